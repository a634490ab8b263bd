"""The TP8 load rate on a machine with 8 GPUs (issue 50; run through the `device` tool on an 8-GPU kind,
not part of `make test`). It feeds models/downtime.py's pre-warmed rate, which one H200 stood in for
until now (load_rate.py: 8 workers sharing one GPU).

    python3 -m bench.device.tp8_load --out DIR [--gpus 8] [--size GB | --max-gb GB] [--budget-s 420] [--dir DIR]

From the repository's root. It writes a synthetic safetensors checkpoint shaped like Kimi-K2.5 INT4's (64
shards; bf16 embedding, attention and shared experts, int32-packed int4 routed experts with bf16 group
scales; random bytes) and measures, with one process per GPU (rank r on GPU r, as vLLM's workers):

- h2d_links: each GPU's host-to-device link alone (pinned and pageable 1 GiB copies, one GPU at a time),
  then all of them at once;
- warm_tp: the checkpoint in the page cache, each process loading its 1/N slices as vLLM's default loader
  does (`safe_open`, `keys()`, `get_tensor` off the file's mmap, `narrow`, `copy_` into GPU parameters
  allocated beforehand), N processes at once; two passes when the budget allows;
- warm_readers: one reader per GPU reading whole shards (shard i to reader i mod N) from the page cache
  into pinned buffers and copying them to its GPU (the InstantTensor-style ceiling);
- after dropping the page cache: cold_readers_direct, the same readers with O_DIRECT on some shards, and
  cold_tp, the vLLM-style load of other shards, as many as the budget's time left reads at the disk's rate.

Only host-to-device copies: every byte goes from host memory to the GPU that keeps it, none from GPU to
GPU, so the rates carry over to PCIe cards with no NVLink (the reference server). The record also says
which GPUs these were, how they are linked (`nvidia-smi topo -m`, `nvidia-smi nvlink --status`) and each
one's PCIe link.

Size: `--size GB` writes that much; without it the checkpoint grows as it is written, in rounds of N
shards written at once: the shards of the next rounds are sized from the disk's free space and the write
rate measured so far, so that writing ends by the budget's write deadline; 120 GB at least where the disk
holds that and writes it within a minute past the deadline. After each round the page cache should hold
every shard written (mincore): RAM grows as it is used on these machines, so MemTotal at the start says
nothing; when it holds less and has stopped growing, writing stops there, and before the warm loads the
shards it dropped are read back into it (as a pre-warm does). GB is 1e9 bytes. The record, `<gpu>x<N>-tp<N>-load-<date>.json` in DIR, is
rewritten after each step, so a run cut short still says what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.metadata
import json
import multiprocessing
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.device import load_rate as base
from bench.device.checkpoint import (
    GB,
    SHARDS,
    ShardPlanner,
    expected_copy_bytes,
    leading_shards,
    next_shard_bytes,
    reader_shards,
    shard_name,
    write_shard_file,
)
from bench.device.gpu_facts import gpu_facts, gpu_slug

MIN_GB = 120.0  # issue 50: at least this much, where the disk holds it
KIND = "tp-load"  # what models/downtime.py looks for in a record
READ_CHUNK = 64 << 20  # a reader's read size and pinned buffer: a multiple of any block size O_DIRECT wants
ALIGN = 4096
PATHS = (
    "host-to-device only: every byte is copied from host memory to the GPU that keeps it; no GPU-to-GPU copy "
    "(no NCCL, no peer access), so NVLink plays no part and the rates carry over to PCIe cards"
)


def record_name(gpu_name: str, n: int, date: str) -> str:
    return f"{gpu_slug(gpu_name)}x{n}-tp{n}-load-{date}.json"


# ---- results into the record (pure) ---------------------------------------------------------------------


def gbps(size: float, seconds: float) -> float | None:
    return round(size / GB / seconds, 3) if seconds > 0 else None


def aggregate(results: Sequence[dict[str, Any]], checkpoint_bytes: int, gpus: Sequence[str] = ()) -> dict[str, Any]:
    """N processes' timings of one load (each: rank, start, end, copied_bytes and maybe read_bytes, on one
    clock) as a record: the load took from the first start to the last end, and the checkpoint's rate is
    its bytes over that; each GPU's own rate is what its process copied over its own time."""
    per = sorted(results, key=lambda r: r["rank"])
    if not per:
        raise ValueError("no process reported")
    wall = max(r["end"] for r in per) - min(r["start"] for r in per)
    copied = sum(r["copied_bytes"] for r in per)
    out: dict[str, Any] = {
        "processes": len(per),
        "checkpoint_gb": round(checkpoint_bytes / GB, 3),
        "seconds": round(wall, 3),
        "checkpoint_gbps": gbps(checkpoint_bytes, wall),
        "copied_gb_all_gpus": round(copied / GB, 3),
        "copied_gbps_all_gpus": gbps(copied, wall),
        "start_spread_s": round(max(r["start"] for r in per) - min(r["start"] for r in per), 3),
        "per_gpu": [
            {
                "rank": r["rank"],
                "gpu": gpus[r["rank"]] if r["rank"] < len(gpus) else None,
                "seconds": round(r["end"] - r["start"], 3),
                "copied_gb": round(r["copied_bytes"] / GB, 3),
                "gbps": gbps(r["copied_bytes"], r["end"] - r["start"]),
            }
            for r in per
        ],
    }
    if all("read_bytes" in r for r in per):
        out["read_gb_as_tensors_all_gpus"] = round(sum(r["read_bytes"] for r in per) / GB, 3)
    return out


def aggregate_links(results: Sequence[dict[str, Any]], gpus: Sequence[str] = ()) -> dict[str, Any]:
    """Each GPU's host-to-device rate alone (one GPU at a time), and all GPUs' together (bytes over the time
    from the first start to the last end)."""
    per = sorted(results, key=lambda r: r["rank"])
    alone = [{"rank": r["rank"], "gpu": gpus[r["rank"]] if r["rank"] < len(gpus) else None, **r["alone"]} for r in per]
    together: dict[str, Any] = {}
    for kind in ("pinned", "pageable"):
        runs = [r["together"][kind] for r in per]
        wall = max(x["end"] for x in runs) - min(x["start"] for x in runs)
        total = sum(x["bytes"] for x in runs)
        together[f"{kind}_gbps"] = gbps(total, wall)
        together[f"{kind}_per_gpu_gbps"] = [gbps(x["bytes"], x["end"] - x["start"]) for x in runs]
    return {"size_gib": per[0].get("size_gib"), "alone": alone, "together": together}


def slower_pass(passes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The pass the forecast uses: the slower one (a real swap's workers get one pass, whichever it is)."""
    return min(passes, key=lambda p: p.get("checkpoint_gbps") or 0.0)


def warm_tp_section(
    passes: Sequence[dict[str, Any]], resident_before: float | None, resident_after: float | None
) -> dict[str, Any]:
    """The record's `warm_tp`: the slower of the passes that ran without error, in full, and each pass's
    figures; whether the page cache held the checkpoint before and after (models/downtime.py wants it all)."""
    good = [p for p in passes if "errors" not in p]
    if not good:
        return {**passes[0], "resident_before": resident_before}
    return {
        **slower_pass(good),
        "checkpoint_gbps_is": f"the slower of {len(good)} pass(es), each a fresh load by the same processes",
        "passes": [{k: v for k, v in p.items() if k != "per_gpu"} for p in passes],
        "resident_before": resident_before,
        "resident_after": resident_after,
    }


def record_head(n: int, gpus: dict[str, Any], argv: Sequence[str], ran_as: str, now: float) -> dict[str, Any]:
    """What the record says before any step: what it measured, on which GPUs, by which command."""
    return {
        "what": f"a synthetic Kimi-K2.5-INT4-shaped checkpoint loaded by {n} processes, one per GPU, as vLLM's "
        "default loader does (TP slices), and by one reader per GPU into pinned buffers; GB = 1e9 bytes",
        "kind": KIND,
        "tp": n,
        "command": " ".join(["python3 -m bench.device.tp8_load", *argv]),
        "ran_as": ran_as,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "paths": PATHS,
        "gpus": gpus,
    }


def summary(record: dict[str, Any]) -> str:
    def get(*path: str) -> Any:
        value: Any = record
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    n = record.get("tp")
    rows = [
        ("pinned host->GPU, each GPU alone (min)", _least(get("h2d_links", "alone"), "pinned_gbps")),
        ("pinned host->GPU, all GPUs at once", get("h2d_links", "together", "pinned_gbps")),
        ("pageable host->GPU, all GPUs at once", get("h2d_links", "together", "pageable_gbps")),
        ("write + fsync, all writers", get("checkpoint", "sizing", "write_gbps")),
        (f"warm, TP{n} vLLM-style, checkpoint", get("warm_tp", "checkpoint_gbps")),
        (f"warm, TP{n} vLLM-style, copied", get("warm_tp", "copied_gbps_all_gpus")),
        (f"warm, {n} readers into pinned buffers", get("warm_readers", "checkpoint_gbps")),
        (f"cold, {n} readers O_DIRECT", get("cold_readers_direct", "checkpoint_gbps")),
        (f"cold, TP{n} vLLM-style, checkpoint", get("cold_tp", "checkpoint_gbps")),
    ]
    size = get("checkpoint", "gb")
    head = f"{get('gpus', 'count')} x {_first(get('gpus', 'names'))}, checkpoint {size} GB"
    return "\n".join([head, *(f"{label:<44} {value if value is not None else '-'} GB/s" for label, value in rows)])


def _first(values: Any) -> Any:
    return values[0] if isinstance(values, list) and values else None


def _least(rows: Any, key: str) -> float | None:
    values = [float(row[key]) for row in rows or [] if isinstance(row, dict) and row.get(key) is not None]
    return min(values) if values else None


# ---- the GPU side: one process per GPU, driven step by step ---------------------------------------------


def _clock() -> float:
    return time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine


def _pinned(torch: Any, size: int) -> tuple[Any, Any]:
    """A pinned host buffer of `size` bytes at a 4 KiB-aligned address (O_DIRECT reads into it), and a
    writable memoryview of it for os.preadv."""
    backing = torch.empty(size + ALIGN, dtype=torch.uint8, pin_memory=True)
    skip = -backing.data_ptr() % ALIGN
    buffer = backing[skip : skip + size]
    view = memoryview((ctypes.c_char * size).from_address(buffer.data_ptr())).cast("B")
    return buffer, view


def op_links(torch: Any, rank: int, n: int, barrier: Any, size: int, reps: int) -> dict[str, Any]:
    """This GPU's host-to-device copies alone (its turn among the N), then together with the others."""
    target = torch.empty(size, dtype=torch.uint8, device="cuda")
    sources = {"pinned": _pinned(torch, size)[0], "pageable": torch.empty(size, dtype=torch.uint8)}
    for source in sources.values():
        source.fill_(0x5A)
        target.copy_(source)  # warm-up: the first copy pins pages, maps the target
    torch.cuda.synchronize()
    alone: dict[str, Any] = {}
    for turn in range(n):
        barrier.wait(timeout=120)
        if turn == rank:
            for kind, source in sources.items():
                alone[f"{kind}_gbps"] = gbps(size, statistics.median(base.copy_seconds(torch, target, source, reps)))
    together: dict[str, Any] = {}
    for kind, source in sources.items():
        barrier.wait(timeout=120)
        start = _clock()
        for _ in range(reps):
            target.copy_(source)
        torch.cuda.synchronize()
        together[kind] = {"start": start, "end": _clock(), "bytes": size * reps}
    del target, sources
    torch.cuda.empty_cache()
    return {"rank": rank, "size_gib": round(size / 2**30, 3), "alone": alone, "together": together}


def op_tp_load(torch: Any, rank: int, n: int, barrier: Any, paths: list[str]) -> dict[str, Any]:
    """vLLM's default loader in rank `rank` of TP `n`: parameters allocated on the GPU first, then every
    shard opened with safe_open, every tensor read off its mmap and this rank's slice copied in."""
    files = [Path(p) for p in paths]
    params = base.gpu_params(files, rank, n, "tp")
    barrier.wait(timeout=300)
    start = _clock()
    read, copied, _ = base.lazy_load(files, params, rank, n, "tp")
    end = _clock()
    del params
    torch.cuda.empty_cache()
    return {"rank": rank, "start": start, "end": end, "read_bytes": read, "copied_bytes": copied}


def op_readers(torch: Any, rank: int, n: int, barrier: Any, paths: list[str], direct: bool) -> dict[str, Any]:
    """Whole shards read into two pinned buffers in turn (O_DIRECT: past the page cache), each block
    copied to this GPU on a stream while the next is read."""
    sizes = [os.path.getsize(p) for p in paths]
    device_buffer = torch.empty(max(sizes, default=0) + READ_CHUNK, dtype=torch.uint8, device="cuda")
    buffers = [_pinned(torch, READ_CHUNK) for _ in range(2)]
    done = [torch.cuda.Event(), torch.cuda.Event()]
    stream = torch.cuda.Stream()
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    barrier.wait(timeout=120)
    start = _clock()
    total = 0
    turn = 0
    for path in paths:
        fd = os.open(path, flags)
        try:
            offset = 0
            while True:
                buffer, view = buffers[turn % 2]
                done[turn % 2].synchronize()  # its last copy to the GPU has finished
                count = os.preadv(fd, [view], offset)
                if count <= 0:
                    break
                with torch.cuda.stream(stream):
                    device_buffer[offset : offset + count].copy_(buffer[:count], non_blocking=True)
                    done[turn % 2].record(stream)
                offset += count
                turn += 1
                if count < READ_CHUNK:
                    break
        finally:
            os.close(fd)
        total += offset
    stream.synchronize()
    end = _clock()
    del device_buffer, buffers
    torch.cuda.empty_cache()
    return {"rank": rank, "start": start, "end": end, "copied_bytes": total, "shards": len(paths)}


OPS: dict[str, Callable[..., dict[str, Any]]] = {"links": op_links, "tp_load": op_tp_load, "readers": op_readers}


def gpu_worker(rank: int, n: int, barrier: Any, conn: Any) -> None:
    """One GPU's process: CUDA up once, then the steps the parent sends, each answered with its result."""
    torch = base.torch_mod()
    torch.set_num_threads(1)  # vLLM's multiproc executor sets OMP_NUM_THREADS=1 in its workers
    torch.cuda.set_device(rank)
    torch.empty(1, device="cuda")
    conn.send({"rank": rank, "ready": True, "gpu": torch.cuda.get_device_name(rank)})
    while True:
        op, kwargs = conn.recv()
        if op == "stop":
            return
        try:
            conn.send(OPS[op](torch, rank, n, barrier, **kwargs))
        except Exception:
            with contextlib.suppress(Exception):
                barrier.abort()  # the others stop waiting for this one
            conn.send({"rank": rank, "error": traceback.format_exc()})


class GpuPool:
    """N spawned processes, rank r on GPU r, that run one step at a time together (a barrier starts each
    timed part at once). A step that fails in one of them leaves the barrier broken: the pool is started
    afresh before the next step."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        self.ready: list[dict[str, Any]] = []
        self.barrier: Any = None

    def start(self) -> None:
        # Kept on the pool: a spawned child opens the barrier's semaphores by name when it unpickles its
        # arguments, after start() returns; a barrier collected by then has unlinked them (the one-GPU
        # rehearsal of 2026-12-06 died so: FileNotFoundError in SemLock._rebuild).
        self.barrier = self.context.Barrier(self.n)
        for rank in range(self.n):
            parent, child = self.context.Pipe()
            process = self.context.Process(target=gpu_worker, args=(rank, self.n, self.barrier, child), daemon=True)
            process.start()
            self.processes.append(process)
            self.conns.append(parent)

    def wait_ready(self, timeout: float = 180) -> list[dict[str, Any]]:
        self.ready = [self._receive(conn, timeout) for conn in self.conns]
        return self.ready

    def run(self, op: str, per_rank: Sequence[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
        for conn, kwargs in zip(self.conns, per_rank, strict=True):
            conn.send((op, kwargs))
        results = [self._receive(conn, timeout) for conn in self.conns]
        if any("error" in r for r in results):
            self.restart()
        return results

    def _receive(self, conn: Any, timeout: float) -> dict[str, Any]:
        if not conn.poll(timeout):
            return {"error": f"no answer within {timeout:.0f} s"}
        answer: dict[str, Any] = conn.recv()
        return answer

    def stop(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", {}))
        for process in self.processes:
            process.join(timeout=20)
            if process.is_alive():
                process.kill()
        self.processes, self.conns = [], []

    def restart(self) -> None:
        for process in self.processes:
            process.kill()
        self.processes, self.conns = [], []
        self.start()
        self.wait_ready()


def errors_of(results: Sequence[dict[str, Any]]) -> list[str]:
    return [str(r["error"]) for r in results if "error" in r]


# ---- the machine ----------------------------------------------------------------------------------------


def host_facts(directory: Path) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for package in ("torch", "safetensors", "numpy"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        **base.machine_facts(directory),
        "numa_nodes": len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))),
        **versions,
        "pid1": Path("/proc/1/comm").read_text().strip() if Path("/proc/1/comm").exists() else None,
    }


def read_back(paths: Sequence[Path]) -> dict[str, Any]:
    """The shards the page cache does not hold in full, read into it (as host/tools/prewarm.py does before a swap)."""
    missing = [p for p in paths if (base.resident_fraction([p]) or 0.0) < 0.999]
    if not missing:
        return {"shards_read": 0}
    return {"shards_read": len(missing), **base.buffered_read_rate(missing)}


def memory_now() -> dict[str, float]:
    info = base.meminfo()
    return {
        "mem_total_gib": round(info["MemTotal"] / 2**20, 1),
        "mem_available_gib": round(info["MemAvailable"] / 2**20, 1),
        "cached_gib": round(info["Cached"] / 2**20, 1),
    }


def disk_free(directory: Path) -> float:
    stat = os.statvfs(directory)
    return float(stat.f_bavail * stat.f_frsize)


# ---- the run --------------------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    directory: Path
    paths: list[Path]
    sizes: list[int]

    @property
    def bytes(self) -> int:
        return sum(self.sizes)

    def headers(self, indices: Sequence[int] | None = None) -> list[dict[str, Any]]:
        chosen = range(len(self.paths)) if indices is None else indices
        return [base.read_header(self.paths[i])[1] for i in chosen]


def write_checkpoint(
    directory: Path,
    n_writers: int,
    size_gb: float | None,
    write_deadline: float,
    dims: base.Dims = base.KIMI,
    minimum_gb: float = MIN_GB,
    max_gb: float | None = None,
    reserve_gb: float = 8.0,
    log: Callable[[str], None] = print,
) -> tuple[Checkpoint, dict[str, Any]]:
    """SHARDS shards written in rounds of `n_writers` at once; the size fixed (`size_gb`) or grown as the
    disk, the time left and the page cache allow, to `max_gb` at most (see the module's docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    planner = ShardPlanner(dims)
    reserve = max(reserve_gb * GB, 0.03 * disk_free(directory))

    def room(written: float) -> float:
        """What may still be written: the disk's free space less the reserve, and what max_gb leaves."""
        disk = disk_free(directory) - reserve
        return disk if max_gb is None else min(disk, max_gb * GB - written)

    # Fixed, or the first round's guess: all the room there is (the measured write rate corrects it).
    shard_bytes = size_gb * GB / SHARDS if size_gb is not None else max(room(0), 0) / SHARDS
    sizing: dict[str, Any] = {
        "mode": "fixed (--size)" if size_gb is not None else "grown as written",
        "requested_gb": size_gb,
        "minimum_gb": minimum_gb if size_gb is None else None,
        "max_gb": max_gb,
        "disk_free_gb_at_start": round(disk_free(directory) / GB, 1),
        "disk_reserve_gb": round(reserve / GB, 1),
        "rounds": [],
        "stopped_by": "all shards written",
    }
    paths: list[Path] = []
    sizes: list[int] = []
    write_seconds = 0.0
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=n_writers, mp_context=context) as pool:
        while len(paths) < SHARDS:
            count = min(n_writers, SHARDS - len(paths))
            left = room(sum(sizes))
            if left <= 0 or (size_gb is not None and shard_bytes * count > left):
                sizing["stopped_by"] = (
                    f"room: {left / GB:.1f} GB left (disk less reserve, or --max-gb) for {count} more shards"
                )
                break
            plan = [planner.next_shard(shard_bytes) for _ in range(count)]
            names = [directory / shard_name(len(paths) + i) for i in range(count)]
            began = time.monotonic()
            futures = [
                pool.submit(write_shard_file, str(path), tensors, len(paths) + i)
                for i, (path, tensors) in enumerate(zip(names, plan, strict=True))
            ]
            done = [future.result() for future in futures]
            seconds = time.monotonic() - began
            write_seconds += seconds
            paths += names
            sizes += [d["bytes"] for d in done]
            resident = base.resident_fraction(paths)
            round_bytes = sum(d["bytes"] for d in done)
            sizing["rounds"].append(
                {
                    "shards": count,
                    "gb": round(round_bytes / GB, 3),
                    "seconds": round(seconds, 3),
                    "gbps": gbps(round_bytes, seconds),
                    "resident_all_written": resident,
                    **memory_now(),
                }
            )
            log(f"    wrote {len(paths)} shards, {sum(sizes) / GB:.1f} GB; round {json.dumps(sizing['rounds'][-1])}")
            # RAM grows as it is used on these machines: pages dropped while it grew come back before the warm
            # loads (warm_tp's prewarm); only when it no longer grows is the page cache full.
            grew = len(sizing["rounds"]) < 2 or (
                sizing["rounds"][-1]["mem_total_gib"] > sizing["rounds"][-2]["mem_total_gib"] + 1
            )
            if resident is not None and resident < 0.98 and not grew:
                sizing["stopped_by"] = (
                    f"the page cache: it held {resident:.1%} of the {len(paths)} shards written and RAM no longer grew"
                )
                break
            if size_gb is None and len(paths) < SHARDS:
                shard_bytes = next_shard_bytes(
                    sum(sizes),
                    SHARDS - len(paths),
                    write_deadline - time.monotonic(),
                    sum(sizes) / write_seconds,
                    room(sum(sizes)),
                    minimum_gb * GB,
                )
    total = sum(sizes)
    sizing["write_gbps"] = gbps(total, write_seconds)
    sizing["write_seconds"] = round(write_seconds, 3)
    return Checkpoint(directory, paths, sizes), sizing


def main(argv: list[str] | None = None, dims: base.Dims = base.KIMI) -> int:
    """The run; `dims` smaller than Kimi's only in the CPU test of this flow (tests/test_tp8_load.py)."""
    parser = argparse.ArgumentParser(description="TP-N load rates on N GPUs, as vLLM's default loader moves weights")
    parser.add_argument("--out", required=True, help="a directory: the record is written there under its own name")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs, one process each; the TP size")
    parser.add_argument("--size", type=float, help="checkpoint GB (default: grown from the disk and time left)")
    parser.add_argument("--max-gb", type=float, help="without --size: grow the checkpoint to this at most")
    parser.add_argument("--budget-s", type=float, default=420.0, help="optional steps are skipped past this")
    parser.add_argument("--after-write-s", type=float, default=170.0, help="time kept for the loads after writing")
    parser.add_argument(
        "--dir", help="where to write the shards (default: the first disk-backed of /var/tmp, /root, ...)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the shards afterwards")
    args = parser.parse_args(argv)
    began = time.monotonic()
    budget_s = float(args.budget_s)
    n = args.gpus
    directory = base.pick_dir(args.dir, (args.size or 1.0) * GB)
    directory = directory.with_name("vllm-fleet-tp-load")
    directory.mkdir(parents=True, exist_ok=True)
    gpus = gpu_facts()
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out = Path(args.out) / record_name(gpus["names"][0] if gpus["names"] else "gpu", n, date)
    argv_used = sys.argv[1:] if argv is None else argv
    record = record_head(n, gpus, argv_used, " ".join([sys.executable, *sys.argv]), time.time())

    steps = base.Steps(record, out, began, budget_s, echo=800)
    save, step, left = steps.save, steps.step, steps.left

    if gpus["count"] < n:
        record["error"] = f"{n} GPUs asked for, nvidia-smi lists {gpus['count']}"
        save()
        print(record["error"], file=sys.stderr)
        return 1
    uuids = gpus["uuids"][:n]
    step("host", lambda: host_facts(directory))
    pool = GpuPool(n)
    pool.start()  # CUDA comes up in the N processes while the checkpoint is written
    checkpoint = Checkpoint(directory, [], [])

    def write() -> dict[str, Any]:
        nonlocal checkpoint
        checkpoint, sizing = write_checkpoint(
            directory,
            n,
            args.size,
            began + budget_s - float(args.after_write_s),
            dims=dims,
            max_gb=args.max_gb,
            log=lambda m: print(m, flush=True),
        )
        return {
            "layout": "Kimi-K2.5 INT4-like: bf16 embedding/attention/shared experts, int32-packed routed experts "
            "+ bf16 group scales; random bytes",
            "shards": len(checkpoint.paths),
            "gb": round(checkpoint.bytes / GB, 3),
            "tensors": sum(len(h) for h in checkpoint.headers()),
            "shard_gb": [round(s / GB, 3) for s in checkpoint.sizes],
            "sizing": sizing,
        }

    step("checkpoint", write)
    ready = pool.wait_ready()
    record["workers"] = ready
    if errors_of(ready):
        save()
        pool.stop()
        return 1

    def links() -> dict[str, Any]:
        results = pool.run("links", [{"size": 1 << 30, "reps": 5}] * n, timeout=300)
        if errors_of(results):
            return {"errors": errors_of(results)}
        return aggregate_links(results, uuids)

    step("h2d_links", links, 20)

    def tp_load(chosen: list[Path]) -> dict[str, Any]:
        """One vLLM-style load of `chosen` by the N processes; whether each copied what slice_plan says."""
        total = sum(os.path.getsize(p) for p in chosen)
        results = pool.run("tp_load", [{"paths": [str(p) for p in chosen]}] * n, timeout=max(left(), 60))
        if errors_of(results):
            return {"errors": errors_of(results)}
        chosen_headers = [base.read_header(p)[1] for p in chosen]
        expected = [expected_copy_bytes(chosen_headers, rank, n) for rank in range(n)]
        copied = [r["copied_bytes"] for r in sorted(results, key=lambda r: r["rank"])]
        return {**aggregate(results, total, uuids), "shards": len(chosen), "slices_as_planned": copied == expected}

    def warm_tp() -> dict[str, Any]:
        prewarm = read_back(checkpoint.paths)
        resident = base.resident_fraction(checkpoint.paths)
        passes = [tp_load(checkpoint.paths)]
        # A second pass where the time left holds it and the cold steps' share after it.
        if "errors" not in passes[0] and left() > 2 * passes[0]["seconds"] + 120:
            passes.append(tp_load(checkpoint.paths))
        return warm_tp_section(passes, resident, base.resident_fraction(checkpoint.paths)) | {"prewarm": prewarm}

    step("warm_tp", warm_tp, 30)

    def readers(chosen: list[Path], direct: bool) -> dict[str, Any]:
        shares = reader_shards(chosen, n)
        results = pool.run(
            "readers", [{"paths": [str(p) for p in share], "direct": direct} for share in shares], timeout=300
        )
        if errors_of(results):
            return {"errors": errors_of(results)}
        total = sum(os.path.getsize(p) for p in chosen)
        source = "O_DIRECT reads (no page cache)" if direct else "buffered reads from the page cache"
        return {**aggregate(results, total, uuids), "shards": len(chosen), "source": source}

    def warm_readers() -> dict[str, Any]:
        return {**readers(checkpoint.paths, False), "resident_before": base.resident_fraction(checkpoint.paths)}

    step("warm_readers", warm_readers, 15)
    drop = step("drop_caches", lambda: base.drop_caches(checkpoint.paths), 10)
    disk_rate = (record["checkpoint"].get("sizing", {}).get("write_gbps") or 0.5) * GB
    cold_ok = drop.get("ok") is True
    # What is left goes to the two cold steps, half each, read at the disk's write rate (reads are rarely
    # slower): the readers from the checkpoint's first half, the vLLM-style load from its second.
    cold_budget = max(left() - 25, 0) / 2 * disk_rate
    half = len(checkpoint.paths) // 2
    direct_paths = checkpoint.paths[: leading_shards(checkpoint.sizes[:half], cold_budget, n)]
    tp_paths = checkpoint.paths[half : half + leading_shards(checkpoint.sizes[half:], cold_budget)]

    def cold(chosen: list[Path], run: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def go() -> dict[str, Any]:
            if not cold_ok:
                return {"skipped": "the page cache could not be dropped here", "drop": drop}
            if not chosen:
                return {"skipped": "no shard fits in the time left at the disk's rate"}
            resident = base.resident_fraction(chosen)
            return {**run(), "resident_before": resident, "shard_indices": [checkpoint.paths.index(p) for p in chosen]}

        return go

    step("cold_readers_direct", cold(direct_paths, lambda: readers(direct_paths, True)))
    step("cold_tp", cold(tp_paths, lambda: tp_load(tp_paths)))
    pool.stop()
    record["mem_at_end"] = memory_now()
    steps.finish(directory, args.keep)
    print(summary(record))
    print(f"record: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
