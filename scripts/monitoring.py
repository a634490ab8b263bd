"""`make monitoring`: the files a Prometheus (and a Grafana) needs to watch a stack, from its outputs.

Reads `pulumi stack output monitoring` (what the last `pulumi up` applied: targets with their labels, the
thresholds of `vllm-fleet:monitoring`) and writes into OUT (default .run/monitoring):
  targets-<stack>.json          the file_sd targets; point a `file_sd_configs` entry at it
  <stack>.alerts.yml            alert rules
  <stack>.recording.yml         recording rules (request rate, TTFT / inter-token / e2e percentiles, queue, KV)
  dashboard-<stack>.json        a Grafana dashboard of the recording rules
  prometheus-<stack>.yml        a complete Prometheus config using the three above (an example to copy from)
Each file is written whole to a temporary name and renamed, so Prometheus never reads half of one; a
targets file that did not change is left alone. With `promtool` on PATH it checks the rules and the config.
Run it after each `pulumi up` (or from the same CI job): the targets then follow swaps and removals.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from host.swap_files import write_file  # noqa: E402
from models.monitoring import Monitoring  # noqa: E402
from render import monitoring as render  # noqa: E402
from scripts.pulumi_cli import pulumi  # noqa: E402


def _write(path: Path, text: str) -> None:
    if path.is_file() and path.read_text() == text:
        return
    write_file(path, text, make_parent=False)


def files_for(stack: str, out: Path) -> dict[str, Path]:
    return {
        "targets": out / f"targets-{stack}.json",
        "alerts": out / f"{stack}.alerts.yml",
        "recording": out / f"{stack}.recording.yml",
        "dashboard": out / f"dashboard-{stack}.json",
        "config": out / f"prometheus-{stack}.yml",
    }


def write_files(
    stack: str,
    output: dict[str, Any],
    out: Path,
    ca_file: str | None = None,
    evaluation_interval_seconds: int | None = None,
) -> dict[str, Path]:
    """Write the stack's monitoring files from its `monitoring` output; returns them by kind."""
    out.mkdir(parents=True, exist_ok=True)
    paths = files_for(stack, out)
    thresholds = Monitoring.model_validate(output.get("thresholds") or {}, by_alias=True, by_name=False)
    targets = output.get("targets") or []
    deployments = [group["labels"]["deployment"] for group in targets]
    board = render.dashboard(stack, deployments, thresholds)
    problems = render.dashboard_problems(board)
    if problems:
        raise ValueError("the dashboard would not import: " + "; ".join(problems))
    evaluation = evaluation_interval_seconds or thresholds.scrape_interval_seconds
    config = {
        "global": {
            "scrape_interval": render.duration(thresholds.scrape_interval_seconds),
            "evaluation_interval": render.duration(evaluation),
        },
        "rule_files": [str(paths["alerts"]), str(paths["recording"])],
        "scrape_configs": [render.scrape_config([str(paths["targets"])], thresholds, ca_file)],
    }
    _write(paths["targets"], json.dumps(targets, indent=2, sort_keys=True) + "\n")
    _write(paths["alerts"], yaml.safe_dump(render.alert_rules(stack, thresholds), sort_keys=False, width=200))
    _write(paths["recording"], yaml.safe_dump(render.recording_rules(stack, thresholds), sort_keys=False, width=200))
    _write(paths["dashboard"], json.dumps(board, indent=2) + "\n")
    _write(paths["config"], yaml.safe_dump(config, sort_keys=False))
    return paths


def promtool_check(paths: dict[str, Path]) -> list[str]:
    """`promtool check rules` and `check config` on the files; the failures' output (empty: all passed)."""
    failures = []
    for command in (
        ["promtool", "check", "rules", str(paths["alerts"]), str(paths["recording"])],
        ["promtool", "check", "config", str(paths["config"])],
    ):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            failures.append(f"{' '.join(command)}:\n{result.stdout}{result.stderr}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--out", type=Path, default=ROOT / ".run" / "monitoring")
    parser.add_argument("--ca-file", help="the CA Prometheus verifies a TLS front door with (access.tls)")
    args = parser.parse_args()
    result = pulumi("stack", "output", "monitoring", "--json", "--stack", args.stack)
    if result.returncode != 0 or not result.stdout.strip():
        print(f"no monitoring output on stack {args.stack!r} (run `pulumi up` first): {result.stderr.strip()}")
        return 2
    output = json.loads(result.stdout)
    if output.get("tls") and not args.ca_file:
        print("note: the front doors use TLS; without --ca-file Prometheus must trust their certificate itself")
    paths = write_files(args.stack, output, args.out, args.ca_file)
    for kind, path in paths.items():
        print(f"{kind:10} {path}")
    if shutil.which("promtool"):
        failures = promtool_check(paths)
        for failure in failures:
            print(failure)
        if failures:
            return 1
        print("promtool: rules and config pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
