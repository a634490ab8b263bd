"""LoRA adapters in the stack config and what they render: every rule with its good and bad case, the
engine's launch and unit, the adapters step, the front door's closed endpoints, the preview's lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import drift
from host.contract import Placement, Survey
from host.front_door import front_door_site
from models.loader import parse_stack_config
from render.launch import engine_environment, vllm_arguments
from render.plan import swap_plan
from render.steps import adapters_script
from render.units import render_unit
from tests.support.stacks import error_of

TERSE = {"repo": "acme/tiny-chat-terse", "revision": "main", "bases": ["tiny-chat-a", "tiny-chat-b"]}


def with_adapters(raw: dict[str, Any], names: list[str], lora: dict[str, Any] | None = None) -> dict[str, Any]:
    raw["models"]["tiny-chat-a"]["serving"] = {"lora": lora if lora is not None else {"maxLoras": 2, "maxLoraRank": 8}}
    raw["adapters"] = {"terse": dict(TERSE), "a-only": {"repo": "acme/tiny-chat-a-only", "bases": ["tiny-chat-a"]}}
    raw["deployments"][0]["adapters"] = names
    return raw


def test_adapters_render_a_lora_launch_and_change_no_unit(dev_raw: dict[str, Any]) -> None:
    plain = parse_stack_config(with_adapters(dev_raw, [])).resolved_deployments()[0]
    served = parse_stack_config(with_adapters(dev_raw, ["terse", "a-only"])).resolved_deployments()[0]
    args = vllm_arguments(served)
    assert args[args.index("--enable-lora") :][:5] == ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"]
    assert engine_environment(served)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    # Which adapters it serves is no part of the unit: adding them restarts nothing.
    assert render_unit(served, "dev").text == render_unit(plain, "dev").text
    assert "--adapters /var/lib/vllm-fleet/deployments/dev.chat/adapters.json --model-path /shared/tiny-chat-a" in (
        render_unit(served, "dev").text
    )
    assert swap_plan(served, "dev") == swap_plan(plain, "dev")
    spec = json.loads(adapters_script(served, "dev").split("readonly ADAPTERS=", 1)[1].split("'")[1])
    assert [(a["name"], a["path"], a["bases"]) for a in spec["adapters"]] == [
        ("terse", "/shared/adapter-terse", ["tiny-chat-a", "tiny-chat-b"]),
        ("a-only", "/shared/adapter-a-only", ["tiny-chat-a"]),
    ]
    assert "readonly MAX_RANK=8" in adapters_script(served, "dev")


def test_without_lora_the_launch_is_unchanged(dev_raw: dict[str, Any]) -> None:
    rd = parse_stack_config(dev_raw).resolved_deployments()[0]
    assert "--enable-lora" not in vllm_arguments(rd) and "--adapters" not in render_unit(rd, "dev").text
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in engine_environment(rd)


def test_adapters_are_downloaded_counted_and_kept_like_models(dev_raw: dict[str, Any]) -> None:
    config = parse_stack_config(with_adapters(dev_raw, ["terse"]))
    assert sorted(config.downloads_on("shared")) == ["adapter-terse", "tiny-chat-a"]
    assert config.downloads_on("shared")["adapter-terse"].dir == "adapter-terse"
    raw = with_adapters(dev_raw, ["terse"])
    raw["adapters"]["terse"]["sizeGb"] = 25
    assert "adapter-terse 25 GB" in error_of(raw)
    raw["adapters"]["terse"].update(sizeGb=0.1, keep=True)
    raw["deployments"][0]["adapters"] = []
    assert "adapter-terse" in parse_stack_config(raw).kept_dirs_on("shared")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw["deployments"][0].update(adapters=["nope"]), "'nope' is no key of vllm-fleet:adapters"),
        (lambda raw: raw["deployments"][0].update(adapters=["terse", "terse"]), "lists an adapter twice"),
        (
            lambda raw: raw["deployments"][0].update(model="tiny-chat-b"),
            "adapter 'a-only' is a LoRA adapter of tiny-chat-a (vllm-fleet:adapters.a-only.bases), not of tiny-chat-b",
        ),
        (
            lambda raw: raw["deployments"][0].update(servedModelName="terse"),
            "adapter 'terse' is also a name the deployment serves its model as",
        ),
        (
            lambda raw: raw["models"]["tiny-chat-a"].update(serving={}),
            "set vllm-fleet:models.tiny-chat-a.serving.lora",
        ),
        (
            lambda raw: raw["models"]["tiny-chat-a"].update(serving={"lora": {"maxLoras": 1}}),
            "2 adapters but the engine holds 1 at once",
        ),
        (
            lambda raw: raw["models"]["tiny-chat-a"].update(serving={"lora": {"maxLoras": 4, "maxCpuLoras": 2}}),
            "maxCpuLoras 2 is below maxLoras 4",
        ),
        (
            lambda raw: raw["models"]["tiny-chat-a"].update(serving={"lora": {"maxLoraRank": 12}}),
            "maxLoraRank",
        ),
        (lambda raw: raw["adapters"]["terse"].update(bases=["nope"]), "vllm-fleet:adapters.terse.bases: 'nope'"),
        (
            lambda raw: raw["adapters"].update({"a" * 56: raw["adapters"]["terse"]}),
            f"vllm-fleet:adapters.{'a' * 56}: the name is 56 characters; at most 55, as its files go in adapter-<name>",
        ),
        (
            lambda raw: raw["models"]["tiny-chat-a"].update(serving={"extraArgs": ["--enable-lora"]}),
            "--enable-lora",
        ),
    ],
)
def test_bad_adapter_config_is_refused_naming_the_key(dev_raw: dict[str, Any], change: Any, message: str) -> None:
    raw = with_adapters(dev_raw, ["terse", "a-only"])
    change(raw)
    assert message in error_of(raw)


def test_production_pins_adapter_revisions(prod_raw: dict[str, Any]) -> None:
    prod_raw["adapters"] = {"tuned": {"repo": "acme/kimi-tuned", "revision": "main", "bases": ["kimi-k2.5-int4"]}}
    assert "vllm-fleet:adapters.tuned.revision: 'main' is not a full commit sha" in error_of(prod_raw)
    prod_raw["adapters"]["tuned"]["revision"] = "b" * 40
    parse_stack_config(prod_raw)


def test_front_door_never_passes_the_runtime_lora_endpoints(dev_raw: dict[str, Any]) -> None:
    plan = swap_plan(parse_stack_config(with_adapters(dev_raw, ["terse"])).resolved_deployments()[0], "dev")
    for site in (front_door_site(plan, Placement((0,), 18000)), front_door_site(plan, None)):
        for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            block = site.split(f"location = {path} {{", 1)[1].split("}", 1)[0]
            assert block.strip() == "return 404;"


def test_preview_says_what_changes_and_that_nothing_restarts(dev_raw: dict[str, Any]) -> None:
    rd = parse_stack_config(with_adapters(dev_raw, ["terse"])).resolved_deployments()[0]
    before = {"wanted": {"a-only": "main", "terse": "0" * 40}, "loaded": ["a-only"], "repairs": 2, "drift": []}
    found = Survey.from_dict({"active": {"dev.chat": {"adapters": before}}})
    (line,) = drift.adapter_lines("dev", rd, found)
    assert line == (
        "deployment 'chat': LoRA adapters: updates terse (000000000000 -> main), removes a-only; loaded into the "
        "serving engine at runtime, no restart"
    )
    assert drift.adapter_repairs("dev", rd, found) == 2
    before["drift"] = ["adapter terse is wanted but not loaded"]
    found = Survey.from_dict({"active": {"dev.chat": {"adapters": before}}})
    assert drift.adapter_repairs("dev", rd, found) == 3
    assert (
        "adapter terse is wanted but not loaded; this update loads the wanted adapters again"
        in (drift.adapter_lines("dev", rd, found)[-1])
    )
    (added,) = drift.adapter_lines("dev", rd, Survey())
    assert "adds terse (acme/tiny-chat-terse@main)" in added
