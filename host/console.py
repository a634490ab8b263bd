"""How a host tool reports as it goes: one line on stdout, flushed at once, prefixed with the tool's name;
and the lists of names in its messages. Standard library only."""

from __future__ import annotations

import os
from collections.abc import Sequence


def say(tool: str, message: str) -> None:
    """Print `tool: message` now. When the SSH session that started the tool is gone (a killed `pulumi
    up`), stdout is a broken pipe: exit at once, so that what the tool started dies with it and the next
    run resumes from what is on disk."""
    try:
        print(f"{tool}: {message}", flush=True)
    except BrokenPipeError:
        os._exit(1)


def listed(names: Sequence[str], most: int | None = None) -> str:
    """The names, comma-separated: the first `most` of them and ", ..." when there are more."""
    shown = names if most is None else names[:most]
    return ", ".join(shown) + (", ..." if len(shown) < len(names) else "")
