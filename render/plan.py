"""What the host's swap transaction (host/transaction.py) does for a deployment: its plan, and how long the swap may take."""

from __future__ import annotations

import hashlib
from typing import Any

from host.contract import NodePlan, Plan, StartForecastRecord
from models.config import ResolvedDeployment
from render import access
from render.paths import TOOLS_DIR, deployment_state_dir, node_state_dir
from render.units import render_unit

# How long activation waits for a rollback or a start, on top of the unit's own start timeout.
ACTIVATION_SLACK_SECONDS = 120


def activation_timeout(rd: ResolvedDeployment) -> int:
    return rd.start_timeout_seconds + rd.deployment.gpu_release_timeout_seconds + ACTIVATION_SLACK_SECONDS


def swap_plan(rd: ResolvedDeployment, stack: str, forecast: StartForecastRecord | None = None) -> Plan:
    """What the host's swap transaction does for this deployment: the plan it reads (host/contract.py),
    with the controller's `forecast` of its engine's start (controller/forecast.plan_forecast), which the
    host keeps beside the start that comes."""
    fields: dict[str, Any] = {
        "stack": stack,
        "deployment": rd.deployment.name,
        "state_dir": deployment_state_dir(stack, rd.deployment.name),
        "unit_name": rd.unit_name,
        "unit_stem": rd.unit_stem,
        "served_name": rd.served_model_name,
        "port": rd.deployment.port,
        "gpus": list(rd.deployment.gpus),
        "gpus_needed": rd.gpus_needed,
        "backend_ports": list(rd.deployment.engine_ports),
        "bind_address": rd.deployment.bind_address,
        "readiness_address": rd.deployment.readiness_address,
        # The nodes of a multi-node deployment hold one engine each: its swaps stop before they start.
        "swap_mode": "stop-start" if rd.multi_node else rd.deployment.swap_mode.value,
        "drain_seconds": rd.deployment.drain_seconds,
        "prewarm_margin_gib": rd.deployment.prewarm_margin_gib,
        "prewarm_min_resident_share": rd.deployment.prewarm_min_resident_share,
        "model": rd.model_name,
        "model_dir": rd.model_path,
        "load_dir": rd.load_path,
        "python": rd.host.runtime.python,
        "tools_dir": TOOLS_DIR,
        "ready_timeout": activation_timeout(rd),
        # The staged unit's digest: a changed unit changes this step, so `pulumi up` re-activates.
        "unit_sha256": hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest(),
        "replaces": list(rd.deployment.replaces),
        "foreign_gpu_processes": rd.deployment.foreign_gpu_processes.value,
        "report_every": 15,
        "journal_lines": 40,
        # Where the site includes who may call it from, and the keys the swap's check through it uses.
        **access.plan_fields(rd, stack),
        **(forecast.plan_fields() if forecast is not None else {}),
    }
    return Plan.from_dict(fields)


def node_plan(rd: ResolvedDeployment, stack: str, rank: int) -> NodePlan:
    """What node `rank` > 0's steps check and install there (host/tools/node.py reads it)."""
    head = rd.node_hosts[0]
    assert head.cluster is not None  # validated: every node has a cluster network
    node = rd.node_hosts[rank]
    return NodePlan(
        stack=stack,
        deployment=rd.deployment.name,
        rank=rank,
        host=node.name,
        head=head.name,
        head_address=head.cluster.address,
        unit_name=rd.worker_unit_name(rank),
        state_dir=node_state_dir(stack, rd, rank),
        gpus=tuple(rd.deployment.gpus),
        python=node.runtime.python,
        tools_dir=TOOLS_DIR,
        foreign_gpu_processes=rd.deployment.foreign_gpu_processes.value,
    )
