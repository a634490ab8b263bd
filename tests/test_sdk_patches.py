"""controller/sdk.py: the program's changes to the Pulumi SDK it runs in."""

from __future__ import annotations

import asyncio
import gc

import pulumi
import pytest
from pulumi.runtime import stack as sdk_stack
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
