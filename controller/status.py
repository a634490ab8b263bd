"""What a deployment does now on its host, against what the stack last applied: `make status`.

host/status.py runs on the host (the host package piped into its python3 over SSH, like the survey) and
reports facts about the deployments that render/report.py's `spec` names (the stack's outputs carry those
entries, so `scripts/status.py` needs only them); `drift` compares its answer with what the stack applied:
the unit file's digest, a missing unit, a stopped unit, its enabled state, the secret environment file
against the staged one, model files changed since they were verified, and GPU processes of units that are
not the deployment's on its GPUs. Nothing here creates a resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The module of the host package that reports (installed as TOOLS_DIR/status; sent along for `make status`).
STATUS_MODULE = "host.status"


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
    found += (facts.get("adapters") or {}).get("drift", [])
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
