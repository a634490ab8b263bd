"""The page-cache half of prewarm: a model's files in the order a load reads them (weights first), what of
them fits in MemAvailable minus a margin, and a reader that pulls a file through the page cache a chunk
ahead (`read_through`, which `prewarm copy` also copies with), with a progress line and a summary.
`cache` reads a model into the page cache as far as free RAM allows. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from host.console import listed, say
from host.contract import MANIFEST_DIR
from host.model_files import HF_CACHE

# Beside the model, not of it: model-sync's manifest and the download client's cache.
SKIP_DIRS = frozenset({MANIFEST_DIR, HF_CACHE.parts[0]})
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
TMP_SUFFIX = ".prewarm-tmp"  # a file `prewarm copy` is writing
CHUNK = 16 * 1024 * 1024
GIB = 1024**3
MEMINFO = Path("/proc/meminfo")

Log = Callable[[str], None]
Clock = Callable[[], float]


class Failure(Exception):
    """What went wrong and what to do about it; prewarm.main() prints it on stderr and exits 1."""


def log(message: str) -> None:
    say("prewarm", message)  # exits when the SSH session that started it is gone: a copy resumes next run


def gib(size: float) -> str:
    return f"{size / GIB:.2f} GiB"


@dataclass(frozen=True)
class ModelFile:
    rel: str  # relative to the model directory, with forward slashes
    size: int
    mtime_ns: int = 0

    @property
    def weight(self) -> bool:
        return self.rel.endswith(WEIGHT_SUFFIXES)


def priority(f: ModelFile) -> tuple[bool, str]:
    """Weights first (the bulk of a load), each group in path order (the order vLLM loads shards)."""
    return (not f.weight, f.rel)


def _raise(error: OSError) -> None:
    raise error


def model_files(directory: Path) -> list[ModelFile]:
    """The model's regular files (symlinks followed) in priority order, without the manifest, the
    download client's cache and this tool's own temporary files."""
    found = []
    for root, dirs, names in os.walk(directory, onerror=_raise):
        here = Path(root)
        if here == directory:
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        dirs.sort()
        for name in names:
            if name.endswith(TMP_SUFFIX):
                continue
            st = (here / name).stat()
            if stat.S_ISREG(st.st_mode):
                rel = (here / name).relative_to(directory).as_posix()
                found.append(ModelFile(rel, st.st_size, st.st_mtime_ns))
    return sorted(found, key=priority)


def must_be_a_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise Failure(f"{directory} is not a directory; pass the model's directory as --dir")


def mem_available(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable in bytes: free memory plus the page cache and slabs the kernel can reclaim."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            value, *unit = rest.split()
            return int(value) * (1024 if unit == ["kB"] else 1)
    return None


@dataclass(frozen=True)
class FilePlan:
    files: tuple[ModelFile, ...]  # to read (or copy), in this order

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class CachePlan(FilePlan):
    left_out: tuple[ModelFile, ...]
    available: int
    margin: int
    budget: int

    @property
    def left_out_size(self) -> int:
        return sum(f.size for f in self.left_out)


def plan_cache(files: Iterable[ModelFile], available: int, margin: int) -> CachePlan:
    """Which files to read: in priority order, each one that still fits in MemAvailable minus the margin
    (a shard that does not fit does not stop a smaller one after it, such as the config or the last
    shard). The budget is never more than the files' total."""
    ordered = sorted(files, key=priority)
    budget = max(0, min(available - margin, sum(f.size for f in ordered)))
    chosen: list[ModelFile] = []
    left_out: list[ModelFile] = []
    used = 0
    for f in ordered:
        if used + f.size <= budget:
            chosen.append(f)
            used += f.size
        else:
            left_out.append(f)
    return CachePlan(tuple(chosen), tuple(left_out), available, margin, budget)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass
class Progress:
    """Counts bytes and logs `VERB: done of total, MB/s, ETA` at most every `every` seconds."""

    verb: str
    total: int
    every: float
    log: Log
    clock: Clock = time.monotonic
    done: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.start = self.clock()
        self.last = self.start

    def add(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.log(self.line(now))

    def rate(self, now: float) -> float:
        """Bytes per second since the start."""
        elapsed = now - self.start
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, now: float) -> str:
        rate = self.rate(now)
        left = max(0, self.total - self.done)
        eta = left / rate if rate > 0 else None
        share = 100 * self.done / self.total if self.total else 100.0
        return (
            f"{self.verb}: {gib(self.done)} of {gib(self.total)} ({share:.0f}%), {rate / 1e6:.1f} MB/s, ETA {_eta(eta)}"
        )

    def summary(self, what: str) -> str:
        now = self.clock()
        return (
            f"{what} {self.done} bytes ({gib(self.done)}) in {now - self.start:.1f} s, {self.rate(now) / 1e6:.1f} MB/s"
        )


def _advise(fd: int, offset: int, length: int, advice: int) -> None:
    # Advice only: a filesystem that does not take it is read all the same.
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, offset, length, advice)


def read_through(
    path: Path,
    buffer: bytearray,
    progress: Progress,
    sink: BinaryIO | None = None,
    advise: Callable[[int, int, int, int], None] = _advise,
) -> int:
    """Read all of `path` into the reusable `buffer`, chunk by chunk, asking the kernel to fetch the next
    chunk while this one is read (POSIX_FADV_WILLNEED); each chunk goes to `sink` when one is given.
    Without a sink the pages stay in the page cache; with one (a copy), the source's pages are dropped
    behind the read (POSIX_FADV_DONTNEED) so that they do not push the copy's own pages out. Returns
    the bytes read."""
    view = memoryview(buffer)
    size = len(buffer)
    offset = 0
    with path.open("rb", buffering=0) as source:
        fd = source.fileno()
        end = os.fstat(fd).st_size
        advise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        advise(fd, 0, size, os.POSIX_FADV_WILLNEED)
        while True:
            if offset + size < end:
                advise(fd, offset + size, size, os.POSIX_FADV_WILLNEED)
            count = source.readinto(view)
            if not count:
                break
            if sink is not None:
                sink.write(view[:count])
                advise(fd, offset, count, os.POSIX_FADV_DONTNEED)
            offset += count
            progress.add(count)
    return offset


@dataclass(frozen=True)
class Reading:
    """How `cache` and `prewarm copy` read: in chunks of `chunk` bytes, with a progress line through `log`
    at most every `every` seconds of `clock`."""

    every: float
    log: Log = log
    clock: Clock = time.monotonic
    chunk: int = CHUNK

    def progress(self, verb: str, size: int) -> Progress:
        return Progress(verb, size, self.every, self.log, self.clock)


def cache(
    directory: Path, margin: int, reading: Reading, available: Callable[[], int | None] = mem_available
) -> CachePlan:
    must_be_a_directory(directory)
    files = model_files(directory)
    if not files:
        raise Failure(f"{directory} holds no model files; pass the model's directory as --dir")
    free = available()
    if free is None:
        raise Failure(f"cannot read MemAvailable from {MEMINFO}; this tool needs Linux 3.14 or later")
    plan = plan_cache(files, free, margin)
    total = sum(f.size for f in files)
    reading.log(
        f"{directory}: {len(files)} files, {gib(total)}; MemAvailable {gib(free)} minus the margin "
        f"{gib(margin)} leaves a budget of {gib(plan.budget)}"
    )
    if plan.left_out:
        names = listed([f.rel for f in plan.left_out], 3)
        reading.log(
            f"leaving out {len(plan.left_out)} file(s), {gib(plan.left_out_size)} of {gib(total)}, which do "
            f"not fit in MemAvailable minus the margin (the load reads them from disk): {names}"
        )
    if not plan.files:
        reading.log("nothing to read: no file fits in the budget")
        return plan
    progress = reading.progress("reading", plan.size)
    buffer = bytearray(reading.chunk)
    for f in plan.files:
        read_through(directory / f.rel, buffer, progress)
    reading.log(progress.summary(f"read {len(plan.files)} file(s):") + f"; {len(plan.left_out)} file(s) left out")
    return plan


# ---- how much of a model is in the page cache (mincore) ------------------------------------------------

# mincore(2) over a window of a file mapped at a time: its vector is a byte per page (256 KiB per GiB).
RESIDENCY_WINDOW = 1024**3
_PROT_READ, _MAP_SHARED = 0x1, 0x01
# mincore's byte per page: only its lowest bit says "resident" (the others are reserved).
_LOW_BIT = bytes(b & 1 for b in range(256))


class _Libc:
    """mmap, mincore and munmap of the C library, through ctypes (Python has no mincore)."""

    def __init__(self) -> None:
        import ctypes  # here: only residency needs it, and prewarm runs on every swap's path

        self.ctypes = ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        self.mincore = libc.mincore
        self.mincore.restype = ctypes.c_int
        self.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        self.munmap = libc.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def resident_pages(self, fd: int, offset: int, length: int) -> bytes:
        """A byte per page of [offset, offset+length) of the open file `fd`: 1 where the page cache holds
        it, else 0."""
        ctypes = self.ctypes
        failed = ctypes.c_void_p(-1).value
        address = self.mmap(None, length, _PROT_READ, _MAP_SHARED, fd, offset)
        if address is None or address == failed:
            raise OSError(ctypes.get_errno(), f"mmap: {os.strerror(ctypes.get_errno())}")
        try:
            pages = (length + PAGE - 1) // PAGE
            vector = (ctypes.c_ubyte * pages)()
            if self.mincore(address, length, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore: {os.strerror(ctypes.get_errno())}")
            return bytes(vector).translate(_LOW_BIT)
        finally:
            self.munmap(address, length)


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(path: Path, libc: _Libc | None = None, window: int = RESIDENCY_WINDOW) -> int:
    """Bytes of `path` in the page cache, a page at a time (the file's last page counts as its tail).
    This reads none of the file: mincore asks the kernel which pages it holds."""
    libc = libc or _Libc()
    size = path.stat().st_size
    window -= window % PAGE
    resident = 0
    with path.open("rb", buffering=0) as handle:
        for offset in range(0, size, window):
            pages = libc.resident_pages(handle.fileno(), offset, min(window, size - offset))
            resident += pages.count(1) * PAGE
    tail = size % PAGE
    if tail and resident and pages[-1]:
        resident -= PAGE - tail
    return resident


@dataclass(frozen=True)
class Residency:
    """How much of a model directory's files the page cache holds."""

    directory: str
    resident: int  # bytes
    total: int  # bytes
    files: int
    whole_files: int  # files entirely in the page cache

    @property
    def share(self) -> float:
        return self.resident / self.total if self.total else 1.0

    def describe(self) -> str:
        return (
            f"{self.share:.0%} of {self.directory} is in the page cache ({gib(self.resident)} of {gib(self.total)}; "
            f"{self.whole_files} of {self.files} files whole)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "residentBytes": self.resident,
            "totalBytes": self.total,
            "files": self.files,
            "wholeFiles": self.whole_files,
            "share": round(self.share, 4),
        }


def residency(directory: Path, libc: _Libc | None = None) -> Residency:
    """What of the model in `directory` (its files as prewarm reads them: no manifest, no download
    cache) the page cache holds now."""
    must_be_a_directory(directory)
    libc = libc or _Libc()
    resident = total = whole = 0
    files = model_files(directory)
    for f in files:
        held = resident_bytes(directory / f.rel, libc) if f.size else 0
        resident += held
        total += f.size
        whole += held >= f.size
    return Residency(str(directory), resident, total, len(files), whole)
