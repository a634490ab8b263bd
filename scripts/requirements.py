"""The pins `make setup` installs, one per line: pyproject.toml's dependencies and its dev extra (the tests,
the linters, the bench). scripts/setup.sh installs them under constraints.txt; scripts/lock.sh resolves
them afresh to write constraints.txt."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def pins(pyproject: Path = PYPROJECT) -> list[str]:
    with pyproject.open("rb") as handle:
        project = tomllib.load(handle)["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


if __name__ == "__main__":
    print("\n".join(pins()))
