"""`make status`: what each deployment of a stack does now, and its drift from what the stack applied.

Reads the stack's outputs (`pulumi stack output deployments`), asks each host once over SSH (host/status.py
piped into its python3, read-only), and prints per deployment: the unit's state and since when, the model
and revision on disk with its verification state, the GPUs and their memory, requests running and waiting
(vLLM's /metrics, from the engine on the host's loopback), and drift. Exit status: 0 in line, 1 drift, 2 a host did not
answer or the stack has no deployments. On drift it drops that host's cached survey, so the next
`pulumi up` looks afresh and activates the stack's unit again.
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

from controller import status as host_status  # noqa: E402
from controller.survey import SurveyFailed, ssh_python  # noqa: E402
from models.hosts import Host  # noqa: E402
from scripts.pulumi_cli import pulumi  # noqa: E402


def private_key(stack: str) -> str:
    key_file = pulumi("config", "get", "vllm-fleet:sshPrivateKeyFile", "--stack", stack).stdout.strip()
    if key_file:
        return (
            (ROOT / key_file).expanduser().read_text() if not key_file.startswith("/") else Path(key_file).read_text()
        )
    return pulumi("config", "get", "vllm-fleet:sshPrivateKey", "--stack", stack, check=True).stdout


def collect(
    stack: str, deployments: dict[str, Any], key: str, cache: Path = ROOT / ".cache" / "survey"
) -> dict[str, Any]:
    """Per deployment: its facts, drift lines and the host's GPUs, asking each host once."""
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
            facts = json.loads(ssh_python(host, key, host_status.STATUS_MODULE, [json.dumps({"deployments": entries})]))
        except (SurveyFailed, ValueError) as error:
            for entry in entries:
                result[entry["deployment"]] = {"host": h["name"], "error": str(error)}
            continue
        for entry in entries:
            mine = facts["deployments"].get(entry["owner"], {})
            result[entry["deployment"]] = {
                "host": h["name"],
                "unit": entry["unit"],
                "facts": mine,
                "gpus": [g for g in facts.get("gpus", []) if g["index"] in entry["gpus"]],
                "drift": host_status.drift(entry, mine, facts.get("gpuHolders", [])),
            }
        if any(result[e["deployment"]]["drift"] for e in entries):
            (cache / f"{stack}.{h['name']}.json").unlink(missing_ok=True)
    return result


def show(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{name} on {r['host']}: NO ANSWER: {r['error']}"
    f, model = r["facts"], r["facts"].get("model", {})
    metrics = f.get("metrics")
    lines = [
        f"{name} on {r['host']}: {r['unit']} {f.get('activeState')} ({f.get('subState')}) since {f.get('since') or '-'}, "
        f"{f.get('enabled')}",
        f"  model     {model.get('repo')}@{(model.get('revision') or '-')[:12]} in {model.get('dir')}: {model.get('state')}",
        "  gpus      " + (", ".join(f"{g['index']}: {g['usedMib']}/{g['totalMib']} MiB" for g in r["gpus"]) or "-"),
        "  requests  "
        + (
            f"{metrics.get('running', 0):g} running, {metrics.get('waiting', 0):g} waiting"
            if metrics
            else "no /metrics answer"
        ),
        f"  vllm      {f.get('vllmVersion')}, last load {f.get('lastLoadSeconds')} s",
    ]
    adapters = f.get("adapters")
    if adapters is not None:
        loaded = adapters.get("loaded")
        listing = ", ".join(f"{n}@{rev[:12]}" for n, rev in sorted(adapters["wanted"].items())) or "none"
        lines.append(
            f"  adapters  wanted {listing}; loaded "
            + (", ".join(loaded) or "none" if loaded is not None else "unknown (the engine does not answer)")
        )
    lines += [f"  DRIFT     {d}" for d in r["drift"]] or ["  drift     none"]
    if r["drift"]:
        lines.append("            `pulumi up` puts back what the stack applied (the host's next survey sees this)")
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
