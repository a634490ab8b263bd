"""host/unit_file.py's reading of a unit's launch against systemd's own, on the sandbox's systemd 252: every
unit render/units.py writes for the real stacks (their golden files) and a hand-made one full of quoting,
escapes, resets and continuation lines are loaded under a temporary name (a file in /run/systemd/system,
which systemd reads when first asked, no daemon-reload), and what systemd holds is asked over D-Bus, where
the words of ExecStart= come back exactly (`systemctl show` joins them with spaces, unquoted)."""

from __future__ import annotations

import json

from host.unit_file import from_bus, read_unit
from sandbox.sandbox_env import on_host
from tests.host.test_unit_file import HAND_MADE, HAND_MADE_LAUNCH
from tests.support.paths import ROOT

PROPERTIES = ("ExecStart", "Environment", "EnvironmentFiles", "User", "WorkingDirectory")
RUN_DIR = "/run/systemd/system"


def bus_path(unit: str) -> str:
    """The unit's object path on systemd's bus (sd_bus's label escaping: every byte but [A-Za-z0-9] as _xx)."""
    return "/org/freedesktop/systemd1/unit/" + "".join(c if c.isalnum() else f"_{ord(c):02x}" for c in unit)


def test_the_launch_read_from_a_unit_is_what_systemd_holds(sandbox: None) -> None:
    units = {p.parent.name + "/" + p.name: p.read_text() for p in (ROOT / "tests" / "golden").glob("*/vllm-*.service")}
    units["hand-made"] = HAND_MADE
    names = {what: f"vllm-fleet-pin-{index}.service" for index, what in enumerate(sorted(units))}
    script = []
    for what, name in names.items():
        script.append(f"cat > {RUN_DIR}/{name} <<'UNIT_EOF'\n{units[what]}UNIT_EOF")
        for prop in PROPERTIES:
            script.append(
                f"echo {name} {prop} $(busctl --json=short get-property org.freedesktop.systemd1 {bus_path(name)} "
                f"org.freedesktop.systemd1.Service {prop})"
            )
    script.append(f"rm -f {' '.join(f'{RUN_DIR}/{n}' for n in names.values())}")
    answers: dict[str, dict[str, str]] = {}
    for line in on_host("\n".join(script)).splitlines():
        name, prop, answer = line.split(" ", 2)
        json.loads(answer)  # each one systemd's JSON
        answers.setdefault(name, {})[prop] = answer
    assert len(answers) == len(units) >= 4, answers.keys()
    for what, name in names.items():
        held = from_bus(answers[name])
        assert read_unit(units[what], name).launch == held, what
    # The hand-made unit's launch as systemd holds it is the one the unit tests read (its %n: this name).
    hand_made = from_bus(answers[names["hand-made"]])
    assert hand_made.exec_start is not None
    assert hand_made.exec_start[:-1] == HAND_MADE_LAUNCH.exec_start[:-1]  # type: ignore[index]
    assert hand_made.exec_start[-1] == names["hand-made"]
    assert hand_made.environment == HAND_MADE_LAUNCH.environment
