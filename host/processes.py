"""A program run to its end on the host with its output captured as text: the one way the host's tools and
library run a command and read what it printed. Standard library only, as all of host/."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any


def run_captured(
    command: Sequence[str], *, timeout: float | None = None, **options: Any
) -> subprocess.CompletedProcess[str]:
    """subprocess.run with stdout and stderr captured as text and no raise on a non-zero exit (the caller
    reads returncode); `options` are subprocess.run's (input, env, cwd). TimeoutExpired after `timeout`
    seconds and OSError for a program that cannot start, as there."""
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **options)


def stdout_of(*command: str, timeout: float = 30) -> str:
    """What the command printed when it exits 0; "" when it fails, cannot start or runs past `timeout` (a
    fact the host cannot read now is no fact)."""
    try:
        result = run_captured(command, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""
