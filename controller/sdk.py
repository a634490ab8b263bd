"""What this program changes about the Pulumi SDK it runs in, in one place, each with its reason."""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping

import pulumi


def quiet_debug_log(env: Mapping[str, str] | None = None) -> bool:
    """Drop the SDK's own debug messages (VLLM_FLEET_SDK_DEBUG=1 keeps them). The SDK sends each one to
    the engine as a blocking gRPC call, several per resource ("registering resource ...", "... prepared",
    "... successful"), which the engine shows only under `--debug`/`-v`: at fleet scale they were the
    program's largest cost (a 32-host preview: 3,276 calls, 7.7 s blocked in them; make bench ARGS=fleet).
    This program itself logs nothing at debug level."""
    if (env if env is not None else os.environ).get("VLLM_FLEET_SDK_DEBUG") == "1":
        return False

    def debug(msg: str, resource: object = None, stream_id: object = None, ephemeral: object = None) -> None:
        del msg, resource, stream_id, ephemeral

    pulumi.log.debug = debug
    return True


def pause_cyclic_gc() -> None:
    """Turn Python's cyclic garbage collector off while the program declares and resolves its resources;
    linear_output_wait's wait turns it back on once every output is awaited. Each resource leaves hundreds
    of objects (futures, outputs, their callbacks, protobuf messages) that live to the program's end, and
    each of the collector's passes walks all that are alive, freeing next to nothing: a 256-host preview
    spent 12 of the program's 21 CPU s in 3,870 collections (13 of them full), a cost that grew faster than
    the hosts. What the program drops, reference counting frees as before; the 1,024-host preview's peak
    memory grew by a few percent (make bench ARGS=fleet)."""
    gc.disable()


def linear_output_wait() -> None:
    """Replace the SDK's wait for outstanding outputs at the program's end (pulumi.runtime.stack
    .wait_for_rpcs, SDK 3.272) with one that waits on each output once. The SDK's loop calls
    `asyncio.wait(every pending output, FIRST_COMPLETED)` until none is left, which adds and removes a
    callback on every pending output each time one completes: quadratic in the resources. A 128-host
    preview spent 58 s of its 60 s of program CPU there (238 waits over ~2,400 outputs). This one awaits
    them in completion order (`asyncio.as_completed`), so an output that fails still stops the program at
    once with its own exception, and outputs made meanwhile are picked up by the next round, as before."""
    import asyncio

    from pulumi.runtime import stack as sdk_stack
    from pulumi.runtime.settings import SETTINGS, _get_rpc_manager

    async def wait_for_rpcs(await_all_outstanding_tasks: bool = True) -> None:
        try:
            await wait(await_all_outstanding_tasks)
        finally:
            # The program's end (pause_cyclic_gc): under the tests' mocks the process goes on.
            gc.enable()

    async def wait(await_all_outstanding_tasks: bool) -> None:
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
