"""Programs and services on this machine as the tests, bench/ and the sandbox's helpers use them: a program
run to its end with its output captured as text, a free loopback port, whether a URL answers."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
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


def answers(url: str, timeout: float) -> bool:
    """Whether a GET of `url` is answered with 200 within `timeout` seconds (no answer, or an error: no)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) == 200
    except OSError:
        return False
