"""Outputs of values that hold no outputs, made in one step."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import pulumi

T = TypeVar("T")


def plain_output(value: T) -> pulumi.Output[T]:
    """An output of `value`, known and not secret, for a dict or list that holds no outputs (a deployment's
    launch, its report's entry). Output.from_input lifts such a value element by element, an output and
    its tasks for each (a reference launch has about 45), and gathers them again: a tenth of the
    program's work in a fleet preview (make bench ARGS=fleet). A plain string or number needs none of
    this: Output.from_input makes it in one step already."""
    resolved: asyncio.Future[T] = asyncio.Future()
    resolved.set_result(value)
    known: asyncio.Future[bool] = asyncio.Future()
    known.set_result(True)
    return pulumi.Output(set(), resolved, known)
