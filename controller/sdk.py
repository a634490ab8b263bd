"""What this program changes about the Pulumi SDK it runs in, in one place: what a fleet's preview needs.

Each change stands in for code of one SDK release, which it names (`written_for`), and `install` makes it
only on that release: on another, the program runs on the SDK as it is (a fleet's preview slower) and says
so in one warning. `make bench ARGS=fleet` previews 256 and 1,024 hosts with each change switched off in
turn (VLLM_FLEET_SDK_OFF=<name>,...), and bench/RESULTS.md keeps the table that decided which stay: each
saves at least 5% of the CPU of one of those previews (on 2026-12-06: 20-45%; two changes that saved
3-4%, lighter stack traces and an early start of the command provider, were dropped).
tests/test_sdk_patches.py pins the SDK code each one stands in for, so a new SDK fails there before a run
meets it.
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

# VLLM_FLEET_SDK_OFF=quiet_debug_log,...: leave these changes out (how the bench measures each one's worth;
# quiet_debug_log's also keeps the SDK's debug messages for `pulumi preview --debug`).
OFF_ENV = "VLLM_FLEET_SDK_OFF"


@dataclass(frozen=True)
class Change:
    name: str
    # The SDK release whose code it stands in for, and that code: the functions it replaces or relies on
    # (tests/test_sdk_patches.py pins their source).
    written_for: str
    stands_in_for: tuple[str, ...]
    make: Callable[[], None]


# In the order `install` makes them.
CHANGES: list[Change] = []


def change(written_for: str, *stands_in_for: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register a change of the SDK, made by `install` on the release it was written for."""

    def register(make: Callable[[], None]) -> Callable[[], None]:
        CHANGES.append(Change(make.__name__, written_for, stands_in_for, make))
        return make

    return register


def sdk_version() -> str:
    return importlib.metadata.version("pulumi")


# What the first `install` of this process made: the changes are made once (the tests' mocks run the program
# again and again in one process).
_made: list[str] | None = None


def install(env: Mapping[str, str] | None = None) -> list[str]:
    """Make the changes, except those VLLM_FLEET_SDK_OFF names, on the SDK release each was written for; the
    ones written for another are left out, with one warning for them all. Returns the names of those made;
    a second call in the process makes none again."""
    global _made
    if _made is not None:
        return _made
    off = {name.strip() for name in (env if env is not None else os.environ).get(OFF_ENV, "").split(",")} - {""}
    unknown = off - {c.name for c in CHANGES}
    if unknown:
        pulumi.log.warn(f"{OFF_ENV} names no change of controller/sdk.py: {', '.join(sorted(unknown))}")
    version = sdk_version()
    wanted = [c for c in CHANGES if c.name not in off]
    stale = [c for c in wanted if c.written_for != version]
    if stale:
        pulumi.log.warn(
            f"controller/sdk.py: {', '.join(c.name for c in stale)} stand(s) in for code of Pulumi SDK "
            f"{' / '.join(sorted({c.written_for for c in stale}))}, and this is SDK {version}: left out, so a large "
            "fleet's preview may be slower; check each against this SDK (tests/test_sdk_patches.py) and update it"
        )
    made = [c for c in wanted if c not in stale]
    for c in made:
        c.make()
    _made = [c.name for c in made]
    return _made


@change("3.272.0", "pulumi.log.debug")
def quiet_debug_log() -> None:
    """Drop the SDK's own debug messages. The SDK sends each one to the engine as a blocking gRPC call,
    several per resource ("registering resource ...", "... prepared", "... successful"), which the engine
    shows only under `--debug`/`-v`. Without this change the 1,024-host preview took 73% more CPU and 62%
    more time (bench/RESULTS.md, History). This program itself logs nothing at debug level."""

    def debug(msg: str, resource: object = None, stream_id: object = None, ephemeral: object = None) -> None:
        del msg, resource, stream_id, ephemeral

    pulumi.log.debug = debug


@change("3.272.0", "pulumi.runtime.stack.wait_for_rpcs")
def linear_output_wait() -> None:
    """Replace the SDK's wait for outstanding outputs at the program's end (pulumi.runtime.stack
    .wait_for_rpcs) with one that waits on each output once. The SDK's loop calls `asyncio.wait(every
    pending output, FIRST_COMPLETED)` until none is left, which adds and removes a callback on every pending
    output each time one completes: quadratic in the outputs pending at once. Without this change the
    256-host preview took 16% more CPU and the 1,024-host one 38% (bench/RESULTS.md, History). This one
    awaits them in completion order
    (`asyncio.as_completed`), so an output that fails still stops the program at once with its own
    exception, and outputs made meanwhile are picked up by the next round, as before."""
    import asyncio

    from pulumi.runtime import stack as sdk_stack
    from pulumi.runtime.settings import SETTINGS, _get_rpc_manager

    async def wait_for_rpcs(await_all_outstanding_tasks: bool = True) -> None:
        rpc_manager = _get_rpc_manager()
        settings = SETTINGS
        while True:
            while len(rpc_manager.rpcs) > 0:
                await asyncio.sleep(0)
                try:
                    await rpc_manager.rpcs.pop()
                except Exception as exn:
                    if rpc_manager.unhandled_exception is not None:
                        cause = rpc_manager.unhandled_exception.with_traceback(rpc_manager.exception_traceback)
                        raise exn from cause
                    raise
            if rpc_manager.unhandled_exception is not None:
                raise rpc_manager.unhandled_exception.with_traceback(rpc_manager.exception_traceback)
            if await_all_outstanding_tasks:
                while True:
                    with settings.lock:
                        if len(settings.outputs) == 0:
                            break
                        pending = list(settings.outputs)
                        settings.outputs.clear()
                    for done in asyncio.as_completed(pending):
                        await done
            if len(rpc_manager.rpcs) == 0:
                break

    sdk_stack.wait_for_rpcs = wait_for_rpcs


@change("3.272.0", "pulumi.runtime.stack.run_pulumi_func")
def pause_cyclic_gc() -> None:
    """Turn Python's cyclic garbage collector off while the program declares and resolves its resources,
    and back on once every output is awaited (it wraps the SDK's wait_for_rpcs, the program's end: after
    linear_output_wait). Each resource leaves hundreds of objects (futures, outputs, their callbacks,
    protobuf messages) that live to the program's end, and each of the collector's passes walks all that are
    alive, freeing next to nothing, a cost that grows faster than the hosts: without this change the 256-host
    preview took 48% more CPU and the 1,024-host one 65% (bench/RESULTS.md, History). What the program drops,
    reference counting frees as before; the peak memory is ~5% higher."""
    from pulumi.runtime import stack as sdk_stack

    sdk_wait = sdk_stack.wait_for_rpcs

    async def wait_for_rpcs(await_all_outstanding_tasks: bool = True) -> None:
        try:
            await sdk_wait(await_all_outstanding_tasks)
        finally:
            # Under the tests' mocks the process goes on.
            resume_cyclic_gc(engine_runs())

    sdk_stack.wait_for_rpcs = wait_for_rpcs
    gc.disable()


def engine_runs() -> bool:
    """Whether this program talks to a real engine (its process ends with the program), not to mocks."""
    from pulumi.runtime.proto import resource_pb2_grpc
    from pulumi.runtime.settings import get_monitor

    return isinstance(get_monitor(), resource_pb2_grpc.ResourceMonitorStub)


def resume_cyclic_gc(process_ends: bool) -> None:
    """Turn the collector back on at the program's end (pause_cyclic_gc). When the process ends with the
    program (`engine_runs`), first move every object alive now out of the collector's reach
    (`gc.freeze`): they live until the process exits, and the interpreter's teardown would otherwise walk
    them all again. Under the tests' mocks the process goes on, and the collector simply resumes."""
    if process_ends:
        gc.freeze()
    gc.enable()


@change("3.272.0", "pulumi.runtime.resource.create_urn", "pulumi.runtime.resource.register_resource")
def direct_registration_urns() -> None:
    """Compute the URN that the SDK's registration makes for every resource as a string when its parts are
    strings. The SDK (pulumi.runtime.resource.register_resource) builds it for each resource through
    Output.from_input, an apply and Output.all (six outputs and their tasks) and uses it only when no engine
    runs (mocks): without this change the 1,024-host preview took 20% more CPU (the 256-host one 1%;
    bench/RESULTS.md, History). The value is the same
    string, known and not secret, as the SDK's own create_urn gives (which still serves any call with an
    output among its parts, and pulumi.create_urn is left alone)."""
    from pulumi.runtime import resource as sdk_resource

    sdk_create_urn = sdk_resource.create_urn

    def create_urn(
        name: Any, type_: Any, parent: Any = None, project: str | None = None, stack: str | None = None
    ) -> pulumi.Output[str]:
        if not (isinstance(name, str) and isinstance(type_, str) and (parent is None or isinstance(parent, str))):
            return sdk_create_urn(name, type_, parent, project, stack)
        if parent is not None:
            prefix = parent[0 : parent.rfind("::")] + "$"
        else:
            stack = pulumi.get_stack() if stack is None else stack
            project = pulumi.get_project() if project is None else project
            prefix = "urn:pulumi:" + stack + "::" + project + "::"
        return pulumi.Output.from_input(prefix + type_ + "::" + name)

    sdk_resource.create_urn = create_urn
