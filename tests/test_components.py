"""The resource graph under Pulumi mocks: what each stack builds, what a swap changes, in which order,
and the options every remote step carries."""

from __future__ import annotations

import re
from typing import Any

import pytest

from components.remote import COMMAND_INPUTS, COPY_INPUTS
from models.loader import load_stack_file, parse_stack_config, read_stack_file
from render import host_bundle
from render.paths import TOOLS_DIR
from render.plan import activation_timeout
from tests.support.paths import ROOT
from tests.support.pulumi_mocks import COMMAND_TYPE, COPY_TYPE, Registered, run_program, unsecret


def commands(resources: dict[str, Registered]) -> dict[str, Registered]:
    return {name: r for name, r in resources.items() if r.type == COMMAND_TYPE}


def copies(resources: dict[str, Registered]) -> dict[str, Registered]:
    return {name: r for name, r in resources.items() if r.type == COPY_TYPE}


@pytest.fixture(scope="module")
def prod() -> dict[str, Registered]:
    return run_program("prod", read_stack_file(ROOT / "Pulumi.prod.yaml"))


def test_prod_graph(prod: dict[str, Registered]) -> None:
    types = {name: r.type for name, r in prod.items()}
    assert types["gpu-01"] == "vllm-fleet:index:GpuHost"
    assert types["shared"] == "vllm-fleet:index:SharedStorage"
    assert types["shared-kimi-k2.5-int4"] == "vllm-fleet:index:ModelDownload"
    assert types["shared-minimax-m2.5"] == "vllm-fleet:index:ModelDownload"
    assert types["primary"] == "vllm-fleet:index:VllmService"
    assert types["gpu-01-front-door"] == "vllm-fleet:index:FrontDoor"
    assert sorted(commands(prod)) == [
        "gpu-01-front-door-proxy",
        "gpu-01-preflight",
        "gpu-01-tools",
        "primary-access-files",
        "primary-serving",
        "primary-unit",
        "shared-kimi-k2.5-int4-files",
        "shared-layout",
        "shared-minimax-m2.5-files",
    ]
    assert not any("nvfp4" in name for name in prod)
    # The host package goes as a file over SFTP: the state holds its path (the engine adds its digest).
    (archive,) = copies(prod).values()
    assert archive.name == "gpu-01-tools-archive"
    assert archive.inputs["source"] == {"fileAsset": f".cache/host-bundle/vllm-fleet-host-{host_bundle.version()}.pyz"}
    assert archive.inputs["remotePath"] == f"/usr/local/lib/vllm-fleet/.incoming/{host_bundle.version()}.pyz"
    assert archive.inputs["triggers"] == ["10.40.0.11", 22, "root"]
    assert unsecret(archive.inputs["connection"])[1]


def test_dev_graph() -> None:
    dev = run_program("dev", read_stack_file(ROOT / "Pulumi.dev.yaml"))
    assert sorted(commands(dev)) == [
        "chat-access-files",
        "chat-serving",
        "chat-unit",
        "sandbox-front-door-proxy",
        "sandbox-preflight",
        "sandbox-tools",
        "shared-layout",
        "shared-tiny-chat-a-files",
    ]
    connection, secret = unsecret(dev["sandbox-preflight"].inputs["connection"])
    assert secret, "the connection holds the private key, so it must be secret as a whole"
    assert connection["port"] == 2222 and connection["host"] == "127.0.0.1"


def test_every_remote_step_follows_the_rules(prod: dict[str, Registered]) -> None:
    for name, step in commands(prod).items():
        conn, secret = unsecret(step.inputs["connection"])
        assert secret and conn["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----"), name
        assert conn["dialErrorLimit"] == 3 and conn["perDialTimeout"] == 10, name
        # Nothing through SSH setenv: sshd drops it without AcceptEnv.
        assert step.inputs["addPreviousOutputInEnv"] is False and "environment" not in step.inputs, name
        assert step.inputs["triggers"] == ["10.40.0.11", 22, "root"], name
        # Before the host's tools exist (their install, the preflight): the script itself, bounded by
        # `timeout`; every other step: one call of the host's `step` tool with its parameters.
        create = step.inputs["create"]
        if name in ("gpu-01-preflight", "gpu-01-tools"):
            assert create.startswith("timeout --kill-after=30 ") and "bash -c \"$(cat <<'VLLM_FLEET_SCRIPT'\n" in create
        else:
            assert create.startswith(f"{TOOLS_DIR}/step ") and "set -euo pipefail" not in create, name
        assert "hf_mocktoken" not in step.inputs["create"] and "mock\n" not in step.inputs["create"], name


def test_secrets_only_travel_on_stdin() -> None:
    # Prod with API keys instead of its open access (the mocks' key), so the key's way is checked too.
    raw = read_stack_file(ROOT / "Pulumi.prod.yaml")
    del raw["access"]
    steps = commands(run_program("prod", raw))
    assert unsecret(steps["shared-kimi-k2.5-int4-files"].inputs["stdin"]) == ("hf_mocktoken\n", True)
    assert unsecret(steps["primary-unit"].inputs["stdin"]) == ("HF_TOKEN=hf_mocktoken\n", True)
    access, secret = unsecret(steps["primary-access-files"].inputs["stdin"])
    assert secret and '"~^Bearer mock-api-key-0123456789$" 1;  # mock-client' in access
    assert "mock-api-key-0123456789" not in steps["primary-access-files"].inputs["create"]
    for name in ("shared-kimi-k2.5-int4-files", "primary-unit", "primary-access-files"):
        assert {"stdin", "stdout", "stderr"} <= set(steps[name].options["additional_secret_outputs"]), name
    for name in ("gpu-01-preflight", "gpu-01-tools", "shared-layout", "primary-serving"):
        assert steps[name].inputs.get("stdin") is None, name


def test_singletons_are_deleted_before_replacement_and_long_steps_have_timeouts(prod: dict[str, Registered]) -> None:
    steps = commands(prod)
    owners = {name for name, step in steps.items() if step.options["delete_before_replace"]}
    # The unit name, the port and the GPUs; the front door's unit and configuration.
    assert owners == {"primary-unit", "primary-serving", "gpu-01-front-door-proxy", "primary-access-files"}
    config = load_stack_file(ROOT / "Pulumi.prod.yaml")
    (rd,) = config.resolved_deployments()
    # A 36-minute load, then a rollback that waits for the old model again, must fit.
    assert time_limit(steps["primary-serving"]) >= 2 * activation_timeout(rd) > 2 * 36 * 60
    # The reference download took ~28 minutes.
    assert time_limit(steps["shared-kimi-k2.5-int4-files"]) >= 2 * 28 * 60
    assert time_limit(steps["gpu-01-preflight"]) == 300
    for name, step in steps.items():
        # The engine is told the same limit (plus the kill grace) that `timeout` enforces on the host.
        timeouts = step.options["custom_timeouts"]
        expected = f"{time_limit(step) + 30}s"
        assert (timeouts.create, timeouts.update, timeouts.delete) == (expected, expected, expected), name
        if "delete" in step.inputs:
            assert time_limit(step, "delete") == time_limit(step), name


def time_limit(step: Registered, command: str = "create") -> int:
    """The seconds the step's script gets on the host: `timeout`'s, or the `step` tool's --time-limit."""
    match = re.match(r"timeout --kill-after=30 (\d+) bash -c |\S+/step \S+ --time-limit (\d+) ", step.inputs[command])
    assert match, step.inputs[command][:80]
    return int(match.group(1) or match.group(2))


def changed(before: dict[str, Registered], after: dict[str, Registered]) -> dict[str, str]:
    result = {}
    for name in sorted(set(before) | set(after)):
        if name not in before:
            result[name] = "create"
        elif name not in after:
            result[name] = "delete"
        elif before[name].inputs != after[name].inputs:
            result[name] = "update"
    return result


def swap_updates(deployment: str) -> dict[str, str]:
    """The steps a swap of `deployment` to another model updates: its unit and its serving step (which
    also reports, once the new model serves)."""
    return {f"{deployment}-serving": "update", f"{deployment}-unit": "update"}


def test_prod_swap_changes_only_the_deployment(prod: dict[str, Registered], prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0].update({"model": "minimax-m2.5", "gpus": [0, 1, 2, 3]})
    swapped = run_program("prod", prod_raw)
    # MiniMax is already on disk (keep: true) and Kimi stays kept: nothing to download or delete.
    assert changed(prod, swapped) == swap_updates("primary")
    unit = swapped["primary-unit"].inputs["create"]
    assert (
        "ExecStart=/root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server --model /shared/minimax-m2.5" in unit
    )
    assert "--tool-call-parser minimax_m2" in unit and "--tensor-parallel-size 4" in unit
    # Which GPUs is the swap's placement on the host; the plan carries the deployment's list.
    assert '"gpus": [\n  0,\n  1,\n  2,\n  3\n ]' in swapped["primary-serving"].inputs["create"]


def test_swap_to_a_model_not_on_disk_adds_its_download(dev_raw: dict[str, Any]) -> None:
    assert dev_raw["models"]["tiny-chat-b"]["keep"] is False
    before = run_program("dev", dev_raw)
    dev_raw["deployments"][0]["model"] = "tiny-chat-b"
    dev_raw["models"]["tiny-chat-a"]["keep"] = False
    after = run_program("dev", dev_raw)
    assert changed(before, after) == {
        **swap_updates("chat"),
        "shared-layout": "update",  # the kept list loses tiny-chat-a, so its removal deletes the files
        "shared-tiny-chat-a": "delete",  # no longer served nor kept: removed after the swap succeeds
        "shared-tiny-chat-a-files": "delete",
        "shared-tiny-chat-b": "create",
        "shared-tiny-chat-b-files": "create",
    }


def test_no_change_means_identical_inputs(prod: dict[str, Registered]) -> None:
    again = run_program("prod", read_stack_file(ROOT / "Pulumi.prod.yaml"))
    assert changed(prod, again) == {}


def test_dependency_order(prod: dict[str, Registered]) -> None:
    """Preflight, tools, storage, downloads, the staged unit, then serving; destroy runs it backwards."""
    deps = {name: step.options["depends_on"] for name, step in commands(prod).items()}
    assert deps["gpu-01-preflight"] == []
    assert copies(prod)["gpu-01-tools-archive"].options["depends_on"] == ["gpu-01-preflight"]
    assert deps["gpu-01-tools"] == ["gpu-01-tools-archive"]
    # The host's `step` tool runs them: they wait for the tools (and their deletes run before the tools go).
    assert deps["gpu-01-front-door-proxy"] == ["gpu-01-tools"]
    assert deps["shared-layout"] == ["gpu-01-tools"]
    assert deps["shared-kimi-k2.5-int4-files"] == ["gpu-01-tools", "shared-layout"]
    assert deps["shared-minimax-m2.5-files"] == ["gpu-01-tools", "shared-layout"]
    assert deps["primary-unit"] == ["gpu-01-front-door-proxy", "gpu-01-tools", "shared-kimi-k2.5-int4-files"]
    assert deps["primary-access-files"] == ["gpu-01-front-door-proxy"]
    assert deps["primary-serving"] == ["primary-access-files", "primary-unit"]
    parents = {name: step.options["parent"] for name, step in commands(prod).items()}
    assert parents["primary-serving"] == "primary" and parents["shared-kimi-k2.5-int4-files"] == "shared-kimi-k2.5-int4"


# ---- a fleet: rolling swaps, cordoned hosts ------------------------------------------------------------


def test_rollout_group_swaps_one_host_after_the_other(fleet_raw: dict[str, Any]) -> None:
    fleet = run_program("fleet", fleet_raw)
    deps = {name: step.options["depends_on"] for name, step in commands(fleet).items()}
    # Staging (downloads, the unit file, the args check) runs on both hosts at once, while both serve;
    # chat-2's activation, which stops its old engine, waits for chat-1's to finish.
    assert "chat-1-serving" not in deps["chat-2-unit"]
    assert deps["chat-2-serving"] == ["chat-1-serving", "chat-2-access-files", "chat-2-unit"]
    assert deps["chat-1-serving"] == ["chat-1-access-files", "chat-1-unit"]


def test_max_unavailable_runs_that_many_lanes(fleet_raw: dict[str, Any]) -> None:
    host = fleet_raw["hosts"][0]
    fleet_raw["hosts"] = [{**host, "name": f"h{i}", "port": 2230 + i} for i in range(5)]
    fleet_raw["storage"] = [{**fleet_raw["storage"][0], "name": f"s{i}", "host": f"h{i}"} for i in range(5)]
    template = fleet_raw["deployments"][0]
    fleet_raw["deployments"] = [
        {**template, "name": f"d{i}", "host": f"h{i}", "rollout": {"group": "g", "maxUnavailable": 2}} for i in range(5)
    ]
    config = parse_stack_config(fleet_raw)
    assert config.rollout_waits_for() == {"d2": "d0", "d3": "d1", "d4": "d2"}


def cordon_fleet_2(fleet_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> frozenset[str]:
    """Cordon fleet-2 after a run in which it took its steps: the state's checkpoint (controller/cordon.py's
    reading of it) lists them as applied there. Returns their names."""
    from controller import cordon

    before = run_program("fleet", fleet_raw)
    steps = {**commands(before), **copies(before)}
    applied = {n: r.inputs.get("create", "") for n, r in steps.items() if r.inputs["triggers"][1] == 2232}
    monkeypatch.setattr(cordon, "applied_steps", lambda: {("127.0.0.1", 2232, "root"): applied})
    on_fleet_2 = frozenset(applied)
    fleet_raw["hosts"][1]["cordon"] = True
    return on_fleet_2


def test_cordoned_host_ignores_every_change_and_is_never_probed(
    fleet_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    on_fleet_2 = cordon_fleet_2(fleet_raw, monkeypatch)
    after = run_program("fleet", fleet_raw)
    for name, step in commands(after).items():
        expected = COMMAND_INPUTS if name in on_fleet_2 else []
        assert step.options["ignore_changes"] == expected, name
    for name, step in copies(after).items():
        assert step.options["ignore_changes"] == (COPY_INPUTS if name in on_fleet_2 else []), name
    assert "chat-2-serving" in on_fleet_2 and "chat-1-serving" not in on_fleet_2
    assert "fleet-2-tools-archive" in on_fleet_2


@pytest.mark.parametrize("change", ["model", "drop"])
def test_cordoned_host_refuses_creates_and_deletes(
    fleet_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    cordon_fleet_2(fleet_raw, monkeypatch)
    if change == "model":
        fleet_raw["deployments"][1]["model"] = "tiny-chat-b"
        expected = r"'fleet-2' is cordoned .* would create step 'shared-2-tiny-chat-b-files'"
    else:
        fleet_raw["deployments"].pop(1)
        expected = r"'fleet-2' is cordoned .* would delete .*chat-2-serving"
    with pytest.raises(Exception, match=expected):
        run_program("fleet", fleet_raw)


def test_a_cordoned_node_refuses_a_change_of_the_model_across_it(
    fleet_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    cordon_fleet_2(fleet_raw, monkeypatch)
    (across,) = [d for d in fleet_raw["deployments"] if d["name"] == "across"]
    # Same model files (nothing to download there): only the launch changes, which fleet-2 would ignore.
    across["overrides"] = {**across.get("overrides", {}), "maxModelLen": 256}
    expected = r"'fleet-2' is cordoned .* node 1 of deployment 'across' runs there .*\(step 'across-node1-unit'\)"
    with pytest.raises(Exception, match=expected):
        run_program("fleet", fleet_raw)


def test_a_deployment_across_hosts_has_a_step_pair_per_node(fleet_raw: dict[str, Any]) -> None:
    fleet = run_program("fleet", fleet_raw)
    steps = commands(fleet)
    on = {name: step.inputs["triggers"][1] for name, step in steps.items() if name.startswith("across")}
    assert on == {
        "across-unit": 2231,
        "across-serving": 2231,
        "across-access-files": 2231,
        "across-node1-unit": 2232,
        "across-node1-serving": 2232,
    }
    deps = {name: step.options["depends_on"] for name, step in steps.items()}
    # fleet-2 downloads the model to its own storage and stages its headless unit there ...
    assert "shared-2-tiny-chat-a-files" in deps["across-node1-unit"]
    # ... nothing stops before both nodes staged (and checked) their units; the head starts last.
    assert deps["across-node1-serving"] == ["across-node1-unit", "across-unit"]
    assert deps["across-serving"] == ["across-access-files", "across-node1-serving", "across-unit"]
