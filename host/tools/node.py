#!/usr/bin/env python3
"""vllm-fleet node: the steps of node `rank` > 0 of a model served across hosts, on that node.

  check     the node's unit step, before anything stops on any node: survey this host and judge its GPUs
            and unit with host/judgement.judge_node, the rule the preview applied to the same survey;
            refuse, naming the node and what is in the way.
  activate  the node's serving step, before the head's swap, under the host lock: judge again, claim the
            node's GPUs, install the staged launch beside the one the engine runs (node-watch runs the
            launch of the model the head runs: the old one until the head's swap stops it, the new one
            once the head starts it, the old one again if the head rolls back), then install the staged
            unit and start it if it does not run. The engine is restarted only when the unit itself
            changed; a model swap alone changes a launch, never the unit.

Usage: node check|activate --plan STAGED_NODE_PLAN.json
Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from host.contract import (
    NODE_CURRENT,
    NODE_LAUNCHES,
    STATE_DIR,
    ActiveRecord,
    Claims,
    NodeLaunch,
    NodePlan,
    read_claims,
)
from host.judgement import judge_node
from host.survey import survey
from host.swap_files import file_text, install_file, same_file, write_file

UNIT_DIR = Path("/etc/systemd/system")
ETC_DIR = Path("/etc/vllm-fleet")


def staged(plan: NodePlan) -> Path:
    return Path(plan.state_dir) / "staged"


def staged_launch(plan: NodePlan) -> NodeLaunch:
    return NodeLaunch.load(staged(plan) / "launch.json")


def refused(plan: NodePlan, state_root: Path) -> bool:
    """Judge the node on a fresh survey (host/judgement.judge_node); say every conflict on stderr."""
    problems = judge_node(plan, survey(), read_claims(state_root))
    if problems:
        print("\n".join(problems) + "\nnothing was stopped on any node", file=sys.stderr)
    return bool(problems)


def check(plan: NodePlan, state_root: Path = Path(STATE_DIR)) -> int:
    if refused(plan, state_root):
        return 1
    launch = staged_launch(plan)
    print(f"[{plan.deployment}.node{plan.rank}] {plan.host}: GPU {list(plan.gpus)} free for {launch.model}")
    return 0


def keep_launches(directory: Path, new: NodeLaunch) -> list[str]:
    """Remove launches other than the new one and the one node-watch runs now (it may go back to it, if
    the head rolls back); returns the file names removed."""
    current = directory / NODE_CURRENT
    running = current.read_text(encoding="utf-8").strip() if current.is_file() else ""
    keep = {new.file_name, f"{running}.json"}
    removed = []
    for path in sorted(directory.glob("*.json")):
        if path.name not in keep:
            path.unlink()
            removed.append(path.name)
    return removed


def systemctl(*args: str) -> int:
    return subprocess.run(["systemctl", *args], check=False).returncode


def replace_previous_unit(plan: NodePlan, tag: str) -> None:
    """A node unit of another name (from before node units were named by deployment, not model): stopped,
    disabled and removed, once."""
    record = ActiveRecord.parse(file_text(Path(plan.state_dir) / "active") or "")
    previous = record.unit if record is not None else ""
    if not previous or previous == plan.unit_name:
        return
    systemctl("stop", previous)
    systemctl("disable", "--quiet", previous)
    for path in (UNIT_DIR / previous, ETC_DIR / f"{previous.removesuffix('.service')}.env"):
        path.unlink(missing_ok=True)
    systemctl("daemon-reload")
    print(f"{tag} stopped and removed {previous}")


def activate(plan: NodePlan, state_root: Path = Path(STATE_DIR)) -> int:
    from host.transaction import host_lock  # the same lock as every swap on this host

    tag = f"[{plan.deployment}.node{plan.rank}]"
    unit_file = staged(plan) / plan.unit_name
    if not unit_file.is_file():
        print(f"no staged {plan.unit_name} in {staged(plan)}: the unit step did not run", file=sys.stderr)
        return 1
    with host_lock(state_root):
        if refused(plan, state_root):
            return 1
        held = Claims(frozenset(plan.gpus), frozenset(), frozenset({plan.unit_name}))
        write_file(state_root / "claims" / f"{plan.owner}.json", held.to_json() + "\n", 0o644)

        launch = staged_launch(plan)
        launches = Path(plan.state_dir) / NODE_LAUNCHES
        launches.mkdir(parents=True, exist_ok=True)
        current = launches / NODE_CURRENT
        same_port = launches / launch.file_name
        if (
            current.is_file()
            and current.read_text(encoding="utf-8").strip() == str(launch.master_port)
            and same_port.is_file()
            and not same_file(same_port, staged(plan) / "launch.json")
        ):
            print(
                f"{tag} warning: the new launch has the master port of the one this engine runs "
                f"({launch.master_port}; ports are chosen by digest from {plan.config_key}.masterPort): should the "
                "head roll back, this node would run the new launch against it. Change masterPort to avoid it."
            )
        install_file(staged(plan) / "launch.json", same_port, 0o644)
        removed = keep_launches(launches, launch)
        if removed:
            print(f"{tag} removed launches no engine runs: {', '.join(removed)}")

        replace_previous_unit(plan, tag)
        installed = UNIT_DIR / plan.unit_name
        env_name = f"{plan.unit_name.removesuffix('.service')}.env"
        changed = not same_file(unit_file, installed) or not same_file(staged(plan) / env_name, ETC_DIR / env_name)
        if changed:
            ETC_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
            install_file(unit_file, installed, 0o644)
            # The secrets' file is 0600 before it has its name (a copy then chmod would show it to all first).
            install_file(staged(plan) / env_name, ETC_DIR / env_name, 0o600)
            systemctl("daemon-reload")
        systemctl("enable", "--quiet", plan.unit_name)
        running = systemctl("is-active", "--quiet", plan.unit_name) == 0
        if changed or not running:
            # Type=exec: returns once the GPU-release guard passed and node-watch runs; it waits for the head.
            if systemctl("restart", plan.unit_name) != 0:
                print(f"{plan.unit_name} did not start; the head was not touched", file=sys.stderr)
                return 1
            print(f"{tag} {'installed and ' if changed else ''}started {plan.unit_name}")
        (Path(plan.state_dir) / "active").write_text(f"UNIT={plan.unit_name}\n", encoding="utf-8")
    print(
        f"{tag} {plan.unit_name} on {plan.host} runs whichever launch the head at {plan.head_address} runs; "
        f"{launch.model}'s is installed (master port {launch.master_port})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="node", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("check", "activate"))
    parser.add_argument("--plan", required=True, type=Path)
    args = parser.parse_args(argv)
    plan = NodePlan.load(args.plan)
    return check(plan) if args.action == "check" else activate(plan)


if __name__ == "__main__":
    sys.exit(main())
