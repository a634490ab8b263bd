#!/usr/bin/env python3
"""vllm-fleet step: run one step of a stack on this host, a glue script of the host package (host/steps/)
with the parameters the step's command names, within the step's time limit.

    step NAME --time-limit SECONDS [--kill-after SECONDS] [KEY=VALUE | KEY[]=VALUE | KEY[] ...]

Every remote step but the host package's own install is one call of this tool, so the command pulumi-command
runs, stores and echoes back when it fails is the step's name and its parameters (what `pulumi preview
--diff` shows change), not the script: a failed step's reason, on its last lines, is what the operator
reads. The parameters become readonly shell variables in front of the script's body (`KEY[]=VALUE`, once
per item, makes an array; `KEY[]` alone an empty one), so no value is ever spliced into shell syntax; the
body is the package's, of the version the tools step installed. A step's delete runs later with the
parameters the stack's state recorded: a body keeps accepting the parameters its earlier versions were
given. The script's stdin is the step's (secrets travel there). Past the time limit the script's process
group gets SIGTERM, SIGKILL `--kill-after` seconds later, and the step exits 124 saying so (pulumi-command
does not act on the engine's timeouts). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from host.processes import stop_group
from host.step import ParamValue, parse_params, script


def run(name: str, params: Mapping[str, ParamValue], time_limit: float, kill_after: float) -> int:
    label = f"vllm-fleet-{name}"
    child = subprocess.Popen(["bash", "-c", script(name, params), label], start_new_session=True)

    def stop(signum: int, _frame: object) -> None:
        # The SSH session went away or the step was stopped: the script's whole group goes with it.
        os.killpg(child.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        return child.wait(timeout=time_limit)
    except subprocess.TimeoutExpired:
        stop_group(child, kill_after)
        print(f"{label}: stopped by its time limit of {time_limit:g} s", file=sys.stderr, flush=True)
        return 124


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="step", description="run one step's script with its parameters")
    parser.add_argument("name", help="the step's script, host/steps/NAME.sh")
    parser.add_argument("--time-limit", type=float, required=True, help="seconds the script may run")
    parser.add_argument("--kill-after", type=float, default=30, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument("params", nargs="*", help="KEY=VALUE, KEY[]=VALUE or KEY[]")
    args = parser.parse_intermixed_args(argv)
    try:
        params = parse_params(args.params)
        return run(args.name, params, args.time_limit, args.kill_after)
    except (FileNotFoundError, ValueError) as error:
        print(f"step: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
