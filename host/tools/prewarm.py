#!/usr/bin/env python3
"""vllm-fleet prewarm: have the next model's files close at hand while the old model still serves.

    prewarm cache --dir MODEL_DIR [--margin-gib N] [--report-every SECONDS]
    prewarm copy  --dir MODEL_DIR --to STAGING_DIR [--margin-gib N] [--report-every SECONDS]
    prewarm read-bytes --unit UNIT     # bytes UNIT's cgroup read from block devices (io.stat rbytes)
    prewarm resident --dir MODEL_DIR   # how much of the model the page cache holds now (mincore), as JSON

`cache` reads the model's files once, weights (*.safetensors, *.bin, *.pt, *.gguf) first, so that the
vLLM load that follows finds them in the page cache instead of reading a slow or shared (NFS) disk. It
reads no more than the host can hold: the budget is MemAvailable (/proc/meminfo) minus --margin-gib
(default 8, left for the new engine's own memory), and the files that do not fit are named and left
out; the load reads those from disk. Nothing fitting is not a failure.

`copy` copies the model to a host-local staging directory: each file to a temporary name, then renamed,
with the source's mtime, so that `model-sync check --dir STAGING_DIR` verifies the copy against the
manifest (.vllm-fleet/manifest.json), which is copied last. Files already there with the same size and
mtime are skipped, so running it again resumes. It refuses, before copying anything, when the staging
filesystem lacks the space plus the margin, when the source no longer matches its manifest, or when
another copy into the same directory runs (a lock in its .vllm-fleet/).

Both skip .vllm-fleet/ (the manifest) and .cache/ (the download client's) as model data, print a progress
line at most every --report-every seconds (default 10) and a summary with bytes, seconds and MB/s.

Exit status: 0 done, 1 failed (stderr says what to fix), 2 usage. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.console import listed
from host.contract import MANIFEST_DIR, MANIFEST_REL
from host.locks import take_lock
from host.model_files import changed_files, changed_since_verified, manifest_path
from host.page_cache import (
    GIB,
    TMP_SUFFIX,
    Failure,
    FilePlan,
    ModelFile,
    Progress,
    Reading,
    cache,
    gib,
    model_files,
    must_be_a_directory,
    read_through,
    residency,
)

LOCK = "prewarm.lock"  # in the staging directory's MANIFEST_DIR, beside model-sync's own `lock`
DEFAULT_MARGIN_GIB = 8.0
CGROUP_ROOT = Path("/sys/fs/cgroup")


def read_manifest(directory: Path) -> dict[str, Any]:
    """model-sync's manifest of the model, or a Failure that says how to get one."""
    path = manifest_path(directory)
    try:
        data = json.loads(path.read_text())
    except OSError:
        raise Failure(
            f"{directory} has no verified manifest ({path}); download it with `model-sync sync` first"
        ) from None
    except ValueError as error:
        raise Failure(
            f"{path} is not valid JSON ({error}); run `pulumi up` where the stack is deployed from: its download step writes it again"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise Failure(
            f"{path} lists no files; run `pulumi up` where the stack is deployed from: its download step writes it again"
        )
    return data


@dataclass(frozen=True)
class CopyPlan(FilePlan):
    unchanged: tuple[ModelFile, ...]  # already at the destination with the same size and mtime
    need: int  # the most extra bytes the destination holds at any point of the copy


def plan_copy(files: Iterable[ModelFile], present: Mapping[str, ModelFile]) -> CopyPlan:
    """What to copy, given what the destination already has. Each file is written beside the one it
    replaces and renamed over it, so the peak is counted file by file rather than as a plain sum."""
    to_copy: list[ModelFile] = []
    unchanged: list[ModelFile] = []
    for f in files:
        there = present.get(f.rel)
        if there is not None and there.size == f.size and there.mtime_ns == f.mtime_ns:
            unchanged.append(f)
        else:
            to_copy.append(f)
    used = 0
    need = 0
    for f in to_copy:
        replaced = present[f.rel].size if f.rel in present else 0
        need = max(need, used + f.size)
        used += f.size - replaced
    return CopyPlan(tuple(to_copy), tuple(unchanged), need)


def remove_leftovers(directory: Path) -> int:
    """Delete the temporary files of a copy that was interrupted."""
    removed = 0
    if directory.is_dir():
        for path in directory.rglob(f"*{TMP_SUFFIX}"):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _stat_present(directory: Path, files: Iterable[ModelFile]) -> dict[str, ModelFile]:
    present = {}
    for f in files:
        try:
            st = (directory / f.rel).stat()
        except FileNotFoundError:
            continue
        present[f.rel] = ModelFile(f.rel, st.st_size, st.st_mtime_ns)
    return present


def copy_file(source: Path, target: Path, buffer: bytearray, progress: Progress) -> None:
    """Copy to `target` + TMP_SUFFIX, give it the source's mode and times, sync it, rename it over
    `target`: a reader sees the old file or the whole new one, never a part."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + TMP_SUFFIX)
    try:
        with temporary.open("wb") as sink:
            read_through(source, buffer, progress, sink=sink)
            sink.flush()
            os.fsync(sink.fileno())
        st = source.stat()
        os.chmod(temporary, stat.S_IMODE(st.st_mode))
        os.utime(temporary, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _sync_dirs(directories: Iterable[Path]) -> None:
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def copy(
    source: Path,
    target: Path,
    margin: int,
    reading: Reading,
    disk_free: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> CopyPlan:
    must_be_a_directory(source)
    manifest = read_manifest(source)
    changed = changed_files(source, manifest)
    if changed:
        raise Failure(changed_since_verified(source, changed, 5) + " Nothing was copied.")
    st = (source / MANIFEST_REL).stat()
    files = [*model_files(source), ModelFile(MANIFEST_REL, st.st_size, st.st_mtime_ns)]  # the manifest last
    with _locked(target):
        return _copy(source, target, files, manifest, margin, reading, disk_free)


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """One copy into a directory at a time: two would write the same temporary files."""
    path = target / MANIFEST_DIR / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        if not take_lock(handle):
            raise Failure(f"another `prewarm copy` into {target} is still running (it holds {path}); let it finish")
        yield


def _copy(
    source: Path,
    target: Path,
    files: list[ModelFile],
    manifest: Mapping[str, Any],
    margin: int,
    reading: Reading,
    disk_free: Callable[[Path], int],
) -> CopyPlan:
    log = reading.log
    removed = remove_leftovers(target)
    if removed:
        log(f"removed {removed} temporary file(s) left by an interrupted copy")
    plan = plan_copy(files, _stat_present(target, files))
    if not plan.files:
        log(f"{target} already holds all {len(files)} files of {source} unchanged (no bytes read)")
    else:
        free = disk_free(target)
        if plan.need > free - margin:
            raise Failure(
                f"not enough space in {target}: the copy needs {gib(plan.need)}, the filesystem has "
                f"{gib(free)} free and the margin is {gib(margin)}, so it is short of "
                f"{gib(plan.need - (free - margin))}. Free that much there, or lower --margin-gib; "
                "nothing was copied."
            )
        log(
            f"copying {len(plan.files)} file(s), {gib(plan.size)}, from {source} to {target}; "
            f"{len(plan.unchanged)} file(s) already there unchanged"
        )
        # A manifest of another revision must go first: until the new one lands (last), an interrupted
        # copy must not pass `model-sync check` as a complete model. The same manifest may stay, since
        # each file is renamed into place only with its final size and mtime.
        if any(f.rel == MANIFEST_REL for f in plan.files):
            (target / MANIFEST_REL).unlink(missing_ok=True)
        progress = reading.progress("copying", plan.size)
        buffer = bytearray(reading.chunk)
        for f in plan.files:  # the manifest is last (model_files does not list it)
            copy_file(source / f.rel, target / f.rel, buffer, progress)
        _sync_dirs({(target / f.rel).parent for f in plan.files})
        log(progress.summary(f"copied {len(plan.files)} file(s):"))
    strays = sorted({f.rel for f in model_files(target)} - {f.rel for f in files})
    if strays:
        log(
            f"left alone {len(strays)} file(s) in {target} that {source} does not have: {listed(strays, 5)}"
            " (remove them if vLLM should not see them)"
        )
    changed = changed_files(target, manifest)
    if changed:
        raise Failure(
            f"the copy in {target} does not match the manifest: {listed(changed, 5)}; "
            f"did {source} change during the copy? Run the copy again."
        )
    log(
        f"{target} matches the manifest of {manifest.get('repo')}@{manifest.get('revision')}: "
        f"{len(manifest['files'])} files (`model-sync check --dir {target}` says the same)"
    )
    return plan


def cgroup_read_bytes(unit: str, root: Path = CGROUP_ROOT) -> int | None:
    """Bytes a systemd service has read from block devices since its cgroup was made (it goes with
    the unit): the rbytes of /sys/fs/cgroup/system.slice/UNIT/io.stat, summed over devices. None when
    there is no such file (the unit is not running, or systemd does not account its I/O: IOAccounting=).
    Reads over NFS do not go through a block device and are not counted."""
    if not unit.endswith((".service", ".scope")):
        unit += ".service"
    try:
        text = (root / "system.slice" / unit / "io.stat").read_text()
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if key == "rbytes":
                total += int(value)
    return total


def _overlap(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="prewarm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_cache = sub.add_parser("cache", help="read the model into the page cache, as far as free RAM allows")
    p_copy = sub.add_parser("copy", help="copy the model to a host-local staging directory")
    for p, margin in ((p_cache, "of MemAvailable left unread"), (p_copy, "left free on the staging filesystem")):
        p.add_argument("--dir", required=True, type=Path, help="the model's directory")
        p.add_argument("--margin-gib", type=float, default=DEFAULT_MARGIN_GIB, help=f"GiB {margin} (default 8)")
        p.add_argument("--report-every", type=float, default=10.0, help="seconds between progress lines (10)")
    p_copy.add_argument("--to", required=True, type=Path, help="the staging directory")
    p_resident = sub.add_parser("resident", help="print how much of the model the page cache holds (JSON)")
    p_resident.add_argument("--dir", required=True, type=Path, help="the model's directory")
    p_read = sub.add_parser("read-bytes", help="print the bytes UNIT's cgroup read from block devices")
    p_read.add_argument("--unit", required=True)
    args = parser.parse_args(argv)
    if getattr(args, "margin_gib", 0.0) < 0 or getattr(args, "report_every", 0.0) < 0:
        parser.error("--margin-gib and --report-every take a number of at least 0")
    if args.command == "copy" and _overlap(args.dir, args.to):
        parser.error(f"--to {args.to} overlaps --dir {args.dir}; pick a staging directory outside the model's")
    try:
        if args.command == "cache":
            cache(args.dir, int(args.margin_gib * GIB), Reading(args.report_every))
        elif args.command == "copy":
            copy(args.dir, args.to, int(args.margin_gib * GIB), Reading(args.report_every))
        elif args.command == "resident":
            print(json.dumps(residency(args.dir).to_dict(), sort_keys=True))
        else:
            read = cgroup_read_bytes(args.unit, CGROUP_ROOT)
            if read is None:
                raise Failure(
                    f"no io.stat for {args.unit} under {CGROUP_ROOT}/system.slice: is it running, with "
                    "IOAccounting=yes (or DefaultIOAccounting=yes in systemd's system.conf)?"
                )
            print(read)
    except Failure as failure:
        print(f"prewarm: {failure}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"prewarm: {error}; nothing more was done", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
