"""The pulumi-command provider every step runs through: its version, read from the pulumi-plugin.json of the
installed pulumi_command package (pyproject pins it to the provider that make setup builds) without
importing the package: every step names it (components/remote.py)."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path


@functools.cache
def plugin_version() -> str | None:
    """The provider version the installed pulumi_command package names, or None without the package.
    Found, not imported: the package's import reads its own version from its distribution's metadata,
    with two version parsers, ~10 ms of every program run."""
    spec = importlib.util.find_spec("pulumi_command")
    if spec is None or spec.origin is None:
        return None
    plugin = json.loads((Path(spec.origin).parent / "pulumi-plugin.json").read_text(encoding="utf-8"))
    return str(plugin["version"])
