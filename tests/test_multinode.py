"""A model served across two hosts with vLLM's own multi-node engine, end to end on the sandbox: the CPU
build of vLLM runs pipeline parallel 2 with fleet-1 as the head (API server, front door) and fleet-2 as
a headless engine; they meet on the fabric (10.77.0.11:29500). Deploy, answer through the head, swap the
model on both nodes, no-op, destroy. The tests run in file order and share one stack."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from pulumi import automation as auto

from scripts.downtime_probe import DowntimeProbe
from tests.support import sandbox_env
from tests.support.sandbox_env import E2E_PORT, on_host
from tests.support.sandbox_stack import SandboxStack

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("pulumi_engine")]

STACK = "multinode-e2e"
ENDPOINT = "http://127.0.0.1:18101/v1"
SERVED = "mn-chat"
HEAD_UNIT = "vllm-mn.service"
NODE_UNIT = "vllm-mn-node1.service"
MODELS = sandbox_env.tiny_models("mn", keep=False)


class MultiNode(SandboxStack):
    def configure(self, model: str) -> auto.Stack:
        raw = sandbox_env.fleet_config(MODELS)
        (across,) = [d for d in raw["vllm-fleet:deployments"] if d["name"] == "across"]
        across.update(
            model=model, gpus=[3], port=E2E_PORT, servedModelName=SERVED, unitName="vllm-mn", publicUrl=ENDPOINT
        )
        raw["vllm-fleet:deployments"] = [across]
        self.stack = self.select({"config": raw})
        return self.stack

    def up(self) -> auto.UpResult:
        self.output.clear()
        result = self.stack.up(on_output=self.output.append)
        assert result.summary.result == "succeeded", "\n".join(self.output)[-3000:]
        return result


def serves(model: str) -> None:
    """The head answers a completion with `model`'s weights (its /v1/models names the model's path)."""
    client = OpenAI(base_url=ENDPOINT, api_key="unused", max_retries=0, timeout=30)
    (listed,) = client.models.list().data
    assert f"/{model}" in str(listed.model_dump().get("root")), listed
    completion = client.completions.create(model=SERVED, prompt="hello", max_tokens=4)
    assert completion.choices and completion.usage is not None and completion.usage.completion_tokens > 0


def node_engine_joined_head() -> bool:
    """fleet-2's headless engine holds connections to the head's fabric address."""
    text = on_host("ss -Htn state established dst 10.77.0.11", host="fleet-2", check=False)
    return bool(text.strip())


@pytest.fixture(scope="module")
def multinode(fleet: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNode]:
    state = MultiNode(tmp_path_factory.mktemp("multinode"), STACK)
    yield state
    state.destroy(state.configure("mn-tiny-a"), continue_on_error=True)
    for host in ("fleet-1", "fleet-2"):
        assert on_host("ls /etc/systemd/system | grep -c '^vllm-mn' || true", host=host).strip() == "0"


def test_one_model_served_across_two_hosts(multinode: MultiNode) -> None:
    multinode.configure("mn-tiny-a")
    multinode.up()
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
    multinode.up()
    time.sleep(1)
    report = probe.report(start, time.monotonic())
    probe.stop()
    serves("mn-tiny-b")
    assert "mn-tiny-b" in on_host(f"systemctl cat {NODE_UNIT}", host="fleet-2")
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
