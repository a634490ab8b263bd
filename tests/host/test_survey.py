"""The host survey's parsers on recorded output, and what the preview concludes from a survey."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from controller import survey as host_survey
from host import facts, survey
from models.loader import parse_stack_config
from tests.support.paths import FIXTURES

SS = """LISTEN 0      4096         0.0.0.0:8000      0.0.0.0:*    users:(("python3",pid=812,fd=21))
LISTEN 0      128          127.0.0.1:22        0.0.0.0:*    users:(("sshd",pid=90,fd=3),("sshd",pid=91,fd=3))
LISTEN 0      4096            [::1]:8001         [::]:*
"""


def test_parse_ss_lists_each_listener_with_its_pids() -> None:
    assert facts.parse_ss(SS) == [
        {"address": "0.0.0.0", "port": 8000, "pid": 812},
        {"address": "127.0.0.1", "port": 22, "pid": 90},
        {"address": "127.0.0.1", "port": 22, "pid": 91},
        {"address": "::1", "port": 8001, "pid": 0},
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


def judged(dev_raw: dict[str, Any], **deployment: Any) -> tuple[list[str], list[str]]:
    dev_raw["deployments"][0].update(deployment)
    config = parse_stack_config(dev_raw)
    return host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), copy.deepcopy(BROWNFIELD))


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
    errors, _ = host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), BROWNFIELD_OTHER)
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
    assert host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), found) == ([], [])


def test_gpus_held_by_others_are_a_note_while_enough_of_the_deployments_gpus_are_free(dev_raw: dict[str, Any]) -> None:
    found = copy.deepcopy(BROWNFIELD)
    found["listeners"] = []
    dev_raw["deployments"][0]["gpus"] = [0, 1]
    config = parse_stack_config(dev_raw)
    errors, notes = host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), found)
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
    errors, _ = host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), found)
    assert errors == [
        "host 'sandbox', deployment 'chat': port 28000, one of its engine ports "
        "(vllm-fleet:deployments[chat].backendPorts), is held by PID 41 (jupyter) of jupyter.service, which this "
        "stack does not manage; add jupyter.service to vllm-fleet:deployments[chat].replaces to take it over, or stop it"
    ]


def serving(unit: str, gpus: list[int], last: float | None = None) -> dict[str, Any]:
    return {
        "units": [{"name": unit, "activeState": "active", "enabled": True, "managed": True, "owner": "dev.chat"}],
        "listeners": [],
        "gpuHolders": [{"pid": 5, "gpus": gpus, "unit": unit}],
        "active": {"dev.chat": {"unit": unit, "gpus": gpus, "backendPort": 18000, "lastStartSeconds": last}},
        "memory": {"totalMib": 24000, "availableMib": 20000},
    }


def test_preview_forecasts_blue_green_when_the_other_gpu_is_free(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0]["model"] = "tiny-chat-b"
    config = parse_stack_config(dev_raw)
    (line,) = host_survey.forecasts(
        "dev", config.hosts[0], config.resolved_deployments(), serving("vllm-tiny-chat-a.service", [0])
    )
    assert "from vllm-tiny-chat-a.service to vllm-tiny-chat-b.service will run blue/green" in line
    assert "GPU 1 free beside vllm-tiny-chat-a.service" in line and line.endswith("expected downtime 0 s")


def test_preview_forecasts_stop_start_with_the_last_measured_start(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0]["model"] = "tiny-chat-b"
    found = serving("vllm-tiny-chat-a.service", [0], last=24.3)
    found["gpuHolders"].append({"pid": 9, "gpus": [1], "unit": "gpu-taker.service"})
    config = parse_stack_config(dev_raw)
    (line,) = host_survey.forecasts("dev", config.hosts[0], config.resolved_deployments(), found)
    assert "will run stop-then-start" in line and "GPU 1 held by other processes" in line
    assert "expected downtime about 24 s (the last start of this deployment here took 24.3 s)" in line
    # No swap, no forecast.
    dev_raw["deployments"][0]["model"] = "tiny-chat-a"
    config = parse_stack_config(dev_raw)
    assert host_survey.forecasts("dev", config.hosts[0], config.resolved_deployments(), found) == []


def test_a_checkpoint_the_ram_cannot_hold_is_named(prod_raw: dict[str, Any]) -> None:
    config = parse_stack_config(prod_raw)
    (rd,) = [r for r in config.resolved_deployments() if r.model.size_gb > 500]
    notes = host_survey.memory_notes(rd, {"memory": {"totalMib": 512 * 1024, "availableMib": 400 * 1024}})
    assert len(notes) == 1 and "over 90% of the host's 512 GiB RAM" in notes[0], notes
    assert host_survey.memory_notes(rd, {"memory": {"totalMib": 2048 * 1024, "availableMib": 1900 * 1024}}) == []


def test_an_enabled_hand_made_unit_that_would_claim_the_port_at_boot_refuses(dev_raw: dict[str, Any]) -> None:
    """The reference server's vllm-glm5.service: stopped, but enabled and launching on the same port."""
    launch = facts.vllm_launch(
        ["/root/ml-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/glm5"], {}
    )
    assert launch is not None and launch["port"] == 8000 and launch["gpus"] is None
    assert launch["servedNames"] == ["/shared/glm5"]
    found = {
        "units": [
            {"name": "vllm-glm5.service", "activeState": "inactive", "enabled": True, "managed": False,
             "owner": None, "launch": launch},
        ],
        "listeners": [],
        "gpuHolders": [],
    }  # fmt: skip
    config = parse_stack_config(dev_raw)
    errors, _ = host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), found)
    assert any(
        "vllm-glm5.service is a hand-made vLLM unit, enabled but not running: the next boot starts it and it "
        "claims port 8000 and GPU 0 (it sets no CUDA_VISIBLE_DEVICES)"
        in e
        and "add vllm-glm5.service to vllm-fleet:deployments[chat].replaces" in e
        for e in errors
    ), errors
    # Disabled, or listed under replaces: no obstacle.
    found["units"][0]["enabled"] = False
    assert host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), found)[0] == []
    found["units"][0]["enabled"] = True
    dev_raw["deployments"][0]["replaces"] = ["vllm-glm5.service"]
    config = parse_stack_config(dev_raw)
    assert host_survey.assess("dev", config.hosts[0], config.resolved_deployments(), found)[0] == []


def test_a_unit_launch_is_read_as_vllm_reads_it() -> None:
    text = """[Service]
Environment=CUDA_VISIBLE_DEVICES=4,5
ExecStart=/root/ml-env/bin/vllm serve /shared/minimax-m2.5 \\
    --served-model-name minimax MiniMax-M2.5 --port=8001 -tp 2
"""
    launch = facts.unit_launch(text, {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert launch is not None
    assert (launch["model"], launch["servedNames"], launch["port"], launch["gpus"], launch["tensorParallel"]) == (
        "/shared/minimax-m2.5",
        ["minimax", "MiniMax-M2.5"],
        8001,
        [4, 5],
        2,
    )
    assert facts.unit_launch("[Service]\nExecStart=/usr/bin/jupyter lab\n", {}) is None


def test_a_take_over_keeps_the_ids_clients_send_and_the_preview_says_so(dev_raw: dict[str, Any]) -> None:
    """The reference server's engine serves its --model path: after the take-over that id still answers."""
    argv = ["/opt/vllm-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/legacy-a"]
    legacy = {"name": "vllm-legacy.service", "activeState": "active", "enabled": True, "managed": False,
              "owner": None, "launch": facts.vllm_launch([*argv, "--port", "8000"], {})}  # fmt: skip
    found = {"units": [legacy], "listeners": [], "gpuHolders": []}
    dev_raw["deployments"][0]["replaces"] = ["vllm-legacy.service"]
    rd = parse_stack_config(dev_raw).resolved_deployments()[0]
    assert host_survey.client_ids("dev", rd, found) == (["/shared/legacy-a"], ["/shared/legacy-a"])
    kept = host_survey.with_client_ids("dev", rd, found)
    assert kept.served_model_names == ("chat", "/shared/legacy-a")
    info, warnings = host_survey.client_id_lines("dev", kept, found)
    assert warnings == []  # no API keys: the front door asks for none
    info, warnings = host_survey.client_id_lines("dev", kept, found, asks_key=True)
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
    only = host_survey.with_client_ids("dev", parse_stack_config(dev_raw).resolved_deployments()[0], found)
    assert only.served_model_names == ("chat",)
    _, warnings = host_survey.client_id_lines("dev", only, found)
    assert [w for w in warnings if "404" in w] == [
        "host 'sandbox', deployment 'chat': clients that send model id '/shared/legacy-a' get 404 after this update; "
        "add it to vllm-fleet:deployments[chat].alsoServedAs to keep it"
    ]
    # A replaced unit that does not run serves nobody today: it adds no id.
    legacy["activeState"] = "inactive"
    assert host_survey.client_ids("dev", rd, found) == ([], [])
    # After the take-over the managed unit carries the kept id; its own served name is never kept, so a
    # swap to another served name drops it (and the preview warns).
    managed = {"name": "vllm-tiny-chat-a.service", "activeState": "active", "enabled": True, "managed": True,
               "owner": "dev.chat", "launch": facts.vllm_launch([*argv, "--served-model-name", "old", "/shared/legacy-a"], {})}  # fmt: skip
    found = {"units": [managed], "active": {"dev.chat": {"unit": "vllm-tiny-chat-a.service"}}}  # type: ignore[dict-item]
    assert host_survey.client_ids("dev", rd, found) == (["old", "/shared/legacy-a"], ["/shared/legacy-a"])
    assert host_survey.with_client_ids("dev", rd, found).served_model_names == ("chat", "/shared/legacy-a")
    _, warnings = host_survey.client_id_lines("dev", host_survey.with_client_ids("dev", rd, found), found)
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

    monkeypatch.setattr(survey, "run", run)
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
    monkeypatch.setattr(survey, "run", lambda *args: answers[tuple(a for a in args if a.endswith(".service"))])
    shown = survey.unit_properties(["a.service", "b.service"])
    assert shown["a.service"]["ActiveState"] == "active" and shown["b.service"]["ActiveState"] == "inactive"


def test_the_survey_reports_the_key_each_stack_pinned(tmp_path: Path) -> None:
    """What each stack's preflight recorded (host/contract.HOST_KEYS_DIR), by stack; a record being written
    (its dot-named temporary) is not one, and a host without the directory has none."""
    from host.contract import pinned_host_keys

    (tmp_path / "prod").write_text("SHA256:abc\n")
    (tmp_path / "dev").write_text("none\n")
    (tmp_path / ".prod.tmp").write_text("SHA256:half")
    assert pinned_host_keys(str(tmp_path)) == {"dev": "none", "prod": "SHA256:abc"}
    assert pinned_host_keys(str(tmp_path / "absent")) == {}
