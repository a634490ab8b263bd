"""components/outputs.py: an output of plain data is what Output.from_input makes of it, in one step."""

from __future__ import annotations

import asyncio
from typing import Any

import pulumi
from pulumi.runtime.settings import SETTINGS

from components.outputs import plain_output


def test_a_plain_output_is_what_from_input_makes() -> None:
    value: dict[str, Any] = {
        "execStart": ["/opt/vllm-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--port", 8000],
        "environment": {"NCCL_P2P_LEVEL": "SYS", "CUDA_VISIBLE_DEVICES": "0,1"},
        "gpus": (0, 1),
        "bench": None,
        "host": {"name": "gpu-01", "port": 22},
    }

    async def data(output: pulumi.Output[Any]) -> tuple[Any, bool, bool, set[Any]]:
        return (await output.future(), await output.is_known(), await output.is_secret(), await output.resources())

    async def both() -> tuple[Any, Any]:
        return await data(plain_output(value)), await data(pulumi.Output.from_input(value))

    loop = asyncio.new_event_loop()
    try:
        ours, sdks = loop.run_until_complete(both())
    finally:
        loop.close()
        SETTINGS.outputs.clear()
    assert ours == sdks
    assert ours == (value, True, False, set())
