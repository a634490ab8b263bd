"""The engine's limit on a stack's config, said before it bites.

Pulumi's Python language host hands the program the whole stack config in one environment variable,
PULUMI_CONFIG: a JSON object of strings, each structured value (`vllm-fleet:hosts`, ...) JSON inside it
(pulumi-language-python's main.go). Linux refuses any one environment string longer than MAX_ARG_STRLEN,
32 pages (128 KiB), its name and final NUL included. Past it the engine cannot start the program at all:
`pulumi preview` stops with the engine's own error, `fork/exec .../.venv/bin/python: argument list too
long`, before any line of the program runs, so no check of the program's can say why. The program
measures the variable it was given instead, and its preview warns past WARN_SHARE of the limit, with the
number of hosts of this stack's shape that fit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONFIG_ENV = "PULUMI_CONFIG"
# Linux's MAX_ARG_STRLEN (32 x 4 KiB pages): the longest single argument or environment string.
MAX_ARG_STRLEN = 32 * 4096
WARN_SHARE = 0.8
# The keys whose size grows with the fleet: an entry per host (and its storage and deployments).
PER_HOST_KEYS = ("vllm-fleet:hosts", "vllm-fleet:storage", "vllm-fleet:deployments")


def env_string_bytes(value: str) -> int:
    """What `PULUMI_CONFIG=<value>` takes of the limit: the name, `=`, the value and the NUL."""
    return len(CONFIG_ENV) + 1 + len(value.encode()) + 1


def engine_value(config: Mapping[str, Any]) -> str:
    """A stack file's `config:` mapping as the engine passes it: a JSON object of strings, a structured
    value JSON-encoded first (its secrets as the stack file holds them, a little longer than in the run)."""
    compact = (",", ":")
    encoded = {k: v if isinstance(v, str) else json.dumps(v, separators=compact) for k, v in config.items()}
    return json.dumps(encoded, separators=compact)


@dataclass(frozen=True)
class ConfigSize:
    """A stack's config against the limit: its bytes, its hosts and what each host adds."""

    total: int
    hosts: int
    per_host: float

    @property
    def share(self) -> float:
        return self.total / MAX_ARG_STRLEN

    @property
    def largest_fleet(self) -> int:
        """About how many hosts of this shape one stack holds: the bytes no host adds, then each host's."""
        if self.per_host <= 0:
            return self.hosts
        fixed = self.total - self.per_host * self.hosts
        return max(0, math.floor((MAX_ARG_STRLEN - fixed) / self.per_host))


def measure(value: str, hosts: int) -> ConfigSize:
    """The size of PULUMI_CONFIG's `value` and, from its per-host keys, what each of `hosts` adds."""
    total = env_string_bytes(value)
    try:
        config = json.loads(value)
    except ValueError:
        return ConfigSize(total, hosts, 0.0)
    # Each per-host value is a JSON string inside the object: its quoted, escaped form is what it takes.
    grows = sum(len(json.dumps(config[key])) for key in PER_HOST_KEYS if isinstance(config.get(key), str))
    return ConfigSize(total, hosts, grows / hosts if hosts else 0.0)


def warning(env: Mapping[str, str], hosts: int) -> str | None:
    """The preview's warning when the stack's config passes WARN_SHARE of the limit (None below it)."""
    value = env.get(CONFIG_ENV)
    if value is None:
        return None
    size = measure(value, hosts)
    if size.share < WARN_SHARE:
        return None
    return (
        f"the stack's config is {size.total / 1024:.0f} KiB, {size.share:.0%} of the engine's limit of "
        f"{MAX_ARG_STRLEN // 1024} KiB: the engine hands it to the program in one environment variable "
        f"({CONFIG_ENV}), which Linux caps at {MAX_ARG_STRLEN // 1024} KiB (MAX_ARG_STRLEN), and past it every "
        "`pulumi preview` and `up` fails before the program starts (the engine's `fork/exec ...: argument list "
        f"too long`). At about {size.per_host:.0f} bytes a host, one stack holds about {size.largest_fleet} hosts "
        f"of this shape ({hosts} now). Split the fleet into stacks by site or rack, one PostgreSQL backend for "
        "all of them; keep what hosts share in vllm-fleet:defaults and their host keys in vllm-fleet:knownHostsFile"
    )
