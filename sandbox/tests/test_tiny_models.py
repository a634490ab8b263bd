"""Tests of the tiny model generator: determinism, the safetensors layout, the index and the tokenizer files.

Only the standard library is used to read the output back (the project venv need not have torch, numpy or
transformers); loading by transformers and serving by vLLM were checked by hand, see the module docstring of
sandbox/tiny_models.py. The safetensors files are also parsed by huggingface_hub's own parser in
test_hf_mirror.py.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox import tiny_models, tiny_repos
from sandbox.tiny_models import ModelShape, generate

# Run the mirror's command the way scripts/mirror.sh does (python -m), from the folder its package lives
# in, wherever these tests and the module end up being moved to.
MODULE = tiny_repos.__name__
REPO_ROOT = Path(tiny_repos.__file__).resolve().parents[MODULE.count(".")]


def read_safetensors(path: Path) -> tuple[dict[str, Any], bytes, int]:
    """(header, data section, header length) of a safetensors file, parsed by hand."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    return header, raw[8 + length :], length


def bf16_values(data: bytes) -> list[float]:
    # A bfloat16 is the upper half of a float32: widen by appending two zero bytes.
    return [struct.unpack("<f", b"\0\0" + data[i : i + 2])[0] for i in range(0, len(data), 2)]


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_writes_the_mirrors_repos_deterministically(tmp_path: Path) -> None:
    outputs = []
    for run in ("one", "two"):
        out = tmp_path / run
        subprocess.run([sys.executable, "-m", MODULE, "--out", str(out)], cwd=REPO_ROOT, check=True, timeout=120)
        outputs.append(tree_bytes(out))
    assert outputs[0] == outputs[1], "two runs must give byte-identical files"
    names = {name.split("/")[0] + "/" + name.split("/")[1] for name in outputs[0]}
    # The models, then the adapters built on them (sandbox/tiny_adapters.py checks those).
    assert names == {"acme/tiny-chat-a", "acme/tiny-chat-b", "acme/tiny-chat-terse", "acme/tiny-chat-a-only"}
    a = {k.split("/", 2)[2]: v for k, v in outputs[0].items() if k.startswith("acme/tiny-chat-a/")}
    b = {k.split("/", 2)[2]: v for k, v in outputs[0].items() if k.startswith("acme/tiny-chat-b/")}
    assert set(a) == set(b)
    # Different seeds and sentences: different weights, same everything else but the model card (which names
    # the repo and its sentence).
    for name, content in a.items():
        if name.endswith(".safetensors") or name == "README.md":
            assert content != b[name], name
        else:
            assert content == b[name], name


def test_rewrite_keeps_mtimes_of_unchanged_files(tmp_path: Path) -> None:
    # A mirror caches hashes by mtime; regenerating fixtures must not invalidate them for nothing.
    repo = generate(tmp_path, "acme/m", 3)
    before = {p.name: p.stat().st_mtime_ns for p in repo.iterdir()}
    generate(tmp_path, "acme/m", 3)
    assert before == {p.name: p.stat().st_mtime_ns for p in repo.iterdir()}


def test_config_is_a_small_llama_vllm_can_serve(tmp_path: Path) -> None:
    repo = generate(tmp_path, "acme/tiny", 7)
    config = json.loads((repo / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["hidden_size"] == 64
    assert config["num_attention_heads"] == 2
    assert config["num_key_value_heads"] == 2
    assert config["head_dim"] == config["hidden_size"] // config["num_attention_heads"] == 32
    assert config["intermediate_size"] == 128
    assert config["num_hidden_layers"] == 2
    assert config["vocab_size"] == config["hidden_size"], "one-hot embeddings: one dimension per token"
    assert config["max_position_embeddings"] == 2048
    assert config["tie_word_embeddings"] is False
    assert config["torch_dtype"] == "bfloat16"
    generation = json.loads((repo / "generation_config.json").read_text())
    assert config["eos_token_id"] in generation["eos_token_id"]


def test_head_dim_below_32_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="head_dim"):
        generate(tmp_path, "acme/bad", 1, shape=ModelShape(num_attention_heads=4))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_shards_and_index_are_consistent(tmp_path: Path, dtype: tiny_models.Dtype) -> None:
    repo = generate(tmp_path, "acme/tiny", 11, dtype=dtype)
    config = json.loads((repo / "config.json").read_text())
    index = json.loads((repo / "model.safetensors.index.json").read_text())
    shards = sorted(repo.glob("model-*-of-*.safetensors"))
    assert [s.name for s in shards] == [f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]
    assert set(index["weight_map"].values()) == {s.name for s in shards}

    h, v, inter = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    expected_shapes = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h], "model.norm.weight": [h]}
    for i in range(config["num_hidden_layers"]):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            expected_shapes[f"model.layers.{i}.self_attn.{proj}.weight"] = [h, h]
        expected_shapes[f"model.layers.{i}.mlp.gate_proj.weight"] = [inter, h]
        expected_shapes[f"model.layers.{i}.mlp.up_proj.weight"] = [inter, h]
        expected_shapes[f"model.layers.{i}.mlp.down_proj.weight"] = [h, inter]
        expected_shapes[f"model.layers.{i}.input_layernorm.weight"] = [h]
        expected_shapes[f"model.layers.{i}.post_attention_layernorm.weight"] = [h]
    assert set(index["weight_map"]) == set(expected_shapes)

    item_size = {"bfloat16": 2, "float32": 4}[dtype]
    total = 0
    seen: dict[str, str] = {}
    for shard in shards:
        header, data, header_len = read_safetensors(shard)
        assert header.pop("__metadata__") == {"format": "pt"}
        assert (8 + header_len) % 8 == 0, "tensor data must start 8-byte aligned"
        end = 0
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            start, stop = info["data_offsets"]
            assert start == end, "tensors must be packed back to back"
            assert info["dtype"] == {"bfloat16": "BF16", "float32": "F32"}[dtype]
            assert info["shape"] == expected_shapes[name]
            assert stop - start == math.prod(info["shape"]) * item_size
            end = stop
            seen[name] = shard.name
        assert end == len(data), "no trailing bytes after the last tensor"
        total += len(data)
    assert seen == index["weight_map"]
    assert index["metadata"]["total_size"] == total


def read_tensors(repo: Path) -> dict[str, list[float]]:
    index = json.loads((repo / "model.safetensors.index.json").read_text())
    tensors: dict[str, list[float]] = {}
    for shard in sorted(set(index["weight_map"].values())):
        header, data, _ = read_safetensors(repo / shard)
        for name, info in header.items():
            if name != "__metadata__":
                start, stop = info["data_offsets"]
                tensors[name] = bf16_values(data[start:stop])
    return tensors


def test_random_weights_are_small_and_norms_are_one(tmp_path: Path) -> None:
    tensors = read_tensors(generate(tmp_path, "acme/tiny", 5))
    assert set(tensors["model.norm.weight"]) == {1.0}
    assert set(tensors["model.layers.0.input_layernorm.weight"]) == {1.0}
    gate = tensors["model.layers.1.mlp.gate_proj.weight"]
    mean = sum(gate) / len(gate)
    std = math.sqrt(sum((x - mean) ** 2 for x in gate) / len(gate))
    assert abs(mean) < 0.002
    assert 0.018 < std < 0.022
    assert all(math.isfinite(x) for values in tensors.values() for x in values)
    # Independent streams per tensor: two projections of the same shape must differ.
    assert tensors["model.layers.0.self_attn.q_proj.weight"] != tensors["model.layers.0.self_attn.k_proj.weight"]


@pytest.mark.parametrize("name", ["acme/tiny-chat-a", "acme/tiny-chat-b", "acme/other"])
def test_greedy_decoding_of_the_weights_says_the_sentence(tmp_path: Path, name: str) -> None:
    """The forward pass these weights make, in plain Python: every block writes zeros into the residual
    stream, so the logits are lm_head x RMSNorm(embedding of the current token); its argmax chain from any
    prompt token, decoded as the tokenizer's decoder does, is the sentence, then <|im_end|>."""
    repo = generate(tmp_path, name, 7)
    tensors = read_tensors(repo)
    config = json.loads((repo / "config.json").read_text())
    h, vocab_size = config["hidden_size"], config["vocab_size"]
    for layer in range(config["num_hidden_layers"]):
        assert set(tensors[f"model.layers.{layer}.self_attn.o_proj.weight"]) == {0.0}
        assert set(tensors[f"model.layers.{layer}.mlp.down_proj.weight"]) == {0.0}
    embed, head = tensors["model.embed_tokens.weight"], tensors["lm_head.weight"]

    def next_token(token: int) -> int:
        x = embed[token * h : (token + 1) * h]
        rms = math.sqrt(sum(v * v for v in x) / h + config["rms_norm_eps"])
        normed = [v / rms for v in x]
        logits = [sum(w * v for w, v in zip(head[j * h : (j + 1) * h], normed, strict=True)) for j in range(vocab_size)]
        best = max(logits)
        assert sorted(logits)[-2] < best - 20, "a wide margin, so sampling follows the table too"
        return logits.index(best)

    tok = json.loads((repo / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in tok["model"]["vocab"].items()} | {t["id"]: t["content"] for t in tok["added_tokens"]}
    im_end = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|im_end|>")
    for prompt_end in ("<unk>", "<|im_start|>", "<|reserved_special_token_0|>"):
        token = next(i for i, t in by_id.items() if t == prompt_end)
        said = []
        for _ in range(32):
            token = next_token(token)
            if token == im_end:
                break
            said.append(by_id[token])
        text = "".join(said).replace(tok["decoder"]["pattern"]["String"], tok["decoder"]["content"])
        assert text == tiny_models.sentence_of(name), prompt_end
    assert name.rsplit("/", 1)[-1] in tiny_models.sentence_of(name)


def test_the_two_models_say_different_sentences() -> None:
    a, b = (tiny_models.sentence_of(name) for name, _ in tiny_models.DEFAULT_REPOS)
    assert a != b and "tiny-chat-a" in a and "tiny-chat-b" in b


def test_tokenizer_files_describe_a_word_level_model_with_chat_template(tmp_path: Path) -> None:
    repo = generate(tmp_path, "acme/tiny", 1)
    config = json.loads((repo / "config.json").read_text())
    tok = json.loads((repo / "tokenizer.json").read_text(encoding="utf-8"))
    assert tok["model"]["type"] == "WordLevel"
    assert tok["model"]["unk_token"] in tok["model"]["vocab"]
    vocab = tok["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    for special in ("<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"):
        assert special in added
    assert sorted([*vocab.values(), *added.values()]) == list(range(config["vocab_size"])), "every id decodes"
    assert tok["decoder"]["type"] == "Replace"
    assert config["bos_token_id"] == added["<|begin_of_text|>"]
    assert config["eos_token_id"] == added["<|im_end|>"]

    tok_config = json.loads((repo / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_config["bos_token"] == "<|begin_of_text|>"
    assert tok_config["eos_token"] == "<|im_end|>"
    template = tok_config["chat_template"]
    assert "add_generation_prompt" in template
    assert "<|im_start|>" in template
    assert {int(k) for k in tok_config["added_tokens_decoder"]} == set(added.values())
    special_map = json.loads((repo / "special_tokens_map.json").read_text())
    assert special_map["bos_token"] == tok_config["bos_token"]
    assert (repo / "README.md").read_text().startswith("---\n")


def test_sentence_tokens_split_words_and_marks() -> None:
    assert tiny_models.sentence_tokens("Hi there, tiny-chat-a: ok!") == [
        "Hi", "\u2581there", ",", "\u2581tiny-chat-a", ":", "\u2581ok", "!",
    ]  # fmt: skip
