"""How a host tool reports as it goes: one line on stdout, flushed at once, prefixed with the tool's name.
Standard library only."""

from __future__ import annotations

import os


def say(tool: str, message: str) -> None:
    """Print `tool: message` now. When the SSH session that started the tool is gone (a killed `pulumi
    up`), stdout is a broken pipe: exit at once, so that what the tool started dies with it and the next
    run resumes from what is on disk."""
    try:
        print(f"{tool}: {message}", flush=True)
    except BrokenPipeError:
        os._exit(1)
