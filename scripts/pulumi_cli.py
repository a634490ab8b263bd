"""The pulumi CLI as the operator scripts call it: from the repository's root, its output captured as text."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pulumi(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`pulumi ARGS...` run to its end in the repository; check=True raises CalledProcessError when it fails."""
    return subprocess.run(["pulumi", *args], capture_output=True, text=True, check=check, cwd=ROOT)
