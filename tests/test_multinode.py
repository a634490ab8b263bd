"""A model served across two hosts with vLLM's own multi-node engine, end to end on the sandbox: the CPU
build of vLLM runs pipeline parallel 2 with fleet-1 as the head (API server, front door) and fleet-2 as
a headless engine; they meet on the fabric (10.77.0.11:29500). Deploy, answer through the head, swap the
model on both nodes, no-op, destroy. The tests run in file order and share one stack."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from openai import OpenAI
from pulumi import automation as auto

from sandbox import sandbox_env
from sandbox.sandbox_env import E2E_PORT, on_host
from scripts.downtime_probe import DowntimeProbe
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "multinode-e2e"
ENDPOINT = "http://127.0.0.1:18101/v1"
SERVED = "mn-chat"
HEAD_UNIT = "vllm-mn.service"
NODE_UNIT = "vllm-mn-node1.service"
MODELS = sandbox_env.tiny_models("mn", keep=False)


class MultiNode(SandboxStack):
    def configure(
        self,
        model: str,
        environment: dict[str, str] | None = None,
        overrides: dict[str, Any] | None = None,
        cordon: tuple[str, ...] = (),
    ) -> auto.Stack:
        raw = sandbox_env.fleet_config(MODELS)
        (across,) = [d for d in raw["vllm-fleet:deployments"] if d["name"] == "across"]
        across.update(
            model=model, gpus=[3], port=E2E_PORT, servedModelName=SERVED, unitName="vllm-mn", publicUrl=ENDPOINT
        )
        if environment:
            across["environment"] = {**across.get("environment", {}), **environment}
        if overrides:
            across["overrides"] = {**across.get("overrides", {}), **overrides}
        for host in raw["vllm-fleet:hosts"]:
            host["cordon"] = host["name"] in cordon
        raw["vllm-fleet:deployments"] = [across]
        self.stack = self.select({"config": raw})
        return self.stack

    def tear_down(self) -> None:
        self.destroy(self.configure("mn-tiny-a"), continue_on_error=True)
        for host in ("fleet-1", "fleet-2"):
            assert on_host("ls /etc/systemd/system | grep -c '^vllm-mn' || true", host=host).strip() == "0"


def serves(model: str) -> None:
    """The head answers a completion with `model`'s weights (its /v1/models names the model's path)."""
    client = OpenAI(base_url=ENDPOINT, api_key="unused", max_retries=0, timeout=30)
    (listed,) = client.models.list().data
    assert f"/{model}" in str(listed.model_dump().get("root")), listed
    completion = client.completions.create(model=SERVED, prompt="hello", max_tokens=4)
    assert completion.choices and completion.usage is not None and completion.usage.completion_tokens > 0


NODE_STATE = "/var/lib/vllm-fleet/deployments/multinode-e2e.across.node1"
HEAD_STATE = "/var/lib/vllm-fleet/deployments/multinode-e2e.across"


def master_port_of(model: str) -> int:
    """The head's rendezvous port for `model`, as the node's launch of it says."""
    for text in on_host(f"cat {NODE_STATE}/launches/*.json", host="fleet-2").split("\n}"):
        if f'"model": "{model}"' in text:
            return int(text.split('"master_port": ')[1].split(",")[0])
    raise AssertionError(f"fleet-2 has no launch of {model}")


def node_runs() -> str:
    """The master port of the launch fleet-2's node-watch runs now."""
    return on_host(f"cat {NODE_STATE}/launches/current", host="fleet-2", check=False).strip()


def node_journal_since(epoch: str) -> str:
    return on_host(f"journalctl -u {NODE_UNIT} -o cat --no-pager --since @{epoch}", host="fleet-2")


def node_engine_joined_head() -> bool:
    """fleet-2's headless engine holds connections to the head's fabric address."""
    text = on_host("ss -Htn state established dst 10.77.0.11", host="fleet-2", check=False)
    return bool(text.strip())


multinode = module_state(lambda tmp: MultiNode(tmp, STACK), on_fleet=True)


def test_one_model_served_across_two_hosts(multinode: MultiNode) -> None:
    multinode.configure("mn-tiny-a")
    multinode.up_succeeds()
    serves("mn-tiny-a")
    assert on_host(f"systemctl is-active {HEAD_UNIT}", host="fleet-1").strip() == "active"
    assert on_host(f"systemctl is-active {NODE_UNIT}", host="fleet-2").strip() == "active"
    assert node_engine_joined_head()
    # The head's engine and the node's each hold their half of the layers: both processes are vLLM's.
    launch: dict[str, Any] = multinode.stack.outputs()["deployments"].value["across"]["launch"]
    assert launch["execStart"][launch["execStart"].index("--nnodes") + 1] == "2"
    assert launch["environment"]["VLLM_HOST_IP"] == "10.77.0.11"


def test_swap_replaces_the_model_on_every_node(multinode: MultiNode) -> None:
    probe = DowntimeProbe(ENDPOINT, SERVED, timeout=10.0).start()
    start = time.monotonic()
    multinode.configure("mn-tiny-b")
    multinode.up_succeeds()
    time.sleep(1)
    report = probe.report(start, time.monotonic())
    probe.stop()
    serves("mn-tiny-b")
    # The node runs the new model's launch (its unit names no model: node-watch runs the head's).
    assert node_runs() == str(master_port_of("mn-tiny-b"))
    assert node_engine_joined_head()
    # Stop-start across nodes: a gap, but the deployment serves again and nothing is left failing.
    assert report["requests"] > 0 and report["longest_gap_s"] is not None, report
    for host, unit in (("fleet-1", HEAD_UNIT), ("fleet-2", NODE_UNIT)):
        assert on_host(f"systemctl is-failed {unit} || true", host=host).strip() == "active"
    sandbox_env.record_phase("multi_node_swap", report)


def test_a_restarted_head_finds_its_node_again(multinode: MultiNode) -> None:
    """A head that restarts alone (a crash, a rollback): node-watch ends the node's engine, which had
    lost its head, and systemd starts a fresh one that joins the new head."""
    restarts = on_host(f"systemctl show -p NRestarts --value {NODE_UNIT}", host="fleet-2").strip()
    started = time.monotonic()
    on_host(f"systemctl restart {HEAD_UNIT}", host="fleet-1", timeout=600)
    serves("mn-tiny-b")
    sandbox_env.record_phase("head_restarted_alone", {"serving_again_after_s": round(time.monotonic() - started, 1)})
    assert int(on_host(f"systemctl show -p NRestarts --value {NODE_UNIT}", host="fleet-2")) > int(restarts)
    assert "lost the head at 10.77.0.11" in on_host(f"journalctl -u {NODE_UNIT} -o cat --no-pager", host="fleet-2")


def test_no_op_changes_nothing(multinode: MultiNode) -> None:
    preview = multinode.configure("mn-tiny-b").preview()
    assert set(preview.change_summary) == {"same"}, preview.change_summary


def test_a_cordoned_node_refuses_a_change_of_the_model_across_it(multinode: MultiNode) -> None:
    # Only the launch changes (no new files on fleet-2): the engine there would ignore it, so it is refused.
    multinode.configure("mn-tiny-b", overrides={"maxModelLen": 256}, cordon=("fleet-2",))
    with pytest.raises(auto.CommandError, match=r"'fleet-2' is cordoned .* node 1 of deployment 'across' runs there"):
        multinode.stack.preview()


# The new model's engines load on both nodes and then ask for a KV cache no host has: the swap fails after
# the node already runs the new model's launch, the case where a stale node would keep the old head down.
NEVER_FITS = {"VLLM_CPU_KVCACHE_SPACE": "100000"}


def test_a_swap_that_fails_after_the_nodes_moved_rolls_every_node_back(multinode: MultiNode) -> None:
    multinode.configure("mn-tiny-b")
    old_port = str(master_port_of("mn-tiny-b"))
    assert node_runs() == old_port
    since = on_host("date +%s", host="fleet-2").strip()
    probe = DowntimeProbe(ENDPOINT, SERVED, timeout=10.0).start()
    start = time.monotonic()
    multinode.configure("mn-tiny-a", environment=NEVER_FITS)
    assert multinode.try_up() is None, "a swap to a model that cannot run must fail"
    serves("mn-tiny-b")  # the old model answers again, on both nodes
    report = probe.report(start, time.monotonic())
    probe.stop()
    result = json.loads(on_host(f"cat {HEAD_STATE}/swap-result.json", host="fleet-1"))
    assert result["status"] == "rolled-back", result
    # fleet-2 followed its head: it ran the new model's launch, and runs the old one again.
    journal = node_journal_since(since)
    assert "runs mn-tiny-a (master port" in journal, journal[-3000:]
    assert journal.rindex("runs mn-tiny-b (master port") > journal.rindex("runs mn-tiny-a (master port"), journal[
        -3000:
    ]
    assert node_runs() == old_port and node_engine_joined_head()
    # The client's gap: the old engine's stop, the failed start, the old model's start again, and seconds.
    timings = result["timings"]
    bound = timings["stop"] + timings["start_failed_after"] + timings["rollback_start_to_ready"] + 5.0
    sandbox_env.record_phase(
        "multi_node_rollback",
        {**report, "bound_s": round(bound, 1), "host_timings": {k: round(v, 1) for k, v in timings.items()}},
    )
    assert report["requests"] > 0 and report["longest_gap_s"] is not None and report["longest_gap_s"] <= bound, (
        report,
        timings,
    )


def test_a_node_engine_killed_during_a_swap_comes_back_with_the_heads_model(multinode: MultiNode) -> None:
    """The node's engine dies while the head starts the new model: systemd starts a fresh watch, which runs
    the launch of the model the head runs, and the deployment ends on one model on both nodes."""
    old, new = ("mn-tiny-a", "mn-tiny-b") if serving_now() == "mn-tiny-a" else ("mn-tiny-b", "mn-tiny-a")
    restarts = int(on_host(f"systemctl show -p NRestarts --value {NODE_UNIT}", host="fleet-2"))
    since = on_host("date +%s", host="fleet-2").strip()
    multinode.configure(new)
    outcome: list[auto.UpResult | None] = []
    swap = threading.Thread(target=lambda: outcome.append(multinode.try_up()))
    swap.start()
    deadline = time.monotonic() + 600
    while f"runs {new} (master port" not in node_journal_since(since):
        assert time.monotonic() < deadline and swap.is_alive(), "the node never ran the new model's launch"
        time.sleep(0.5)
    killed = time.monotonic()
    on_host("pkill -9 -f -- '--headless'", host="fleet-2")
    swap.join(timeout=1200)
    assert not swap.is_alive()
    model = new if outcome[0] is not None else old
    serves(model)
    assert node_runs() == str(master_port_of(model)) and node_engine_joined_head()
    assert int(on_host(f"systemctl show -p NRestarts --value {NODE_UNIT}", host="fleet-2")) > restarts
    sandbox_env.record_phase(
        "node_killed_during_swap",
        {
            "swap_succeeded": outcome[0] is not None,
            "serves": model,
            "up_after_kill_s": round(time.monotonic() - killed, 1),
        },
    )


def serving_now() -> str:
    """The model the head serves, as its /v1/models names the model's directory."""
    client = OpenAI(base_url=ENDPOINT, api_key="unused", max_retries=0, timeout=30)
    (listed,) = client.models.list().data
    return str(listed.model_dump().get("root")).rstrip("/").rsplit("/", 1)[-1]
