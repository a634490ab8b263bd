"""Shared fixtures: the stack files as data, the sandbox and the engine. What tests import lives in
tests/support/ and, where bench/ needs it too, in sandbox/ (engine, sandbox_env, processes)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import engine, sandbox_env
from tests.support.stacks import stack_values


@pytest.fixture
def prod_raw() -> dict[str, Any]:
    """The real Pulumi.prod.yaml values, namespace stripped, as a mutable copy."""
    return stack_values("prod")


@pytest.fixture
def dev_raw() -> dict[str, Any]:
    return stack_values("dev")


@pytest.fixture
def fleet_raw() -> dict[str, Any]:
    return stack_values("fleet")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs the sandbox is an end-to-end test (`-m e2e`, the lane that runs alone): said once
    here, before `-m` selects, so that no module can forget it."""
    for item in items:
        if "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def sandbox(pulumi_engine: None) -> Iterator[None]:
    """The sandbox host and the mirror; started here (and stopped at the end) unless already up. Its tests
    drive stacks, so the engine must be there too."""
    started = []
    for script, timeout in ((sandbox_env.HOST_SH, 3000), (sandbox_env.MIRROR_SH, 120)):
        if not sandbox_env.is_up(script):
            sandbox_env.bring_up(script, timeout)
            started.append(script)
    yield
    for script in reversed(started):
        sandbox_env.take_down(script)


@pytest.fixture(scope="session")
def fleet(sandbox: None) -> Iterator[int]:
    """Two more sandbox hosts, fleet-1 and fleet-2, on the fabric beside the dev sandbox (which the mirror
    comes with); started here and stopped at the end unless already up. Yields how many there are."""
    hosts = 2
    started = not sandbox_env.fleet_is_up(hosts)
    if started:
        subprocess.run([str(sandbox_env.HOST_SH), "fleet-up", str(hosts)], check=True, timeout=600)
    yield hosts
    if started:
        subprocess.run([str(sandbox_env.HOST_SH), "fleet-down"], check=False, timeout=600)


@pytest.fixture(scope="session")
def pulumi_engine() -> None:
    """The engine `make setup` builds. Missing, it fails the tests that need it, never skips them."""
    problem = engine.missing_engine()
    if problem:
        pytest.fail(f"{problem}: run `make setup` (or scripts/build-engine.sh) to build the engine", pytrace=False)


@pytest.fixture
def host_tools(tmp_path: Path) -> Path:
    """The host package installed as a host has it (the copy and the tools step's own script, the
    directory moved into tmp_path): run a tool as `python TOOLS/<tool> ...`, the way units and steps call it."""
    from tests.support.host_package import install_host_package

    tools = tmp_path / "host-tools"
    tools.mkdir()
    install_host_package(tools)
    return tools
