"""The first `pulumi up` on a server that already serves by hand, end to end on the sandbox.

Before the stack exists, the sandbox runs a hand-written unit serving a model on the deployment's port
(vllm-legacy.service, GPU 3), has a second hand-made unit enabled (vllm-glm5.service) and a stray
process holding GPU 3 that no unit started. A client sends a one-token completion every 100 ms through
every phase; the tests assert its failures per phase: preview names all three, `up` adopts what the
stack names and stops the stray it allows, a swap whose arguments the host's vLLM rejects fails before
the stop (zero failed requests), and a controller killed after the stop leaves the host to finish the
swap on its own."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from sandbox.sandbox_env import E2E_PORT, on_host, serving_root, wait_serving
from scripts.downtime_probe import DowntimeProbe
from tests.support.sandbox_stack import WatchedStack, module_state

STACK = "brown"
ENDPOINT = sandbox_env.api_url(E2E_PORT)  # the test host's (VLLM_FLEET_SANDBOX_NAME), as every single-host module
SERVED = "brown"
PYTHON = "/opt/vllm-env/bin/python3"
LEGACY = "vllm-legacy.service"
SPARE = "vllm-glm5.service"
LEGACY_UNIT = f"""[Unit]
Description=Kimi by hand (written before vllm-fleet)
[Service]
# Without nobind vLLM's CPU build pins its busy engine to core 0, where it starves everything pinned there;
# with multiprocessing off its worker runs inside the engine core (a start 15 s shorter; models/catalog.yaml).
Environment=CUDA_VISIBLE_DEVICES=3 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 TMPDIR=/tmp/legacy
ExecStartPre=/bin/mkdir -p /tmp/legacy
ExecStart={PYTHON} -m vllm.entrypoints.openai.api_server --model /shared/legacy-a --served-model-name {SERVED} --host 127.0.0.1 --port {E2E_PORT} --enforce-eager --dtype float32 --max-model-len 256
[Install]
WantedBy=multi-user.target
"""
SPARE_UNIT = """[Unit]
Description=GLM-5 by hand, not running
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
"""
# 1.2 GB of resident memory in a process titled like a vLLM engine: the stand-in nvidia-smi counts it on GPU 3.
STRAY = (
    "CUDA_VISIBLE_DEVICES=3 setsid nohup bash -c "
    "'exec -a VLLM::stray /usr/bin/python3 -c \"b = bytearray(1200 << 20); import time; time.sleep(3600)\"' "
    "> /dev/null 2>&1 < /dev/null & echo $!"
)


class Brownfield(WatchedStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK, DowntimeProbe(ENDPOINT, SERVED, timeout=5.0), "brownfield-phases")
        self.stray_pid = 0

    def set_up(self) -> None:
        clean_host()
        sandbox_env.download_by_hand("acme/tiny-chat-a", "/shared/legacy-a")
        sandbox_env.install_units_by_hand({LEGACY: LEGACY_UNIT, SPARE: SPARE_UNIT}, enabled=[SPARE], started=[LEGACY])
        self.stray_pid = int(on_host(STRAY).strip())
        self.watch_once_serving(ENDPOINT, "/shared/legacy-a", 240)

    def leave_sandbox(self) -> None:
        try:
            self.destroy_left_over(self.configure(), force_remove=True)
        finally:
            clean_host()
            on_host(
                "for u in $(systemctl list-units --all --no-legend --plain 'vllm-brown-*' | awk '{print $1}'); do "
                "systemctl disable --now $u; rm -f /etc/systemd/system/$u; done; systemctl daemon-reload; "
                "rm -rf /var/lib/vllm-fleet/deployments/brown.chat /var/lib/vllm-fleet/claims/brown.chat.json "
                "/shared/brown-a /shared/brown-b",
                check=False,
            )

    def configure(self, model: str = "brown-a", **deployment: Any) -> auto.Stack:
        extra = {
            "brown-a": {"preset": "tiny-chat-a", "dir": "brown-a", "revision": "main", "keep": True},
            "brown-b": {"preset": "tiny-chat-b", "dir": "brown-b", "revision": "main", "keep": True},
        }
        doc = yaml.safe_load(sandbox_env.e2e_stack_file(model, gpus=[3], port=E2E_PORT, extra_models=extra))
        doc["config"]["vllm-fleet:deployments"][0].update(servedModelName=SERVED, **deployment)
        # As on a server taken over by hand: its vLLM version is not pinned, so only the host's own vLLM
        # can judge the launch (a pinned version lets the config refuse removed flags already).
        doc["config"]["vllm-fleet:hosts"][0]["runtime"].pop("vllmVersion", None)
        return self.select(doc)

    def adopting(self, model: str = "brown-a", **extra: Any) -> auto.Stack:
        return self.configure(model, replaces=[LEGACY, SPARE], foreignGpuProcesses="stop", **extra)


def clean_host() -> None:
    on_host(
        f"systemctl disable --now {LEGACY} {SPARE} 2>/dev/null; rm -f /etc/systemd/system/{LEGACY} "
        f"/etc/systemd/system/{SPARE}; systemctl daemon-reload; pkill -f '^VLLM::stray' || true; "
        "rm -rf /shared/legacy-a /tmp/legacy",
        check=False,
    )


brown = module_state(Brownfield)


def test_preview_refuses_what_it_would_have_to_stop_unasked(brown: Brownfield) -> None:
    with pytest.raises(auto.CommandError) as refused:
        brown.configure().preview()
    message = str(refused.value)
    assert f"port {E2E_PORT}, its front door's port, is held by PID" in message
    assert f"of {LEGACY}, which this stack does not manage" in message
    assert f"add {LEGACY} to vllm-fleet:deployments[chat].replaces" in message
    assert f"GPU 3 is held by PID {brown.stray_pid} (VLLM::stray" in message
    assert "foreignGpuProcesses: stop" in message
    assert on_host(f"systemctl is-active {LEGACY}").strip() == "active"


def test_preview_names_the_units_it_adopts_and_the_stray_it_stops(brown: Brownfield) -> None:
    preview = brown.adopting().preview(diff=True)
    shown = preview.stdout + preview.stderr
    assert f"takes over {LEGACY} (active, enabled)" in shown
    assert f"takes over {SPARE} (inactive, enabled)" in shown
    assert f"PID {brown.stray_pid} (VLLM::stray" in shown and "the GPU-release guard will stop it" in shown


def test_up_adopts_the_hand_made_units_and_serves(brown: Brownfield) -> None:
    start = time.monotonic()
    result = brown.adopting().up(on_output=brown.output.append)
    assert result.summary.result == "succeeded"
    stats = brown.record("adopt", start)
    assert on_host(f"systemctl is-active {LEGACY} || true").strip() == "inactive"
    # Taken over: their files put away where no boot and no hand starts them, with how they were.
    assert on_host(f"ls /etc/systemd/system/{LEGACY} /etc/systemd/system/{SPARE} 2>/dev/null || true").strip() == ""
    adopted_dir = "/var/lib/vllm-fleet/deployments/brown.chat/adopted"
    assert sorted(on_host(f"ls {adopted_dir}").split()) == sorted([LEGACY, f"{LEGACY}.was", SPARE, f"{SPARE}.was"])
    was = json.loads(on_host(f"cat {adopted_dir}/{LEGACY}.was"))
    assert was == {"path": f"/etc/systemd/system/{LEGACY}", "enabled": True, "running": True}
    assert on_host(f"test -e /proc/{brown.stray_pid} || echo gone").strip() == "gone"
    backups = on_host("ls /var/lib/vllm-fleet/deployments/brown.chat/previous").split()
    assert LEGACY in backups and SPARE in backups
    assert serving_root(ENDPOINT) == "/shared/brown-a"
    assert stats["requests"] > 0


def test_swap_the_hosts_vllm_rejects_fails_before_the_stop(brown: Brownfield) -> None:
    start = time.monotonic()
    # A flag the host's release removed is refused by the preview already: the survey read that release
    # (the stack pins none), and the version rules ran for it.
    with pytest.raises(auto.CommandError) as removed:
        brown.adopting(overrides={"extraArgs": ["--disable-log-requests"]}).preview()
    assert "'--disable-log-requests' was removed in vLLM 0.12" in str(removed.value)
    assert "host 'sandbox' runs vLLM 0.32.0" in str(removed.value)
    # One no rule knows (the V1 engine dropped it, REFERENCE.md 1): only the host's own vLLM can refuse it,
    # in the unit step, before anything stops.
    stack = brown.adopting(overrides={"extraArgs": ["--num-scheduler-steps", "8"]})
    with pytest.raises(auto.CommandError) as rejected:
        stack.up(on_output=brown.output.append)
    message = str(rejected.value)
    assert "on this host rejects the launch of vllm-brown-a.service" in message
    assert "--num-scheduler-steps (from vllm-fleet:deployments[chat].overrides.extraArgs)" in message
    stats = brown.record("rejected", start)
    assert stats["failed"] == 0, repr(stats)
    assert on_host("systemctl is-active vllm-brown-a.service").strip() == "active"
    assert serving_root(ENDPOINT) == "/shared/brown-a"


def test_controller_killed_after_the_stop_and_the_host_finishes(brown: Brownfield) -> None:
    stack = brown.adopting("brown-b")
    env = engine.engine_env(brown.backend)
    start = time.monotonic()
    # The moment the old model stops, the controller dies with its whole process group.
    with engine.up_killed_on_exit(brown.work, env, STACK) as process:
        deadline = time.monotonic() + 300
        while on_host("systemctl is-active vllm-brown-a.service || true").strip() == "active":
            assert time.monotonic() < deadline, "the swap never stopped the old model"
            assert process.poll() is None, "pulumi up ended before the swap"
            time.sleep(0.2)
    killed = time.monotonic()
    recovered = wait_serving(ENDPOINT, "/shared/brown-b", 300)
    stats = brown.record("killed-controller", start)
    brown.phases["killed-controller"]["kill_to_serving_s"] = round(recovered, 2)
    brown.record("after-kill", killed)  # the client's view from the kill on
    # The API answers a moment before the unit's ExecStartPost (wait-ready) marks it active.
    on_host("for i in $(seq 1 120); do systemctl is-active --quiet vllm-brown-b.service && break; sleep 0.5; done")
    assert on_host("systemctl is-active vllm-brown-b.service").strip() == "active"
    started_at = on_host("systemctl show -p ActiveEnterTimestampMonotonic --value vllm-brown-b.service").strip()
    # The next `up` (after docs/troubleshooting.md's recovery steps) finds the swap done and changes nothing there.
    stack.cancel()
    recovery: list[str] = []
    result = stack.up(on_output=recovery.append)
    assert result.summary.result == "succeeded", "".join(recovery)[-3000:]
    assert "already serves brown with this configuration" in "".join(recovery), "".join(recovery)[-3000:]
    now = on_host("systemctl show -p ActiveEnterTimestampMonotonic --value vllm-brown-b.service").strip()
    assert now == started_at, "the recovery up restarted the model"
    stack.preview(expect_no_changes=True)
    assert stats["requests"] > 0
