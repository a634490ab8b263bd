"""The synthetic checkpoint that tp8_load.py loads, and each TP rank's share of it: pure functions and a
shard writer that needs no torch, so the CPU tests (tests/test_tp8_load.py) run them on a checkpoint of a
few MB with the same names and shapes, smaller dimensions.

The layout is load_rate.py's (Kimi-K2.5 INT4: bf16 embedding, MLA attention and shared experts; routed
experts as compressed-tensors int32-packed int4 weights with bf16 group scales), cut into 64 shards as
Kimi's checkpoint is. GB is 1e9 bytes.
"""

from __future__ import annotations

import importlib
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.device import load_rate as base

GB = base.GB
SHARDS = 64  # Kimi-K2.5 INT4's checkpoint: 64 safetensors shards
Tensor = base.Tensor


class ShardPlanner:
    """Cuts the layout into shards one at a time, each as large as asked (one tensor more at most): the
    checkpoint's tensors continue where the last shard stopped, so shards can be sized as writing goes."""

    def __init__(self, dims: base.Dims = base.KIMI) -> None:
        self._tensors: Iterator[Tensor] = base.layout(dims)

    def next_shard(self, target_bytes: float) -> list[Tensor]:
        shard: list[Tensor] = []
        size = 0
        while not shard or size < target_bytes:
            tensor = next(self._tensors)
            shard.append(tensor)
            size += base.nbytes(tensor[1], tensor[2])
        return shard


def shard_name(index: int, count: int = SHARDS) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


@dataclass(frozen=True)
class Slice:
    """What rank `rank` of a TP group copies of one tensor: `length` rows of dimension `dim` from `start`,
    or the whole tensor (`dim` None: replicated, as vLLM keeps norms, the router and MLA's down-projections)."""

    name: str
    dim: int | None
    start: int
    length: int
    nbytes: int


def slice_plan(header: dict[str, Any], rank: int, n: int) -> list[Slice]:
    """Rank `rank`'s slices of a shard's tensors (its header, as `load_rate.read_header` gives it), in the
    order `load_rate.lazy_load` narrows them: vLLM's column-parallel layers split the output dimension,
    row-parallel ones the input; each split must be even."""
    plan = []
    for name, info in sorted(header.items()):
        shape = list(info["shape"])
        dim = base.tp_dim(name)
        size = base.nbytes(info["dtype"], shape)
        if dim is None or n == 1:
            plan.append(Slice(name, None, 0, shape[0] if shape else 1, size))
            continue
        if shape[dim] % n:
            raise ValueError(f"{name}: dimension {dim} of {shape} does not split into {n} equal slices")
        width = shape[dim] // n
        plan.append(Slice(name, dim, rank * width, width, size // n))
    return plan


def expected_copy_bytes(headers: Sequence[dict[str, Any]], rank: int, n: int) -> int:
    return sum(s.nbytes for header in headers for s in slice_plan(header, rank, n))


def reader_shards(paths: Sequence[Path], n: int) -> list[list[Path]]:
    """One reader per GPU: shard i goes to reader i mod n, so each reads whole shards and every shard is read once."""
    return [list(paths[rank::n]) for rank in range(n)]


def leading_shards(sizes: Sequence[int], byte_budget: float, multiple: int = 1) -> int:
    """How many shards from the front fit in `byte_budget`, counted in whole multiples of `multiple` (so
    that N readers get as many shards each); 0 when not even one multiple fits."""
    count = total = 0
    while count + multiple <= len(sizes):
        more = sum(sizes[count : count + multiple])
        if total + more > byte_budget:
            break
        total += more
        count += multiple
    return count


def next_shard_bytes(
    written: float,
    shards_left: int,
    seconds_left: float,
    write_rate: float,
    disk_room: float,
    minimum: float,
    grace_s: float = 60.0,
) -> float:
    """The size of each of the shards still to write: the checkpoint grows by what the write rate measured so
    far writes in the time left, and no more than the disk's room (its free space less a reserve, counted
    from now); to `minimum` in all where that is written within `grace_s` past the time left (a disk too
    slow for it leaves the loads their time: a smaller checkpoint measured beats a large one not loaded)."""
    if shards_left <= 0:
        return 0.0
    affordable = write_rate * max(seconds_left, 0.0)
    wanted = max(affordable, min(minimum - written, write_rate * max(seconds_left + grace_s, 0.0)))
    return max(min(wanted, disk_room), 0.0) / shards_left


def random_bytes(size: int, seed: int) -> Iterator[memoryview]:
    """`size` random bytes (a multiple of 8) in blocks: numpy's PCG64 where numpy is (GB/s), else `random`."""
    block = 32 << 20
    try:
        numpy = importlib.import_module("numpy")
    except ImportError:
        numpy = None
    generator: Any = numpy.random.PCG64(seed) if numpy is not None else random.Random(seed)
    left = size
    while left:
        count = min(left, block)
        if numpy is not None:
            yield memoryview(generator.random_raw(count // 8)).cast("B")
        else:
            yield memoryview(generator.randbytes(count))
        left -= count


def write_shard_file(path: str, tensors: list[Tensor], seed: int) -> dict[str, Any]:
    """A safetensors file: 8-byte little-endian header length, the JSON header padded to 8, the tensors'
    bytes back to back; fsynced, so its pages stay cached but clean (a drop of the page cache frees them)."""
    started = time.monotonic()
    head, offset = base.safetensors_head(tensors)
    with open(path, "wb") as handle:
        handle.write(head)
        # Every tensor's size is a multiple of 4 (bf16 pairs, int32, f32): pad the random stream to 8.
        written = 0
        for block in random_bytes(offset + (-offset % 8), seed):
            piece = block[: offset - written]
            handle.write(piece)
            written += len(piece)
        handle.flush()
        os.fsync(handle.fileno())
    return {"path": path, "bytes": len(head) + offset, "seconds": round(time.monotonic() - started, 3)}
