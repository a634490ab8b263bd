"""vllm-fleet:defaults: entries that say only what differs load, render and build as if they said it all,
and an error names the key the user wrote (the default's, when the value came from there)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models.loader import parse_stack_config
from scripts.fleet_stack import fleet_stack, fleet_values
from tests.support.pulumi_mocks import run_program
from tests.support.stacks import error_of, factor_defaults, stack_values

STACKS = ("dev", "prod", "fleet")


@pytest.mark.parametrize("name", STACKS)
def test_a_stack_written_with_defaults_is_the_same_stack(name: str) -> None:
    factored = factor_defaults(stack_values(name))
    assert factored["defaults"], "every stack file repeats something to factor out"
    assert parse_stack_config(factored) == parse_stack_config(stack_values(name))


@pytest.mark.parametrize("name", STACKS)
def test_a_stack_written_with_defaults_builds_the_same_resources(name: str) -> None:
    explicit, factored = run_program(name, stack_values(name)), run_program(name, factor_defaults(stack_values(name)))
    assert sorted(explicit) == sorted(factored)
    for resource, registered in explicit.items():
        assert factored[resource].inputs == registered.inputs, resource
        assert plain(factored[resource].options) == plain(registered.options), resource


def plain(value: Any) -> Any:
    """Resource options as comparable data (CustomTimeouts and the like are objects without __eq__)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "__dict__"):
        return plain(vars(value))
    return value


def test_the_entry_wins_and_mappings_merge_key_by_key() -> None:
    values = factor_defaults(stack_values("prod"))
    values["hosts"] = [
        {"name": "gpu-01", "address": "10.40.0.11", "gpus": {"count": 16}},
        {"name": "gpu-02", "address": "10.40.0.12", "runtime": {"python": "/opt/vllm/bin/python3"}},
    ]
    values["deployments"][0]["environment"] = {"NCCL_PROTO": "Simple", "NCCL_DEBUG": "WARN"}
    config = parse_stack_config(values)
    big, other = config.hosts
    assert big.gpus.count == 16 and big.gpus.memory_gib == 96 and big.gpus.model == "NVIDIA RTX PRO 6000 Blackwell"
    # The entry's python wins; the rest of runtime comes from the default (prod pins no vLLM: the host says).
    assert other.runtime.python == "/opt/vllm/bin/python3" and other.runtime.vllm_version is None
    assert "vllmVersion" not in values["defaults"]["host"]["runtime"]
    env = config.deployments[0].environment
    assert env["NCCL_PROTO"] == "Simple" and env["NCCL_DEBUG"] == "WARN" and env["NCCL_ALGO"] == "Ring"
    # Lists replace the default's.
    values["deployments"][0]["overrides"] = {"extraArgs": []}
    assert parse_stack_config(values).deployments[0].overrides.extra_args == ()


def test_defaults_storage_gives_each_host_without_an_entry_its_own() -> None:
    config = parse_stack_config(fleet_values(3))
    assert [(s.name, s.host, s.path, s.capacity_gb) for s in config.storage] == [
        (f"gpu-0{i}", f"gpu-0{i}", "/shared", 1700) for i in (1, 2, 3)
    ]
    assert config.wanted_models_on("gpu-02") == ["kimi-k2.5-int4", "minimax-m2.5"]
    # An explicit entry still wins for its host.
    values = fleet_values(3)
    values["storage"] = [{"name": "big", "host": "gpu-02", "capacityGb": 4000}]
    stores = {s.host: s for s in parse_stack_config(values).storage}
    assert stores["gpu-02"].name == "big" and stores["gpu-02"].capacity_gb == 4000
    assert stores["gpu-02"].path == "/shared" and stores["gpu-01"].name == "gpu-01"


def test_a_wrong_default_is_named_once_where_it_was_written() -> None:
    values = fleet_values(4)
    values["defaults"]["host"]["gpus"]["count"] = -1
    values["defaults"]["host"]["gpuz"] = 8
    message = error_of(values)
    assert message.splitlines() == [
        "vllm-fleet:defaults.host.gpus.count: Input should be greater than or equal to 0 (got -1) "
        "(inherited by hosts[0] 'gpu-01' and 3 more)",
        "vllm-fleet:defaults.host.gpuz: unknown key; check its spelling against docs/config-reference.md "
        "(got 8) (inherited by hosts[0] 'gpu-01' and 3 more)",
    ]


def test_a_wrong_value_of_an_entry_names_the_entry() -> None:
    values = fleet_values(4)
    values["hosts"][2]["gpus"] = {"count": 200}
    values["deployments"][1]["environment"] = {"CUDA_VISIBLE_DEVICES": "0"}
    message = error_of(values)
    assert "vllm-fleet:hosts[2].gpus.count: Input should be less than or equal to 64 (got 200)" in message
    assert "vllm-fleet:deployments[1].environment (merged with vllm-fleet:defaults.deployment.environment): " in message
    assert "defaults.host.gpus" not in message


def test_a_rule_broken_by_a_default_names_the_default_and_the_entry() -> None:
    values = fleet_values(2)
    values["hosts"][1]["gpus"] = {"count": 4}
    values["deployments"][1]["overrides"] = {"tensorParallel": 4}
    message = error_of(values)
    assert (
        "vllm-fleet:deployments[1].gpus (from vllm-fleet:defaults.deployment.gpus): GPU 4 does not exist on host "
        "'gpu-02'" in message
    )
    values = fleet_values(2)
    values["defaults"]["storage"]["capacityGb"] = 800
    message = error_of(values)
    assert message.startswith(
        "vllm-fleet:defaults.storage.capacityGb (the storage of host 'gpu-01'): models kept on 'gpu-01' need"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(hots={}), "vllm-fleet:defaults.hots: unknown section; use host, storage or deployment"),
        (lambda d: d["host"].update(name="gpu"), "vllm-fleet:defaults.host.name: not a default"),
        (lambda d: d["storage"].update(host="gpu-01"), "vllm-fleet:defaults.storage.host: not a default"),
        (lambda d: d.update(deployment=[1]), "vllm-fleet:defaults.deployment: must be a mapping"),
    ],
)
def test_defaults_themselves_are_checked(change: Any, expected: str) -> None:
    values = fleet_values(2)
    change(values["defaults"])
    assert expected in error_of(values)


def test_rollout_and_cordon_work_through_defaults() -> None:
    values = fleet_values(20, max_unavailable=8)
    values["hosts"][3]["cordon"] = True
    config = parse_stack_config(values)
    assert config.rollout_waits_for()["kimi-09"] == "kimi-01"
    assert "kimi-08" not in config.rollout_waits_for()
    assert [h.name for h in config.hosts if h.cordon] == ["gpu-04"]


def test_a_1024_host_fleet_fits_the_engines_config_variable() -> None:
    """The engine hands the program its config in PULUMI_CONFIG (JSON, structured values JSON-encoded
    again), one environment string, which Linux caps at 128 KiB."""
    import yaml

    config = yaml.safe_load(fleet_stack(1024))["config"]
    encoded = {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for k, v in config.items()}
    assert len(json.dumps(encoded, separators=(",", ":"))) < 110 * 1024
