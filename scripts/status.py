"""`make status`: what each deployment of a stack does now, and its drift from what the stack applied.

Reads the stack's outputs (`pulumi stack output deployments`), asks each host once over SSH (host/tools/status.py
piped into its python3, read-only, with the host's survey: the one `pulumi preview` reads), and prints per
deployment: the unit's state and since when, the model and revision on disk with its verification state,
the GPUs and their memory, requests running and waiting (vLLM's /metrics, from the engine on the host's
loopback), and drift, judged by the preview's own rules (controller/drift.py), so what it names the next
plain `pulumi up` repairs. Exit status: 0 in line, 1 drift, 2 a host did not answer or the stack has no
deployments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.drift import Applied, drift  # noqa: E402
from controller.transport import STATUS_MODULE, SurveyFailed, ssh_python  # noqa: E402
from host.contract import DeploymentStatus, StatusReport  # noqa: E402
from models.hosts import Host  # noqa: E402
from scripts.pulumi_cli import pulumi  # noqa: E402


def private_key(stack: str) -> str:
    key_file = pulumi("config", "get", "vllm-fleet:sshPrivateKeyFile", "--stack", stack).stdout.strip()
    if key_file:
        return (
            (ROOT / key_file).expanduser().read_text() if not key_file.startswith("/") else Path(key_file).read_text()
        )
    return pulumi("config", "get", "vllm-fleet:sshPrivateKey", "--stack", stack, check=True).stdout


def collect(stack: str, deployments: dict[str, Any], key: str) -> dict[str, Any]:
    """Per deployment: its status, drift lines and the host's GPUs, asking each host once."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    for out in deployments.values():
        by_host.setdefault(json.dumps(out["status"]["host"], sort_keys=True), []).append(out["status"])
    result: dict[str, Any] = {}
    for host_json, entries in by_host.items():
        h = json.loads(host_json)
        host = Host.model_validate(
            {**h, "gpus": {"count": 1, "model": "-", "memoryGib": 1}}, by_alias=True, by_name=False
        )
        try:
            answer = ssh_python(host, key, STATUS_MODULE, ["--survey", json.dumps({"deployments": entries})])
            report = StatusReport.from_json(answer) if answer.strip() else StatusReport()
        except (SurveyFailed, ValueError, KeyError) as error:
            for entry in entries:
                result[entry["deployment"]] = {"host": h["name"], "error": str(error)}
            continue
        for entry in entries:
            mine = report.deployments.get(entry["owner"])
            result[entry["deployment"]] = {
                "host": h["name"],
                "unit": entry["unit"],
                "facts": mine.to_dict() if mine is not None else {},
                "gpus": [
                    {"index": g.index, "usedMib": g.used_mib, "totalMib": g.total_mib}
                    for g in report.gpus
                    if g.index in entry["gpus"]
                ],
                "drift": drift(Applied.from_status_entry(entry), report.survey) if report.survey is not None else [],
            }
    return result


def show(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{name} on {r['host']}: NO ANSWER: {r['error']}"
    f = DeploymentStatus.from_dict({"unit": r["unit"], **r["facts"]})
    model = f.model
    where = f"{model.repo}@{(model.revision or '-')[:12]} in {model.dir}: {model.describe()}" if model else "-"
    metrics = f.metrics
    lines = [
        f"{name} on {r['host']}: {r['unit']} {f.active_state} ({f.sub_state}) since {f.since or '-'}, {f.enabled}",
        f"  model     {where}",
        "  gpus      " + (", ".join(f"{g['index']}: {g['usedMib']}/{g['totalMib']} MiB" for g in r["gpus"]) or "-"),
        "  requests  "
        + (
            f"{metrics.get('running', 0):g} running, {metrics.get('waiting', 0):g} waiting"
            if metrics
            else "no /metrics answer"
        ),
        f"  vllm      {f.vllm_version}, last load {f.last_load_seconds} s",
    ]
    if f.last_start is not None:
        lines.append(f"  start     {f.last_start.describe()}")
    adapters = f.adapters
    if adapters is not None:
        listing = ", ".join(f"{n}@{rev[:12]}" for n, rev in sorted(adapters.wanted.items())) or "none"
        loaded = (
            ", ".join(adapters.loaded) or "none"
            if adapters.loaded is not None
            else "unknown (the engine does not answer)"
        )
        lines.append(f"  adapters  wanted {listing}; loaded {loaded}")
    lines += [f"  DRIFT     {d}" for d in r["drift"]] or ["  drift     none"]
    if r["drift"]:
        lines.append(
            "            run `pulumi up` where the stack is deployed from: it puts back what the stack applied"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--stack", default=os.environ.get("VLLM_FLEET_STACK", "dev"))
    parser.add_argument("--json", action="store_true", help="one JSON document for scripts")
    args = parser.parse_args()
    try:
        outputs = json.loads(pulumi("stack", "output", "--json", "--stack", args.stack, check=True).stdout or "{}")
    except subprocess.CalledProcessError as error:
        print(f"status: cannot read stack {args.stack!r}: {error.stderr.strip()}", file=sys.stderr)
        return 2
    deployments = {n: d for n, d in (outputs.get("deployments") or {}).items() if "status" in d}
    if not deployments:
        print(f"status: stack {args.stack!r} has no deployments in its outputs yet: run `make up` (or `pulumi up`)")
        return 2
    result = collect(args.stack, deployments, private_key(args.stack))
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
    else:
        print("\n".join(show(name, r) for name, r in sorted(result.items())))
    if any("error" in r for r in result.values()):
        return 2
    return 1 if any(r["drift"] for r in result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
