"""The engine's limit on a stack's config (controller/config_limit.py): the preview warns past 80% of the
128 KiB that Linux allows the one environment variable holding it, with the hosts of this shape that fit."""

from __future__ import annotations

import re

from controller.config_limit import MAX_ARG_STRLEN, engine_value, env_string_bytes, measure, warning
from scripts.fleet_stack import fleet_values
from scripts.host_keys import host_seed, openssh_public_key


def test_the_config_limit_is_said_before_it_bites() -> None:
    """The preview warns past 80% of the engine's 128 KiB with the host count that fits; below, nothing."""
    small = engine_value({f"vllm-fleet:{k}": v for k, v in fleet_values(64).items()})
    assert warning({"PULUMI_CONFIG": small}, 64) is None
    size = measure(small, 64)
    assert 70 < size.per_host < 140, size
    # Each host with its key in the stack file, as before knownHostsFile: about 100 bytes more a host.
    values = fleet_values(1100)
    for host in values["hosts"]:
        host["hostKey"] = openssh_public_key(host_seed(host["name"]))
    big = engine_value({f"vllm-fleet:{k}": v for k, v in values.items()})
    said = warning({"PULUMI_CONFIG": big}, 1100)
    assert said is not None and size.largest_fleet > measure(big, 1100).largest_fleet
    assert re.search(r"one stack holds about \d+ hosts of this shape \(1100 now\)", said), said
    assert "by site or rack, one PostgreSQL backend" in said and "argument list too long" in said
    assert measure(big, 1100).total > 0.8 * MAX_ARG_STRLEN


def test_the_size_is_the_environment_string_s() -> None:
    """The name, `=`, the value's bytes and the NUL: what Linux counts against MAX_ARG_STRLEN."""
    assert env_string_bytes('{"a":"é"}') == len("PULUMI_CONFIG=") + len('{"a":"é"}'.encode()) + 1
    assert warning({}, 10) is None  # no config variable: a program run outside the engine
