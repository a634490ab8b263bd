"""How fast weights go from safetensors shards into GPU memory the way vLLM's default loader moves them
(run through the `device` tool; not part of `make test`, which has no GPU). It feeds models/downtime.py.

    python3 bench/device/load_rate.py OUT.json [--dir DIR] [--shards 4] [--shard-gb 4] [--budget-s 420]

It writes shards shaped like Kimi-K2.5 INT4's checkpoint (bf16 embedding, MLA attention and shared
experts; routed experts as compressed-tensors int32-packed weights with bf16 group scales; every
tensor's bytes random), then loads them as vLLM's lazy strategy does: `safe_open(framework="pt")`,
`f.keys()`, `f.get_tensor(name)` (a view of the file's mmap) and `param.copy_(tensor)` into a GPU
tensor allocated beforehand (a weight loader's copy; also once with `.to("cuda")`). Cases:

- warm: one process, every page already in the page cache (the files were just written and read once);
- tp4 / tp8: 4 or 8 processes at once, as a TP engine's workers: each opens every shard, reads every
  tensor and copies its 1/N slice (dim 0 of column-parallel weights, dim 1 of row-parallel ones; small
  and replicated tensors whole) into the one GPU this machine has; also 8 processes each copying a
  disjoint 1/8 of the tensors whole;
- cold: the same loads after `echo 1 > /proc/sys/vm/drop_caches` (checked with mincore), one process
  and 8 (tp8), and one process with a thread that reads the files ahead (vLLM's `prefetch` strategy);
  plus a loader that reads each shard with O_DIRECT into an aligned buffer and copies from there.

Also the disk's raw sequential read rate (O_DIRECT and buffered after a cache drop; `dd` on one
shard), the write rate, the pinned and pageable host-to-GPU copy ceilings, and the host: CPUs, RAM,
GPU, driver, PCIe link, torch, safetensors, kernel, the filesystem of the shards' directory.
GB is 1e9 bytes throughout. The record in OUT.json is rewritten after each step, so a run cut short
still says what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import itertools
import json
import mmap
import multiprocessing
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GB = 1e9
CHUNK = 64 << 20  # read size for raw and O_DIRECT reads; a multiple of any block size


@dataclass(frozen=True)
class Dims:
    """A DeepSeek-V3-architecture model's dimensions (KIMI: Kimi-K2.5's). Smaller ones make a checkpoint of
    the same names and shapes in a few MB (the CPU tests of tp8_load.py)."""

    hidden: int
    vocab: int
    q_lora: int
    kv_lora: int
    rope: int
    heads: int
    nope: int
    v_head: int
    moe_inter: int
    experts: int
    group: int  # int4 weights' scale group


KIMI = Dims(
    hidden=7168, vocab=163840, q_lora=1536, kv_lora=512, rope=64, heads=64, nope=128, v_head=128,
    moe_inter=2048, experts=384, group=32,
)  # fmt: skip
ITEM = {"BF16": 2, "F32": 4, "I32": 4}
Tensor = tuple[str, str, list[int]]  # name, safetensors dtype, shape


def torch_mod() -> Any:
    return importlib.import_module("torch")


def safe_open_fn() -> Any:
    return importlib.import_module("safetensors").safe_open


def layout(d: Dims = KIMI) -> Iterator[Tensor]:
    """Tensors in checkpoint order, without end: the embedding, then layer after layer."""
    yield "model.embed_tokens.weight", "BF16", [d.vocab, d.hidden]
    layer = 0
    while True:
        p = f"model.layers.{layer}."
        yield p + "input_layernorm.weight", "BF16", [d.hidden]
        yield p + "self_attn.q_a_proj.weight", "BF16", [d.q_lora, d.hidden]
        yield p + "self_attn.q_a_layernorm.weight", "BF16", [d.q_lora]
        yield p + "self_attn.q_b_proj.weight", "BF16", [d.heads * (d.nope + d.rope), d.q_lora]
        yield p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", [d.kv_lora + d.rope, d.hidden]
        yield p + "self_attn.kv_a_layernorm.weight", "BF16", [d.kv_lora]
        yield p + "self_attn.kv_b_proj.weight", "BF16", [d.heads * (d.nope + d.v_head), d.kv_lora]
        yield p + "self_attn.o_proj.weight", "BF16", [d.hidden, d.heads * d.v_head]
        yield p + "post_attention_layernorm.weight", "BF16", [d.hidden]
        yield p + "mlp.gate.weight", "BF16", [d.experts, d.hidden]
        yield p + "mlp.gate.e_score_correction_bias", "F32", [d.experts]
        projections = (
            ("gate_proj", d.moe_inter, d.hidden),
            ("up_proj", d.moe_inter, d.hidden),
            ("down_proj", d.hidden, d.moe_inter),
        )
        for proj, rows, cols in projections:
            yield p + f"mlp.shared_experts.{proj}.weight", "BF16", [rows, cols]
        for expert in range(d.experts):
            for proj, rows, cols in projections:
                q = p + f"mlp.experts.{expert}.{proj}."
                yield q + "weight_packed", "I32", [rows, cols // 8]
                yield q + "weight_scale", "BF16", [rows, cols // d.group]
                yield q + "weight_shape", "I32", [2]
        layer += 1


def tp_dim(name: str) -> int | None:
    """The dimension a TP worker slices (vLLM: column-parallel on the output, row-parallel on the input)."""
    if name.endswith(("weight_shape", "layernorm.weight", "e_score_correction_bias", "mlp.gate.weight")):
        return None
    if "q_a_proj" in name or "kv_a_proj_with_mqa" in name:
        return None  # replicated in vLLM's DeepSeek-V3 MLA
    if "o_proj" in name or "down_proj" in name:
        return 1
    return 0  # embed_tokens (vocab-parallel), q_b_proj, kv_b_proj, gate_proj, up_proj


def nbytes(dtype: str, shape: list[int]) -> int:
    n = ITEM[dtype]
    for d in shape:
        n *= d
    return n


def plan_shards(shards: int, shard_bytes: float) -> list[list[Tensor]]:
    plan: list[list[Tensor]] = [[]]
    size = 0
    for tensor in layout():
        if size >= shard_bytes:
            if len(plan) == shards:
                break
            plan.append([])
            size = 0
        plan[-1].append(tensor)
        size += nbytes(tensor[1], tensor[2])
    return plan


def safetensors_head(tensors: list[Tensor]) -> tuple[bytes, int]:
    """What a safetensors file of `tensors` (back to back, in this order) starts with: its 8-byte
    little-endian header length and JSON header (padded to 8); and how many bytes of tensors follow."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def write_shard(path: Path, tensors: list[Tensor], seed: int) -> int:
    """A safetensors file: its head (safetensors_head), then random bytes made on the GPU."""
    torch = torch_mod()
    head, data_bytes = safetensors_head(tensors)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)
    with path.open("wb") as handle:
        handle.write(head)
        for _name, dtype, shape in tensors:
            left = nbytes(dtype, shape)
            assert left % 4 == 0
            while left:
                words = min(left, 256 << 20) // 4
                block = torch.randint(
                    -(2**31), 2**31 - 1, (words,), dtype=torch.int32, device="cuda", generator=generator
                )
                handle.write(memoryview(block.cpu().numpy()))
                left -= words * 4
        handle.flush()
        os.fsync(handle.fileno())
    return len(head) + data_bytes


def read_header(path: Path) -> tuple[int, dict[str, Any]]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return 8 + length, header


def torch_dtype(torch: Any, dtype: str) -> Any:
    return {"BF16": torch.bfloat16, "F32": torch.float32, "I32": torch.int32}[dtype]


def gpu_params(paths: list[Path], rank: int = 0, n: int = 1, mode: str = "whole") -> dict[str, Any]:
    """The model's parameters, allocated on the GPU before the load as vLLM does: whole, TP slices or a share."""
    torch = torch_mod()
    params: dict[str, Any] = {}
    index = 0
    for path in paths:
        for name, info in sorted(read_header(path)[1].items()):
            shape = list(info["shape"])
            dim = tp_dim(name)
            if mode == "tp" and dim is not None:
                shape[dim] //= n
            if mode == "disjoint" and index % n != rank:
                index += 1
                continue
            index += 1
            params[name] = torch.empty(shape, dtype=torch_dtype(torch, info["dtype"]), device="cuda")
    torch.cuda.synchronize()
    return params


def lazy_load(
    paths: list[Path],
    params: dict[str, Any],
    rank: int = 0,
    n: int = 1,
    mode: str = "whole",
    to_cuda: bool = False,
    buckets: dict[str, list[float]] | None = None,
) -> tuple[int, int, float]:
    """vLLM's lazy safetensors iterator and weight loaders: returns (bytes read as tensors, bytes copied, s)."""
    torch = torch_mod()
    safe_open = safe_open_fn()
    read = copied = 0
    start = time.perf_counter()
    for path in paths:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is no dict)
                if name not in params:
                    continue
                began = time.perf_counter()
                tensor = handle.get_tensor(name)
                read += tensor.numel() * tensor.element_size()
                dim = tp_dim(name)
                if mode == "tp" and dim is not None:
                    width = tensor.shape[dim] // n
                    tensor = tensor.narrow(dim, rank * width, width)
                if to_cuda:
                    moved = tensor.to("cuda")
                else:
                    moved = params[name]
                    moved.copy_(tensor)
                size = moved.numel() * moved.element_size()
                copied += size
                if buckets is not None:
                    bucket = size_bucket(size)
                    buckets.setdefault(bucket, [0.0, 0.0, 0.0])
                    buckets[bucket][0] += 1
                    buckets[bucket][1] += size
                    buckets[bucket][2] += time.perf_counter() - began
    torch.cuda.synchronize()
    return read, copied, time.perf_counter() - start


def size_bucket(size: int) -> str:
    for limit, label in ((1 << 20, "<1MiB"), (4 << 20, "1-4MiB"), (16 << 20, "4-16MiB"), (256 << 20, "16-256MiB")):
        if size < limit:
            return label
    return ">=256MiB"


def direct_load(paths: list[Path], params: dict[str, Any]) -> tuple[int, float, float]:
    """Each shard read whole with O_DIRECT (no page cache) into an aligned buffer, then copied tensor by tensor."""
    torch = torch_mod()
    copied = 0
    reading = 0.0
    start = time.perf_counter()
    for path in paths:
        size = path.stat().st_size
        buffer = mmap.mmap(-1, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        began = time.perf_counter()
        got = direct_read_into(path, buffer, size)
        reading += time.perf_counter() - began
        assert got == size, (path, got, size)
        (length,) = struct.unpack("<Q", buffer[:8])
        header = json.loads(buffer[8 : 8 + length])
        header.pop("__metadata__", None)
        base = torch.frombuffer(buffer, dtype=torch.uint8)
        for name, info in header.items():
            first, last = info["data_offsets"]
            tensor = base[8 + length + first : 8 + length + last].view(torch_dtype(torch, info["dtype"]))
            params[name].copy_(tensor.view(info["shape"]))
            copied += last - first
        torch.cuda.synchronize()
        del base, tensor
        with contextlib.suppress(BufferError):  # a view still exported: it goes with its last reference
            buffer.close()
    return copied, time.perf_counter() - start, reading


def direct_read_into(path: Path, buffer: mmap.mmap, size: int) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    view = memoryview(buffer)
    got = 0
    try:
        while got < size:
            count = os.preadv(fd, [view[got : got + CHUNK]], got)
            if count <= 0:
                break
            got += count
    finally:
        view.release()
        os.close(fd)
    return got


def direct_read_rate(paths: list[Path]) -> dict[str, Any]:
    buffer = mmap.mmap(-1, CHUNK)
    view = memoryview(buffer)
    total = 0
    start = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        offset = 0
        while True:
            count = os.preadv(fd, [view], offset)
            if count <= 0:
                break
            offset += count
        os.close(fd)
        total += offset
    seconds = time.perf_counter() - start
    view.release()
    buffer.close()
    return {
        "gb": total / GB,
        "seconds": round(seconds, 3),
        "gbps": round(total / GB / seconds, 3),
        "read_size_mib": CHUNK >> 20,
    }


def buffered_read_rate(paths: list[Path]) -> dict[str, Any]:
    buffer = bytearray(16 << 20)
    total = 0
    start = time.perf_counter()
    for path in paths:
        with path.open("rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                total += count
    seconds = time.perf_counter() - start
    return {"gb": total / GB, "seconds": round(seconds, 3), "gbps": round(total / GB / seconds, 3), "read_size_mib": 16}


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_fraction(paths: list[Path]) -> float | None:
    """Share of the files' pages in the page cache (mincore on a fresh shared mapping)."""
    resident = pages = 0
    for path in paths:
        size = path.stat().st_size
        fd = os.open(path, os.O_RDONLY)
        try:
            address = LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if address is None or address == ctypes.c_void_p(-1).value:
                return None
            count = -(-size // mmap.PAGESIZE)
            vector = (ctypes.c_ubyte * count)()
            rc = LIBC.mincore(address, size, vector)
            LIBC.munmap(address, size)
            if rc != 0:
                return None
            resident += count - bytes(vector).count(0)
            pages += count
        finally:
            os.close(fd)
    return round(resident / pages, 4) if pages else None


def meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0])  # KiB
    return values


def drop_caches(paths: list[Path]) -> dict[str, Any]:
    os.sync()
    before = meminfo()["Cached"]
    result: dict[str, Any] = {"method": "echo 1 > /proc/sys/vm/drop_caches"}
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        result["ok"] = True
    except OSError as error:
        result["ok"] = False
        result["error"] = str(error)
    result["cached_gib_before"] = round(before / 2**20, 2)
    result["cached_gib_after"] = round(meminfo()["Cached"] / 2**20, 2)
    result["resident_after"] = resident_fraction(paths)
    result["ok"] = bool(result["ok"] and (result["resident_after"] or 0) < 0.02)
    return result


def prefetch_reader(paths: list[Path]) -> None:
    """vLLM's prefetch strategy: a thread reads the files into the page cache while the loader works."""
    buffer = bytearray(16 << 20)
    for path in paths:
        with path.open("rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass


def worker(rank: int, n: int, mode: str, paths: list[Path], barrier: Any, queue: Any) -> None:
    """One TP worker's share of the load, timed from a barrier all workers pass after CUDA is up."""
    try:
        torch = torch_mod()
        torch.set_num_threads(1)  # vLLM's multiproc executor sets OMP_NUM_THREADS=1 in its workers
        params = gpu_params(paths, rank, n, mode)
        barrier.wait(timeout=120)
        start = time.clock_gettime(time.CLOCK_MONOTONIC)
        read, copied, _ = lazy_load(paths, params, rank, n, mode)
        end = time.clock_gettime(time.CLOCK_MONOTONIC)
        queue.put({"rank": rank, "start": start, "end": end, "read_bytes": read, "copied_bytes": copied})
    except Exception:
        queue.put({"rank": rank, "error": traceback.format_exc()})


def multi_load(paths: list[Path], n: int, mode: str, checkpoint_bytes: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(n)
    queue = context.Queue()
    workers = [context.Process(target=worker, args=(r, n, mode, paths, barrier, queue)) for r in range(n)]
    launched = time.perf_counter()
    for process in workers:
        process.start()
    results = [queue.get(timeout=150) for _ in workers]
    for process in workers:
        process.join(timeout=30)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        return {"processes": n, "mode": mode, "errors": errors}
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    per = sorted(results, key=lambda r: r["rank"])
    return {
        "processes": n,
        "mode": mode,
        "gpus": 1,
        "checkpoint_gb": round(checkpoint_bytes / GB, 3),
        "seconds": round(wall, 3),
        "checkpoint_gbps": round(checkpoint_bytes / GB / wall, 3),
        "copied_gb_all_processes": round(sum(r["copied_bytes"] for r in per) / GB, 3),
        "copied_gbps_all_processes": round(sum(r["copied_bytes"] for r in per) / GB / wall, 3),
        "read_gb_as_tensors_all_processes": round(sum(r["read_bytes"] for r in per) / GB, 3),
        "per_process_seconds": [round(r["end"] - r["start"], 3) for r in per],
        "start_spread_s": round(max(r["start"] for r in per) - min(r["start"] for r in per), 3),
        "launch_to_done_s": round(time.perf_counter() - launched, 3),
    }


def copy_seconds(torch: Any, target: Any, source: Any, reps: int) -> list[float]:
    """The seconds of each of `reps` copies of `source` into `target`, each timed from an idle GPU to the
    copy's end (h2d_ceilings here, op_links in tp8_load.py)."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        began = time.perf_counter()
        target.copy_(source)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return times


def h2d_ceilings() -> dict[str, Any]:
    torch = torch_mod()
    size = 1 << 30
    target = torch.empty(size, dtype=torch.uint8, device="cuda")
    out: dict[str, Any] = {"size_gib": 1}
    for kind in ("pinned", "pageable"):
        source = torch.empty(size, dtype=torch.uint8, pin_memory=kind == "pinned")
        source.fill_(0x5A)
        times = copy_seconds(torch, target, source, 6)
        out[f"{kind}_gbps"] = round(size / GB / statistics.median(times[1:]), 3)
        del source
    del target
    torch.cuda.empty_cache()
    return out


def command(*args: str) -> str:
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unavailable: {error}"
    return (done.stdout + done.stderr).strip()


def mount_of(path: Path) -> dict[str, Any]:
    best: list[str] = []
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        point = fields[1]
        inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
        if inside and (not best or len(point) >= len(best[1])):
            best = fields
    stat = os.statvfs(path)
    return {
        "source": best[0] if best else None,
        "mountpoint": best[1] if best else None,
        "fstype": best[2] if best else None,
        "options": best[3] if best else None,
        "free_gib": round(stat.f_bavail * stat.f_frsize / 2**30, 1),
    }


def pick_dir(wanted: str | None, need_bytes: float) -> Path:
    """A directory on a disk (not tmpfs: that is RAM) with room for the shards."""
    candidates = [wanted] if wanted else ["/var/tmp", "/root", str(Path(__file__).resolve().parents[2]), "/tmp"]
    for candidate in candidates:
        base = Path(candidate)
        if not base.is_dir():
            continue
        mount = mount_of(base)
        if mount["fstype"] in ("tmpfs", "ramfs", "devtmpfs") and not wanted:
            continue
        if mount["free_gib"] * 2**30 < need_bytes * 1.1 and not wanted:
            continue
        return base / "vllm-fleet-load-rate"
    raise SystemExit(f"no directory on a disk with {need_bytes / GB:.0f} GB free among {candidates}")


def machine_facts(directory: Path) -> dict[str, Any]:
    """What each device script records of the machine it ran on (here and tp8_load.py): its CPUs, memory at
    the start, kernel, python, and the directory its files are on, its filesystem and the block devices."""
    info = meminfo()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        None,
    )
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "mem_total_gib_at_start": round(info["MemTotal"] / 2**20, 1),
        "mem_available_gib_at_start": round(info["MemAvailable"] / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "directory": str(directory),
        "filesystem": mount_of(directory),
        "block_devices": command("lsblk", "-o", "NAME,SIZE,ROTA,TYPE,FSTYPE,MOUNTPOINT,MODEL"),
    }


def host_facts(directory: Path) -> dict[str, Any]:
    torch = torch_mod()
    return {
        **machine_facts(directory),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "safetensors": importlib.import_module("safetensors").__version__,
        "numpy": importlib.import_module("numpy").__version__,
        "gpu": command(
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
            "--format=csv",
        ),
        "gpu_torch": torch.cuda.get_device_name(0),
        "df": command("df", "-T", str(directory)),
    }


class Steps:
    """A device script's record, rewritten to `out` after each step, so a run cut short still says what it
    measured; a step that would end past the budget is skipped, one that raises is recorded with its
    traceback (load_rate.py and tp8_load.py)."""

    def __init__(self, record: dict[str, Any], out: Path, began: float, budget_s: float, echo: int = 600) -> None:
        self.record, self.out, self.began, self.budget_s, self.echo = record, out, began, budget_s, echo

    def left(self) -> float:
        return self.began + self.budget_s - time.monotonic()

    def save(self) -> None:
        self.record["elapsed_s"] = round(time.monotonic() - self.began, 1)
        self.out.write_text(json.dumps(self.record, indent=1) + "\n")

    def step(self, key: str, run: Callable[[], Any], estimate_s: float = 0.0) -> Any:
        if estimate_s > self.left():
            self.record[key] = {"skipped": f"past the {self.budget_s:.0f} s budget (estimated {estimate_s:.0f} s)"}
        else:
            print(f"[{time.monotonic() - self.began:6.1f} s] {key}", flush=True)
            try:
                self.record[key] = run()
            except Exception:
                self.record[key] = {"error": traceback.format_exc()}
        self.save()
        print(f"    {json.dumps(self.record[key])[: self.echo]}", flush=True)
        return self.record[key]

    def finish(self, directory: Path, keep: bool) -> None:
        """The record's last save, once the script's files in `directory` are removed (unless `keep`)."""
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        self.save()


def rate(copied: int, seconds: float) -> float:
    return round(copied / GB / seconds, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description="safetensors shards -> GPU load rates, as vLLM's default loader")
    parser.add_argument("out")
    parser.add_argument(
        "--dir", help="where to write the shards (default: the first disk-backed of /var/tmp, /root, the repo, /tmp)"
    )
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-gb", type=float, default=4.0)
    parser.add_argument("--budget-s", type=float, default=420.0, help="optional cold steps are skipped past this")
    parser.add_argument("--keep", action="store_true", help="keep the shards afterwards")
    args = parser.parse_args()
    began = time.monotonic()
    plan = plan_shards(args.shards, args.shard_gb * GB)
    checkpoint_bytes = sum(nbytes(d, s) for shard in plan for _, d, s in shard)
    directory = pick_dir(args.dir, checkpoint_bytes)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))]
    report: dict[str, Any] = {
        "what": "safetensors shards -> GPU memory as vLLM's default (lazy) loader moves them; GB = 1e9 bytes",
        "command": "python3 bench/device/load_rate.py OUT.json" + "".join(f" {a}" for a in sys.argv[2:]),
        "ran_as": " ".join([sys.executable, *sys.argv]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checkpoint": {
            "layout": "Kimi-K2.5 INT4-like: bf16 embedding/attention/shared experts, int32-packed routed experts + bf16 scales",
            "shards": len(plan),
            "gb": round(checkpoint_bytes / GB, 3),
            "tensors": sum(len(shard) for shard in plan),
            "mean_tensor_mb": round(checkpoint_bytes / sum(len(shard) for shard in plan) / 1e6, 3),
        },
    }
    out = Path(args.out)

    steps = Steps(report, out, began, args.budget_s)
    step = steps.step

    step("host", lambda: host_facts(directory))
    step("h2d_ceilings", h2d_ceilings)

    def write_all() -> dict[str, Any]:
        start = time.perf_counter()
        sizes = [write_shard(path, shard, seed=i) for i, (path, shard) in enumerate(zip(paths, plan, strict=True))]
        seconds = time.perf_counter() - start
        return {
            "shard_gb": [round(s / GB, 3) for s in sizes],
            "seconds": round(seconds, 3),
            "gbps_with_fsync": rate(sum(sizes), seconds),
        }

    step("write", write_all)
    step("keys_order", lambda: keys_in_file_order(paths))

    def warm() -> dict[str, Any]:
        torch = torch_mod()
        result: dict[str, Any] = {"page_cache_read": buffered_read_rate(paths), "resident": resident_fraction(paths)}
        params = gpu_params(paths)
        passes = []
        buckets: dict[str, list[float]] = {}
        for i in range(3):
            _, copied, seconds = lazy_load(paths, params, buckets=buckets if i == 2 else None)
            passes.append(rate(copied, seconds))
        result["copy_into_params_gbps_passes"] = passes
        result["copy_into_params_gbps"] = statistics.median(passes)
        del params
        torch.cuda.empty_cache()
        _, copied, seconds = lazy_load(paths, {name: None for p in paths for name in read_header(p)[1]}, to_cuda=True)
        result["to_cuda_gbps"] = rate(copied, seconds)
        result["by_tensor_size_last_pass"] = {
            k: {"tensors": int(v[0]), "gb": round(v[1] / GB, 3), "gbps": rate(int(v[1]), v[2])}
            for k, v in sorted(buckets.items())
        }
        result["resident_after"] = resident_fraction(paths)
        torch.cuda.empty_cache()
        return result

    step("warm_single", warm)

    def multi(n: int, mode: str) -> Callable[[], dict[str, Any]]:
        return lambda: multi_load(paths, n, mode, checkpoint_bytes)

    for n, mode in ((8, "tp"), (4, "tp"), (8, "disjoint")):
        step(f"warm_{mode}{n}", multi(n, mode))

    drop = step("drop_caches_check", lambda: drop_caches(paths))
    can_drop = isinstance(drop, dict) and drop.get("ok") is True
    raw = step("disk_direct_read", lambda: direct_read_rate(paths))
    disk_gbps = raw.get("gbps", 0.5) if isinstance(raw, dict) else 0.5
    cold_s = checkpoint_bytes / GB / max(disk_gbps, 0.05) * 1.3 + 5

    def cold(run: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def go() -> dict[str, Any]:
            if not can_drop:
                return {"skipped": "the page cache could not be dropped here", "drop": drop}
            dropped = drop_caches(paths)
            result = run()
            result["drop"] = dropped
            return result

        return go

    step("disk_buffered_read_after_drop", cold(lambda: buffered_read_rate(paths)), cold_s)
    step(
        "disk_dd_direct_one_shard",
        lambda: {"output": command("dd", f"if={paths[0]}", "of=/dev/null", "bs=64M", "iflag=direct")},
        cold_s / len(paths),
    )

    def into_fresh_params(load: Callable[[dict[str, Any]], tuple[int, float]]) -> dict[str, Any]:
        """One load (`load(params)` gives the bytes copied and the seconds) into parameters allocated for it,
        freed afterwards; its size and rate."""
        torch = torch_mod()
        params = gpu_params(paths)
        copied, seconds = load(params)
        del params
        torch.cuda.empty_cache()
        return {"gb": round(copied / GB, 3), "seconds": round(seconds, 3), "gbps": rate(copied, seconds)}

    def cold_single() -> dict[str, Any]:
        result = into_fresh_params(lambda params: lazy_load(paths, params)[1:])
        return result | {"resident_after": resident_fraction(paths)}

    step("cold_single", cold(cold_single), cold_s)

    def cold_direct() -> dict[str, Any]:
        reading = 0.0

        def load(params: dict[str, Any]) -> tuple[int, float]:
            nonlocal reading
            copied, seconds, reading = direct_load(paths, params)
            return copied, seconds

        result = into_fresh_params(load)
        return result | {"read_seconds": round(reading, 3), "resident_after": resident_fraction(paths)}

    step("direct_single", cold_direct, cold_s)

    def cold_prefetch() -> dict[str, Any]:
        reader = threading.Thread(target=prefetch_reader, args=(paths,), daemon=True)
        start = 0.0

        def load(params: dict[str, Any]) -> tuple[int, float]:
            nonlocal start
            start = time.perf_counter()
            reader.start()
            _, copied, seconds = lazy_load(paths, params)
            reader.join()
            return copied, seconds

        result = into_fresh_params(load)
        return result | {"reader_done_s": round(time.perf_counter() - start, 3)}

    step("cold_single_prefetch", cold(cold_prefetch), cold_s)
    step("cold_tp8", cold(lambda: multi_load(paths, 8, "tp", checkpoint_bytes)), cold_s + 30)
    report["mem_total_gib_at_end"] = round(meminfo()["MemTotal"] / 2**20, 1)
    steps.finish(directory, args.keep)
    print(summary(report))
    return 0


def keys_in_file_order(paths: list[Path]) -> dict[str, Any]:
    """Whether safe_open's keys() walks a file front to back (it sorts names, so experts 0, 1, 10, 100 ...)."""
    safe_open = safe_open_fn()
    forward = steps = 0
    for path in paths:
        _, header = read_header(path)
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            names = list(handle.keys())
        offsets = [header[name]["data_offsets"][0] for name in names]
        forward += sum(b > a for a, b in itertools.pairwise(offsets))
        steps += len(offsets) - 1
    return {"forward_steps_share": round(forward / steps, 4) if steps else None}


def summary(report: dict[str, Any]) -> str:
    def get(key: str, *path: str) -> Any:
        value: Any = report.get(key, {})
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    rows = [
        ("pinned host->GPU, 1 GiB", get("h2d_ceilings", "pinned_gbps")),
        ("pageable host->GPU, 1 GiB", get("h2d_ceilings", "pageable_gbps")),
        ("write + fsync", get("write", "gbps_with_fsync")),
        ("page cache read (buffered)", get("warm_single", "page_cache_read", "gbps")),
        ("warm, 1 process, copy_", get("warm_single", "copy_into_params_gbps")),
        ("warm, 1 process, .to(cuda)", get("warm_single", "to_cuda_gbps")),
        ("warm, 8 processes TP slices", get("warm_tp8", "checkpoint_gbps")),
        ("warm, 4 processes TP slices", get("warm_tp4", "checkpoint_gbps")),
        ("warm, 8 processes disjoint", get("warm_disjoint8", "checkpoint_gbps")),
        ("disk O_DIRECT read", get("disk_direct_read", "gbps")),
        ("disk buffered read, cold", get("disk_buffered_read_after_drop", "gbps")),
        ("cold, 1 process", get("cold_single", "gbps")),
        ("O_DIRECT loader, 1 process", get("direct_single", "gbps")),
        ("cold, 1 process + prefetch thread", get("cold_single_prefetch", "gbps")),
        ("cold, 8 processes TP slices", get("cold_tp8", "checkpoint_gbps")),
    ]
    return "\n".join(f"{label:<36} {value if value is not None else '-'} GB/s" for label, value in rows)


if __name__ == "__main__":
    sys.exit(main())
