#!/usr/bin/env python3
"""vllm-fleet status: what a host's deployments are doing now, read-only, as one JSON document on stdout
(a host/contract.StatusReport; host/status.py reads it and says what each entry holds).

    status [--bench] [--survey] '{"deployments": [StatusRequest...]}'

The controller pipes the host package into the host's python3 over SSH for `make status`
(render/host_bundle.bootstrap_source); the swap reads the same report through host/status.py once the
deployment serves. Standard library only.
"""

from __future__ import annotations

import json
import sys

from host.status import report


def main(argv: list[str]) -> int:
    with_bench = "--bench" in argv
    spec = json.loads(next(a for a in argv if not a.startswith("--")))
    json.dump(report(spec, with_bench, with_survey="--survey" in argv).to_dict(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
