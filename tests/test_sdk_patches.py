"""controller/sdk.py: the program's changes to the Pulumi SDK it runs in."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import threading
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_command
import pytest
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import settings
from pulumi.runtime import stack as sdk_stack
from pulumi.runtime.proto import resource_pb2, resource_pb2_grpc
from pulumi.runtime.settings import SETTINGS

from controller import sdk


def test_sdk_debug_messages_are_dropped_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulumi.log, "debug", pulumi.log.debug)
    original = pulumi.log.debug
    assert sdk.quiet_debug_log({"VLLM_FLEET_SDK_DEBUG": "1"}) is False
    assert pulumi.log.debug is original
    assert sdk.quiet_debug_log({}) is True
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


def test_the_collector_is_paused_until_every_output_is_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_stack, "wait_for_rpcs", sdk_stack.wait_for_rpcs)
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
    sdk.linear_output_wait()
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


def test_stack_traces_are_the_sdks_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk_stack_trace = replaced(monkeypatch, "_get_stack_trace", sdk.lighter_stack_traces)
    traces: list[tuple[Any, Any]] = []

    # Resource, CustomResource, the concrete class: three constructors deep, as the SDK expects.
    class Base:
        def __init__(self) -> None:
            traces.append((sdk_resource._get_stack_trace(), sdk_stack_trace()))

    class Custom(Base):
        def __init__(self) -> None:
            super().__init__()

    class Concrete(Custom):
        def __init__(self) -> None:
            super().__init__()

    def declare(depth: int) -> None:
        if depth:
            declare(depth - 1)
        else:
            Concrete()

    declare(5)
    Base()  # fewer than three constructors: no frames
    (ours, theirs), (ours_short, theirs_short) = traces
    assert ours == theirs and len(ours.frames) > 5
    assert ours.frames[0].pc.uri == pathlib.Path(__file__).as_uri()
    assert ours_short == theirs_short


class RecordingMonitor(resource_pb2_grpc.ResourceMonitorStub):
    """The engine's resource monitor as the program's gRPC stub, recording the invokes it is sent."""

    def __init__(self) -> None:
        self.invokes: list[resource_pb2.ResourceInvokeRequest] = []
        self.sent = threading.Event()

    def Invoke(self, request: resource_pb2.ResourceInvokeRequest) -> None:  # gRPC's name
        self.invokes.append(request)
        self.sent.set()


def test_the_command_provider_is_asked_for_early_as_every_command_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = RecordingMonitor()
    monkeypatch.setattr(settings, "get_monitor", lambda: monitor)
    sdk.start_command_provider()
    assert monitor.sent.wait(5), "no request reached the engine"
    (request,) = monitor.invokes
    assert request.tok == "command:local:run" and dict(request.args) == {"command": "true"}
    # The version every Command's registration names (the SDK's): the engine keys its default provider by
    # it, and another version would add a provider resource to the stack.
    assert request.version == pulumi_command._utilities.get_version() != ""  # type: ignore[no-untyped-call]


def test_under_the_mocks_no_provider_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []
    monkeypatch.setattr(threading, "Thread", lambda *args, **kwargs: asked.append(kwargs))
    sdk.start_command_provider()
    assert asked == []
