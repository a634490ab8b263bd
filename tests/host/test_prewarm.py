"""prewarm's plans (what fits in RAM, what a copy must write and how much space it needs at most) as
pure functions, and its two modes on real files in a temporary directory: `cache` reads every byte it
plans to, `copy` writes a staging copy that model-sync's own `check` accepts."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest

from host import contract, model_files, page_cache
from host.tools import model_sync, prewarm
from sandbox.processes import run_captured

GIB = page_cache.GIB


def f(rel: str, size: int) -> page_cache.ModelFile:
    return page_cache.ModelFile(rel, size)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def quiet() -> page_cache.Reading:
    """Reading with no progress lines, on a clock that stands still."""
    return page_cache.Reading(10, lambda _m: None, Clock())


def shared_and_local(tmp_path: Path) -> tuple[Path, Path]:
    """A model on the shared storage, and where its copy on the host's own disk goes."""
    return make_model(tmp_path / "shared" / "m"), tmp_path / "local" / "m"


# A small model: two shards, an index, a config, a tokenizer in a subfolder; sizes not multiples of a chunk.
MODEL = {
    "model-00001-of-00002.safetensors": 3000,
    "model-00002-of-00002.safetensors": 1700,
    "model.safetensors.index.json": 120,
    "config.json": 50,
    "tokenizer/tokenizer.json": 333,
}


def make_model(directory: Path, files: dict[str, int] = MODEL, manifest: bool = True) -> Path:
    for index, (rel, size) in enumerate(files.items()):
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes((index + i) % 251 for i in range(size)))
        os.utime(path, ns=(1_600_000_000_000_000_000 + index, 1_600_000_000_123_456_789 + index))
    # What model-sync and the download client keep beside the model: not model data.
    (directory / ".cache" / "huggingface" / "download").mkdir(parents=True, exist_ok=True)
    (directory / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text("x" * 999)
    if manifest:
        entries = {rel: {**model_files.stat_entry(directory / rel), "hash": "0" * 64} for rel in files}
        model_files.write_manifest(directory, "org/model", "a" * 40, entries)
        (directory / contract.MANIFEST_DIR / "lock").touch()
    return directory


def sync_check(directory: Path) -> int:
    """model-sync's own `check`, in process: what the swap runs before it trusts a model directory (its exit
    status: 1 when the directory fails it)."""
    return model_sync.main(["check", "--dir", str(directory)])


def test_skips_what_model_sync_keeps_beside_the_model() -> None:
    assert model_files.HF_CACHE.parts[0] in page_cache.SKIP_DIRS


def test_model_files_lists_weights_first_and_skips_manifest_cache_and_leftovers(tmp_path: Path) -> None:
    make_model(tmp_path)
    (tmp_path / "consolidated.pt").write_bytes(b"p" * 10)
    (tmp_path / "config.json.prewarm-tmp").write_bytes(b"t")
    (tmp_path / "link.json").symlink_to("config.json")
    files = page_cache.model_files(tmp_path)
    assert [x.rel for x in files] == [
        "consolidated.pt",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
        "link.json",
        "model.safetensors.index.json",
        "tokenizer/tokenizer.json",
    ]
    by_rel = {x.rel: x for x in files}
    assert by_rel["tokenizer/tokenizer.json"].size == 333
    assert by_rel["config.json"].mtime_ns == (tmp_path / "config.json").stat().st_mtime_ns


def test_plan_reads_weights_first_and_stops_at_the_budget() -> None:
    files = [f("config.json", 1), f("b.safetensors", 40), f("a.safetensors", 40), f("c.gguf", 15), f("t.json", 30)]
    plan = page_cache.plan_cache(files, available=100, margin=10)
    assert plan.budget == 90
    # a and b fill 80 of 90: c (15) no longer fits, the config (1) still does; t (30) does not.
    assert [x.rel for x in plan.files] == ["a.safetensors", "b.safetensors", "config.json"]
    assert [x.rel for x in plan.left_out] == ["c.gguf", "t.json"]
    assert plan.size == 81 and plan.left_out_size == 45
    assert plan.size <= plan.available - plan.margin


def test_plan_budget_is_never_more_than_the_files_and_the_margin_is_kept() -> None:
    files = [f("a.bin", 5 * GIB), f("b.bin", 5 * GIB)]
    everything = page_cache.plan_cache(files, available=500 * GIB, margin=8 * GIB)
    assert everything.budget == 10 * GIB and not everything.left_out
    one = page_cache.plan_cache(files, available=14 * GIB, margin=8 * GIB)
    assert one.budget == 6 * GIB and [x.rel for x in one.files] == ["a.bin"]
    none = page_cache.plan_cache(files, available=18 * GIB - 1, margin=8 * GIB)
    assert [x.rel for x in none.files] == ["a.bin"]  # 10 GiB - 1 byte: the second does not fit
    short = page_cache.plan_cache(files, available=7 * GIB, margin=8 * GIB)
    assert short.budget == 0 and short.files == () and len(short.left_out) == 2


def test_mem_available_reads_meminfo_in_bytes(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       263842064 kB\nMemFree:         1200 kB\nMemAvailable:   201234567 kB\n")
    assert page_cache.mem_available(meminfo) == 201234567 * 1024
    meminfo.write_text("MemTotal:       263842064 kB\n")
    assert page_cache.mem_available(meminfo) is None
    assert page_cache.mem_available(tmp_path / "absent") is None
    assert page_cache.mem_available() is not None  # this machine's own


def test_progress_reports_at_most_every_period_with_rate_and_eta() -> None:
    clock = Clock()
    lines: list[str] = []
    progress = page_cache.Progress("reading", 10 * GIB, 10, lines.append, clock)
    clock.now += 4
    progress.add(2 * GIB)
    assert lines == []
    clock.now += 6  # 10 s, 4 GiB: 429.5 MB/s, 6 GiB left: 15 s
    progress.add(2 * GIB)
    assert lines == ["reading: 4.00 GiB of 10.00 GiB (40%), 429.5 MB/s, ETA 15 s"]
    clock.now += 9.9
    progress.add(1)
    assert len(lines) == 1
    clock.now = 100 + 200  # 4 GiB in 200 s, 6 GiB left: 300 s
    progress.add(0)
    assert lines[-1] == "reading: 4.00 GiB of 10.00 GiB (40%), 21.5 MB/s, ETA 5 min 00 s"
    assert progress.summary("read 2 file(s):") == "read 2 file(s): 4294967297 bytes (4.00 GiB) in 200.0 s, 21.5 MB/s"


def test_read_through_reads_every_byte_and_asks_for_the_next_chunk(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    data = os.urandom(10_000)
    path.write_bytes(data)
    advice: list[tuple[int, int, int]] = []
    progress = page_cache.Progress("reading", len(data), 1000, lambda _m: None, Clock())

    def advise(fd: int, offset: int, length: int, what: int) -> None:
        advice.append((offset, length, what))

    class Sink:
        def __init__(self) -> None:
            self.data = bytearray()

        def write(self, chunk: memoryview) -> int:
            self.data += chunk
            return len(chunk)

    assert page_cache.read_through(path, bytearray(4096), progress, advise=advise) == 10_000
    assert progress.done == 10_000
    willneed = [(o, n) for o, n, w in advice if w == os.POSIX_FADV_WILLNEED]
    assert willneed == [(0, 4096), (4096, 4096), (8192, 4096)]  # never past the end
    assert (0, 0, os.POSIX_FADV_SEQUENTIAL) in advice
    assert not [a for a in advice if a[2] == os.POSIX_FADV_DONTNEED]

    sink = Sink()
    advice.clear()
    page_cache.read_through(path, bytearray(4096), progress, sink=sink, advise=advise)  # type: ignore[arg-type]
    assert bytes(sink.data) == data
    assert [(o, n) for o, n, w in advice if w == os.POSIX_FADV_DONTNEED] == [(0, 4096), (4096, 4096), (8192, 1808)]


def test_cache_reads_all_of_every_file_and_reports(tmp_path: Path) -> None:
    make_model(tmp_path)
    lines: list[str] = []
    clock = Clock()
    opened: list[str] = []
    real = page_cache.read_through

    def recording(path: Path, *args: object, **kwargs: object) -> int:
        count = real(path, *args, **kwargs)  # type: ignore[arg-type]
        opened.append(f"{path.relative_to(tmp_path)}={count}")
        clock.now += 1
        return count

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(page_cache, "read_through", recording)
        plan = page_cache.cache(
            tmp_path, 8 * GIB, page_cache.Reading(2, lines.append, clock, chunk=1024), lambda: 64 * GIB
        )
    assert opened == [
        "model-00001-of-00002.safetensors=3000",
        "model-00002-of-00002.safetensors=1700",
        "config.json=50",
        "model.safetensors.index.json=120",
        "tokenizer/tokenizer.json=333",
    ]
    assert plan.left_out == ()
    total = sum(MODEL.values())
    assert lines[0].startswith(f"{tmp_path}: 5 files, 0.00 GiB; MemAvailable 64.00 GiB minus the margin 8.00 GiB")
    assert [x for x in lines if x.startswith("reading: ")]  # a progress line every 2 (fake) seconds
    assert lines[-1] == f"read 5 file(s): {total} bytes (0.00 GiB) in 5.0 s, 0.0 MB/s; 0 file(s) left out"


def test_cache_leaves_out_what_does_not_fit_and_says_why(tmp_path: Path) -> None:
    make_model(tmp_path)
    lines: list[str] = []
    # 4800 bytes over the margin: the first shard (3000), then the small files; not the second shard.
    plan = page_cache.cache(tmp_path, 8 * GIB, page_cache.Reading(10, lines.append, Clock()), lambda: 8 * GIB + 3600)
    assert [x.rel for x in plan.files] == [
        "model-00001-of-00002.safetensors",
        "config.json",
        "model.safetensors.index.json",
        "tokenizer/tokenizer.json",
    ]
    (left,) = [x for x in lines if x.startswith("leaving out")]
    assert "1 file(s)" in left and "model-00002-of-00002.safetensors" in left
    assert "do not fit in MemAvailable minus the margin" in left
    assert lines[-1].startswith(f"read 4 file(s): {3000 + 50 + 120 + 333} bytes")


def test_cache_reads_nothing_when_memory_is_below_the_margin(tmp_path: Path) -> None:
    make_model(tmp_path)
    lines: list[str] = []
    plan = page_cache.cache(tmp_path, 8 * GIB, page_cache.Reading(10, lines.append, Clock()), lambda: 6 * GIB)
    assert plan.files == () and len(plan.left_out) == 5
    assert "budget of 0.00 GiB" in lines[0]
    assert lines[-1] == "nothing to read: no file fits in the budget"


def test_cache_fails_on_a_wrong_directory(tmp_path: Path) -> None:
    with pytest.raises(page_cache.Failure, match="is not a directory"):
        page_cache.cache(tmp_path / "absent", 0, page_cache.Reading(10, lambda _m: None), lambda: GIB)
    (tmp_path / ".vllm-fleet").mkdir()
    with pytest.raises(page_cache.Failure, match="holds no model files"):
        page_cache.cache(tmp_path, 0, page_cache.Reading(10, lambda _m: None), lambda: GIB)


def test_copy_writes_a_copy_that_model_sync_check_accepts(tmp_path: Path) -> None:
    source, target = shared_and_local(tmp_path)
    lines: list[str] = []
    plan = prewarm.copy(source, target, 8 * GIB, page_cache.Reading(10, lines.append, Clock()), lambda _p: 100 * GIB)
    assert [x.rel for x in plan.files][-1] == ".vllm-fleet/manifest.json"
    assert len(plan.files) == 6 and plan.unchanged == ()
    for rel in MODEL:
        assert (target / rel).read_bytes() == (source / rel).read_bytes()
        assert (target / rel).stat().st_mtime_ns == (source / rel).stat().st_mtime_ns
    assert not (target / ".cache").exists()
    assert not (target / ".vllm-fleet" / "lock").exists()  # model-sync's, not copied
    assert not list(target.rglob("*.prewarm-tmp"))
    assert sync_check(target) == 0
    assert lines[-1].startswith(f"{target} matches the manifest of org/model@{'a' * 40}: 5 files")


def test_copy_again_skips_what_is_there_and_redoes_what_changed(tmp_path: Path) -> None:
    source, target = shared_and_local(tmp_path)
    prewarm.copy(source, target, 0, quiet(), lambda _p: 100 * GIB)
    inode = (target / "model-00001-of-00002.safetensors").stat().st_ino
    lines: list[str] = []
    again = prewarm.copy(source, target, 0, page_cache.Reading(10, lines.append, Clock()), lambda _p: 100 * GIB)
    assert again.files == () and len(again.unchanged) == 6
    assert lines[0] == f"{target} already holds all 6 files of {source} unchanged (no bytes read)"
    assert (target / "model-00001-of-00002.safetensors").stat().st_ino == inode

    (target / "config.json").write_text("{}")  # changed at the destination: copied again
    (target / "tokenizer" / "tokenizer.json").unlink()  # gone: copied again
    assert sync_check(target) == 1
    third = prewarm.copy(source, target, 0, quiet(), lambda _p: 100 * GIB)
    assert sorted(x.rel for x in third.files) == ["config.json", "tokenizer/tokenizer.json"]
    assert (target / "model-00001-of-00002.safetensors").stat().st_ino == inode
    assert sync_check(target) == 0


def test_copy_refuses_when_the_disk_is_short_and_writes_nothing(tmp_path: Path) -> None:
    source, target = shared_and_local(tmp_path)
    asked: list[Path] = []
    need = sum(MODEL.values()) + (source / ".vllm-fleet" / "manifest.json").stat().st_size

    def free(path: Path) -> int:
        asked.append(path)
        return 8 * GIB + need - 1

    with pytest.raises(page_cache.Failure) as refused:
        prewarm.copy(source, target, 8 * GIB, quiet(), free)
    assert asked == [target]
    assert f"not enough space in {target}" in str(refused.value)
    assert "short of 0.00 GiB" in str(refused.value) and "nothing was copied" in str(refused.value)
    assert [p.relative_to(target).as_posix() for p in target.rglob("*")] == [".vllm-fleet", ".vllm-fleet/prewarm.lock"]
    prewarm.copy(source, target, 8 * GIB, quiet(), lambda _p: 8 * GIB + need)
    assert sync_check(target) == 0


def test_one_copy_into_a_directory_at_a_time(tmp_path: Path) -> None:
    source = make_model(tmp_path / "m")
    target = tmp_path / "s"
    (target / ".vllm-fleet").mkdir(parents=True)
    with (target / ".vllm-fleet" / "prewarm.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(page_cache.Failure, match=r"another `prewarm copy` into .* is still running"):
            prewarm.copy(source, target, 0, quiet(), lambda _p: GIB)
    assert not (target / "config.json").exists()
    prewarm.copy(source, target, 0, quiet(), lambda _p: GIB)
    assert sync_check(target) == 0


def test_plan_copy_counts_the_peak_of_replacing_files_one_by_one() -> None:
    files = [page_cache.ModelFile("a", 100, 1), page_cache.ModelFile("b", 50, 1), page_cache.ModelFile("c", 10, 1)]
    assert prewarm.plan_copy(files, {}).need == 160
    present = {"a": page_cache.ModelFile("a", 100, 1), "b": page_cache.ModelFile("b", 80, 0)}
    plan = prewarm.plan_copy(files, present)
    assert [x.rel for x in plan.files] == ["b", "c"] and [x.rel for x in plan.unchanged] == ["a"]
    # b's 50 are written beside its old 80 (peak 50), then the old goes (-30); c adds 10 (peak -20).
    assert plan.need == 50
    # The same size with another mtime is another file.
    assert prewarm.plan_copy(files, {"c": page_cache.ModelFile("c", 10, 2)}).need == 160


def test_copy_refuses_a_source_that_changed_since_it_was_verified(tmp_path: Path) -> None:
    source = make_model(tmp_path / "m")
    (source / "config.json").write_text('{"changed": true}')
    with pytest.raises(page_cache.Failure, match=r"1 file\(s\) in .* changed since they were verified: config.json"):
        prewarm.copy(source, tmp_path / "s", 0, quiet(), lambda _p: GIB)
    assert not (tmp_path / "s").exists()
    bare = make_model(tmp_path / "bare", manifest=False)
    with pytest.raises(page_cache.Failure, match="has no verified manifest"):
        prewarm.copy(bare, tmp_path / "s", 0, quiet(), lambda _p: GIB)


def test_an_interrupted_copy_over_another_revision_fails_model_sync_check(tmp_path: Path) -> None:
    old = make_model(tmp_path / "old", {"model.safetensors": 900, "config.json": 10})
    target = tmp_path / "local"
    prewarm.copy(old, target, 0, quiet(), lambda _p: GIB)
    assert sync_check(target) == 0
    new = make_model(tmp_path / "new")
    calls = []
    real = prewarm.copy_file

    def failing(source: Path, *args: object) -> None:
        calls.append(source.name)
        if len(calls) == 2:
            raise OSError(5, "Input/output error", str(source))
        real(source, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prewarm, "copy_file", failing)
        with pytest.raises(OSError):
            prewarm.copy(new, target, 0, quiet(), lambda _p: GIB)
    # The old revision's files are still there, but not its manifest: nothing passes for a complete model.
    assert (target / "model.safetensors").exists()
    assert not (target / ".vllm-fleet" / "manifest.json").exists()
    assert sync_check(target) == 1
    lines: list[str] = []
    prewarm.copy(new, target, 0, page_cache.Reading(10, lines.append, Clock()), lambda _p: GIB)
    assert sync_check(target) == 0
    assert any(x.startswith("left alone 1 file(s)") and "model.safetensors" in x for x in lines)


def test_copy_file_leaves_no_temporary_behind_when_it_fails(tmp_path: Path) -> None:
    source = tmp_path / "a.bin"
    source.write_bytes(b"x" * 5000)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "b.bin.prewarm-tmp").write_bytes(b"left by a killed run")

    class Boom(Exception):
        pass

    class Interrupted(page_cache.Progress):
        def add(self, count: int) -> None:
            super().add(count)
            if self.done >= 2048:  # two chunks are in the temporary file
                raise Boom

    progress = Interrupted("copying", 5000, 10, lambda _m: None, Clock())
    with pytest.raises(Boom):
        prewarm.copy_file(source, tmp_path / "out" / "a.bin", bytearray(1024), progress)
    assert not (tmp_path / "out" / "a.bin.prewarm-tmp").exists() and not (tmp_path / "out" / "a.bin").exists()
    assert prewarm.remove_leftovers(tmp_path / "out") == 1
    assert list((tmp_path / "out").iterdir()) == []


def test_cgroup_read_bytes_sums_rbytes_over_devices(tmp_path: Path) -> None:
    unit = tmp_path / "system.slice" / "vllm-chat.service"
    unit.mkdir(parents=True)
    (unit / "io.stat").write_text(
        "259:0 rbytes=1048576 wbytes=4096 rios=12 wios=1 dbytes=0 dios=0\n"
        "8:16 rbytes=524288 wbytes=0 rios=4 wios=0 dbytes=0 dios=0\n"
    )
    assert prewarm.cgroup_read_bytes("vllm-chat.service", tmp_path) == 1572864
    assert prewarm.cgroup_read_bytes("vllm-chat", tmp_path) == 1572864
    assert prewarm.cgroup_read_bytes("vllm-other.service", tmp_path) is None
    (unit / "io.stat").write_text("")  # accounted, nothing read yet
    assert prewarm.cgroup_read_bytes("vllm-chat", tmp_path) == 0


def test_main_exit_codes_and_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as usage:
        prewarm.main(["cache"])
    assert usage.value.code == 2
    model = make_model(tmp_path / "m")
    with pytest.raises(SystemExit) as overlap:
        prewarm.main(["copy", "--dir", str(model), "--to", str(model / "staging")])
    assert overlap.value.code == 2 and "overlaps --dir" in capsys.readouterr().err
    assert prewarm.main(["cache", "--dir", str(tmp_path / "absent")]) == 1
    assert capsys.readouterr().err.startswith(f"prewarm: {tmp_path / 'absent'} is not a directory")

    unit = tmp_path / "cg" / "system.slice" / "vllm-a.service"
    unit.mkdir(parents=True)
    (unit / "io.stat").write_text("8:0 rbytes=42 wbytes=0\n")
    monkeypatch.setattr(prewarm, "CGROUP_ROOT", tmp_path / "cg")
    assert prewarm.main(["read-bytes", "--unit", "vllm-a"]) == 0
    assert capsys.readouterr().out == "42\n"
    assert prewarm.main(["read-bytes", "--unit", "vllm-b"]) == 1
    assert "IOAccounting=yes" in capsys.readouterr().err


def test_the_installed_files_run_as_programs(tmp_path: Path, host_tools: Path) -> None:
    """As the host runs them: the installed tools by path, this machine's /proc/meminfo, model-sync's CLI."""
    model = make_model(tmp_path / "m")
    cached = run_captured(
        [sys.executable, str(host_tools / "prewarm"), "cache", "--dir", str(model), "--margin-gib", "0"]
    )
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout.splitlines()[-1].startswith(f"prewarm: read 5 file(s): {sum(MODEL.values())} bytes")
    copied = run_captured(
        [
            sys.executable,
            str(host_tools / "prewarm"),
            "copy",
            "--dir",
            str(model),
            "--to",
            str(tmp_path / "s"),
            "--margin-gib",
            "0",
        ]
    )
    assert copied.returncode == 0, copied.stderr
    checked = run_captured([sys.executable, str(host_tools / "model-sync"), "check", "--dir", str(tmp_path / "s")])
    assert checked.returncode == 0 and checked.stdout == f"model-sync: org/model@{'a' * 40}: 5 files unchanged\n"


def evict(path: Path, offset: int = 0, length: int = 0) -> None:
    """Drop `path`'s pages (those of the range) from the page cache, written back first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_residency_says_what_of_a_model_the_page_cache_holds(tmp_path: Path) -> None:
    """mincore on real files: all of a model just read, none after the kernel dropped it, half of a
    shard whose first half was dropped; reading it counts nothing (the file's atime aside)."""
    page = page_cache.PAGE
    model = make_model(tmp_path / "m", {"a.safetensors": 64 * page, "b.safetensors": 10 * page + 7, "config.json": 50})
    for f in page_cache.model_files(model):
        (model / f.rel).read_bytes()
    held = page_cache.residency(model)
    assert (held.resident, held.total, held.files, held.whole_files) == (74 * page + 57, 74 * page + 57, 3, 3)
    for f in page_cache.model_files(model):
        evict(model / f.rel)
    if page_cache.resident_bytes(model / "a.safetensors") == 64 * page:
        pytest.skip(f"the filesystem of {tmp_path} keeps its pages (tmpfs): nothing to evict here")
    assert page_cache.residency(model).resident == 0
    (model / "a.safetensors").read_bytes()
    evict(model / "a.safetensors", 0, 32 * page)
    half = page_cache.residency(model)
    assert half.resident == 32 * page and half.whole_files == 0
    assert half.share == pytest.approx(32 * page / (74 * page + 57))
    assert half.describe().startswith(f"{half.share:.0%} of {model} is in the page cache")


class Pages:
    """A stand-in for mincore: which page numbers of which file are resident."""

    def __init__(self, resident: set[int]) -> None:
        self.resident = resident
        self.windows: list[tuple[int, int]] = []

    def resident_pages(self, fd: int, offset: int, length: int) -> bytes:
        self.windows.append((offset, length))
        first, count = offset // page_cache.PAGE, -(-length // page_cache.PAGE)
        return bytes(int(p in self.resident) for p in range(first, first + count))


def test_resident_bytes_walks_the_file_window_by_window_and_counts_the_tail_as_the_file_has_it(
    tmp_path: Path,
) -> None:
    page = page_cache.PAGE
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"x" * (5 * page + 10))
    pages = Pages({0, 3, 5})
    assert page_cache.resident_bytes(path, pages, window=2 * page) == 2 * page + 10  # type: ignore[arg-type]
    assert pages.windows == [(0, 2 * page), (2 * page, 2 * page), (4 * page, page + 10)]
    assert page_cache.resident_bytes(path, Pages({4}), window=2 * page) == page  # type: ignore[arg-type]


def test_prewarm_resident_prints_the_residency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = make_model(tmp_path / "m")
    assert prewarm.main(["resident", "--dir", str(model)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["totalBytes"] == sum(MODEL.values()) and printed["files"] == len(MODEL)
    assert prewarm.main(["resident", "--dir", str(tmp_path / "absent")]) == 1
