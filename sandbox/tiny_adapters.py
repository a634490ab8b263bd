"""Generator of tiny LoRA adapters (PEFT format) for the tiny chat models, each changing the answer visibly.

The tiny models (sandbox/tiny_models.py) walk a next-token table: their attention and MLP blocks write
nothing into the residual stream, so the last hidden state is the current token's one-hot embedding and
lm_head maps it to the token's successor in the model's sentence. An adapter here is a LoRA on layer 0's
`down_proj`: for the tokens a prompt ends with (<unk>, which every chat prompt ends with since
"assistant\\n" is no word of the vocabulary, and the special tokens) it adds a large multiple of another
token's embedding to the residual, so the model answers as if it had just read that token: it starts its
sentence further along. For the tokens of the rest of the walk the LoRA adds nothing. Which token it
jumps to is per base model, and one adapter may serve several bases (the two tiny models share their
shapes and vocabulary), which is what a blue/green swap between them keeps.

The LoRA's A rows solve, in exact rational-free float64 arithmetic, the small linear system "this MLP
input -> 1, those -> 0" over the base's own MLP inputs (computed from its published weights); B holds the
jump. `simulate` runs the same forward pass the engine runs and is what the tests (and `generate`, which
refuses an adapter that does not say its sentence) check. Standard library only, like tiny_models.

`python -m sandbox.tiny_repos --out DIR` writes them after the models: DIR/acme/tiny-chat-terse (its main
revision) and DIR/acme/tiny-chat-terse/.revisions/<label>/ (another revision the mirror serves by its sha).
"""

from __future__ import annotations

import math
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.tiny_models import (
    DEFAULT_REPOS,
    IM_END,
    SPECIAL_TOKENS,
    UNK_TOKEN,
    ModelShape,
    _dump_json,
    _encode,
    _initial_values,
    _vocabulary,
    next_token_table,
    safetensors_bytes,
    sentence_of,
    sentence_tokens,
    write_files,
)

# The LoRA rank the adapters declare (their A and B carry zero rows beyond the jumps they need) and how
# far the jump outweighs the token itself in the residual.
RANK = 8
JUMP_WEIGHT = 8.0
SEEDS: dict[str, int] = dict(DEFAULT_REPOS)
# Revisions other than main live here inside a repo folder (sandbox.hf_mirror serves them by their sha).
REVISIONS_DIR = ".revisions"


@dataclass(frozen=True)
class AdapterVariant:
    """One revision of an adapter: for each base repo, the token of its sentence the answer starts after."""

    start_after: dict[str, str]

    def sentence(self, base: str) -> str:
        """What the base answers with this adapter: its sentence from the token after start_after."""
        tokens = sentence_tokens(sentence_of(base))
        rest = tokens[tokens.index(self.start_after[base]) + 1 :]
        return "".join(rest).replace("\u2581", " ").strip()


# The project's adapter: main skips each model's greeting; the other revision skips further.
TERSE_REPO = "acme/tiny-chat-terse"
TERSE: dict[str, AdapterVariant] = {
    "main": AdapterVariant({"acme/tiny-chat-a": "!", "acme/tiny-chat-b": "!"}),
    "shorter": AdapterVariant({"acme/tiny-chat-a": "\u2581is", "acme/tiny-chat-b": "\u2581tiny-chat-b"}),
}
# An adapter of tiny-chat-a alone (its adapter_config.json names tiny-chat-a as its base).
A_ONLY_REPO = "acme/tiny-chat-a-only"
A_ONLY = AdapterVariant({"acme/tiny-chat-a": "\u2581tiny-chat-a"})


def _bf16_round(values: list[float]) -> list[float]:
    """Values as the bf16 checkpoint stores them (tiny_models' own rounding), which the engine reads
    whatever dtype it runs in."""
    stored = array("H", _encode(values, "bfloat16"))
    return list(array("f", array("I", [half << 16 for half in stored]).tobytes()))


def _silu(z: float) -> float:
    return z / (1.0 + math.exp(-z))


@dataclass(frozen=True)
class BaseModel:
    """What an adapter needs of a base: its vocabulary, successor table and layer 0's MLP inputs."""

    repo: str
    vocab: list[str]
    table: list[int]
    mlp_inputs: list[list[float]]  # per token id: down_proj's input when the residual is that token

    @classmethod
    def of(cls, repo: str, shape: ModelShape | None = None) -> BaseModel:
        shape = shape or ModelShape()
        vocab_size = shape.vocab_size or shape.hidden_size
        vocab = _vocabulary(repo, vocab_size)
        table = next_token_table(repo, vocab)
        inter, hidden = shape.intermediate_size, shape.hidden_size
        std = 0.02  # tiny_models.generate's default
        gate = _bf16_round(
            _initial_values("normal", SEEDS[repo], "model.layers.0.mlp.gate_proj.weight", [inter, hidden], std, table)
        )
        up = _bf16_round(
            _initial_values("normal", SEEDS[repo], "model.layers.0.mlp.up_proj.weight", [inter, hidden], std, table)
        )
        # post_attention_layernorm of a one-hot residual (attention adds nothing): scale * e_t, weight ones.
        scale = 1.0 / math.sqrt(1.0 / hidden + shape.rms_norm_eps)
        inputs = [
            [_silu(scale * gate[i * hidden + t]) * scale * up[i * hidden + t] for i in range(inter)]
            for t in range(vocab_size)
        ]
        return cls(repo, vocab, table, inputs)

    def prompt_ends(self) -> list[int]:
        """The tokens a prompt ends with that are no word of the model's sentences: <unk> and the specials."""
        return [self.vocab.index(t) for t in (UNK_TOKEN, *SPECIAL_TOKENS)]

    def walk(self, variant: AdapterVariant) -> list[int]:
        """The tokens the answer passes through once it jumped (the jump must not fire on them)."""
        tokens = sentence_tokens(sentence_of(self.repo))
        rest = tokens[tokens.index(variant.start_after[self.repo]) + 1 :]
        return [self.vocab.index(t) for t in rest]


def _solve(rows: list[list[float]], rhs: list[float]) -> list[float]:
    """The least-norm x with rows . x = rhs (rows independent): x = R^T (R R^T)^-1 rhs, by Gauss-Jordan."""
    m = len(rows)
    gram = [[sum(a * b for a, b in zip(rows[i], rows[j], strict=True)) for j in range(m)] + [rhs[i]] for i in range(m)]
    for col in range(m):
        pivot = max(range(col, m), key=lambda r: abs(gram[r][col]))
        gram[col], gram[pivot] = gram[pivot], gram[col]
        if abs(gram[col][col]) < 1e-12:
            raise ValueError("the constraint vectors are dependent: no adapter can separate these tokens")
        for r in range(m):
            if r != col:
                factor = gram[r][col] / gram[col][col]
                gram[r] = [a - factor * b for a, b in zip(gram[r], gram[col], strict=True)]
    weights = [gram[i][m] / gram[i][i] for i in range(m)]
    return [sum(w * rows[i][k] for i, w in enumerate(weights)) for k in range(len(rows[0]))]


@dataclass(frozen=True)
class LoraWeights:
    a: list[list[float]]  # RANK x intermediate
    b: list[list[float]]  # hidden x RANK


def lora_weights(variant: AdapterVariant, bases: list[BaseModel]) -> LoraWeights:
    """One rank-1 jump per distinct target token: A's row fires on the prompt ends of the bases that jump
    to that token, and on nothing else the answer passes through."""
    shape = ModelShape()
    targets: list[int] = []  # the token whose embedding each jump adds (its successor starts the answer)
    for base in bases:
        target = base.vocab.index(variant.start_after[base.repo])
        if target not in targets:
            targets.append(target)
    if len(targets) > RANK:
        raise ValueError(f"{len(targets)} distinct jumps need a rank above {RANK}")
    rows: list[list[float]] = []
    jumps: list[int | None] = []  # per row: the jump it fires (a prompt end), or None (a walk token)
    for base in bases:
        target = base.vocab.index(variant.start_after[base.repo])
        for t in base.prompt_ends():
            rows.append(base.mlp_inputs[t])
            jumps.append(targets.index(target))
        for t in base.walk(variant):
            rows.append(base.mlp_inputs[t])
            jumps.append(None)
    a = [[0.0] * shape.intermediate_size for _ in range(RANK)]
    b = [[0.0] * RANK for _ in range(shape.hidden_size)]
    for k, target in enumerate(targets):
        a[k] = _solve(rows, [1.0 if jump == k else 0.0 for jump in jumps])
        b[target][k] = JUMP_WEIGHT
    return LoraWeights(a, b)


def simulate(base: BaseModel, weights: LoraWeights | None, max_tokens: int = 20) -> str:
    """The engine's greedy answer to a chat prompt (which ends with <unk>): the same forward pass, in floats."""
    shape = ModelShape()
    hidden = shape.hidden_size
    token = base.vocab.index(UNK_TOKEN)
    out: list[str] = []
    for _ in range(max_tokens):
        residual = [0.0] * hidden
        residual[token] = 1.0
        if weights is not None:
            h = base.mlp_inputs[token]
            mid = [sum(x * y for x, y in zip(row, h, strict=True)) for row in weights.a]
            for i in range(hidden):
                residual[i] += sum(weights.b[i][k] * mid[k] for k in range(RANK))
        # Final RMSNorm (weights ones), then lm_head: row j weighs the columns of the tokens followed by j.
        norm = 1.0 / math.sqrt(sum(x * x for x in residual) / hidden + shape.rms_norm_eps)
        logits = [0.0] * len(base.vocab)
        for column, successor in enumerate(base.table):
            logits[successor] += 4.0 * residual[column] * norm
        token = max(range(len(logits)), key=logits.__getitem__)
        if base.vocab[token] == IM_END:
            break
        out.append(base.vocab[token])
    return "".join(out).replace("\u2581", " ").strip()


def adapter_files(variant: AdapterVariant, base_repos: list[str]) -> dict[str, bytes]:
    """adapter_config.json and adapter_model.safetensors of one revision; its config names the first base."""
    bases = [BaseModel.of(repo) for repo in base_repos]
    weights = lora_weights(variant, bases)
    for base in bases:
        said, wanted = simulate(base, weights), variant.sentence(base.repo)
        if said != wanted:
            raise ValueError(f"the adapter makes {base.repo} say {said!r}, not {wanted!r}")
    shape = ModelShape()
    prefix = "base_model.model.model.layers.0.mlp.down_proj"
    tensors = [
        (
            f"{prefix}.lora_A.weight",
            "F32",
            [RANK, shape.intermediate_size],
            _f32([x for row in weights.a for x in row]),
        ),
        (f"{prefix}.lora_B.weight", "F32", [shape.hidden_size, RANK], _f32([x for row in weights.b for x in row])),
    ]
    config: dict[str, Any] = {
        "base_model_name_or_path": base_repos[0],
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "lora_alpha": RANK,  # scaling alpha / r = 1: the weights are the change itself
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": RANK,
        "target_modules": ["down_proj"],
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }
    readme = (
        f"# LoRA adapter of {', '.join(base_repos)}\n\nGenerated by `sandbox/tiny_adapters.py` for vllm-fleet's "
        "tests. With it each base answers:\n\n" + "".join(f"- {r}: {variant.sentence(r)}\n" for r in base_repos)
    )
    return {
        "adapter_config.json": _dump_json(config),
        "adapter_model.safetensors": safetensors_bytes(tensors),
        "README.md": readme.encode(),
    }


def _f32(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def generate_default_adapters(out_dir: Path) -> list[Path]:
    """The adapter repos the tests use: acme/tiny-chat-terse (main and the `shorter` revision, fitting
    both tiny models) and acme/tiny-chat-a-only (tiny-chat-a's alone)."""
    both = [name for name, _ in DEFAULT_REPOS]
    terse = out_dir / TERSE_REPO
    write_files(terse, adapter_files(TERSE["main"], both))
    for label, variant in TERSE.items():
        if label != "main":
            write_files(terse / REVISIONS_DIR / label, adapter_files(variant, both))
    a_only = out_dir / A_ONLY_REPO
    write_files(a_only, adapter_files(A_ONLY, ["acme/tiny-chat-a"]))
    return [terse, a_only]
