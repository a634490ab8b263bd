"""What a deployment does now on its host, against what the stack last applied: `make status` and the
post-deploy numbers.

host/status.py runs on the host (the installed tool after a deploy; the host package piped into its python3
over SSH for `make status`, like the survey) and reports facts;
this module says what to ask it (`spec`, from the config, and the same again in the stack's outputs so
`scripts/status.py` needs only those), reads its answer into the deployment's outputs (`numbers`), and
compares it with what the stack applied (`drift`): the unit file's digest, a missing unit, a stopped unit,
its enabled state, the secret environment file against the staged one, model files changed since they were verified,
and GPU processes of units that are not the deployment's on its GPUs. Nothing here creates a resource.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from typing import Any

from host.contract import TOOLS_DIR, deployment_state_dir, owner_key
from models.config import ResolvedDeployment
from render.units import render_unit

# The module of the host package that reports (installed as TOOLS_DIR/status; sent along for `make status`).
STATUS_MODULE = "host.status"


def spec(rd: ResolvedDeployment, stack: str) -> dict[str, Any]:
    """One deployment's entry of host/status.py's argument (plain data: it is a stack output too)."""
    bench = rd.deployment.smoke_benchmark
    return {
        "owner": owner_key(stack, rd.deployment.name),
        "deployment": rd.deployment.name,
        "unit": rd.unit_name,
        "unitSha256": hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest(),
        "stateDir": deployment_state_dir(stack, rd.deployment.name),
        "modelDir": rd.model_path,
        "python": rd.host.runtime.python,
        "frontDoor": f"http://{_url_host(rd.deployment.readiness_address)}:{rd.deployment.port}",
        "gpus": list(rd.deployment.gpus),
        "servedName": rd.served_model_name,
        "bench": bench.model_dump(by_alias=True) if bench is not None else None,
        "host": {
            "name": rd.host.name,
            "address": rd.host.address,
            "port": rd.host.port,
            "user": rd.host.user,
            "hostKey": rd.host.host_key,
        },
    }


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def report_script(entry: Mapping[str, Any], with_bench: bool) -> str:
    """The post-deploy step: host/status.py on this deployment, its JSON answer the step's last line."""
    argument = json.dumps({"deployments": [entry]}, sort_keys=True)
    flag = " --bench" if with_bench else ""
    return (
        "#!/usr/bin/env bash\n# vllm-fleet report: what the deployment serves now, for the stack's outputs.\nset -euo pipefail\n"
        f"exec python3 {TOOLS_DIR}/status {shlex.quote(argument)}{flag}\n"
    )


def last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            found: dict[str, Any] = json.loads(line)
            return found
    return {}


def numbers(endpoint: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The post-deploy outputs of one deployment from host/status.py's facts of it."""
    model = facts.get("model") or {}
    return {
        "endpoint": endpoint,
        "metricsUrl": endpoint.rstrip("/").removesuffix("/v1") + "/metrics",
        "vllmVersion": facts.get("vllmVersion"),
        "modelRevision": model.get("revision"),
        "modelState": model.get("state"),
        "lastLoadSeconds": facts.get("lastLoadSeconds"),
        "smokeBenchmark": facts.get("bench"),
    }


def drift(entry: Mapping[str, Any], facts: Mapping[str, Any], gpu_holders: list[dict[str, Any]]) -> list[str]:
    """What differs on the host from what the stack last applied, one line each (empty: none)."""
    unit = entry["unit"]
    found: list[str] = []
    if facts.get("fileSha256") is None:
        found.append(f"{unit} is missing from /etc/systemd/system")
    elif facts["fileSha256"] != entry["unitSha256"]:
        found.append(
            f"{unit} was edited on the host (sha256 {facts['fileSha256'][:12]}, applied {entry['unitSha256'][:12]})"
        )
    if facts.get("activeState") in ("inactive", "failed"):
        found.append(f"{unit} is {facts['activeState']}: it serves nothing (stopped by hand, or it failed)")
    if facts.get("enabled") not in ("enabled", None, ""):
        found.append(f"{unit} is {facts['enabled']}, not enabled (a reboot would not start it)")
    if facts.get("envMatchesStaged") is False:
        found.append(f"{unit}'s environment file differs from the staged one")
    state = (facts.get("model") or {}).get("state", "")
    if state != "verified":
        found.append(f"model files in {entry['modelDir']}: {state}")
    for holder in gpu_holders:
        if holder.get("unit") != unit and set(holder.get("gpus") or ()) & set(entry["gpus"]):
            found.append(
                f"PID {holder.get('pid')} of {holder.get('unit') or 'no unit'} holds GPU(s) "
                f"{', '.join(str(g) for g in sorted(set(holder['gpus']) & set(entry['gpus'])))} of the deployment"
            )
    return found
