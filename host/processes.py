"""Programs the host's tools run: one run to its end with its output captured as text (the one way the
tools and library run a command and read what it printed), and a process group stopped, SIGTERM first.
Standard library only, as all of host/."""

from __future__ import annotations

import os
import signal
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


def stop_group(child: subprocess.Popen[Any], kill_after: float) -> None:
    """SIGTERM to the process group `child` leads (started with start_new_session), SIGKILL if it has not
    exited `kill_after` seconds later; returns once it has (at once when the group is already gone)."""
    try:
        os.killpg(child.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        child.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
