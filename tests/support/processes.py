"""Running a program the way a test reads it: to its end, output and errors captured as text."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from typing import Any


def run_captured(
    command: Sequence[str] | str, *, check: bool = False, **options: Any
) -> subprocess.CompletedProcess[str]:
    """subprocess.run with its stdout and stderr captured as text; `options` are subprocess.run's (cwd,
    env, input, timeout, ...). check=True raises CalledProcessError on a non-zero exit, as there."""
    return subprocess.run(command, capture_output=True, text=True, check=check, **options)


def free_port() -> int:
    """A loopback TCP port that nothing listens on now (the kernel's pick of a free one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
