"""A host's SSH address and port as plain rules, without pydantic: the Host model (models/hosts.py)
validates with them, and the probes that start before the program imports its models
(controller/probe.py start_early) apply the same ones to the raw config."""

from __future__ import annotations

import ipaddress
import re

HOSTNAME_PATTERN = (
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
DEFAULT_SSH_PORT = 22
PORT_MIN, PORT_MAX = 1, 65535


def check_address(value: str) -> str:
    """An IP address or a DNS host name, as it is; ValueError otherwise."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not re.fullmatch(HOSTNAME_PATTERN, value) or len(value) > 253:
        raise ValueError(f"{value!r} is neither an IP address nor a DNS host name")
    return value


def is_port(value: object) -> bool:
    """A TCP port as the config gives it (an int, not a bool or a string that pydantic would convert)."""
    return type(value) is int and PORT_MIN <= value <= PORT_MAX
