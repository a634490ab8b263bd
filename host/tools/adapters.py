#!/usr/bin/env python3
"""vllm-fleet adapters: the LoRA adapters a deployment's engine serves, loaded at runtime (no restart).

    adapters apply --state-dir DIR --max-rank N     (stdin: {"adapters": [Adapter...]}, the wanted set)

The deployment's adapters step runs it; host/adapters.apply checks, records and loads the wanted set
(host/adapters.py says how). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from host.adapters import apply
from host.contract import Adapter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    apply_cmd = sub.add_parser("apply", help="check, record and load the wanted adapters (JSON on stdin)")
    apply_cmd.add_argument("--state-dir", type=Path, required=True)
    apply_cmd.add_argument("--max-rank", type=int, required=True)
    args = parser.parse_args(argv)
    spec = json.load(sys.stdin)
    wanted = [Adapter.from_dict(entry) for entry in spec.get("adapters", [])]
    return apply(args.state_dir, wanted, args.max_rank, lambda m: print(f"adapters: {m}", flush=True))


if __name__ == "__main__":
    sys.exit(main())
