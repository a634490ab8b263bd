"""A node of a model across hosts: the judgement its unit step and the preview make of its GPUs
(host/judgement.judge_node), and which launches its activation keeps (host/tools/node.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from host.contract import Claims, NodeLaunch, NodePlan, Survey
from host.judgement import judge_node
from host.tools.node import keep_launches

PLAN = NodePlan(
    stack="prod",
    deployment="across",
    rank=1,
    host="gpu-2",
    head="gpu-1",
    head_address="10.0.0.1",
    unit_name="vllm-across-node1.service",
    state_dir="/var/lib/vllm-fleet/deployments/prod.across.node1",
    gpus=(0, 1),
    python="/opt/vllm/bin/python",
    tools_dir="/usr/local/lib/vllm-fleet",
)


def unit(
    name: str, *, owner: str | None = None, state: str = "active", enabled: bool = True, gpus: Any = None
) -> dict[str, Any]:
    return {
        "name": name,
        "managed": owner is not None,
        "owner": owner,
        "activeState": state,
        "enabled": enabled,
        "launch": {"port": 8000, "gpus": gpus},
    }


def holder(pid: int, unit_name: str | None, gpus: list[int]) -> dict[str, Any]:
    return {"pid": pid, "unit": unit_name, "cmd": "python -m vllm", "gpus": gpus}


def test_the_nodes_own_engine_on_its_gpus_is_no_conflict() -> None:
    found = {
        "units": [unit(PLAN.unit_name, owner="prod.across")],
        "gpuHolders": [holder(10, PLAN.unit_name, [0, 1])],
    }
    assert judge_node(PLAN, Survey.from_dict(found), {}) == []


def test_what_holds_or_waits_for_the_nodes_gpus_refuses_naming_the_node_and_the_fix() -> None:
    found = {
        "units": [
            unit("vllm-other.service", owner="prod.other"),
            unit("vllm-hand.service"),
            unit("vllm-boot.service", state="inactive", enabled=True),  # no CUDA_VISIBLE_DEVICES: every GPU
            unit("vllm-elsewhere.service", state="inactive", enabled=True, gpus=[5]),
        ],
        "gpuHolders": [
            holder(11, "vllm-other.service", [0]),
            holder(12, "vllm-hand.service", [1]),
            holder(13, None, [1]),
            holder(14, None, [4]),  # not this deployment's GPU
        ],
    }
    others = {"prod.batch": Claims(frozenset({1}), frozenset(), frozenset())}
    problems = judge_node(PLAN, Survey.from_dict(found), others)
    where = "node 1 of deployment 'across' on host 'gpu-2'"
    assert all(p.startswith(where) for p in problems), problems
    text = "\n".join(problems)
    assert "GPU 0 is held by PID 11" in text and "a unit of deployment prod.other" in text
    assert "GPU 1 is held by PID 12" in text and "stop and disable it on gpu-2" in text
    assert "GPU 1 is held by PID 13" in text and "vllm-fleet:deployments[across].foreignGpuProcesses: stop" in text
    assert "vllm-boot.service is a hand-made vLLM unit, enabled but not running" in text
    assert "vllm-elsewhere" not in text and "PID 14" not in text
    assert "GPU 1 is claimed by deployment prod.batch" in text
    assert len(problems) == 5, problems


def test_a_process_of_no_unit_is_left_to_the_release_guard_when_the_stack_says_stop() -> None:
    plan = NodePlan(**{**PLAN.__dict__, "foreign_gpu_processes": "stop"})
    assert judge_node(plan, Survey.from_dict({"gpuHolders": [holder(13, None, [1])]}), {}) == []


def test_activation_keeps_the_new_launch_and_the_one_the_engine_runs(tmp_path: Path) -> None:
    for port in (29501, 29502, 29503):
        (tmp_path / f"{port}.json").write_text("{}")
    (tmp_path / "current").write_text("29502\n")
    new = NodeLaunch("b", 29503, ("python",), {}, "")
    assert keep_launches(tmp_path, new) == ["29501.json"]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["29502.json", "29503.json"]
