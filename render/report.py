"""The post-deploy report of a deployment: what to ask host/status.py about it (`spec`, plain data that is
also a stack output, so `make status` needs only the outputs), the arguments with which the serving step's
`swap start` asks it once the deployment serves (`swap_arguments`), and the deployment's outputs read from
its answer (`numbers`).

components/deploy_report.py reads the answer from the serving step; `make status` (scripts/status.py) asks
about the same entries, with the host's survey, and judges their drift (controller/drift.py). Nothing here
creates a resource or touches a host.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from host.contract import DeploymentStatus, StartRecord, StatusRequest, deployment_state_dir, owner_key
from models.config import ResolvedDeployment
from render.paths import metrics_url, url_host
from render.units import render_unit


def spec(rd: ResolvedDeployment, stack: str) -> dict[str, Any]:
    """One deployment's entry of host/status.py's argument, a StatusRequest as plain data (it is a stack
    output too)."""
    bench = rd.deployment.smoke_benchmark
    return StatusRequest(
        owner=owner_key(stack, rd.deployment.name),
        deployment=rd.deployment.name,
        unit=rd.unit_name,
        unit_sha256=hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest(),
        state_dir=deployment_state_dir(stack, rd.deployment.name),
        model_dir=rd.model_path,
        python=rd.host.runtime.python,
        front_door=f"http://{url_host(rd.deployment.readiness_address)}:{rd.deployment.port}",
        gpus=tuple(rd.deployment.gpus),
        served_name=rd.served_model_name,
        bench=bench.model_dump(mode="json", by_alias=True) if bench is not None else None,
        host={
            "name": rd.host.name,
            "address": rd.host.address,
            "port": rd.host.port,
            "user": rd.host.user,
            "hostKey": rd.host.host_key,
        },
    ).to_dict()


def swap_arguments(entry: Mapping[str, Any]) -> list[str]:
    """`swap start`'s arguments for the report (host/tools/swap.py): host/status.py's JSON argument, and its
    smoke benchmark when the deployment enables one. The entry holds the unit's digest and the benchmark,
    so a change of either re-runs the serving step, which reports (a transaction with nothing to change
    ends at once as "unchanged")."""
    argument = json.dumps({"deployments": [entry]}, sort_keys=True)
    return ["--report", argument, *(["--bench"] if entry["bench"] is not None else [])]


def last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            found: dict[str, Any] = json.loads(line)
            return found
    return {}


def numbers(endpoint: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The post-deploy outputs of one deployment from host/status.py's answer about it (a DeploymentStatus
    as JSON; empty when the step printed none)."""
    status = DeploymentStatus.from_dict(dict(facts)) if facts else None
    model = status.model if status is not None else None
    return {
        "endpoint": endpoint,
        "metricsUrl": metrics_url(endpoint),
        "vllmVersion": status.vllm_version if status else None,
        "modelRevision": model.revision if model else None,
        "modelState": model.describe() if model else None,
        "lastLoadSeconds": status.last_load_seconds if status else None,
        "smokeBenchmark": status.bench if status else None,
        "lastStart": start_numbers(status.last_start) if status and status.last_start else None,
    }


def start_numbers(start: StartRecord) -> dict[str, Any]:
    """A deployment's last start as outputs: its seconds, where they went, the forecast beside them."""
    forecast = start.forecast
    return {
        "seconds": start.seconds,
        "phases": {p.name: p.seconds for p in start.phases.phases} if start.phases is not None else None,
        "forecastSeconds": forecast.seconds if forecast is not None else None,
        "forecastBasis": forecast.basis if forecast is not None else None,
        "downtimeSeconds": start.downtime_seconds,
        "said": start.describe(),
    }
