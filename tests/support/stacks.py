"""Stack values in tests: the real stack files' values, the error a config is refused with, and the values
rewritten the way a fleet writes them (what every entry repeats moved to vllm-fleet:defaults)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from models.defaults import SECTIONS
from models.loader import ConfigError, parse_stack_config, read_stack_file
from tests.support.paths import ROOT


def stack_values(name: str) -> dict[str, Any]:
    """The values of the real Pulumi.<name>.yaml (namespace stripped), as a copy the test may change."""
    return copy.deepcopy(read_stack_file(ROOT / f"Pulumi.{name}.yaml"))


def error_of(raw: dict[str, Any]) -> str:
    """The message parse_stack_config refuses `raw` with (the test fails when it accepts it)."""
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(raw)
    return str(caught.value)


def factor_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """The same stack with each key that every entry of hosts, storage and deployments gives with one
    value (its name and, for storage, its host excepted) written once under vllm-fleet:defaults instead."""
    out = copy.deepcopy(raw)
    defaults: dict[str, Any] = {}
    for section, list_key in SECTIONS.items():
        entries = out.get(list_key) or []
        if not entries:
            continue
        keep = {"name", "host"} if section == "storage" else {"name"}
        common = {
            key: value
            for key, value in entries[0].items()
            if key not in keep and all(key in e and e[key] == value for e in entries)
        }
        if common:
            defaults[section] = common
            out[list_key] = [{k: v for k, v in e.items() if k not in common} for e in entries]
    return {"defaults": defaults, **out}
