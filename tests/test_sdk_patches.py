"""controller/sdk.py: the program's changes to the Pulumi SDK it runs in, each made only on the SDK release it
was written for, and each failing here when the SDK code it stands in for changes."""

from __future__ import annotations

import ast
import asyncio
import gc
import hashlib
import importlib
import inspect
import pathlib
import tomllib
from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pytest
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import stack as sdk_stack
from pulumi.runtime.settings import SETTINGS

from controller import sdk

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The source of the SDK code each change stands in for (Change.stands_in_for), as SDK 3.272.0 has it. A new SDK
# that changes one fails here: read the SDK's new code against the change (and its tests below), then pin it
# anew and update the change's `written_for`, or drop the change.
SDK_SOURCES = {
    "pulumi.log.debug": "766897f70e3a1770",
    "pulumi.runtime.stack.wait_for_rpcs": "0bf483f44da06fc7",
    "pulumi.runtime.stack.run_pulumi_func": "d097b54514f00f91",
    "pulumi.runtime.resource.create_urn": "e82dcea9aaa00dd5",
    "pulumi.runtime.resource.register_resource": "094e3752d490c7e0",
}


def sdk_source_digest(name: str) -> str:
    """The digest of a function's source as the SDK's file has it (read from the file: the program that the
    tests run under mocks has made the changes in this process)."""
    module, function = name.rsplit(".", 1)
    text = inspect.getsource(importlib.import_module(module))
    (node,) = (
        n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
    )
    source = ast.get_source_segment(text, node)
    assert source is not None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@pytest.mark.parametrize("change", sdk.CHANGES, ids=[c.name for c in sdk.CHANGES])
def test_each_change_is_for_the_sdk_installed_and_its_code(change: sdk.Change) -> None:
    assert change.written_for == sdk.sdk_version(), (
        f"{change.name} was written for Pulumi SDK {change.written_for}, and {sdk.sdk_version()} is installed"
    )
    assert change.stands_in_for, f"{change.name} names no SDK code it stands in for"
    for name in change.stands_in_for:
        assert sdk_source_digest(name) == SDK_SOURCES.get(name), f"the SDK's {name} changed under {change.name}"


def test_the_sdk_pinned_is_the_one_the_changes_were_written_for() -> None:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {f"pulumi=={c.written_for}" for c in sdk.CHANGES} <= set(pins)


@pytest.fixture
def sdk_as_it_was(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whatever `install` replaces is put back after the test, and the collector turned back on."""
    for owner, name in (
        (pulumi.log, "debug"),
        (sdk_stack, "wait_for_rpcs"),
        (sdk_resource, "create_urn"),
    ):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(sdk, "_made", None)  # made afresh in the test, as in a new process
    yield
    gc.enable()


def test_install_makes_every_change_in_order_but_those_switched_off(sdk_as_it_was: None) -> None:
    names = [c.name for c in sdk.CHANGES]
    debug, wait = pulumi.log.debug, sdk_stack.wait_for_rpcs
    assert sdk.install({sdk.OFF_ENV: "quiet_debug_log"}) == names[1:]
    assert pulumi.log.debug is debug and sdk_stack.wait_for_rpcs is not wait and not gc.isenabled()
    assert sdk.install({}) == names[1:], "made once in a process"
    sdk._made = None
    assert sdk.install({}) == names
    assert pulumi.log.debug is not debug
    pulumi.log.debug("never sent", None)


def test_on_another_sdk_every_change_steps_aside_with_one_warning(
    sdk_as_it_was: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warnings.append(message))
    monkeypatch.setattr(sdk, "sdk_version", lambda: "3.999.0")
    debug, wait = pulumi.log.debug, sdk_stack.wait_for_rpcs
    assert sdk.install({}) == []
    assert pulumi.log.debug is debug and sdk_stack.wait_for_rpcs is wait and gc.isenabled()
    (warning,) = warnings
    assert "Pulumi SDK 3.272.0, and this is SDK 3.999.0: left out" in warning
    assert all(c.name in warning for c in sdk.CHANGES)


def test_a_name_switched_off_that_is_no_change_is_said(sdk_as_it_was: None, monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warnings.append(message))
    sdk.install({sdk.OFF_ENV: "quiet_debug_logs"})
    assert warnings == [f"{sdk.OFF_ENV} names no change of controller/sdk.py: quiet_debug_logs"]


def test_sdk_debug_messages_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulumi.log, "debug", pulumi.log.debug)
    original = pulumi.log.debug
    sdk.quiet_debug_log()
    assert pulumi.log.debug is not original
    pulumi.log.debug("never sent", None)


def test_the_output_wait_awaits_every_output_and_stops_at_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_stack, "wait_for_rpcs", sdk_stack.wait_for_rpcs)
    sdk.linear_output_wait()

    async def scenario(fail: bool) -> list[int]:
        seen: list[int] = []

        async def output(n: int) -> None:
            await asyncio.sleep(0.01 * (n % 3))
            if fail and n == 4:
                raise RuntimeError("output 4 failed")
            seen.append(n)
            if n == 0:
                # An output made while the others are awaited is awaited too.
                SETTINGS.outputs.add(asyncio.ensure_future(output(100)))

        SETTINGS.outputs.clear()
        SETTINGS.outputs.update(asyncio.ensure_future(output(n)) for n in range(6))
        await sdk_stack.wait_for_rpcs()
        return seen

    assert sorted(asyncio.run(scenario(fail=False))) == [0, 1, 2, 3, 4, 5, 100]
    with pytest.raises(RuntimeError, match="output 4 failed"):
        asyncio.run(scenario(fail=True))
    SETTINGS.outputs.clear()


@pytest.mark.parametrize("linear", [True, False], ids=["after linear_output_wait", "around the SDK's own wait"])
def test_the_collector_is_paused_until_every_output_is_awaited(monkeypatch: pytest.MonkeyPatch, linear: bool) -> None:
    monkeypatch.setattr(sdk_stack, "wait_for_rpcs", sdk_stack.wait_for_rpcs)
    if linear:
        sdk.linear_output_wait()
    sdk.pause_cyclic_gc()
    assert not gc.isenabled()

    async def scenario(fail: bool) -> None:
        async def output() -> None:
            await asyncio.sleep(0.01)
            assert not gc.isenabled(), "the collector stays off while outputs resolve"
            if fail:
                raise RuntimeError("failed")

        SETTINGS.outputs.clear()
        SETTINGS.outputs.add(asyncio.ensure_future(output()))
        await sdk_stack.wait_for_rpcs()

    asyncio.run(scenario(fail=False))
    assert gc.isenabled()
    sdk.pause_cyclic_gc()
    with pytest.raises(RuntimeError, match="failed"):
        asyncio.run(scenario(fail=True))
    assert gc.isenabled(), "a failed program turns it back on too"
    SETTINGS.outputs.clear()


def test_a_program_run_by_the_engine_leaves_what_lives_to_its_exit_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not sdk.engine_runs(), "the unit tests talk to no engine"
    monkeypatch.setattr(sdk_stack, "wait_for_rpcs", sdk_stack.wait_for_rpcs)
    monkeypatch.setattr(sdk, "engine_runs", lambda: True)
    sdk.pause_cyclic_gc()
    SETTINGS.outputs.clear()
    try:
        asyncio.run(sdk_stack.wait_for_rpcs())
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def replaced(monkeypatch: pytest.MonkeyPatch, name: str, patch: Callable[[], None]) -> Any:
    """The SDK's own pulumi.runtime.resource.<name>, once `patch` has replaced it (put back after the test)."""
    original = getattr(sdk_resource, name)
    monkeypatch.setattr(sdk_resource, name, original)
    patch()
    assert getattr(sdk_resource, name) is not original
    return original


def test_registration_urns_are_the_sdks_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk_create_urn = replaced(monkeypatch, "create_urn", sdk.direct_registration_urns)
    monkeypatch.setattr(pulumi.runtime.settings, "get_stack", lambda: "fleet")
    monkeypatch.setattr(pulumi.runtime.settings, "get_project", lambda: "vllm-fleet")
    parent = "urn:pulumi:fleet::vllm-fleet::vllm-fleet:index:GpuHost::gpu-01"
    cases: list[tuple[Any, ...]] = [
        ("gpu-01", "vllm-fleet:index:GpuHost", None),
        ("gpu-01-tools", "command:remote:Command", parent),
        ("fleet", "pulumi:pulumi:Stack", ""),
        ("x", "t:m:T", None, "other-project", "other-stack"),
    ]

    async def values() -> list[tuple[Any, Any]]:
        async def data(output: pulumi.Output[str]) -> tuple[Any, bool, bool, set[Any]]:
            return (await output.future(), await output.is_known(), await output.is_secret(), await output.resources())

        pairs: list[tuple[Any, Any]] = [
            (await data(sdk_resource.create_urn(*c)), await data(sdk_create_urn(*c))) for c in cases
        ]
        # A part that is an output still goes to the SDK's own function.
        mixed = sdk_resource.create_urn(pulumi.Output.from_input("gpu-01"), "vllm-fleet:index:GpuHost")
        pairs.append((await mixed.future(), "urn:pulumi:fleet::vllm-fleet::vllm-fleet:index:GpuHost::gpu-01"))
        return pairs

    pairs = asyncio.run(values())
    for ours, theirs in pairs:
        assert ours == theirs
    assert (
        pairs[1][0][0] == "urn:pulumi:fleet::vllm-fleet::vllm-fleet:index:GpuHost$command:remote:Command::gpu-01-tools"
    )
    SETTINGS.outputs.clear()
