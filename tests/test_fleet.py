"""A fleet in one stack, end to end on two sandbox hosts (fleet-1, fleet-2: real systemd and sshd each,
in network namespaces of their own): deploy, a rolling swap with a client on each endpoint, a no-op, a
failed swap that stops the rollout, a cordoned host left alone while the other one converges, destroy.

The two deployments form one rollout group (maxUnavailable 1) and each lists one stand-in GPU, so each
swap stops its old engine first (stop-start): each endpoint is down for a while, but never both at
once. The tests run in file order and share one stack."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from sandbox import sandbox_env
from sandbox.sandbox_env import E2E_PORT, on_host
from scripts.downtime_probe import Answer, DowntimeProbe
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "fleet-e2e"
SERVED = "fl-chat"
HOSTS = ("fleet-1", "fleet-2")
ENDPOINTS = {"fleet-1": "http://127.0.0.1:18101/v1", "fleet-2": "http://127.0.0.1:18201/v1"}
MODELS = sandbox_env.tiny_models("fl", keep=False)
# A context longer than the tiny model allows: the engine refuses to start, so readiness never comes.
NEVER_READY = {"overrides": {"maxModelLen": 1_000_000}}


def unit_of(model: str) -> str:
    return f"vllm-{model}.service"


class Fleet(SandboxStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK)
        self.probes: dict[str, DowntimeProbe] = {}

    def tear_down(self) -> None:
        for probe in self.probes.values():
            probe.stop()
        for host in HOSTS:
            sandbox_env.exec_on(host, "systemctl start ssh.service")
        self.destroy(self.configure({h: "fl-tiny-a" for h in HOSTS}), continue_on_error=True)
        for host in HOSTS:
            assert on_host("ls /etc/systemd/system/ | grep -c '^vllm-fl-' || true", host=host).strip() == "0"

    def configure(
        self, models: dict[str, str], cordon: tuple[str, ...] = (), per_host: dict[str, dict[str, Any]] | None = None
    ) -> auto.Stack:
        """The fleet stack with deployment chat-N serving models[fleet-N], on GPU 3 and port 8001."""
        raw = sandbox_env.fleet_config(MODELS)
        for host in raw["vllm-fleet:hosts"]:
            host["cordon"] = host["name"] in cordon
        # The two chat deployments (the stack's model across both hosts is tests/test_multinode.py's).
        raw["vllm-fleet:deployments"] = [d for d in raw["vllm-fleet:deployments"] if d["name"] in ("chat-1", "chat-2")]
        for deployment in raw["vllm-fleet:deployments"]:
            host = deployment["host"]
            deployment.update(
                model=models[host],
                gpus=[3],
                port=E2E_PORT,
                servedModelName=SERVED,
                publicUrl=ENDPOINTS[host],
                **(per_host or {}).get(host, {}),
            )
        self.stack = self.select({"config": raw})
        return self.stack


def serving_model(host: str) -> str:
    """The model directory the deployment's engine serves, as its /v1/models names its root."""
    text = on_host(f"curl -s --max-time 5 http://127.0.0.1:{E2E_PORT}/v1/models", host=host, check=False)
    for model in MODELS:
        if f"/{model}" in text:
            return model
    return f"none ({text[:200]!r})"


def main_pid(host: str, unit: str) -> str:
    return on_host(f"systemctl show -p MainPID --value {unit}", host=host).strip()


def outage(answers: list[Answer]) -> tuple[float, float] | None:
    """From the first failed request to the last one: the window an endpoint did not answer."""
    failed = [a for a in answers if not a.ok]
    return (failed[0].started, failed[-1].ended) if failed else None


def longest_gap_of_either(answers: list[Answer], start: float, end: float) -> float:
    """The longest time during which neither endpoint answered a request."""
    times = [start, *sorted(a.ended for a in answers if a.ok and start <= a.started < end), end]
    return max(b - a for a, b in itertools.pairwise(times))


fleet_stack = module_state(Fleet, on_fleet=True)


def test_deploy_to_two_hosts(fleet_stack: Fleet) -> None:
    fleet_stack.configure({h: "fl-tiny-a" for h in HOSTS})
    result = fleet_stack.up_succeeds()
    outputs = result.outputs["deployments"].value
    assert {outputs[d]["endpoint"] for d in ("chat-1", "chat-2")} == set(ENDPOINTS.values())
    for host in HOSTS:
        assert serving_model(host) == "fl-tiny-a"
        # Each host has its own address on the fabric and reaches the other one there.
        other = "10.77.0.12" if host == "fleet-1" else "10.77.0.11"
        reach = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{other}/22' && echo ok || ip -br addr"
        assert on_host(reach, host=host).strip() == "ok"
    for host, url in ENDPOINTS.items():
        fleet_stack.probes[host] = DowntimeProbe(url, SERVED, timeout=10.0).start()
    time.sleep(3)
    for host, probe in fleet_stack.probes.items():
        assert probe.report()["failed"] == 0, repr((host, probe.report()))


def test_rolling_swap_keeps_one_host_answering(fleet_stack: Fleet) -> None:
    fleet_stack.configure({h: "fl-tiny-b" for h in HOSTS})
    start = time.monotonic()
    fleet_stack.up_succeeds()
    time.sleep(1)
    end = time.monotonic()
    for host in HOSTS:
        assert serving_model(host) == "fl-tiny-b"
    windows = {
        host: outage([a for a in probe.answers if start <= a.started < end])
        for host, probe in fleet_stack.probes.items()
    }
    # Each endpoint was down while its engine restarted (stop-start) ...
    first, second = windows["fleet-1"], windows["fleet-2"]
    assert first is not None and second is not None, windows
    # ... fleet-2 only once fleet-1 served again ...
    assert second[0] > first[1], windows
    # ... so a client that tries both always had one answering.
    answers = [a for probe in fleet_stack.probes.values() for a in probe.answers]
    gap = longest_gap_of_either(answers, start, end)
    sandbox_env.record_phase(
        "rolling_swap",
        {
            "up_s": round(end - start, 1),
            "down": {h: [round(w[0] - start, 1), round(w[1] - start, 1)] for h, w in windows.items() if w},
            "longest_gap_either_s": round(gap, 3),
            "per_endpoint": {h: p.report(start, end) for h, p in fleet_stack.probes.items()},
        },
    )
    assert gap < 2.0, windows


def test_no_op_changes_nothing(fleet_stack: Fleet) -> None:
    preview = fleet_stack.configure({h: "fl-tiny-b" for h in HOSTS}).preview()
    assert set(preview.change_summary) == {"same"}, preview.change_summary
    result = fleet_stack.try_up()
    assert result is not None and set(result.summary.resource_changes or {}) == {"same"}


def test_failed_swap_stops_the_rollout(fleet_stack: Fleet) -> None:
    pid_2 = main_pid("fleet-2", unit_of("fl-tiny-b"))
    fleet_stack.configure({h: "fl-tiny-a" for h in HOSTS}, per_host={h: NEVER_READY for h in HOSTS})
    result = fleet_stack.try_up()
    assert result is None, "a swap to a model that cannot start must fail"
    # fleet-1 rolled back to what it served; fleet-2 was never touched.
    assert serving_model("fleet-1") == "fl-tiny-b"
    assert serving_model("fleet-2") == "fl-tiny-b"
    assert main_pid("fleet-2", unit_of("fl-tiny-b")) == pid_2
    assert "chat-2-serving" not in "\n".join(line for line in fleet_stack.output if "updating" in line)


def test_cordoned_host_is_left_alone_while_the_other_converges(fleet_stack: Fleet) -> None:
    # Back to a state that serves on both, then take fleet-2 out of service and make it unreachable.
    fleet_stack.configure({h: "fl-tiny-b" for h in HOSTS})
    fleet_stack.up_succeeds()
    pid_2 = main_pid("fleet-2", unit_of("fl-tiny-b"))
    sandbox_env.exec_on("fleet-2", "systemctl stop ssh.socket ssh.service")
    try:
        # A change of what the cordoned host serves is refused before anything runs.
        fleet_stack.configure({"fleet-1": "fl-tiny-b", "fleet-2": "fl-tiny-a"}, cordon=("fleet-2",))
        with pytest.raises(auto.CommandError, match=r"'fleet-2' is cordoned"):
            fleet_stack.stack.preview()
        # The rest of the fleet converges; the cordoned host is not contacted.
        fleet_stack.configure({"fleet-1": "fl-tiny-a", "fleet-2": "fl-tiny-b"}, cordon=("fleet-2",))
        fleet_stack.up_succeeds()
        assert "is cordoned: not contacted" in fleet_stack.log()
        assert serving_model("fleet-1") == "fl-tiny-a"
    finally:
        sandbox_env.exec_on("fleet-2", "systemctl start ssh.service")
    assert main_pid("fleet-2", unit_of("fl-tiny-b")) == pid_2
    assert serving_model("fleet-2") == "fl-tiny-b"
