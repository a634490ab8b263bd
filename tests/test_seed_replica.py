"""The reference server as it is, on a sandbox host: the first `pulumi up` no client notices, swaps that
keep the id clients send, reboots that bring back exactly the managed deployment, and a destroy that puts
the hand-made units back as they were.

The host is prepared as the seeds leave the reference server (shared/REFERENCE.md section 1): the model's
files in a plain directory (`hf download --local-dir`); a hand-made unit of the managed unit's name
serving that directory under its path (no --served-model-name, so clients send the path as the model id)
on the deployment's port, with the seeds' own `rm -f /dev/shm/psm_*` clean-up in its ExecStartPre; a
second hand-made unit enabled but stopped on the same port (`vllm-glm5`); a third stopped and disabled
whose name is the managed unit of the stack's other model (`vllm-seed-b`, as `vllm-minimax-m25` is on
the server). The stack is shaped like Pulumi.prod.yaml: every hand-made unit under `replaces`, open
access, no vLLM version pinned. The serving unit spells the stack's launch otherwise (issue 44), so the
take-over adopts it in place; the first swap after it and, once the destroy has put the hand-made units
back, a take-over of one tuned by hand (another --max-model-len) start the new engine first on the free
GPU, the port's move to the front door all clients wait through. A client sends the old model id every
100 ms through every phase; each phase's requests, failures and longest gap go to
.run/seed-replica-phases.json.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from host.contract import FRONT_DOOR_UNIT
from models.loader import parse_stack_config
from render.launch import engine_environment, vllm_arguments
from sandbox import sandbox_env
from sandbox.sandbox_env import E2E_PORT, on_host, served_ids, wait_serving
from scripts.downtime_probe import DowntimeProbe
from tests.support.paths import ROOT
from tests.support.sandbox_stack import WatchedStack, module_state

STACK = "seed"
ENDPOINT = sandbox_env.api_url(E2E_PORT)
MODEL_DIR = "/shared/seed-a"
OLD_ID = MODEL_DIR  # what the seeds' clients send: the hand-made launch serves the model under its path
SERVING = "vllm-seed-a.service"  # hand-made, running, and the managed unit's name of model seed-a
WAITING = "vllm-glm5.service"  # hand-made, enabled but stopped, on the same port
SPARE = "vllm-seed-b.service"  # hand-made, stopped and disabled, the managed unit's name of model seed-b
HAND_MADE = (SERVING, WAITING, SPARE)
BRIDGE = "vllm-seed-a-bridge.service"  # the managed unit's temporary name while a new engine starts first
MODELS = {
    "seed-a": {"preset": "tiny-chat-a", "dir": "seed-a", "revision": "main", "keep": True},
    "seed-b": {"preset": "tiny-chat-b", "dir": "seed-b", "revision": "main", "keep": True},
}
# The variables every managed unit adds that change no answer (host/judgement.MANAGED_VARIABLES): a
# hand-made unit written before vllm-fleet does not set them.
MANAGED_ONLY = ("VLLM_NO_USAGE_STATS", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_OFFLINE", "CUDA_DEVICE_ORDER")
SHM_CLEANUP = "/bin/sh -c 'rm -f /dev/shm/psm_* /dev/shm/sem.mp-*'"


def stack_doc(model: str = "seed-a", replaces: tuple[str, ...] = HAND_MADE) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        sandbox_env.e2e_stack_file(model, gpus=[2, 3], port=E2E_PORT, extra_models=MODELS)
    )
    config = doc["config"]
    config["vllm-fleet:deployments"][0]["replaces"] = list(replaces)
    # As Pulumi.prod.yaml: the host's own vLLM decides, and the clients send no key.
    config["vllm-fleet:hosts"][0]["runtime"].pop("vllmVersion", None)
    config["vllm-fleet:access"] = {"open": True}
    return doc


def by_hand(unit: str, model_dir: str, env: dict[str, str], argv: list[str]) -> str:
    """A unit as the team wrote them: its own environment, the seeds' shared-memory clean-up, no served name."""
    environment = " ".join(f"{key}={value}" for key, value in sorted(env.items()))
    return (
        f"[Unit]\nDescription={model_dir} by hand (written before vllm-fleet)\nAfter=network-online.target\n"
        f"[Service]\nEnvironment={environment}\nExecStartPre=/bin/mkdir -p {env['TMPDIR']}\n"
        f"ExecStartPre={SHM_CLEANUP}\nExecStart={' '.join(argv)}\nRestart=on-failure\nRestartSec=14\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


# How the serving unit spells the stack's launch otherwise, each as vLLM's parser reads it the same
# (issue 44; tests/test_launch_identity.py reads each alone): `vllm serve <path>` with the model positional,
# --a_b=c beside --a-b c, -tp 1 for --tensor-parallel-size 1, a default the stack leaves out written out
# (--seed 0), HF_HOME without the TRANSFORMERS_CACHE the stack spells (its default under HF_HOME).
SPELLED = {
    "--max-model-len": "--max_model_len=",
    "--gpu-memory-utilization": "--gpu_memory_utilization=",
    "--tensor-parallel-size": "-tp ",
}


def spelled_otherwise(argv: list[str]) -> list[str]:
    """A hand-made launch (`argv`, the stack's without its served names) as SPELLED says."""
    python, _m, _module, _model, model, *rest = argv
    words = [python.replace("python3", "vllm"), "serve", model]
    for index, word in enumerate(rest):
        if index and rest[index - 1] in SPELLED:
            continue
        if word in SPELLED:
            words += (SPELLED[word] + rest[index + 1]).split(" ")
        else:
            words.append(word)
    return [*words[:-4], "--seed", "0", *words[-4:]]


def hand_made_units() -> dict[str, str]:
    """The seeds' units, their launch the one the stack renders for model seed-a on this host's vLLM, as a
    hand-made unit spells it: the engine on the public port itself, on GPU 3, its path as the model id."""
    from models.loader import read_stack_file

    raw = {k.removeprefix("vllm-fleet:"): v for k, v in stack_doc()["config"].items()}
    raw["hosts"][0]["runtime"]["vllmVersion"] = read_stack_file(ROOT / "Pulumi.dev.yaml")["hosts"][0]["runtime"][
        "vllmVersion"
    ]
    (rd,) = parse_stack_config(raw).resolved_deployments()
    managed = vllm_arguments(rd)
    argv = [rd.host.runtime.python]
    skip = 0
    for word in managed:
        if skip:
            skip -= 1
            continue
        if word == "--served-model-name":
            skip = len(rd.served_model_names)
            continue
        if word in ("--host", "--port"):
            skip = 1
            continue
        argv.append(word)
    argv += ["--host", "127.0.0.1", "--port", str(E2E_PORT)]
    env = {k: v for k, v in engine_environment(rd).items() if k not in MANAGED_ONLY}
    spelled = spelled_otherwise(argv)
    assert "--max_model_len=512" in spelled and "-tp" in spelled and spelled[:2] == ["/opt/vllm-env/bin/vllm", "serve"]
    own = {k: v for k, v in env.items() if k != "TRANSFORMERS_CACHE"}
    serving = by_hand(SERVING, MODEL_DIR, {**own, "CUDA_VISIBLE_DEVICES": "3", "TMPDIR": "/tmp/seed-a"}, spelled)
    other = [a if a != MODEL_DIR else "/shared/glm-5" for a in argv]
    waiting = by_hand(WAITING, "/shared/glm-5", {**env, "TMPDIR": "/tmp/glm5"}, other)
    spare = by_hand(
        SPARE, "/shared/seed-b", {**env, "TMPDIR": "/tmp/seed-b"}, [a.replace("seed-a", "seed-b") for a in argv]
    )
    return {SERVING: serving, WAITING: waiting, SPARE: spare}


class Seed(WatchedStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK, DowntimeProbe(ENDPOINT, OLD_ID, timeout=5.0), "seed-replica-phases")
        self.units = hand_made_units()

    def set_up(self) -> None:
        clean_host()
        sandbox_env.download_by_hand("acme/tiny-chat-a", MODEL_DIR)
        sandbox_env.install_units_by_hand(self.units, enabled=[WAITING], started=[SERVING])
        self.watch_once_serving(ENDPOINT, MODEL_DIR, 300)

    def leave_sandbox(self) -> None:
        try:
            self.destroy_left_over(self.stack_of())
        finally:
            clean_host()

    def stack_of(self, model: str = "seed-a", replaces: tuple[str, ...] = HAND_MADE) -> auto.Stack:
        return self.select(stack_doc(model, replaces))

    def up(self, model: str) -> str:
        output: list[str] = []
        result = self.stack_of(model).up(on_output=output.append)
        self.output += output
        assert result.summary.result == "succeeded", "".join(output)[-3000:]
        return "".join(output)


def unit_props(unit: str, *props: str) -> dict[str, str]:
    text = on_host(f"systemctl show {unit} --property={','.join(props)}")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def vllm_units_running() -> dict[str, dict[str, str]]:
    """Every vllm-* service that runs, with its restart count, whether vllm-fleet wrote it, and how often
    systemd started it in this boot."""
    names = on_host("systemctl list-units --plain --no-legend --state=active,activating 'vllm-*.service'").split()
    running = {}
    for name in (n for n in names if n.endswith(".service")):
        props = unit_props(name, "NRestarts", "FragmentPath")
        first = on_host(f"head -n 1 {props['FragmentPath']}").strip() if props.get("FragmentPath") else ""
        starts = on_host(f"journalctl -b -u {name} -o cat --no-pager | grep -c '^Starting ' || true").strip()
        running[name] = {
            "restarts": props["NRestarts"],
            "managed": str(first.startswith("# Managed by")),
            "starts": starts,
        }
    return running


def clean_host() -> None:
    units = " ".join(HAND_MADE)
    on_host(
        f"systemctl disable --now {units} 2>/dev/null; cd /etc/systemd/system && rm -rf {units} "
        f"{' '.join(u + '.d' for u in HAND_MADE)}; systemctl daemon-reload; systemctl reset-failed {units} 2>/dev/null; "
        f"rm -rf /var/lib/vllm-fleet/deployments/{STACK}.chat /var/lib/vllm-fleet/claims/{STACK}.chat.json "
        "/shared/seed-a /shared/seed-b /tmp/seed-a",
        check=False,
    )


def reboot_and_wait() -> float:
    """Reboot the host, wait for its sshd and for the deployment to answer the old id; seconds to answer."""
    answered = sandbox_env.reboot_until(lambda: OLD_ID in served_ids(ENDPOINT), 300)
    assert answered is not None, f"{OLD_ID} not served within 300 s of the reboot"
    return answered


seed = module_state(Seed)


def no_client_waits_out_its_timeout(phase: str, output: str, stats: dict[str, Any]) -> None:
    """A port's move fails what the hand-made engine held as it stopped (vLLM's shutdown aborts it), at once:
    no client waits out its timeout on an engine that will not answer (CI saw it once: a 5 s gap)."""
    assert not [e for e in stats["errors"] if "Timeout" in e], repr(stats)
    said = re.findall(r"port \d+ moved to the front door in [\d.]+ s|\S+ still ran [\d.]+ s after it let port", output)
    print(f"[seed-replica-phases] {phase}: {'; '.join(dict.fromkeys(said))}")


def test_preview_refuses_a_waiting_hand_made_unit_it_is_not_told_to_take_over(seed: Seed) -> None:
    with pytest.raises(auto.CommandError) as refused:
        seed.stack_of(replaces=(SERVING, SPARE)).preview()
    message = " ".join(str(refused.value).split())
    assert (
        f"{WAITING} is a hand-made vLLM unit, enabled but not running: the next boot starts it and it claims port {E2E_PORT}"
        in message
    )
    assert f"add {WAITING} to vllm-fleet:deployments[chat].replaces" in message


def test_preview_names_each_hand_made_unit_and_adopts_the_one_that_serves(seed: Seed) -> None:
    start = time.monotonic()
    preview = seed.stack_of().preview(diff=True)
    said = " ".join((preview.stdout + preview.stderr).split())
    pid = unit_props(SERVING, "MainPID")["MainPID"]
    assert f"adopts {SERVING} (PID {pid}) in place: it already runs the stack's launch" in said, said[-4000:]
    assert f"takes over {WAITING} (inactive, enabled)" in said
    assert f"takes over {SPARE} (inactive, disabled)" in said
    assert f"takes over {SERVING}" not in said
    assert (
        f"model ids clients can send on port {E2E_PORT}: today ['{OLD_ID}']; after this update ['{OLD_ID}'] "
        f"(adopted in place); after its next swap ['seed-a', '{OLD_ID}']"
    ) in said
    assert f"the take-over of {SERVING} adopts it in place" in said and "expected downtime 0 s" in said
    seed.record("preview", start)


def test_first_up_adopts_the_serving_engine_in_place_and_no_client_notices(seed: Seed) -> None:
    before = unit_props(SERVING, "MainPID", "NRestarts")
    start = time.monotonic()
    output = seed.up("seed-a")
    stats = seed.record("take-over", start)
    assert f"adopted {SERVING} in place" in output, output[-3000:]
    assert stats["failed"] == 0 and stats["requests"] > 0, repr(stats)
    assert unit_props(SERVING, "MainPID", "NRestarts") == before, "the take-over restarted the engine"
    print(f"[seed-replica-phases] take-over: MainPID {before['MainPID']} before and after")
    # The managed unit (enabled) runs the adopted launch through its drop-in; the hand-made files are put away.
    assert on_host(f"head -n 1 /etc/systemd/system/{SERVING}").startswith("# Managed by vllm-fleet")
    assert on_host(f"systemctl is-enabled {SERVING}").strip() == "enabled"
    assert on_host(f"test -f /etc/systemd/system/{SERVING}.d/50-vllm-fleet-adopted.conf && echo yes").strip() == "yes"
    assert on_host(f"ls /etc/systemd/system/{WAITING} /etc/systemd/system/{SPARE} 2>/dev/null || true").strip() == ""
    adopted = sorted(on_host(f"ls /var/lib/vllm-fleet/deployments/{STACK}.chat/adopted").split())
    assert adopted == sorted([*HAND_MADE, *(u + ".was" for u in HAND_MADE), "in-place.json"])
    assert served_ids(ENDPOINT) == [OLD_ID]
    seed.stack_of().preview(expect_no_changes=True)


def test_a_swap_to_the_model_whose_unit_a_replaced_unit_named_and_back_keeps_the_old_id(seed: Seed) -> None:
    start = time.monotonic()
    output = seed.up("seed-b")
    stats = seed.record("swap-to-b", start)
    assert "is a hand-made unit" not in output
    # The adopted engine holds the public port itself and GPU 2 is free: the new engine first, then the
    # port's move to the front door is all clients wait through (issue 44).
    assert "will run new engine first (new engine first: GPU 2 free beside vllm-seed-a.service" in output, output[
        -3000:
    ]
    assert "swap mode: port-move" in output and "moved to the front door in" in output, output[-3000:]
    assert stats["longest_gap_s"] <= 2.0, repr(stats)
    no_client_waits_out_its_timeout("swap-to-b", output, stats)
    assert set(served_ids(ENDPOINT)) == {"seed-b", OLD_ID}
    assert on_host(f"test -e /etc/systemd/system/{SERVING}.d/50-vllm-fleet-adopted.conf || echo gone").strip() == "gone"
    assert stats["requests"] > 0
    start = time.monotonic()
    output = seed.up("seed-a")
    stats = seed.record("swap-back-to-a", start)
    assert "swap mode: blue-green" in output, output[-3000:]
    assert stats["failed"] == 0, repr(stats)
    assert set(served_ids(ENDPOINT)) == {"seed-a", OLD_ID}
    seed.stack_of().preview(expect_no_changes=True)


def check_only_managed_units_run(phase: str, seed: Seed, answered_after: float) -> None:
    """Every vllm-* unit that runs after the boot is one vllm-fleet wrote (the deployment's engine and the
    front door), started once, never restarted; no hand-made one runs."""
    running = vllm_units_running()
    seed.phases.setdefault("reboots", {})[phase] = {"answered_after_s": round(answered_after, 1), "units": running}
    assert {SERVING, FRONT_DOOR_UNIT} <= set(running), running
    for name, facts in running.items():
        assert facts == {"restarts": "0", "managed": "True", "starts": "1"}, (phase, name, facts)
    for unit in (WAITING, SPARE):
        assert on_host(f"systemctl is-active {unit} || true").strip() == "inactive"
    assert set(served_ids(ENDPOINT)) == {"seed-a", OLD_ID}


def test_reboots_bring_back_exactly_the_managed_deployment(seed: Seed) -> None:
    start = time.monotonic()
    check_only_managed_units_run("reboot-1", seed, reboot_and_wait())
    seed.record("reboot", start)
    start = time.monotonic()
    for n in (2, 3, 4):
        check_only_managed_units_run(f"reboot-{n}", seed, reboot_and_wait())
    seed.record("three-reboots", start)
    seed.stack_of().preview(expect_no_changes=True)


def test_destroy_puts_the_hand_made_units_back_as_they_were(seed: Seed) -> None:
    start = time.monotonic()
    seed.stack_of().destroy(on_output=seed.output.append)
    wait_serving(ENDPOINT, MODEL_DIR, 300)
    seed.record("destroy", start)
    for unit, text in seed.units.items():
        assert on_host(f"cat /etc/systemd/system/{unit}") == text, unit
    assert on_host(f"systemctl is-enabled {SERVING} {WAITING} {SPARE} || true").split() == [
        "enabled",
        "enabled",
        "disabled",
    ]
    assert on_host(f"systemctl is-active {SERVING} {WAITING} {SPARE} || true").split() == [
        "active",
        "inactive",
        "inactive",
    ]
    assert on_host(f"test -e /etc/systemd/system/{SERVING}.d || echo gone").strip() == "gone"
    assert served_ids(ENDPOINT) == [OLD_ID]


def test_a_hand_made_launch_that_really_differs_moves_to_the_new_engine_first(seed: Seed) -> None:
    # The hand-made unit the destroy put back, tuned by hand (another --max-model-len): vLLM reads another
    # engine, so it cannot be adopted in place; GPU 2 is free beside it on GPU 3. Under the managed unit's own
    # name the stack's launch serves first as the bridge, then the unit takes over from it (issue 44).
    tuned = seed.units[SERVING].replace("--max_model_len=512", "--max_model_len=256")
    assert tuned != seed.units[SERVING]
    on_host(
        f"cat > /etc/systemd/system/{SERVING} <<'UNIT'\n{tuned}UNIT\n"
        f"systemctl daemon-reload && systemctl restart {SERVING}"
    )
    wait_serving(ENDPOINT, MODEL_DIR, 300)
    preview = seed.stack_of().preview(diff=True)
    said = " ".join((preview.stdout + preview.stderr).split())
    pid = unit_props(SERVING, "MainPID")["MainPID"]
    assert f"cannot adopt {SERVING} (PID {pid}) in place, so the managed engine starts first beside it" in said, said[
        -4000:
    ]
    assert "--max-model-len is 256 there, 512 in the stack" in said, said[-4000:]
    assert "will run new engine first (new engine first: GPU 2 free beside vllm-seed-a.service" in said
    start = time.monotonic()
    output = seed.up("seed-a")
    stats = seed.record("take-over-differs", start)
    assert "swap mode: port-move" in output and "moved to the front door in" in output, output[-3000:]
    assert stats["longest_gap_s"] <= 2.0 and stats["requests"] > 0, repr(stats)
    no_client_waits_out_its_timeout("take-over-differs", output, stats)
    assert unit_props(SERVING, "MainPID")["MainPID"] != pid
    assert "--max-model-len 512" in on_host(f"systemctl status --no-pager --lines=0 {SERVING}")
    assert on_host(f"systemctl is-active {BRIDGE} || true").strip() == "inactive"
    assert set(served_ids(ENDPOINT)) == {"seed-a", OLD_ID}
