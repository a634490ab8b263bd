"""The mirror's repositories, written by ``python -m sandbox.tiny_repos --out DIR`` (scripts/mirror.sh):
the two tiny chat models (sandbox/tiny_models.py), then the LoRA adapters built from their weights
(sandbox/tiny_adapters.py). One path a line, as each is written."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from sandbox.tiny_adapters import generate_default_adapters
from sandbox.tiny_models import Dtype, generate_default_repos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="folder to write ORG/NAME repos into")
    parser.add_argument("--dtype", choices=get_args(Dtype), default="bfloat16")
    args = parser.parse_args(argv)
    for repo in [*generate_default_repos(args.out, dtype=args.dtype), *generate_default_adapters(args.out)]:
        print(repo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
