"""The host survey's parsers on recorded output, and what the preview concludes from a survey."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from controller import assess, client_ids, forecast
from host import contract, facts, model_files, survey
from host.contract import Listener, Memory, Survey
from models.config import StackConfig
from models.loader import parse_stack_config
from render.units import render_unit
from tests.support.paths import FIXTURES

SS = """LISTEN 0      4096         0.0.0.0:8000      0.0.0.0:*    users:(("python3",pid=812,fd=21))
LISTEN 0      128          127.0.0.1:22        0.0.0.0:*    users:(("sshd",pid=90,fd=3),("sshd",pid=91,fd=3))
LISTEN 0      4096            [::1]:8001         [::]:*
"""


def test_parse_ss_lists_each_listener_with_its_pids() -> None:
    assert facts.parse_ss(SS) == [
        Listener(address="0.0.0.0", port=8000, pid=812),
        Listener(address="127.0.0.1", port=22, pid=90),
        Listener(address="127.0.0.1", port=22, pid=91),
        Listener(address="::1", port=8001, pid=0),
    ]


def test_compute_apps_are_attributed_to_gpu_indices_by_uuid() -> None:
    uuids = facts.parse_gpu_uuids((FIXTURES / "query-gpu-index-uuid.csv").read_text())
    assert uuids == {"GPU-2d89e51f-5e96-045d-c482-d5b2e616b566": 0}
    holders = facts.parse_compute_apps((FIXTURES / "compute-apps-uuid-busy.csv").read_text(), uuids)
    assert [(h.pid, sorted(h.gpus or ()), h.used_mib) for h in holders] == [
        (427, [0], 10758),
        (428, [0], 2566),
        (469, [0], 3590),
    ]


BROWNFIELD: dict[str, Any] = {
    "units": [
        {"name": "vllm-legacy.service", "activeState": "active", "enabled": True, "managed": False, "owner": None},
        {"name": "vllm-glm5.service", "activeState": "inactive", "enabled": True, "managed": False, "owner": None},
    ],
    "listeners": [
        {"address": "0.0.0.0", "port": 8000, "pid": 700, "unit": "vllm-legacy.service", "cmd": "python3 -m vllm"}
    ],
    "gpuHolders": [
        {"pid": 700, "gpus": [0], "usedMib": 3000, "unit": "vllm-legacy.service", "cmd": "python3 -m vllm"},
        {"pid": 901, "gpus": [0], "usedMib": 1200, "unit": None, "cmd": "VLLM::stray"},
    ],
}


def survey_of(found: dict[str, Any]) -> Survey:
    """A survey as the controller parses the host's answer."""
    return Survey.from_dict(copy.deepcopy(found))


def judged(dev_raw: dict[str, Any], **deployment: Any) -> tuple[list[str], list[str]]:
    dev_raw["deployments"][0].update(deployment)
    config = parse_stack_config(dev_raw)
    return assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(BROWNFIELD))


def test_unnamed_units_and_strays_on_the_deployments_port_and_gpus_are_refused(dev_raw: dict[str, Any]) -> None:
    errors, notes = judged(dev_raw, gpus=[0])
    assert any(
        "port 8000, its front door's port, is held by PID 700 (python3 -m vllm) of vllm-legacy.service, which this stack does not manage; "
        "add vllm-legacy.service to vllm-fleet:deployments[chat].replaces" in e
        for e in errors
    ), errors
    assert any("GPU 0 is held by PID 901 (VLLM::stray) of no systemd unit" in e for e in errors), errors
    assert any("set vllm-fleet:deployments[chat].foreignGpuProcesses: stop" in e for e in errors), errors
    assert notes == []


def test_named_units_are_adopted_and_allowed_strays_noted(dev_raw: dict[str, Any]) -> None:
    errors, notes = judged(
        dev_raw, gpus=[0], replaces=["vllm-legacy.service", "vllm-glm5.service"], foreignGpuProcesses="stop"
    )
    assert errors == []
    assert any("takes over vllm-legacy.service (active, enabled)" in n for n in notes), notes
    assert any("takes over vllm-glm5.service (inactive, enabled)" in n for n in notes), notes
    assert any("PID 901 (VLLM::stray) of no systemd unit; the GPU-release guard will stop it" in n for n in notes)


def test_another_deployments_unit_on_the_gpus_is_a_conflict(dev_raw: dict[str, Any]) -> None:
    BROWNFIELD_OTHER = copy.deepcopy(BROWNFIELD)
    BROWNFIELD_OTHER["units"][0].update(managed=True, owner="prod.primary")
    dev_raw["deployments"][0]["gpus"] = [0]
    config = parse_stack_config(dev_raw)
    errors, _ = assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(BROWNFIELD_OTHER))
    assert any("a unit of deployment prod.primary" in e for e in errors), errors


@pytest.mark.parametrize("unit", ["vllm-tiny-chat-a.service"])
def test_the_deployments_own_units_are_not_conflicts(dev_raw: dict[str, Any], unit: str) -> None:
    found = {
        "units": [
            {"name": "vllm-old.service", "activeState": "active", "enabled": True, "managed": True, "owner": "dev.chat"}
        ],
        "listeners": [{"port": 8000, "pid": 5, "unit": "vllm-old.service"}, {"port": 8000, "pid": 6, "unit": unit}],
        "gpuHolders": [{"pid": 5, "gpus": [0], "unit": "vllm-old.service"}],
    }
    config = parse_stack_config(dev_raw)
    assert assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(found)) == ([], [])


def test_gpus_held_by_others_are_a_note_while_enough_of_the_deployments_gpus_are_free(dev_raw: dict[str, Any]) -> None:
    found = copy.deepcopy(BROWNFIELD)
    found["listeners"] = []
    dev_raw["deployments"][0]["gpus"] = [0, 1]
    config = parse_stack_config(dev_raw)
    errors, notes = assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(found))
    assert errors == []
    assert any(
        "GPU 0 of vllm-fleet:deployments[chat].gpus is held by PID 901 (VLLM::stray)" in n
        and "cannot start the new model there beside the old one" in n
        for n in notes
    ), notes


def test_the_front_door_on_the_deployments_port_is_its_own(dev_raw: dict[str, Any]) -> None:
    found = {
        "units": [],
        "listeners": [
            {"port": 8000, "pid": 40, "unit": "vllm-fleet-frontdoor.service", "cmd": "nginx: master process"},
            {"port": 28000, "pid": 41, "unit": "jupyter.service", "cmd": "jupyter"},
        ],
        "gpuHolders": [],
    }
    config = parse_stack_config(dev_raw)
    errors, _ = assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(found))
    assert errors == [
        "host 'sandbox', deployment 'chat': port 28000, one of its engine ports "
        "(vllm-fleet:deployments[chat].backendPorts), is held by PID 41 (jupyter) of jupyter.service, which this "
        "stack does not manage; add jupyter.service to vllm-fleet:deployments[chat].replaces to take it over, or stop it"
    ]


def serving(unit: str, gpus: list[int]) -> dict[str, Any]:
    return {
        "units": [{"name": unit, "activeState": "active", "enabled": True, "managed": True, "owner": "dev.chat"}],
        "listeners": [],
        "gpuHolders": [{"pid": 5, "gpus": gpus, "unit": unit}],
        "active": {"dev.chat": {"unit": unit, "gpus": gpus, "backendPort": 18000}},
        "memory": {"totalMib": 24000, "availableMib": 20000},
    }


def test_preview_forecasts_blue_green_when_the_other_gpu_is_free(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0]["model"] = "tiny-chat-b"
    config = parse_stack_config(dev_raw)
    (line, kept) = forecast.forecasts(
        "dev",
        config,
        config.hosts[0],
        config.resolved_deployments(),
        survey_of(serving("vllm-tiny-chat-a.service", [0])),
    )
    assert "from vllm-tiny-chat-a.service to vllm-tiny-chat-b.service will run blue/green" in line
    assert (
        "GPU 1 free beside vllm-tiny-chat-a.service" in line and "expected downtime 0 s; the new engine's start" in line
    )
    # tiny-chat-a is kept on disk (models[].keep): what a swap back to it would cost is said too.
    assert kept.startswith("host 'sandbox', deployment 'chat': a swap to tiny-chat-a (kept on disk): about")


def test_preview_forecasts_stop_start_from_the_incoming_models_own_start(dev_raw: dict[str, Any]) -> None:
    """The deployment's last start (24.3 s) was tiny-chat-a's, the model that goes: the forecast of the
    swap to tiny-chat-b is tiny-chat-b's own last start on the host, not that one."""
    dev_raw["deployments"][0]["model"] = "tiny-chat-b"
    found = serving("vllm-tiny-chat-a.service", [0])
    found["gpuHolders"].append({"pid": 9, "gpus": [1], "unit": "gpu-taker.service"})
    found["mounts"] = [{"path": "/", "type": "overlay"}]
    config = parse_stack_config(dev_raw)
    rds = config.resolved_deployments()
    (line, _) = forecast.forecasts("dev", config, config.hosts[0], rds, survey_of(found))
    assert "will run stop-then-start" in line and "GPU 1 held by other processes" in line
    assert "expected downtime: the start of tiny-chat-b, about 60 s (from the rates of models/downtime.py" in line
    assert "no start of tiny-chat-b on sandbox yet" in line and "24" not in line
    assert "loader: --load-format auto (vLLM default), --safetensors-load-strategy lazy (vLLM default)" in line
    assert "/shared/tiny-chat-b is on overlay, a local filesystem" in line
    found["starts"] = [
        start_record(config, "tiny-chat-a", at=2000.0, seconds=24.3),
        start_record(config, "tiny-chat-b", at=1000.0, seconds=18.7),
    ]
    (line, kept) = forecast.forecasts("dev", config, config.hosts[0], rds, survey_of(found))
    assert (
        "expected downtime: the start of tiny-chat-b, about 19 s (from the start of tiny-chat-b on sandbox at 1970-01-01 00:16 (dev.chat)"
        in line
    )
    assert "a swap to tiny-chat-a (kept on disk): about 24 s (from the start of tiny-chat-a on sandbox" in kept
    # No swap, no forecast of one; with a kept model, what a swap to it costs, beside the next start of its own.
    dev_raw["deployments"][0]["model"] = "tiny-chat-a"
    config = parse_stack_config(dev_raw)
    (rd,) = config.resolved_deployments()
    found["units"][0]["sha256"] = hashlib.sha256(render_unit(rd, "dev").text.encode()).hexdigest()
    assert forecast.forecasts("dev", config, config.hosts[0], config.resolved_deployments(), survey_of(found)) == []
    dev_raw["models"]["tiny-chat-b"]["keep"] = True
    config = parse_stack_config(dev_raw)
    own, other = forecast.forecasts("dev", config, config.hosts[0], config.resolved_deployments(), survey_of(found))
    assert own.startswith("host 'sandbox', deployment 'chat': a restart of tiny-chat-a: about 24 s (from the start")
    assert other.startswith("host 'sandbox', deployment 'chat': a swap to tiny-chat-b (kept on disk): about 19 s")


def start_record(config: StackConfig, model: str, at: float, seconds: float) -> dict[str, Any]:
    """A start as the survey reports it (host/contract.StartRecord), of a dev model loaded from /shared."""
    spec = config.models[model]
    loaded = contract.Loaded(model, f"/shared/{model}", spec.repo, spec.revision, size_bytes=1_000_000)
    unit = f"vllm-{model}.service"
    return contract.StartRecord(at, "dev.chat", unit, "stop-start", seconds, loaded).to_dict()


def test_preview_forecasts_each_change_of_the_deployments_own_unit(dev_raw: dict[str, Any]) -> None:
    """The unit that serves changes (its text differs from the stack's): the survey's reading of its engine
    decides a rewrite, a restart through the bridge on the free GPU, or, with none free, stop-then-start."""
    config = parse_stack_config(dev_raw)
    found = serving("vllm-tiny-chat-a.service", [0])
    found["units"][0]["sha256"] = "0" * 64
    same = {"unit": "vllm-tiny-chat-a.service", "unitChanges": ["TimeoutStopSec=", "its comments"]}
    found["readings"] = {"dev.chat": same}

    def line() -> str:
        (said,) = forecast.forecasts("dev", config, config.hosts[0], config.resolved_deployments(), survey_of(found))
        return said

    assert line() == (
        "host 'sandbox', deployment 'chat': vllm-tiny-chat-a.service: unit updated, the engine keeps running "
        "(its launch is unchanged): TimeoutStopSec=, its comments change; expected downtime 0 s"
    )
    flag = "--max-model-len is 512 now, 256 in the new unit"
    found["readings"] = {"dev.chat": {**same, "differences": [flag]}}
    bridged = line()
    assert bridged.startswith(
        "host 'sandbox', deployment 'chat': vllm-tiny-chat-a.service restarts with its new launch: its launch "
        f"changes ({flag}): blue/green through vllm-tiny-chat-a-bridge.service on GPU 1 beside "
        "vllm-tiny-chat-a.service: two loads, 0 s downtime expected; each load: about "
    ), bridged
    found["gpuHolders"].append({"pid": 9, "gpus": [1], "unit": "gpu-taker.service"})
    said = line()
    assert "vllm-tiny-chat-a.service will run stop-then-start (its launch changes" in said
    assert "so it restarts in place: the new launch needs 1 GPU(s) beside it on GPU 0" in said
    # Its downtime: the start of its model, from that model's own starts here (none yet: the rates).
    assert "; expected downtime: the start of tiny-chat-a, about 60 s (from the rates of models/downtime.py" in said
    # The first read of a launch waited for the host's vLLM: said once per host.
    found["readings"]["dev.chat"]["note"] = "read 2 launch(es) with this host's vLLM 0.32.0 argument parser in 7.1 s"
    notes = forecast.parser_notes("dev", config.hosts[0], config.resolved_deployments(), survey_of(found))
    assert notes == ["host 'sandbox': read 2 launch(es) with this host's vLLM 0.32.0 argument parser in 7.1 s"]


def test_a_checkpoint_the_ram_cannot_hold_is_named(prod_raw: dict[str, Any]) -> None:
    config = parse_stack_config(prod_raw)
    (rd,) = [r for r in config.resolved_deployments() if r.model.size_gb > 500]
    notes = forecast.memory_notes(rd, Survey(memory=Memory(512 * 1024, 400 * 1024)))
    assert len(notes) == 1 and "over 90% of the host's 512 GiB RAM" in notes[0], notes
    assert forecast.memory_notes(rd, Survey(memory=Memory(2048 * 1024, 1900 * 1024))) == []


def test_an_enabled_hand_made_unit_that_would_claim_the_port_at_boot_refuses(dev_raw: dict[str, Any]) -> None:
    """The reference server's vllm-glm5.service: stopped, but enabled and launching on the same port."""
    launch = facts.vllm_launch(
        ["/root/ml-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/glm5"], {}
    )
    assert launch is not None and launch.port == 8000 and launch.gpus is None
    assert launch.served_names == ("/shared/glm5",)
    found = {
        "units": [
            {"name": "vllm-glm5.service", "activeState": "inactive", "enabled": True, "managed": False,
             "owner": None, "launch": launch.to_dict()},
        ],
        "listeners": [],
        "gpuHolders": [],
    }  # fmt: skip
    config = parse_stack_config(dev_raw)
    errors, _ = assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(found))
    assert any(
        "vllm-glm5.service is a hand-made vLLM unit, enabled but not running: the next boot starts it and it "
        "claims port 8000 and GPU 0 (it sets no CUDA_VISIBLE_DEVICES)"
        in e
        and "add vllm-glm5.service to vllm-fleet:deployments[chat].replaces" in e
        for e in errors
    ), errors
    # Disabled, or listed under replaces: no obstacle.
    found["units"][0]["enabled"] = False
    assert assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(found))[0] == []
    found["units"][0]["enabled"] = True
    dev_raw["deployments"][0]["replaces"] = ["vllm-glm5.service"]
    config = parse_stack_config(dev_raw)
    assert assess.assess("dev", config.hosts[0], config.resolved_deployments(), survey_of(found))[0] == []


def test_a_unit_launch_is_read_as_vllm_reads_it() -> None:
    text = """[Service]
Environment=CUDA_VISIBLE_DEVICES=4,5
ExecStart=/root/ml-env/bin/vllm serve /shared/minimax-m2.5 \\
    --served-model-name minimax MiniMax-M2.5 --port=8001 -tp 2
"""
    launch = facts.unit_launch(text, {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert launch is not None
    assert (launch.model, launch.served_names, launch.port, launch.gpus, launch.tensor_parallel) == (
        "/shared/minimax-m2.5",
        ("minimax", "MiniMax-M2.5"),
        8001,
        (4, 5),
        2,
    )
    assert facts.unit_launch("[Service]\nExecStart=/usr/bin/jupyter lab\n", {}) is None


def launch_dict(argv: list[str]) -> dict[str, Any]:
    launch = facts.vllm_launch(argv, {})
    assert launch is not None
    return launch.to_dict()


def test_a_take_over_keeps_the_ids_clients_send_and_the_preview_says_so(dev_raw: dict[str, Any]) -> None:
    """The reference server's engine serves its --model path: after the take-over that id still answers."""
    argv = ["/opt/vllm-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/legacy-a"]
    legacy = {"name": "vllm-legacy.service", "activeState": "active", "enabled": True, "managed": False,
              "owner": None, "launch": launch_dict([*argv, "--port", "8000"])}  # fmt: skip
    found: dict[str, Any] = {"units": [legacy], "listeners": [], "gpuHolders": []}
    dev_raw["deployments"][0]["replaces"] = ["vllm-legacy.service"]
    rd = parse_stack_config(dev_raw).resolved_deployments()[0]
    assert client_ids.client_ids("dev", rd, survey_of(found)) == (["/shared/legacy-a"], ["/shared/legacy-a"])
    kept = client_ids.with_client_ids("dev", rd, survey_of(found))
    assert kept.served_model_names == ("chat", "/shared/legacy-a")
    info, warnings = client_ids.client_id_lines("dev", kept, survey_of(found))
    assert warnings == []  # no API keys: the front door asks for none
    info, warnings = client_ids.client_id_lines("dev", kept, survey_of(found), asks_key=True)
    assert info == [
        "host 'sandbox', deployment 'chat': model ids clients can send on port 8000: today ['/shared/legacy-a']; "
        "after this update ['chat', '/shared/legacy-a']"
    ]
    # With API keys the front door asks for one; the hand-made engine took none: its clients get 401.
    assert warnings == [
        "host 'sandbox', deployment 'chat': vllm-legacy.service answers on port 8000 without an API key; after "
        "this update the front door asks for one of vllm-fleet:apiKeys and clients that send none get 401. Give "
        "every client a key first, or set vllm-fleet:access.open: true to keep the port open"
    ]
    # The stack says otherwise: the id goes, and the preview warns with the key that keeps it.
    dev_raw["deployments"][0]["alsoServedAs"] = []
    only = client_ids.with_client_ids("dev", parse_stack_config(dev_raw).resolved_deployments()[0], survey_of(found))
    assert only.served_model_names == ("chat",)
    _, warnings = client_ids.client_id_lines("dev", only, survey_of(found))
    assert [w for w in warnings if "404" in w] == [
        "host 'sandbox', deployment 'chat': clients that send model id '/shared/legacy-a' get 404 after this update; "
        "add it to vllm-fleet:deployments[chat].alsoServedAs to keep it"
    ]
    # A replaced unit that does not run serves nobody today: it adds no id.
    legacy["activeState"] = "inactive"
    assert client_ids.client_ids("dev", rd, survey_of(found)) == ([], [])
    # After the take-over the managed unit carries the kept id; its own served name is never kept, so a
    # swap to another served name drops it (and the preview warns).
    managed = {"name": "vllm-tiny-chat-a.service", "activeState": "active", "enabled": True, "managed": True,
               "owner": "dev.chat", "launch": launch_dict([*argv, "--served-model-name", "old", "/shared/legacy-a"])}  # fmt: skip
    found = {"units": [managed], "active": {"dev.chat": {"unit": "vllm-tiny-chat-a.service"}}}
    assert client_ids.client_ids("dev", rd, survey_of(found)) == (["old", "/shared/legacy-a"], ["/shared/legacy-a"])
    assert client_ids.with_client_ids("dev", rd, survey_of(found)).served_model_names == ("chat", "/shared/legacy-a")
    kept_ids = client_ids.with_client_ids("dev", rd, survey_of(found))
    _, warnings = client_ids.client_id_lines("dev", kept_ids, survey_of(found))
    assert [w for w in warnings if "'old' get 404" in w], warnings


# `systemctl show` of two units as systemd 252 prints it on the sandbox (the second one has no unit file).
SHOW_TWO_UNITS = """MainPID=3454
NRestarts=0
Environment=HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
ActiveState=active
FragmentPath=/etc/systemd/system/vllm-tiny-chat-b.service
DropInPaths=
UnitFileState=enabled

MainPID=0
NRestarts=0
Environment=
ActiveState=inactive
FragmentPath=
DropInPaths=
UnitFileState=
"""


def test_one_systemctl_show_reads_every_unit_and_its_blocks_follow_the_names(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def run(*args: str) -> str:
        calls.append(args)
        return SHOW_TWO_UNITS

    monkeypatch.setattr(survey, "stdout_of", run)
    shown = survey.unit_properties(["vllm-tiny-chat-b.service", "vllm-gone.service"])
    assert len(calls) == 1
    assert shown["vllm-tiny-chat-b.service"]["FragmentPath"] == "/etc/systemd/system/vllm-tiny-chat-b.service"
    assert shown["vllm-tiny-chat-b.service"]["Environment"] == "HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1"
    assert shown["vllm-gone.service"] == {
        "MainPID": "0", "NRestarts": "0", "Environment": "", "ActiveState": "inactive", "FragmentPath": "",
        "DropInPaths": "", "UnitFileState": "",
    }  # fmt: skip


def test_an_answer_without_a_block_per_unit_is_read_again_unit_by_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    # systemctl skips a name it cannot parse (with a word on stderr): the blocks would no longer match the names.
    first, second = SHOW_TWO_UNITS.split("\n\n")
    answers = {("a.service", "b.service"): first, ("a.service",): first, ("b.service",): second}
    monkeypatch.setattr(survey, "stdout_of", lambda *args: answers[tuple(a for a in args if a.endswith(".service"))])
    shown = survey.unit_properties(["a.service", "b.service"])
    assert shown["a.service"]["ActiveState"] == "active" and shown["b.service"]["ActiveState"] == "inactive"


def test_the_mount_table_without_pseudo_filesystems_and_with_its_escapes() -> None:
    mounts = facts.parse_mounts(
        "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"
        "proc /proc proc rw 0 0\n"
        "10.40.0.2:/export /shared nfs4 rw,vers=4.2 0 0\n"
        "/dev/md0 /mnt/local\\040disk xfs rw 0 0\n"
        "10.40.0.3:/other /shared nfs4 rw 0 0\n"
    )
    assert mounts == [
        contract.Mount("/", "ext4", "/dev/nvme0n1p2"),
        contract.Mount("/mnt/local disk", "xfs", "/dev/md0"),
        contract.Mount("/shared", "nfs4", "10.40.0.3:/other"),  # the last mount over it
    ]
    assert contract.filesystem_of("/shared/kimi", tuple(mounts)) == "nfs4"
    assert contract.filesystem_of("/mnt/local disk/m", tuple(mounts)) == "xfs"
    assert contract.filesystem_of("/sharedother/m", tuple(mounts)) == "ext4"
    assert contract.filesystem_of("/shared/kimi", ()) is None


def test_the_vllm_facts_name_the_release_and_the_loaders_extras(tmp_path: Path) -> None:
    """Read by the host's python from its packages' metadata: a venv with vLLM and instanttensor, without
    runai_model_streamer."""
    packages = tmp_path / "site"
    for name, version in (("vllm", "0.32.0+cpu"), ("instanttensor", "0.1.9")):
        info = packages / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={packages} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    assert survey.vllm_facts(str(python)) == ("0.32.0+cpu", {"runai_model_streamer": None, "instanttensor": "0.1.9"})
    assert survey.vllm_facts(str(tmp_path / "no-python")) == (None, None)  # unknown, not "not installed"


def test_a_survey_crosses_the_wire_as_it_was_read() -> None:
    """host/survey.py writes Survey.to_dict(); the controller and the swap read it back with from_dict."""
    launch = facts.vllm_launch(["/opt/v/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "9"], {})
    found = Survey.from_dict(
        {
            "units": [
                {"name": "vllm-a.service", "activeState": "active", "subState": "running", "enabled": True,
                 "managed": True, "owner": "dev.chat", "sha256": "1" * 64, "stagedSha256": "1" * 64,
                 "envMatchesStaged": True, "launch": launch.to_dict() if launch else None, "mainPid": 5},
            ],
            "listeners": [{"address": "0.0.0.0", "port": 9, "pid": 5, "unit": "vllm-a.service", "cmd": "python3"}],
            "gpuHolders": [
                {"pid": 5, "gpus": [0], "usedMib": 10, "unit": "vllm-a.service", "cmd": "python3"},
                {"pid": 6, "gpus": [1], "unit": "jupyter.service", "unitState": "active", "unitManaged": False},
            ],
            "gpuCount": 2,
            "active": {"dev.chat": {"unit": "vllm-a.service", "gpus": [0], "backendPort": 18000, "repairs": 3,
                                    "adapters": {"wanted": {"x": "r"}, "loaded": ["x"], "repairs": 1, "drift": []},
                                    "forecast": {"seconds": 19.0, "basis": "b", "source": "rates", "madeAt": 0.5}}},
            "claims": {"dev.chat": {"gpus": [0], "ports": [9], "units": ["vllm-a.service"]}},
            "memory": {"totalMib": 100, "availableMib": 50},
            "models": {"/shared/m": {"dir": "/shared/m", "state": "changed", "changed": ["a"], "repairs": {"dev": 2}}},
            "vllm": {"version": "0.32.0+cpu", "extras": {"instanttensor": None, "runai_model_streamer": "0.15.0"}},
            "hostKeys": {"dev": "none", "prod": "SHA256:abc"},
            "mounts": [{"path": "/", "type": "overlay", "source": "overlay"}, {"path": "/shared", "type": "nfs4"}],
            "starts": [{"at": 1.0, "owner": "dev.chat", "unit": "vllm-a.service", "mode": "stop-start", "seconds": 20.5,
                        "loaded": {"model": "a", "directory": "/shared/a", "sizeBytes": 10, "residentShare": 1.0},
                        "phases": {"startedAt": 1.0, "seconds": 20.4, "ready": True,
                                   "phases": [{"name": "imports", "seconds": 9.4}, {"name": "weights", "seconds": 11.0}],
                                   "reported": {"weightsSeconds": 0.5, "filesystem": "nfs"}, "shards": [1, 1]},
                        "forecast": {"seconds": 19.0, "basis": "from the start ...", "source": "own start", "madeAt": 0.5},
                        "downtimeSeconds": 21.0}],
            "at": 1.5,
        }
    )  # fmt: skip
    assert Survey.from_dict(json.loads(json.dumps(found.to_dict()))) == found
    # A holder's unit from the survey's units when the entry does not say; from the entry otherwise.
    assert found.gpu_holders[0].unit == found.units[0].process_unit
    assert found.gpu_holders[1].unit is not None and found.gpu_holders[1].unit.running
    assert found.deployment("dev.chat").record == contract.ActiveRecord("vllm-a.service", gpus=(0,), backend_port=18000)
    assert found.deployment("dev.other").record is None and found.running("vllm-a.service")
    assert found.deployment("dev.chat").forecast == contract.StartForecastRecord(19.0, "b", "rates", 0.5)
    assert found.host_keys == {"dev": "none", "prod": "SHA256:abc"}
    # The facts the loader and the forecast read, typed once.
    assert found.vllm_extras == {"instanttensor": None, "runai_model_streamer": "0.15.0"}
    assert contract.filesystem_of("/shared/a", found.mounts) == "nfs4"
    (start,) = found.starts
    assert start.phases is not None and start.phases.phase("weights") == 11.0 and start.phases.shards == (1, 1)
    assert start.forecast is not None and start.forecast.made_at == 0.5 and start.loaded.resident_share == 1.0


def test_a_managed_units_file_and_environment_are_compared_with_what_was_staged(tmp_path: Path) -> None:
    state, etc = tmp_path / "state", tmp_path / "etc"
    staged = state / "deployments" / "dev.chat" / "staged"
    staged.mkdir(parents=True)
    etc.mkdir()
    assert survey.staged("dev.chat", "vllm-a.service", str(state), str(etc)) == (None, None)  # nothing staged
    (staged / "vllm-a.service").write_text("unit\n")
    (staged / "vllm-a.env").write_text("HF_TOKEN=x\n")
    (etc / "vllm-a.env").write_text("HF_TOKEN=x\n")
    digest = hashlib.sha256(b"unit\n").hexdigest()
    assert survey.staged("dev.chat", "vllm-a.service", str(state), str(etc)) == (digest, True)
    (etc / "vllm-a.env").write_text("HF_TOKEN=edited\n")
    assert survey.staged("dev.chat", "vllm-a.service", str(state), str(etc)) == (digest, False)
    assert survey.staged(None, "vllm-a.service", str(state), str(etc)) == (None, None)


def test_a_model_directory_is_judged_by_its_manifest_and_its_repairs_live_in_the_hosts_state(tmp_path: Path) -> None:
    model, state = tmp_path / "m", tmp_path / "state"
    assert model_files.model_state(model, state) == contract.ModelFiles(str(model), contract.MODEL_NO_MANIFEST)
    model.mkdir()
    for name in ("a.safetensors", "b.safetensors"):
        (model / name).write_text(name)
    entries = {name: model_files.stat_entry(model / name) for name in ("a.safetensors", "b.safetensors")}
    model_files.write_manifest(model, "acme/m", "f" * 40, entries)
    assert model_files.model_state(model, state).state == contract.MODEL_VERIFIED
    (model / "b.safetensors").unlink()
    model_files.record_repairs(state, "dev", model, 2)
    model_files.record_repairs(state, "e2e", model, 5)
    model_files.record_repairs(state, "dev", tmp_path / "other", 9)
    found = model_files.model_state(model, state)
    assert (found.state, found.changed, found.repairs) == (
        contract.MODEL_CHANGED,
        ("b.safetensors",),
        {"dev": 2, "e2e": 5},
    )
    assert found.describe() == "changed: b.safetensors"
    # Deleted whole: the manifest goes with it, the repairs stay.
    shutil.rmtree(model)
    assert model_files.model_state(model, state).repairs == {"dev": 2, "e2e": 5}


def test_the_survey_reports_the_key_each_stack_pinned(tmp_path: Path) -> None:
    """What each stack's preflight recorded (host/contract.HOST_KEYS_DIR), by stack; a record being written
    (its dot-named temporary) is not one, and a host without the directory has none."""
    (tmp_path / "prod").write_text("SHA256:abc\n")
    (tmp_path / "dev").write_text("none\n")
    (tmp_path / ".prod.tmp").write_text("SHA256:half")
    assert contract.pinned_host_keys(str(tmp_path)) == {"dev": "none", "prod": "SHA256:abc"}
    assert contract.pinned_host_keys(str(tmp_path / "absent")) == {}
