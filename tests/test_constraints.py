"""constraints.txt (make lock) agrees with pyproject.toml: make setup installs the pins under it, and a pin
changed in one but not the other would stop a fresh machine's set-up with pip's conflict."""

from __future__ import annotations

import re

from scripts.requirements import pins
from tests.support.paths import ROOT

LINE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)")


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints() -> dict[str, str]:
    versions: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = LINE.fullmatch(line)
        assert match is not None, f"constraints.txt: {line!r} is not NAME==VERSION"
        name = normalized(match["name"])
        assert name not in versions, f"constraints.txt names {name} twice"
        versions[name] = match["version"]
    return versions


def test_every_pin_of_pyproject_is_constrained_at_its_own_version() -> None:
    locked = constraints()
    for pin in pins():
        name, _, version = pin.partition("==")
        assert version, f"pyproject.toml: {pin!r} is not pinned with =="
        if normalized(name) == "pip":  # pip freeze leaves pip itself out; the pin alone decides it
            continue
        assert locked.get(normalized(name)) == version, (
            f"pyproject.toml pins {pin} but constraints.txt has {locked.get(normalized(name))}: run `make lock`"
        )


def test_the_lock_holds_what_the_pins_pull_in() -> None:
    # pulumi alone brings grpcio, protobuf and the rest; a lock of the pins only would leave them free.
    assert {"grpcio", "protobuf", "pydantic-core", "typing-extensions"} <= set(constraints())
