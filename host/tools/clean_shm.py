#!/usr/bin/env python3
"""vllm-fleet clean-shm: remove the shared-memory segments a previous vLLM run left behind, and only those.

Stale psm_*/sem.mp-* segments of a killed engine broke later launches on the reference server, so every
managed unit runs this before it starts and after it stops. The hand-made units there ran `rm -f
/dev/shm/psm_* ...` instead, which at a boot removed the segments of the managed engines starting beside
them (`FileNotFoundError: '/psm_...'` in their engine core). This removes a segment only when no process
holds it, mapped or open (an engine creating one holds it from its shm_open on), and takes the host-wide
lock every run of it takes, so two units cleaning at the same moment see each other's work whole.
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import os
import sys
from collections.abc import Iterable, Iterator

PATTERNS = ("psm_*", "sem.mp-*", "*vllm*", "*nccl*")
LOCK = "/run/vllm-fleet-clean-shm.lock"


def mapped_or_open(process: str) -> Iterator[str]:
    """The paths a process (its directory in /proc) has mapped or open, as far as they can be read."""
    try:
        with open(f"{process}/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(None, 5)
                if len(fields) == 6:
                    yield fields[5].strip()
    except OSError:
        pass
    try:
        fds = os.listdir(f"{process}/fd")
    except OSError:
        return
    for fd in fds:
        with contextlib.suppress(OSError):
            yield os.readlink(f"{process}/fd/{fd}")


def held_segments(proc: str = "/proc", shm: str = "/dev/shm") -> set[str]:
    """Paths under `shm` that some live process has mapped or open."""
    prefix = shm.rstrip("/") + "/"
    return {
        path.removesuffix(" (deleted)")
        for entry in os.listdir(proc)
        if entry.isdigit()
        for path in mapped_or_open(f"{proc}/{entry}")
        if path.startswith(prefix)
    }


def stale(names: Iterable[str], held: set[str], shm: str = "/dev/shm") -> list[str]:
    """The segments among `names` (file names in `shm`) that match vLLM's patterns and nobody holds."""
    out = []
    for name in sorted(names):
        path = f"{shm.rstrip('/')}/{name}"
        if any(fnmatch.fnmatch(name, pattern) for pattern in PATTERNS) and path not in held:
            out.append(path)
    return out


def clean(shm: str = "/dev/shm", proc: str = "/proc", lock: str = LOCK) -> tuple[int, int]:
    """Remove the stale segments; (removed, kept in use)."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            names = os.listdir(shm)
        except OSError:
            return 0, 0
        # Listed first, then who holds what: a segment created after the listing is not looked at, and one
        # created before it is held by its creator by the time the holders are read.
        held = held_segments(proc, shm)
        matching = [n for n in names if any(fnmatch.fnmatch(n, p) for p in PATTERNS)]
        removed = 0
        for path in stale(matching, held, shm):
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
        return removed, len(matching) - removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="clean-shm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shm", default="/dev/shm")
    parser.add_argument("--lock", default=LOCK)
    args = parser.parse_args(argv)
    removed, kept = clean(args.shm, lock=args.lock)
    print(f"clean-shm: removed {removed} stale segment(s) from {args.shm}, kept {kept} in use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
