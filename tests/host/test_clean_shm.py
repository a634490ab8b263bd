"""clean-shm on this machine's real /dev/shm and /proc: stale segments go, held ones stay, also one an
engine is still creating (opened, not yet sized or mapped) while the clean-up runs beside it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from host.tools import clean_shm

SHM = Path("/dev/shm")

# An engine's start, slowed down: it creates its segment (shm_open: O_CREAT), waits before it sizes and
# maps it (the moment the hand-made units' `rm -f /dev/shm/psm_*` hit on the reference server), then
# maps it and reports whether the segment is still there.
CREATING_ENGINE = """
import mmap, os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
print("created", flush=True)
time.sleep(float(sys.argv[2]))
os.ftruncate(fd, 4096)
view = mmap.mmap(fd, 4096)
view[:5] = b"alive"
print("mapped" if os.path.exists(path) else "gone", flush=True)
time.sleep(60)
"""


@pytest.fixture
def names() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        (SHM / name).unlink(missing_ok=True)


def segment(names: list[str], prefix: str = "psm_") -> Path:
    name = f"{prefix}vllmfleettest{uuid.uuid4().hex[:8]}"
    names.append(name)
    return SHM / name


def test_stale_segments_go_and_held_ones_stay(names: list[str], tmp_path: Path) -> None:
    stale = segment(names)
    stale.write_bytes(b"x" * 64)  # what a SIGKILLed engine leaves: no process holds it
    held = segment(names, "sem.mp-")
    holder = subprocess.Popen([sys.executable, "-c", f"import time; f = open({str(held)!r}, 'ab'); time.sleep(60)"])
    try:
        for _ in range(100):
            if str(held) in clean_shm.held_segments():
                break
            time.sleep(0.05)
        removed, kept = clean_shm.clean(lock=str(tmp_path / "lock"))
        assert not stale.exists() and held.exists()
        assert removed >= 1 and kept >= 1
    finally:
        holder.kill()
        holder.wait()
    # Once its holder is gone, it is stale too.
    clean_shm.clean(lock=str(tmp_path / "lock"))
    assert not held.exists()


@contextlib.contextmanager
def engine_creating(path: Path, seconds: str) -> Iterator[IO[str]]:
    """CREATING_ENGINE on `path`, once it has created its segment (it maps it `seconds` later); yields the
    lines it prints next. Killed when the block ends."""
    engine = subprocess.Popen(
        [sys.executable, "-c", CREATING_ENGINE, str(path), seconds], stdout=subprocess.PIPE, text=True
    )
    try:
        assert engine.stdout is not None
        assert engine.stdout.readline().strip() == "created"
        yield engine.stdout
    finally:
        engine.kill()
        engine.wait()


def test_a_segment_an_engine_is_creating_survives_a_clean_up_beside_it(names: list[str], tmp_path: Path) -> None:
    path = segment(names)
    with engine_creating(path, "1.5") as said:
        # Another unit starting at the same moment cleans up, several times, while this engine is between
        # creating its segment and mapping it.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            clean_shm.clean(lock=str(tmp_path / "lock"))
            assert path.exists()
        assert said.readline().strip() == "mapped"


def test_the_reference_servers_cleanup_would_have_broken_it(names: list[str]) -> None:
    """The same engine beside the hand-made `rm -f /dev/shm/psm_*`: the provocation is real."""
    path = segment(names)
    with engine_creating(path, "0.5") as said:
        os.unlink(path)  # what `rm -f /dev/shm/psm_*` does
        assert said.readline().strip() == "gone"
