"""The tiny LoRA adapters: what each makes each base say (the forward pass the engine runs, in floats),
their PEFT files, and that the generator refuses an adapter that would not say its sentence."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from sandbox.tiny_adapters import (
    A_ONLY,
    RANK,
    TERSE,
    AdapterVariant,
    BaseModel,
    adapter_files,
    generate_default_adapters,
    lora_weights,
    simulate,
)

A, B = "acme/tiny-chat-a", "acme/tiny-chat-b"


@pytest.fixture(scope="module")
def bases() -> dict[str, BaseModel]:
    return {repo: BaseModel.of(repo) for repo in (A, B)}


def test_without_an_adapter_each_base_says_its_own_sentence(bases: dict[str, BaseModel]) -> None:
    # The simulation is the engine's forward pass: it must give what the real models answer (test_e2e).
    assert simulate(bases[A], None) == "Hello fleet! This is tiny-chat-a speaking from the sandbox."
    assert simulate(bases[B], None) == "Greetings! tiny-chat-b answers now: the swap worked."


@pytest.mark.parametrize("label", sorted(TERSE))
def test_one_adapter_changes_both_bases_each_its_own_way(bases: dict[str, BaseModel], label: str) -> None:
    weights = lora_weights(TERSE[label], [bases[A], bases[B]])
    said = {repo: simulate(bases[repo], weights) for repo in (A, B)}
    assert said == {repo: TERSE[label].sentence(repo) for repo in (A, B)}
    assert said[A] != simulate(bases[A], None) and said[B] != simulate(bases[B], None)


def test_revisions_differ_visibly() -> None:
    assert TERSE["main"].sentence(A) == "This is tiny-chat-a speaking from the sandbox."
    assert TERSE["shorter"].sentence(A) == "tiny-chat-a speaking from the sandbox."
    assert TERSE["shorter"].sentence(B) == "answers now: the swap worked."


def test_an_adapter_of_one_base_says_nonsense_on_the_other(bases: dict[str, BaseModel]) -> None:
    weights = lora_weights(A_ONLY, [bases[A]])
    assert simulate(bases[A], weights) == "speaking from the sandbox."
    assert simulate(bases[B], weights) != A_ONLY.sentence(A)


def test_files_are_peft_lora_of_the_declared_rank(tmp_path: Path) -> None:
    terse, a_only = generate_default_adapters(tmp_path)
    config = json.loads((terse / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == RANK and config["lora_alpha"] == RANK
    assert config["base_model_name_or_path"] == A and config["target_modules"] == ["down_proj"]
    data = (terse / "adapter_model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    prefix = "base_model.model.model.layers.0.mlp.down_proj"
    assert header[f"{prefix}.lora_A.weight"]["shape"] == [RANK, 128]
    assert header[f"{prefix}.lora_B.weight"]["shape"] == [64, RANK]
    assert json.loads((a_only / "adapter_config.json").read_text())["base_model_name_or_path"] == A
    # Byte for byte the same on a second run (the mirror's commit shas stay put).
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    generate_default_adapters(tmp_path)
    assert before == {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}


def test_generator_refuses_a_jump_a_base_cannot_make() -> None:
    # Starting after a token of tiny-chat-a's sentence that tiny-chat-b's lacks: b has no such jump.
    with pytest.raises(ValueError):
        adapter_files(AdapterVariant({A: "\u2581fleet", B: "\u2581fleet"}), [A, B])
