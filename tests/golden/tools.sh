#!/usr/bin/env bash
# vllm-fleet tools.sh: parameters rendered from the stack config
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
# vllm-fleet host tools: the GPU-release guard, readiness check, model verifier and /dev/shm cleaner
# that units and steps call on the host. The files follow this header; each is written atomically.
set -euo pipefail

install -d -m 0755 "$TOOLS_DIR"
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env bash
# vllm-fleet clean-shm: remove shared-memory segments a previous vLLM run left behind.
# Stale psm_*/sem.mp-* segments from a killed engine broke later launches in production; the unit runs
# this before it starts and after it stops. A segment still mapped or open by a live process (another
# deployment on the same host) is kept.
set -euo pipefail
shopt -s nullglob

in_use() {
  local segment=$1
  grep -qsF -- "$segment" /proc/[0-9]*/maps && return 0
  [ -n "$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$segment" -print -quit 2>/dev/null)" ]
}

removed=0
kept=0
for segment in /dev/shm/psm_* /dev/shm/sem.mp-* /dev/shm/*vllm* /dev/shm/*nccl*; do
  [ -e "$segment" ] || continue
  if in_use "$segment"; then
    kept=$((kept + 1))
    continue
  fi
  rm -f -- "$segment"
  removed=$((removed + 1))
done
echo "clean-shm: removed $removed stale segment(s) from /dev/shm, kept $kept in use"
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/clean-shm
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env python3
"""vllm-fleet GPU-release guard: runs as ExecStartPre of every vLLM unit.

In production, tensor-parallel workers and engine cores outlived their API server and kept GPU memory
after the service was stopped; the next launch then failed. This guard waits until the deployment's
GPUs are released and stops stray holders itself, within a bound, or fails with the PIDs it could not
stop. It never touches a process that belongs to another running vLLM unit: that is a conflict between
deployments, reported instead. Standard library only: it runs with whatever python the host has.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuMemory:
    index: int
    used_mib: int


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    name: str
    used_mib: int
    # GPU indices it holds, from nvidia-smi's gpu_uuid; None when nvidia-smi did not say.
    gpus: frozenset[int] | None = None


def _number(field: str) -> int:
    """nvidia-smi prints '21090', '21090 MiB' (units on) or '[N/A]'; the latter counts as 0."""
    value = field.strip().removesuffix("MiB").strip()
    if not value or value.startswith("["):
        return 0
    return int(float(value))


def parse_csv(text: str, fields: list[str]) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-*=... --format=csv[,noheader][,nounits]` keyed by field name."""
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if cells[0].split(" [")[0] == fields[0]:
            continue  # a header line: "index, name, memory.total [MiB]"
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi printed {len(cells)} columns, expected {len(fields)}: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


# The exact queries recorded in shared/fixtures/nvidia-smi (mem-busy.csv, compute-apps-*.csv).
MEMORY_QUERY = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"]
GPU_UUID_QUERY = ["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]


def parse_gpu_memory(text: str) -> list[GpuMemory]:
    rows = parse_csv(text, ["index", "memory.used"])
    return [GpuMemory(int(r["index"]), _number(r["memory.used"])) for r in rows]


def parse_compute_apps(text: str, uuids: dict[str, int] | None = None) -> list[ComputeApp]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory,process_name` (one row per process and GPU), merged
    per process with its GPUs as indices; the older `pid,process_name,used_memory` form is read too."""
    merged: dict[int, ComputeApp] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",", 3)]
        if cells[0] == "pid":
            continue
        if len(cells) == 4:  # pid, gpu_uuid, used_memory, process_name
            pid, uuid, used, name = int(cells[0]), cells[1], _number(cells[2]), cells[3]
            gpu = (uuids or {}).get(uuid)
            gpus = frozenset({gpu}) if gpu is not None else None
        elif len(cells) == 3:  # pid, process_name, used_memory
            pid, name, used, gpus = int(cells[0]), cells[1], _number(cells[2]), None
        else:
            raise ValueError(f"nvidia-smi printed {len(cells)} columns: {line!r}")
        known = merged.get(pid)
        if known is None:
            merged[pid] = ComputeApp(pid, name, used, gpus)
        else:
            both = None if known.gpus is None or gpus is None else known.gpus | gpus
            merged[pid] = ComputeApp(pid, name, known.used_mib + used, both)
    return list(merged.values())


def parse_gpu_uuids(text: str) -> dict[str, int]:
    rows = parse_csv(text, ["index", "uuid"])
    return {r["uuid"]: int(r["index"]) for r in rows}


def device_holders(proc: str = "/proc") -> dict[int, frozenset[int]]:
    """Processes with a /dev/nvidiaN open, and the N's: a child forked after CUDA initialisation holds its
    parent's memory without nvidia-smi listing it (fixtures/nvidia-smi/dead-parent-trace.txt)."""
    found: dict[int, frozenset[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        minors = set()
        try:
            for fd in os.listdir(f"{proc}/{entry}/fd"):
                target = os.readlink(f"{proc}/{entry}/fd/{fd}")
                if target.startswith("/dev/nvidia") and target[len("/dev/nvidia") :].isdigit():
                    minors.add(int(target[len("/dev/nvidia") :]))
        except OSError:
            continue
        if minors:
            found[int(entry)] = frozenset(minors)
    return found


Runner = Callable[[list[str]], str]


def run_nvidia_smi(args: list[str]) -> str:
    binary = os.environ.get("VLLM_FLEET_NVIDIA_SMI", "nvidia-smi")
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def read_memory(run: Runner) -> list[GpuMemory]:
    return parse_gpu_memory(run(MEMORY_QUERY))


def read_apps(
    run: Runner,
    devices: Callable[[], dict[int, frozenset[int]]] = lambda: {},
    is_alive: Callable[[int], bool] = lambda pid: alive(pid),
) -> list[ComputeApp]:
    """What holds GPU memory: nvidia-smi's list by GPU UUID, without PIDs that are gone (it keeps naming a
    killed parent while a child holds its memory), plus live holders of /dev/nvidiaN it does not list."""
    apps = [a for a in parse_compute_apps(run(APPS_QUERY), parse_gpu_uuids(run(GPU_UUID_QUERY))) if is_alive(a.pid)]
    listed = {a.pid for a in apps}
    for pid, minors in devices().items():
        if pid not in listed:
            apps.append(ComputeApp(pid, _comm(pid), 0, minors))
    return apps


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def _parent(pid: int, proc: str) -> int:
    try:
        with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def visible_gpus(pid: int, proc: str = "/proc") -> set[int] | None:
    """GPUs a process was started with (CUDA_VISIBLE_DEVICES of it or its nearest ancestor that set
    it: vLLM's engine core and workers drop the variable but use their server's devices), or None
    when it could use any."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            with open(f"{proc}/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            return None
        for entry in entries:
            if entry.startswith(b"CUDA_VISIBLE_DEVICES="):
                value = entry.split(b"=", 1)[1].decode(errors="replace")
                try:
                    return {int(v) for v in value.split(",") if v.strip()}
                except ValueError:
                    return None  # UUID form: cannot tell, so treat it as possibly ours
        pid = _parent(pid, proc)
    return None


def unit_of(pid: int, proc: str = "/proc") -> str | None:
    """The systemd service a process runs in, from its cgroup path, or None."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            for line in handle:
                path = line.rstrip("\n").split(":", 2)[-1]
                for part in reversed(path.split("/")):
                    if part.endswith(".service"):
                        return part
    except OSError:
        return None
    return None


# A unit in these states holds (or is about to hold) its GPUs: a 36-minute load is `activating`.
RUNNING_STATES = frozenset({"active", "activating", "reloading"})
MANAGED_MARK = "# Managed by vllm-fleet"


def unit_is_active(unit: str) -> bool:
    """Running in systemd's sense: serving, or still starting (loading a model)."""
    result = subprocess.run(
        ["systemctl", "show", unit, "--property=ActiveState", "--value"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() in RUNNING_STATES


def unit_is_managed(unit: str) -> bool:
    """Whether vllm-fleet wrote the unit's file (its first line says so)."""
    result = subprocess.run(
        ["systemctl", "show", unit, "--property=FragmentPath", "--value"], capture_output=True, text=True, check=False
    )
    path = result.stdout.strip()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().startswith(MANAGED_MARK)
    except OSError:
        return False


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())[:200]
    except OSError:
        return "?"


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie holds no GPU memory)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_processes(pids: list[int], grace: float, log: Callable[[str], None]) -> list[int]:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; return the PIDs still alive after that."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            log(f"sent SIGTERM to stray GPU holder PID {pid}")
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                log(f"sent SIGKILL to PID {pid}, which ignored SIGTERM for {grace:g} s")
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@dataclass
class GuardResult:
    released: bool
    message: str


def guard(
    gpus: list[int],
    threshold_mib: int,
    timeout: float,
    own_unit: str,
    run: Runner = run_nvidia_smi,
    unit_lookup: Callable[[int], str | None] = unit_of,
    gpus_of: Callable[[int], set[int] | None] = visible_gpus,
    is_active: Callable[[str], bool] = unit_is_active,
    stop: Callable[[list[int], float, Callable[[str], None]], list[int]] = stop_processes,
    log: Callable[[str], None] = print,
    poll: float = 0.5,
    settle: float = 5.0,
    exclude: frozenset[int] = frozenset(),
    adopted: frozenset[str] = frozenset(),
    foreign: str = "stop",
    is_managed: Callable[[str], bool] = lambda unit: False,
    describe: Callable[[int], str] = command_line,
    devices: Callable[[], dict[int, frozenset[int]]] = lambda: {},
    is_alive: Callable[[int], bool] = lambda pid: alive(pid),
) -> GuardResult:
    """Wait until `gpus` are released, stopping what holds them, within `timeout` seconds.

    Each holder is judged by its systemd unit (its cgroup): this deployment's unit, a unit the stack
    adopts (`adopted`) and leftovers of a stopped vllm-fleet unit are stopped; a process of another unit
    that is running or loading is a conflict, never stopped; anything else (no unit, a login session, a
    unit vllm-fleet does not manage) is foreign: stopped when `foreign` is "stop", otherwise the guard
    fails at once with its PID, command line and unit."""
    start = time.monotonic()
    deadline = start + timeout
    wanted = set(gpus)
    unstoppable: list[int] = []
    last_report = 0.0
    while True:
        memory = [m for m in read_memory(run) if m.index in wanted]
        missing = wanted - {m.index for m in memory}
        if missing:
            return GuardResult(False, f"nvidia-smi does not list GPU(s) {sorted(missing)} on this host")
        worst = max(memory, key=lambda m: m.used_mib)
        elapsed = time.monotonic() - start
        if worst.used_mib < threshold_mib:
            return GuardResult(
                True,
                f"GPUs {','.join(map(str, gpus))} released: max {worst.used_mib} MiB < {threshold_mib} MiB after {elapsed:.1f} s",
            )
        # The recorded query does not say which GPU a process uses; the process's own
        # CUDA_VISIBLE_DEVICES does, for everything vLLM starts.
        conflicts = []
        strays = []
        foreigners = []
        for app in read_apps(run, devices, is_alive):
            if app.pid in exclude:
                continue  # this guard and the unit start that runs it
            visible = app.gpus if app.gpus is not None else gpus_of(app.pid)
            if visible is not None and not visible & wanted:
                continue  # a process on other GPUs
            unit = unit_lookup(app.pid)
            if unit == own_unit or (unit is not None and unit in adopted):
                strays.append(app)
            elif unit is not None and is_active(unit) and (unit.startswith("vllm-") or is_managed(unit)):
                conflicts.append(f"PID {app.pid} ({app.name}, {app.used_mib} MiB) of running unit {unit}")
            elif unit is not None and is_managed(unit):
                strays.append(app)  # a leftover of a stopped vllm-fleet unit
            elif foreign == "stop":
                strays.append(app)
            else:
                foreigners.append(
                    f"PID {app.pid} ({describe(app.pid)}, {app.used_mib} MiB) of {unit or 'no systemd unit'}"
                )
        if foreigners:
            return GuardResult(
                False,
                "GPUs "
                + ",".join(map(str, gpus))
                + " are held by processes vllm-fleet does not manage: "
                + "; ".join(foreigners)
                + ". Stop them, add their unit to deployments[].replaces, or set "
                "deployments[].foreignGpuProcesses: stop to let vllm-fleet stop them.",
            )
        if conflicts:
            return GuardResult(
                False,
                "GPUs are held by another running deployment: "
                + "; ".join(conflicts)
                + ". Stop that deployment or give this one other GPUs (deployments[].gpus).",
            )
        if time.monotonic() >= deadline:
            held = ", ".join(f"PID {a.pid} ({a.name}, {a.used_mib} MiB)" for a in strays) or "no process listed"
            detail = f"; could not stop PIDs {unstoppable}" if unstoppable else ""
            return GuardResult(
                False,
                f"GPU {worst.index} still holds {worst.used_mib} MiB (threshold {threshold_mib} MiB) after "
                f"{timeout:g} s: {held}{detail}",
            )
        # Give a just-stopped engine a moment to exit on its own before stopping what is left.
        if strays and elapsed >= min(settle, timeout / 4):
            pids = sorted({a.pid for a in strays})
            log(f"stopping stray GPU holders {pids} on GPUs {','.join(map(str, gpus))}")
            unstoppable = stop(pids, 10.0, log)
        if elapsed - last_report >= 5:
            log(
                f"waiting for GPUs {','.join(map(str, gpus))}: GPU {worst.index} uses {worst.used_mib} MiB ({elapsed:.0f}/{timeout:g} s)"
            )
            last_report = elapsed
        time.sleep(poll)


def ancestors(pid: int) -> frozenset[int]:
    """A process and its parents, up to PID 1."""
    found = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        pid = _parent(pid, "/proc")
    return frozenset(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", required=True, help="comma-separated GPU indices, or 'none'")
    parser.add_argument("--threshold-mib", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--unit", default="")
    parser.add_argument("--adopt", action="append", default=[], help="a unit the stack replaces (repeatable)")
    parser.add_argument(
        "--foreign", choices=["stop", "refuse"], default="refuse", help="what to do with holders of no managed unit"
    )
    args = parser.parse_args(argv)
    if args.gpus == "none":
        print("no GPUs assigned; nothing to release")
        return 0
    gpus = [int(g) for g in args.gpus.split(",")]
    try:
        result = guard(
            gpus,
            args.threshold_mib,
            args.timeout,
            args.unit,
            log=lambda m: print(m, flush=True),
            exclude=ancestors(os.getpid()),
            adopted=frozenset(args.adopt),
            foreign=args.foreign,
            is_managed=unit_is_managed,
            devices=device_holders,
        )
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as error:
        print(f"gpu-release-guard: {error}", file=sys.stderr)
        return 1
    print(
        ("" if result.released else "gpu-release-guard: ") + result.message,
        file=sys.stdout if result.released else sys.stderr,
    )
    return 0 if result.released else 1


if __name__ == "__main__":
    sys.exit(main())
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp /usr/local/lib/vllm-fleet/gpu-release-guard
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env python3
"""vllm-fleet model-sync: download a pinned Hugging Face revision and prove every byte of it.

    model-sync sync   --repo ORG/NAME --revision REV --dir DIR [--margin-gb N]
    model-sync check  --dir DIR        # stat-only: have the verified files changed since? (ExecStartPre)
    model-sync verify --dir DIR [--repair]   # re-hash everything, as a user would before trusting a disk

A manifest in DIR/.vllm-fleet/manifest.json records `repo@sha` and, per file, its size, mtime and hash
as checked against the repository's metadata (sha256 for LFS files, git blob sha1 for the rest). Later
runs compare sizes and mtimes with it instead of re-reading 500 GB. The download itself is `hf download`
(the client users know, honouring HF_ENDPOINT and HF_TOKEN from the environment), watched by a thread
that prints progress; partial files a killed run left behind are removed before it starts.
Runs with the host's vLLM python, which brings huggingface_hub.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_DIR = ".vllm-fleet"
MANIFEST = "manifest.json"
HF_CACHE = Path(".cache") / "huggingface"
CHUNK = 8 * 1024 * 1024


def log(message: str) -> None:
    try:
        print(f"model-sync: {message}", flush=True)
    except BrokenPipeError:
        # The controller's SSH session is gone (a killed `pulumi up`): stop now, and take `hf download`
        # along (it dies with us, see _die_with_parent), so the next run resumes from a clean state.
        os._exit(1)


def _die_with_parent() -> None:
    """In the `hf download` child: receive SIGTERM when model-sync exits, however it exits."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str  # git blob sha1, for the small ones


def repo_files(repo: str, revision: str, endpoint: str | None) -> tuple[str, list[RemoteFile]]:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint)
    info = api.model_info(repo, revision=revision)
    sha = info.sha or revision
    files = []
    for entry in api.list_repo_tree(repo, revision=sha, recursive=True):
        size = getattr(entry, "size", None)
        blob_id = getattr(entry, "blob_id", None)
        if size is None or blob_id is None:
            continue  # folders
        lfs = getattr(entry, "lfs", None)
        sha256 = None
        if lfs is not None:
            sha256 = lfs["sha256"] if isinstance(lfs, dict) else lfs.sha256
        files.append(RemoteFile(entry.path, int(size), sha256, blob_id))
    return sha, sorted(files, key=lambda f: f.path)


def hash_file(path: Path, remote: RemoteFile) -> str:
    if remote.sha256 is not None:
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1()
        digest.update(f"blob {remote.size}\0".encode())
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def expected_hash(remote: RemoteFile) -> str:
    return remote.sha256 if remote.sha256 is not None else remote.blob_id


def manifest_path(directory: Path) -> Path:
    return directory / MANIFEST_DIR / MANIFEST


def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(manifest_path(directory).read_text())
        return data
    except (OSError, ValueError):
        return None


def write_manifest(
    directory: Path, repo: str, sha: str, entries: dict[str, dict[str, Any]], complete: bool = True
) -> None:
    """`complete` is true only when `entries` covers every file of the revision."""
    target = manifest_path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    document = {"repo": repo, "revision": sha, "files": entries, "complete": complete}
    tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
    os.replace(tmp, target)


def stat_entry(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def changed_files(directory: Path, manifest: dict[str, Any]) -> list[str]:
    """Files whose size or mtime differ from the manifest, or that are gone."""
    changed = []
    for rel, recorded in manifest["files"].items():
        path = directory / rel
        try:
            now = stat_entry(path)
        except OSError:
            changed.append(rel)
            continue
        if now["size"] != recorded["size"] or now["mtime_ns"] != recorded["mtime_ns"]:
            changed.append(rel)
    return changed


def remove_partials(directory: Path) -> int:
    """Delete what a killed `hf download` left behind: *.incomplete files and stale locks."""
    removed = 0
    download_dir = directory / HF_CACHE / "download"
    if download_dir.is_dir():
        for path in list(download_dir.rglob("*.incomplete")) + list(download_dir.rglob("*.lock")):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def forget_file(directory: Path, rel: str) -> None:
    """Remove a bad file and the client's metadata for it, so `hf download` fetches it again."""
    (directory / rel).unlink(missing_ok=True)
    (directory / HF_CACHE / "download" / f"{rel}.metadata").unlink(missing_ok=True)


def hf_cli() -> str:
    candidate = Path(sys.executable).with_name("hf")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("hf")
    if found is None:
        raise SystemExit("model-sync: the `hf` CLI (huggingface_hub) is not installed next to " + sys.executable)
    return found


class Progress(threading.Thread):
    """Prints how much of the download is on disk every `every` seconds while `hf download` runs."""

    def __init__(self, directory: Path, files: list[RemoteFile], every: float) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.files = files
        self.every = every
        self.done = threading.Event()
        self.total = sum(f.size for f in files)

    def on_disk(self) -> tuple[int, int]:
        present = 0
        complete = 0
        for f in self.files:
            final = self.directory / f.path
            if final.exists():
                present += f.size
                complete += 1
        partial_dir = self.directory / HF_CACHE / "download"
        if partial_dir.is_dir():
            present += sum(p.stat().st_size for p in partial_dir.rglob("*.incomplete") if p.exists())
        return present, complete

    def run(self) -> None:
        start = time.monotonic()
        start_bytes, _ = self.on_disk()
        while not self.done.wait(self.every):
            present, complete = self.on_disk()
            elapsed = time.monotonic() - start
            rate = (present - start_bytes) / elapsed / 1e6 if elapsed > 0 else 0.0
            log(
                f"downloading: {present / 1e9:.2f} of {self.total / 1e9:.2f} GB on disk, "
                f"{complete}/{len(self.files)} files, {rate:.1f} MB/s"
            )


def run_hf_download(
    repo: str,
    sha: str,
    directory: Path,
    files: list[RemoteFile],
    only: list[str] | None,
    every: float,
    attempts: int = 4,
) -> None:
    """`hf download`, run again when it fails: the client retries a cleanly closed connection itself,
    but gives up on a reset one, and a fresh run resumes from the files already complete."""
    command = [hf_cli(), "download", repo, *(only or []), "--revision", sha, "--local-dir", str(directory)]
    log(f"running: {' '.join(command)}")
    for attempt in range(1, attempts + 1):
        progress = Progress(directory, [f for f in files if only is None or f.path in only], every)
        progress.start()
        try:
            # The CLI's own progress bars are carriage-return animations; our thread prints plain lines.
            result = subprocess.run(
                command,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
                preexec_fn=_die_with_parent,
            )
        finally:
            progress.done.set()
        if result.returncode == 0:
            return
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        if attempt == attempts or not transient(result.stderr):
            raise SystemExit(f"model-sync: hf download failed (exit {result.returncode}, attempt {attempt}):\n{tail}")
        delay = 2 * attempt
        log(
            f"hf download failed (attempt {attempt}/{attempts}), retrying in {delay} s: {tail.splitlines()[-1] if tail else ''}"
        )
        time.sleep(delay)


# Errors a new attempt can fix; a missing repo, revision or file, or a refused token, it cannot.
PERMANENT_ERRORS = ("not found", "Access denied", "Invalid credentials", "requires approval", "401", "403")


def transient(stderr: str) -> bool:
    return not any(marker in stderr for marker in PERMANENT_ERRORS)


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def sync(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST_DIR).mkdir(exist_ok=True)
    lock = (directory / MANIFEST_DIR / "lock").open("w")
    waited = 0.0
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            # A download of an interrupted run may still be finishing: wait for it, then continue from it.
            if waited >= args.lock_wait:
                raise SystemExit(
                    f"model-sync: another download into {directory} still runs after {waited:.0f} s"
                ) from None
            if waited % 30 == 0:
                log(f"waiting for another download into {directory} to finish")
            time.sleep(1)
            waited += 1
    manifest = read_manifest(directory)
    if (
        manifest is not None
        and manifest.get("complete") is True
        and manifest.get("repo") == args.repo
        and manifest.get("revision") == args.revision
        and not changed_files(directory, manifest)
    ):
        log(
            f"{args.repo}@{args.revision} is complete: {len(manifest['files'])} files match the manifest (no bytes read)"
        )
        return 0
    sha, files = repo_files(args.repo, args.revision, os.environ.get("HF_ENDPOINT"))
    verified: dict[str, dict[str, Any]] = {}
    if manifest is not None and manifest.get("repo") == args.repo and manifest.get("revision") == sha:
        stale = set(changed_files(directory, manifest))
        verified = {k: v for k, v in manifest["files"].items() if k not in stale}
    by_path = {f.path: f for f in files}
    missing = [f for f in files if f.path not in verified]
    need = sum(f.size for f in missing if not (directory / f.path).exists())
    free = free_bytes(directory)
    margin = int(args.margin_gb * 1e9)
    if need > free - margin:
        raise SystemExit(
            f"model-sync: not enough space for {args.repo}@{sha[:12]} in {directory}: it needs "
            f"{need / 1e9:.2f} GB more, the filesystem has {free / 1e9:.2f} GB free and the margin is "
            f"{args.margin_gb:g} GB (vllm-fleet:storage[].freeMarginGb). Nothing was downloaded."
        )
    removed = remove_partials(directory)
    if removed:
        log(f"removed {removed} partial file(s) left by an interrupted download")
    for attempt in (1, 2):
        todo = [f.path for f in files if f.path not in verified]
        if not todo:
            break
        # The whole revision on a fresh directory; only the missing or bad files otherwise.
        only = None if not verified and attempt == 1 else todo
        run_hf_download(args.repo, sha, directory, files, only, args.progress_every)
        bad = []
        for rel in todo:
            remote = by_path[rel]
            path = directory / rel
            if (
                not path.exists()
                or path.stat().st_size != remote.size
                or hash_file(path, remote) != expected_hash(remote)
            ):
                bad.append(rel)
                forget_file(directory, rel)
            else:
                verified[rel] = {**stat_entry(path), "hash": expected_hash(remote)}
        if bad:
            log(f"attempt {attempt}: {len(bad)} file(s) failed verification and were removed: {', '.join(bad)}")
    bad = [f.path for f in files if f.path not in verified]
    if bad:
        raise SystemExit(f"model-sync: files still fail verification after a second download: {', '.join(bad)}")
    write_manifest(directory, args.repo, sha, verified)
    total = sum(f.size for f in files)
    log(f"{args.repo}@{sha} complete and verified: {len(files)} files, {total / 1e9:.3f} GB")
    return 0


def check(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    manifest = read_manifest(directory)
    if manifest is None:
        print(f"model-sync: {directory} has no verified manifest; run `pulumi up` to download it", file=sys.stderr)
        return 1
    changed = changed_files(directory, manifest)
    if changed:
        print(
            f"model-sync: {len(changed)} file(s) in {directory} changed since they were verified: "
            f"{', '.join(changed)}. Run `model-sync verify --repair --dir {directory}` to re-check and re-fetch them.",
            file=sys.stderr,
        )
        return 1
    print(f"model-sync: {manifest['repo']}@{manifest['revision']}: {len(manifest['files'])} files unchanged")
    return 0


def verify(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    manifest = read_manifest(directory)
    if manifest is None:
        print(f"model-sync: {directory} has no manifest to verify against", file=sys.stderr)
        return 1
    bad = []
    for rel, recorded in sorted(manifest["files"].items()):
        path = directory / rel
        remote = RemoteFile(
            rel, recorded["size"], recorded["hash"] if len(recorded["hash"]) == 64 else None, recorded["hash"]
        )
        if not path.exists() or path.stat().st_size != remote.size or hash_file(path, remote) != recorded["hash"]:
            bad.append(rel)
    if not bad:
        print(f"model-sync: all {len(manifest['files'])} files of {manifest['repo']}@{manifest['revision']} verified")
        return 0
    print(f"model-sync: corrupt or missing: {', '.join(bad)}", file=sys.stderr)
    if not args.repair:
        return 1
    for rel in bad:
        forget_file(directory, rel)
    files = dict(manifest["files"])
    for rel in bad:
        files.pop(rel)
    write_manifest(directory, manifest["repo"], manifest["revision"], files, complete=False)
    return sync(
        argparse.Namespace(
            dir=str(directory),
            repo=manifest["repo"],
            revision=manifest["revision"],
            margin_gb=0.0,
            progress_every=args.progress_every,
            lock_wait=600.0,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_sync = sub.add_parser("sync")
    p_sync.add_argument("--repo", required=True)
    p_sync.add_argument("--revision", required=True)
    p_sync.add_argument("--dir", required=True)
    p_sync.add_argument("--margin-gb", type=float, default=0.0)
    p_sync.add_argument("--progress-every", type=float, default=10.0)
    p_sync.add_argument("--lock-wait", type=float, default=600.0)
    p_check = sub.add_parser("check")
    p_check.add_argument("--dir", required=True)
    p_verify = sub.add_parser("verify")
    p_verify.add_argument("--dir", required=True)
    p_verify.add_argument("--repair", action="store_true")
    p_verify.add_argument("--progress-every", type=float, default=10.0)
    args = parser.parse_args(argv)
    handlers = {"sync": sync, "check": check, "verify": verify}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env python3
"""vllm-fleet survey: what already runs on a host, read-only, as one JSON document on stdout.

The controller runs it over SSH while it evaluates the program (`pulumi preview` too), before the tools
are installed, by piping this file into the host's python; the swap transaction runs it again right
before it stops anything. It reports:
  units       every vllm-*.service: active state, enabled, whether vllm-fleet manages it (its first line)
  listeners   TCP listening ports with the PID and systemd unit that holds them (`ss -ltnpH`)
  gpuHolders  processes nvidia-smi lists per GPU (`--query-compute-apps=pid,gpu_uuid,...` mapped to indices
              with `--query-gpu=index,uuid`), with their unit and command line
A process's unit is the last *.service of its cgroup path; a login session's scope or no cgroup means
it belongs to no unit. Standard library only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

MANAGED_MARK = "# Managed by vllm-fleet"
MANAGED_BY = re.compile(r"^# Managed by vllm-fleet: stack (\S+?), deployment (\S+?)\. ")


def run(*args: str) -> str:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def unit_of_pid(pid: int, proc: str = "/proc") -> str | None:
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            for line in handle:
                for part in reversed(line.rstrip("\n").split(":", 2)[-1].split("/")):
                    if part.endswith(".service"):
                        return part
    except OSError:
        return None
    return None


def command_line(pid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            return " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())[:300]
    except OSError:
        return ""


_SS_LINE = re.compile(r"^\S+\s+\d+\s+\d+\s+(\S+):(\d+)\s+\S+\s*(.*)$")
_SS_PID = re.compile(r"pid=(\d+)")


def parse_ss(text: str) -> list[dict[str, Any]]:
    """`ss -ltnpH` lines: one entry per (address, port, pid)."""
    found = []
    for line in text.splitlines():
        match = _SS_LINE.match(line.strip())
        if not match:
            continue
        address, port, users = match.group(1), int(match.group(2)), match.group(3)
        pids = sorted({int(p) for p in _SS_PID.findall(users)}) or [0]
        for pid in pids:
            found.append({"address": address.strip("[]"), "port": port, "pid": pid})
    return found


def parse_gpu_uuids(text: str) -> dict[str, int]:
    """`nvidia-smi --query-gpu=index,uuid --format=csv,noheader,nounits` as uuid -> index."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 2 and cells[0].isdigit():
            out[cells[1]] = int(cells[0])
    return out


def parse_compute_apps(text: str, uuids: dict[str, int]) -> list[dict[str, Any]]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory,process_name` rows merged per PID."""
    holders: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 3)]
        if len(cells) < 4 or not cells[0].isdigit():
            continue
        pid = int(cells[0])
        entry = holders.setdefault(pid, {"pid": pid, "gpus": [], "usedMib": 0, "name": cells[3]})
        if cells[1] in uuids and uuids[cells[1]] not in entry["gpus"]:
            entry["gpus"].append(uuids[cells[1]])
        used = cells[2].removesuffix("MiB").strip()
        entry["usedMib"] += int(float(used)) if used and not used.startswith("[") else 0
    return [dict(h, gpus=sorted(h["gpus"])) for h in holders.values()]


def units() -> list[dict[str, Any]]:
    listing = run("systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=service", "vllm-*")
    files = run("systemctl", "list-unit-files", "--plain", "--no-legend", "--type=service", "vllm-*")
    names = {line.split()[0] for line in (listing + files).splitlines() if line.split()}
    out = []
    for name in sorted(n for n in names if n.endswith(".service")):
        props = dict(
            line.split("=", 1)
            for line in run("systemctl", "show", name, "--property=ActiveState,UnitFileState,FragmentPath").splitlines()
            if "=" in line
        )
        fragment = props.get("FragmentPath", "")
        first_line = ""
        if fragment:
            try:
                with open(fragment, encoding="utf-8", errors="replace") as handle:
                    first_line = handle.readline()
            except OSError:
                pass
        owner = MANAGED_BY.match(first_line)
        out.append(
            {
                "name": name,
                "activeState": props.get("ActiveState", "inactive"),
                "enabled": props.get("UnitFileState") == "enabled",
                "managed": first_line.startswith(MANAGED_MARK),
                # stack.deployment of a vllm-fleet unit, from its first line
                "owner": f"{owner.group(1)}.{owner.group(2)}" if owner else None,
                "fragment": fragment,
            }
        )
    return out


def survey() -> dict[str, Any]:
    listeners = parse_ss(run("ss", "-ltnpH"))
    for entry in listeners:
        entry["unit"] = unit_of_pid(entry["pid"]) if entry["pid"] else None
        entry["cmd"] = command_line(entry["pid"]) if entry["pid"] else ""
    uuids = parse_gpu_uuids(run("nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader,nounits"))
    holders = parse_compute_apps(
        run(
            "nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"
        ),
        uuids,
    )
    for holder in holders:
        holder["unit"] = unit_of_pid(holder["pid"])
        holder["cmd"] = command_line(holder["pid"])
    return {"units": units(), "listeners": listeners, "gpuHolders": holders}


def main() -> int:
    json.dump(survey(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp /usr/local/lib/vllm-fleet/survey
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env python3
"""vllm-fleet swap: make a deployment serve its staged unit, as a transaction that the host finishes.

    swap start --plan PLAN.json   what the Pulumi step runs: start the transaction as a transient systemd
                                  unit (or attach to the one already running for this deployment), print
                                  its journal as it goes, and exit with its result
    swap run --plan PLAN.json     the transaction itself, inside that unit

Everything that can fail is checked while the old model still serves (claims on GPUs, port and unit
name, the model files against their manifest, the staged unit; the unit step already had the host's
vLLM parse the launch). Then, in order: back up the units it replaces (the previous managed unit, a
hand-made unit of the same name, and the hand-made units the stack names in `replaces`), install the new
unit, stop and disable the old ones, start the new one and wait until it serves (its ExecStartPre guard
frees the GPUs, its ExecStartPost waits for readiness). If it does not serve in time, the new unit is
stopped, every backed-up unit file is put back, the units that ran before are started again and waited
for with their own start timeout, and the transaction reports the new unit's journal tail.

It runs in its own systemd unit (`systemd-run`), so a dropped SSH session or a killed controller neither
interrupts it nor leaves the host serving nothing; the result is written to the deployment's state
directory, where the next `swap start` finds it. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_ROOT = Path("/var/lib/vllm-fleet")
UNIT_DIR = Path("/etc/systemd/system")
ENV_DIR = Path("/etc/vllm-fleet")
MANAGED_MARK = "# Managed by vllm-fleet"
# A unit in these states holds (or is about to hold) its GPUs: a 36-minute load is `activating`.
RUNNING_STATES = frozenset({"active", "activating", "reloading"})
DEFAULT_START_TIMEOUT = 90.0  # systemd's DefaultTimeoutStartSec


@dataclass(frozen=True)
class Plan:
    stack: str
    deployment: str
    state_dir: str
    unit_name: str
    unit_stem: str
    served_name: str
    port: int
    gpus: tuple[int, ...]
    model_dir: str
    python: str
    tools_dir: str
    ready_timeout: int
    unit_sha256: str
    replaces: tuple[str, ...] = ()
    foreign_gpu_processes: str = "refuse"
    report_every: int = 15
    journal_lines: int = 40

    @property
    def owner(self) -> str:
        return f"{self.stack}.{self.deployment}"

    @property
    def transaction_unit(self) -> str:
        return f"vllm-fleet-swap-{self.owner}.service"

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["gpus"] = tuple(data.get("gpus", ()))
        data["replaces"] = tuple(data.get("replaces", ()))
        return cls(**data)


@dataclass
class Result:
    status: str  # succeeded | unchanged | refused | rolled-back | rollback-failed
    message: str
    plan_digest: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "unchanged")


class SwapRefused(Exception):
    """A check failed before anything was stopped."""


# ---- pure helpers -------------------------------------------------------------------------------------

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?")
_SPAN_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_timespan(text: str) -> float | None:
    """Seconds of a systemd time span as `systemctl show` prints it ("1h 4min 42s", "90s", "infinity")."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total = 0.0
    position = 0
    for match in _SPAN.finditer(text):
        if text[position : match.start()].strip():
            raise ValueError(f"not a systemd time span: {text!r}")
        total += float(match.group(1)) * _SPAN_SECONDS[match.group(2)]
        position = match.end()
    if text[position:].strip():
        raise ValueError(f"not a systemd time span: {text!r}")
    return total


@dataclass(frozen=True)
class Claims:
    """What one deployment holds on a host: a set per kind, rewritten whole on every swap."""

    gpus: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()
    units: frozenset[str] = frozenset()

    def to_json(self) -> str:
        return json.dumps({"gpus": sorted(self.gpus), "ports": sorted(self.ports), "units": sorted(self.units)})

    @classmethod
    def from_json(cls, text: str) -> Claims:
        data = json.loads(text)
        return cls(frozenset(data.get("gpus", ())), frozenset(data.get("ports", ())), frozenset(data.get("units", ())))


def claim_conflicts(owner: str, wanted: Claims, others: Mapping[str, Claims]) -> list[str]:
    """Sentences for every GPU, port or unit name another live deployment holds."""
    problems = []
    for other, held in sorted(others.items()):
        if other == owner:
            continue
        for gpu in sorted(wanted.gpus & held.gpus):
            problems.append(
                f"GPU {gpu} is claimed by deployment {other} on this host; the two stacks overlap. Give this "
                f"deployment other GPUs (deployments[].gpus) or destroy {other} first."
            )
        for port in sorted(wanted.ports & held.ports):
            problems.append(
                f"port {port} is claimed by deployment {other} on this host; choose another deployments[].port"
            )
        for unit in sorted(wanted.units & held.units):
            problems.append(
                f"unit {unit} belongs to deployment {other} on this host; set deployments[].unitName or use another model name"
            )
    return problems


def is_managed(unit_text: str) -> bool:
    return unit_text.startswith(MANAGED_MARK)


# ---- the host, as the transaction uses it -------------------------------------------------------------


class SystemdHost:
    """systemctl, journalctl and files; one place, so the transaction reads as its steps."""

    def run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, *(f"--property={p}" for p in props), check=False)
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def state(self, unit: str) -> str:
        return self.show(unit, "ActiveState").get("ActiveState", "inactive")

    def running(self, unit: str) -> bool:
        return self.state(unit) in RUNNING_STATES

    def enabled(self, unit: str) -> bool:
        return self.run("systemctl", "is-enabled", unit, check=False).strip() == "enabled"

    def unit_file(self, unit: str) -> Path | None:
        path = self.show(unit, "FragmentPath").get("FragmentPath", "")
        return Path(path) if path else None

    def start_timeout(self, unit: str) -> float:
        value = self.show(unit, "TimeoutStartUSec").get("TimeoutStartUSec", "")
        try:
            parsed = parse_timespan(value)
        except ValueError:
            return DEFAULT_START_TIMEOUT
        return DEFAULT_START_TIMEOUT if parsed is None and not value else (parsed or 24 * 3600.0)

    def journal_cursor(self) -> str:
        out = self.run("journalctl", "-n", "0", "--show-cursor", "-o", "cat", check=False)
        return next(
            (line.removeprefix("-- cursor: ") for line in out.splitlines() if line.startswith("-- cursor: ")), ""
        )

    def journal(self, unit: str, cursor: str, lines: int | None = None) -> tuple[list[str], str]:
        """Lines of `unit` after `cursor`, and the cursor after them."""
        args = ["journalctl", "-u", unit, "-o", "cat", "--no-pager", "--show-cursor"]
        if cursor:
            args += ["--after-cursor", cursor]
        out = self.run(*args, check=False).splitlines()
        new_cursor = cursor
        if out and out[-1].startswith("-- cursor: "):
            new_cursor = out.pop().removeprefix("-- cursor: ")
        return (out[-lines:] if lines else out), new_cursor


def now() -> float:
    return time.monotonic()


# ---- the transaction ----------------------------------------------------------------------------------


@dataclass
class Backup:
    unit: str
    file: Path | None  # where its unit file lived (None: it had none)
    saved: Path | None  # the copy in the state directory
    was_running: bool
    was_enabled: bool


class Transaction:
    def __init__(
        self,
        plan: Plan,
        host: SystemdHost | None = None,
        log: Callable[[str], None] = print,
        state_root: Path = STATE_ROOT,
        unit_dir: Path = UNIT_DIR,
        env_dir: Path = ENV_DIR,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.plan = plan
        self.host = host or SystemdHost()
        self._log = log
        self.state_root = state_root
        self.unit_dir = unit_dir
        self.env_dir = env_dir
        self.sleep = sleep
        self.state_dir = Path(plan.state_dir)
        self.timings: dict[str, float] = {}

    def log(self, message: str) -> None:
        self._log(f"[{self.plan.deployment}] {message}")

    # -- checks while the old model serves ------------------------------------------------------------

    def live_claims(self) -> dict[str, Claims]:
        claims: dict[str, Claims] = {}
        directory = self.state_root / "claims"
        if directory.is_dir():
            for path in directory.glob("*.json"):
                owner = path.name.removesuffix(".json")
                # A claim counts while its owner's deployment exists on this host.
                if (self.state_root / "deployments" / owner).is_dir():
                    claims[owner] = Claims.from_json(path.read_text(encoding="utf-8"))
        return claims

    def claim(self) -> None:
        wanted = Claims(frozenset(self.plan.gpus), frozenset({self.plan.port}), frozenset({self.plan.unit_name}))
        problems = claim_conflicts(self.plan.owner, wanted, self.live_claims())
        if problems:
            raise SwapRefused(" ".join(problems))
        directory = self.state_root / "claims"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.plan.owner}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(wanted.to_json(), encoding="utf-8")
        temporary.replace(path)

    def check_model(self) -> None:
        self.log(f"checking {self.plan.model_dir} against its verified manifest")
        result = subprocess.run(
            [self.plan.python, f"{self.plan.tools_dir}/model-sync", "check", "--dir", self.plan.model_dir],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in (result.stdout + result.stderr).splitlines():
            self.log(line)
        if result.returncode != 0:
            raise SwapRefused(f"the model files in {self.plan.model_dir} do not match their verified manifest")

    def survey(self) -> dict[str, Any]:
        result = subprocess.run(
            [self.plan.python, f"{self.plan.tools_dir}/survey"], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SwapRefused(f"the survey of this host failed: {result.stderr.strip()[-300:]}")
        found: dict[str, Any] = json.loads(result.stdout)
        return found

    def check_holders(self, leaving: Sequence[str]) -> None:
        """Refuse, before anything stops, when the port or the GPUs are held by what the swap will not stop."""
        found = self.survey()
        owners = {u["name"]: u.get("owner") for u in found.get("units", [])}

        def ours(unit: str | None) -> bool:
            return unit is not None and (unit in leaving or owners.get(unit) == self.plan.owner)

        problems = []
        for listener in found.get("listeners", []):
            if listener["port"] == self.plan.port and not ours(listener.get("unit")):
                problems.append(
                    f"port {self.plan.port} is held by PID {listener['pid']} ({listener.get('cmd', '')}) of "
                    f"{listener.get('unit') or 'no systemd unit'}; add its unit to deployments[].replaces or stop it"
                )
        for holder in found.get("gpuHolders", []):
            shared = set(holder.get("gpus", [])) & set(self.plan.gpus)
            unit = holder.get("unit")
            if not shared or ours(unit):
                continue
            if unit is None and self.plan.foreign_gpu_processes == "stop":
                continue  # the GPU-release guard stops it after the old units stopped
            problems.append(
                f"GPU {','.join(map(str, sorted(shared)))} is held by PID {holder['pid']} ({holder.get('cmd', '')}) of "
                f"{unit or 'no systemd unit'}; stop it, adopt its unit (deployments[].replaces) or set "
                "deployments[].foreignGpuProcesses: stop"
            )
        if problems:
            raise SwapRefused("; ".join(problems))

    # -- the swap -------------------------------------------------------------------------------------

    def active_record(self) -> dict[str, str]:
        path = self.state_dir / "active"
        if not path.is_file():
            return {}
        return dict(line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if "=" in line)

    def backup(self, unit: str, backups: Path) -> Backup:
        file = self.host.unit_file(unit)
        saved = None
        if file is not None and file.is_file():
            saved = backups / unit
            shutil.copy2(file, saved)
        return Backup(unit, file, saved, self.host.running(unit), self.host.enabled(unit))

    def run(self) -> Result:
        plan = self.plan
        started = now()
        staged_unit = self.state_dir / "staged" / plan.unit_name
        staged_env = self.state_dir / "staged" / f"{plan.unit_stem}.env"
        unit_path = self.unit_dir / plan.unit_name
        env_path = self.env_dir / f"{plan.unit_stem}.env"
        try:
            self.claim()
            if not staged_unit.is_file():
                raise SwapRefused(f"nothing staged at {staged_unit}; run pulumi up again")
            self.check_model()
            old_unit = self.active_record().get("UNIT", "")
            # Every unit that may hold this deployment's GPUs or port now, and must stop for the new one.
            leaving = [u for u in dict.fromkeys([old_unit, plan.unit_name, *plan.replaces]) if u]
            self.check_holders(leaving)
        except SwapRefused as refusal:
            return Result("refused", f"refused: {refusal}", plan.digest)

        if (
            old_unit == plan.unit_name
            and _same(staged_unit, unit_path)
            and _same(staged_env, env_path)
            and self.host.running(plan.unit_name)
            and not [u for u in plan.replaces if self.host.running(u)]
        ):
            state = self.host.state(plan.unit_name)
            return Result(
                "unchanged",
                f"{plan.unit_name} already serves {plan.served_name} with this configuration ({state})",
                plan.digest,
            )

        backups_dir = self.state_dir / "previous"
        shutil.rmtree(backups_dir, ignore_errors=True)
        backups_dir.mkdir(parents=True, mode=0o700)
        backups = [self.backup(unit, backups_dir) for unit in leaving]
        env_backup = backups_dir / env_path.name
        if env_path.is_file():
            shutil.copy2(env_path, env_backup)
        if unit_path.is_file() and not is_managed(unit_path.read_text(encoding="utf-8", errors="replace")):
            self.log(f"{plan.unit_name} is a hand-made unit of the same name: it is replaced (backup in {backups_dir})")

        self.env_dir.mkdir(parents=True, exist_ok=True)
        _install(staged_unit, unit_path, 0o644)
        _install(staged_env, env_path, 0o600)
        self.host.run("systemctl", "daemon-reload")

        stop_started = now()
        for backup in backups:
            if backup.was_running:
                self.log(f"stopping {backup.unit}")
                self.host.run("systemctl", "stop", backup.unit, check=False)
            if backup.unit != plan.unit_name and backup.was_enabled:
                self.host.run("systemctl", "disable", "--quiet", backup.unit, check=False)
        self.timings["stop"] = now() - stop_started
        if any(b.was_running for b in backups):
            self.log(f"stopped {', '.join(b.unit for b in backups if b.was_running)} in {self.timings['stop']:.1f} s")

        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
        self.log(
            f"starting {plan.unit_name} (serving {plan.served_name} on port {plan.port}; up to {plan.ready_timeout} s)"
        )
        cursor = self.host.journal_cursor()
        start = now()
        self.host.run("systemctl", "start", "--no-block", plan.unit_name)
        if self.wait_active(plan.unit_name, plan.ready_timeout):
            self.timings["start_to_ready"] = now() - start
            self.timings["total"] = now() - started
            record = f"UNIT={plan.unit_name}\nSERVED={plan.served_name}\nPORT={plan.port}\n"
            temporary = self.state_dir / "active.tmp"
            temporary.write_text(record, encoding="utf-8")
            temporary.replace(self.state_dir / "active")
            if old_unit and old_unit != plan.unit_name and old_unit not in plan.replaces:
                # The previous managed unit of this deployment: its files go, a backup stays until the next swap.
                (self.unit_dir / old_unit).unlink(missing_ok=True)
                (self.env_dir / f"{old_unit.removesuffix('.service')}.env").unlink(missing_ok=True)
                self.host.run("systemctl", "daemon-reload")
                self.host.run("systemctl", "reset-failed", old_unit, check=False)
            adopted = [u for u in plan.replaces if any(b.unit == u and b.file for b in backups)]
            if adopted:
                self.log(f"adopted: {', '.join(adopted)} stopped and disabled (unit files backed up in {backups_dir})")
            self.log(f"serving {plan.served_name} from {plan.unit_name} on port {plan.port}")
            self.log(
                f"timing: stop={self.timings['stop']:.2f}s start_to_ready={self.timings['start_to_ready']:.2f}s "
                f"total={self.timings['total']:.2f}s"
            )
            return Result("succeeded", f"serving {plan.served_name} from {plan.unit_name}", plan.digest, self.timings)
        return self.roll_back(backups, env_backup, unit_path, env_path, cursor)

    def wait_active(self, unit: str, timeout: float) -> bool:
        """Until `unit` is active (its ExecStartPost saw it serve), failed, restarting, or out of time."""
        started = now()
        last_report = 0.0
        while True:
            props = self.host.show(unit, "ActiveState", "NRestarts")
            state = props.get("ActiveState", "inactive")
            elapsed = now() - started
            if state == "active":
                return True
            if state == "failed":
                self.log(f"{unit} failed after {elapsed:.0f} s")
                return False
            if int(props.get("NRestarts", "0") or 0) > 0:
                self.log(f"{unit} failed after {elapsed:.0f} s and systemd is restarting it")
                return False
            if elapsed >= timeout:
                self.log(f"{unit} is not ready after {timeout:g} s (state: {state})")
                return False
            if elapsed - last_report >= self.plan.report_every:
                lines, _ = self.host.journal(unit, "", lines=1)
                self.log(
                    f"starting {unit}: {elapsed:.0f}/{timeout:g} s, state {state}; last log: {(lines or ['none'])[-1][:200]}"
                )
                last_report = elapsed
            self.sleep(1)

    def roll_back(
        self, backups: Sequence[Backup], env_backup: Path, unit_path: Path, env_path: Path, cursor: str
    ) -> Result:
        plan = self.plan
        tail, _ = self.host.journal(plan.unit_name, cursor, lines=plan.journal_lines)
        self.host.run("systemctl", "stop", plan.unit_name, check=False)
        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        own = next((b for b in backups if b.unit == plan.unit_name), None)
        if own is not None and own.saved is not None:
            _install(own.saved, unit_path, 0o644)
            if env_backup.is_file():
                _install(env_backup, env_path, 0o600)
        else:
            self.host.run("systemctl", "disable", "--quiet", plan.unit_name, check=False)
            unit_path.unlink(missing_ok=True)
            env_path.unlink(missing_ok=True)
        for backup in backups:
            if backup.unit != plan.unit_name and backup.saved is not None and backup.file is not None:
                _install(backup.saved, backup.file, 0o644)
        self.host.run("systemctl", "daemon-reload")
        restarted: list[str] = []
        failed: list[str] = []
        for backup in backups:
            if backup.was_enabled:
                self.host.run("systemctl", "enable", "--quiet", backup.unit, check=False)
            if not backup.was_running:
                continue
            # Wait with the old unit's own start timeout, not the new model's.
            timeout = self.host.start_timeout(backup.unit)
            self.log(f"rolling back: starting {backup.unit} again (up to {timeout:g} s)")
            self.host.run("systemctl", "start", "--no-block", backup.unit, check=False)
            (restarted if self.wait_active(backup.unit, timeout) else failed).append(backup.unit)
        if not any(b.was_running for b in backups):
            (self.state_root / "claims" / f"{plan.owner}.json").unlink(missing_ok=True)
        if failed:
            status = "rollback-failed"
            outcome = f"ROLLBACK FAILED: {', '.join(failed)} did not become ready either; the host serves nothing on port {plan.port}"
        elif restarted:
            status = "rolled-back"
            outcome = f"rolled back: {', '.join(restarted)} {'serves' if len(restarted) == 1 else 'serve'} again"
        else:
            status = "rolled-back"
            outcome = "nothing was serving before, so nothing was restarted"
        journal = "\n".join(f"  | {line}" for line in tail)
        message = f"swap of deployment {plan.deployment} to {plan.unit_name} failed; {outcome}.\nlast lines of the {plan.unit_name} journal:\n{journal}"
        return Result(status, message, plan.digest, self.timings)


def _same(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()


def _install(source: Path, target: Path, mode: int) -> None:
    temporary = target.with_name(target.name + ".vllm-fleet-tmp")
    shutil.copyfile(source, temporary)
    os.chmod(temporary, mode)
    temporary.replace(target)


@contextlib.contextmanager
def host_lock(state_root: Path, timeout: float = 3600) -> Iterator[None]:
    """One swap at a time per host: two deployments must not stop and start units underneath each other."""
    state_root.mkdir(parents=True, exist_ok=True)
    with open(state_root / "host.lock", "w") as handle:
        deadline = now() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if now() > deadline:
                    raise TimeoutError(f"another swap held {state_root / 'host.lock'} for {timeout:g} s") from None
                time.sleep(1)
        yield


def result_path(plan: Plan) -> Path:
    return Path(plan.state_dir) / "swap-result.json"


def run_transaction(plan_file: str) -> int:
    plan = Plan.load(plan_file)
    with host_lock(STATE_ROOT):
        try:
            result = Transaction(plan, log=lambda m: print(m, flush=True)).run()
        except Exception as error:  # the result must be written whatever happens
            result = Result(
                "rollback-failed", f"swap transaction crashed: {type(error).__name__}: {error}", plan.digest
            )
    path = result_path(plan)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(result)), encoding="utf-8")
    temporary.replace(path)
    print(("" if result.ok else "FAILED: ") + result.message.splitlines()[0], flush=True)
    return 0 if result.ok else 1


# ---- the Pulumi step's side: start or attach, follow, report ------------------------------------------


def follow(plan: Plan, host: SystemdHost, out: Callable[[str], None], cursor: str, poll: float = 1.0) -> None:
    """Print the transaction unit's journal after `cursor` until the unit is gone (collected when it ends)."""
    while True:
        lines, cursor = host.journal(plan.transaction_unit, cursor)
        for line in lines:
            out(line)
        if host.show(plan.transaction_unit, "ActiveState").get("ActiveState", "inactive") not in RUNNING_STATES:
            time.sleep(poll / 2)  # journald may still be writing the last lines
            lines, cursor = host.journal(plan.transaction_unit, cursor)
            for line in lines:
                out(line)
            return
        time.sleep(poll)


def read_result(plan: Plan) -> Result | None:
    path = result_path(plan)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Result(**data)


def start(plan_file: str, host: SystemdHost | None = None, poll: float = 1.0) -> int:
    plan = Plan.load(plan_file)
    host = host or SystemdHost()

    def out(line: str) -> None:
        print(line, flush=True)

    if host.running(plan.transaction_unit):
        out(
            f"[{plan.deployment}] a swap transaction is already running on this host ({plan.transaction_unit}): attaching"
        )
        follow(plan, host, out, host.journal_cursor(), poll)
        previous = read_result(plan)
        if previous is not None and previous.plan_digest == plan.digest:
            return report(previous)
        out(f"[{plan.deployment}] that transaction was for another plan; starting this one")
    result_path(plan).unlink(missing_ok=True)
    cursor = host.journal_cursor()
    host.run(
        "systemd-run",
        f"--unit={plan.transaction_unit}",
        "--collect",
        "--quiet",
        f"--description=vllm-fleet swap of deployment {plan.owner}",
        plan.python,
        f"{plan.tools_dir}/swap",
        "run",
        "--plan",
        plan_file,
    )
    follow(plan, host, out, cursor, poll)
    result = read_result(plan)
    if result is None:
        print(
            f"swap transaction {plan.transaction_unit} ended without a result; see journalctl -u {plan.transaction_unit}",
            file=sys.stderr,
        )
        return 1
    return report(result)


def report(result: Result) -> int:
    if result.ok:
        return 0
    print(result.message, file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "run"])
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_transaction(args.plan)
    return start(args.plan)


if __name__ == "__main__":
    sys.exit(main())
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp /usr/local/lib/vllm-fleet/swap
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env python3
"""vllm-fleet vllm-args-check: have the host's own vLLM parse a deployment's launch before anything stops.

A flag that one vLLM release accepts can be unknown to another (`--disable-log-requests` was removed in
v0.12, `--attention-backend` came with it), and vLLM rejects a bad flag only when it starts, that is,
after the old model was stopped. This tool runs in the unit step, while the old model still serves: it
imports the vLLM of the unit's Python, builds the same argument parser `python -m
vllm.entrypoints.openai.api_server` builds, parses the rendered arguments and runs vLLM's own check of
the parsed serve arguments. On failure it names the flag, the stack config key it came from and the
vLLM version, and exits 1. It loads no model and touches no GPU.

Usage: vllm-args-check --spec FILE, where FILE is JSON {"unit": ..., "args": [...], "origins": {flag: key}}
(args are those after `-m vllm.entrypoints.openai.api_server`). Standard library only, besides vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Where vLLM keeps the server's parser, newest layout first (it moved between releases).
PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
FLEXIBLE_PARSER_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str


def flags_named(error: str, args: Sequence[str]) -> list[str]:
    """The flags of `args` that an argparse error message names, in the order of `args`."""
    named = []
    for arg in args:
        if not arg.startswith("-"):
            continue
        flag = arg.split("=", 1)[0]
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", error) and flag not in named:
            named.append(flag)
    return named


def explain(version: str, unit: str, error: str, args: Sequence[str], origins: Mapping[str, str]) -> str:
    error = " ".join(error.split())
    flags = flags_named(error, args)
    if flags:
        blamed = "; ".join(f"{flag} (from {origins.get(flag, 'the deployment serving config')})" for flag in flags)
        return (
            f"vLLM {version} on this host rejects the launch of {unit}: {blamed}: {error}. "
            "Change that config key (this host's vLLM decides which flags exist); nothing was stopped."
        )
    return f"vLLM {version} on this host rejects the launch of {unit}: {error}. Nothing was stopped."


def check(
    args: Sequence[str],
    unit: str,
    origins: Mapping[str, str],
    version: str,
    make_parser: Callable[[], argparse.ArgumentParser],
    validate: Callable[[argparse.Namespace], Any] | None,
) -> Verdict:
    parser = make_parser()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            namespace = parser.parse_args(list(args))
    except SystemExit as exit_:
        if exit_.code in (0, None):
            return Verdict(False, f"vLLM {version} printed help instead of parsing the launch of {unit}")
        lines = [line for line in captured.getvalue().splitlines() if "error:" in line]
        error = lines[-1].split("error:", 1)[1].strip() if lines else captured.getvalue().strip()
        return Verdict(False, explain(version, unit, error, args, origins))
    if validate is not None:
        try:
            validate(namespace)
        except Exception as error:  # vLLM raises TypeError/ValueError/its own errors here
            return Verdict(False, explain(version, unit, f"{type(error).__name__}: {error}", args, origins))
    return Verdict(True, f"vLLM {version} accepts the launch of {unit} ({len(args)} arguments)")


def _import_first(names: Sequence[str], attribute: str) -> Any:
    errors = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            errors.append(f"{name}: {error}")
            continue
        if hasattr(module, attribute):
            return getattr(module, attribute)
        errors.append(f"{name} has no {attribute}")
    raise ImportError(f"this vLLM has no {attribute} where vllm-fleet looks for it ({'; '.join(errors)})")


def host_vllm() -> tuple[str, Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], Any] | None]:
    """The installed vLLM's version, a factory of its server parser, and its serve-args validator."""
    vllm = importlib.import_module("vllm")  # the host's; the controller has none
    version = str(getattr(vllm, "__version__", "unknown"))
    make_arg_parser = _import_first(PARSER_MODULES, "make_arg_parser")
    flexible = _import_first(FLEXIBLE_PARSER_MODULES, "FlexibleArgumentParser")
    try:
        validate = _import_first(PARSER_MODULES, "validate_parsed_serve_args")
    except ImportError:
        validate = None

    def make_parser() -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = make_arg_parser(
            flexible(description="vLLM OpenAI-Compatible RESTful API server.")
        )
        return parser

    return version, make_parser, validate


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--spec", required=True, help="JSON file with unit, args and origins")
    options = cli.parse_args(argv)
    with open(options.spec, encoding="utf-8") as handle:
        spec = json.load(handle)
    # Parsing computes nothing: keep the OpenMP runtime that importing vLLM loads from probing the
    # machine's topology by pinning itself to each CPU in turn (Intel OpenMP's default), which on a host
    # whose CPUs a serving engine keeps busy was seen to hang the import in sched_setaffinity.
    os.environ.setdefault("KMP_AFFINITY", "disabled")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        version, make_parser, validate = host_vllm()
    except ImportError as error:
        print(f"vllm-args-check: cannot load this host's vLLM argument parser: {error}", file=sys.stderr)
        return 1
    verdict = check(spec["args"], spec["unit"], spec.get("origins", {}), version, make_parser, validate)
    print(verdict.message, file=sys.stdout if verdict.accepted else sys.stderr)
    return 0 if verdict.accepted else 1


if __name__ == "__main__":
    sys.exit(main())
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp /usr/local/lib/vllm-fleet/vllm-args-check
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
#!/usr/bin/env python3
"""vllm-fleet wait-ready: runs as ExecStartPost, so a vLLM unit is "active" only once it serves.

Ready means all three, in order: GET /health answers 200, GET /v1/models lists the served name, and a
one-token completion succeeds. A 36-minute load is normal for a 500 GB model, so this waits up to
--timeout seconds and prints progress every --report seconds for `journalctl` and `pulumi up` to show.
It gives up early when the engine process ($MAINPID, set by systemd) has exited. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def _request(url: str, body: dict[str, object] | None, timeout: float) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    api_key = os.environ.get("VLLM_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


Fetch = Callable[[str, "dict[str, object] | None", float], "tuple[int, str]"]


def probe(base: str, served_name: str, fetch: Fetch = _request) -> tuple[bool, str]:
    """One readiness check; returns (ready, what is missing)."""
    try:
        status, _ = fetch(f"{base}/health", None, 5)
        if status != 200:
            return False, f"/health answered {status}"
        status, body = fetch(f"{base}/v1/models", None, 5)
        if status != 200:
            return False, f"/v1/models answered {status}"
        names = [m.get("id") for m in json.loads(body).get("data", [])]
        if served_name not in names:
            return False, f"/v1/models lists {names}, not {served_name!r}"
        status, body = fetch(f"{base}/v1/completions", {"model": served_name, "prompt": "ping", "max_tokens": 1}, 60)
        if status != 200 or not json.loads(body).get("choices"):
            return False, f"a one-token completion answered {status}: {body[:200]}"
    except (OSError, ValueError) as error:
        return False, f"not answering yet ({error.__class__.__name__}: {error})"
    return True, "ready"


def engine_alive() -> bool:
    pid = os.environ.get("MAINPID")
    return not pid or os.path.exists(f"/proc/{pid}")


def wait(
    base: str,
    served_name: str,
    timeout: float,
    report: float,
    log: Callable[[str], None],
    fetch: Fetch = _request,
    alive: Callable[[], bool] = engine_alive,
    poll: float = 2.0,
) -> bool:
    start = time.monotonic()
    last_report = -report
    while True:
        ready, detail = probe(base, served_name, fetch)
        elapsed = time.monotonic() - start
        if ready:
            log(f"ready: {served_name} answers on {base} after {elapsed:.0f} s")
            return True
        if not alive():
            log(f"not ready: the engine process exited after {elapsed:.0f} s ({detail})")
            return False
        if elapsed >= timeout:
            log(f"not ready after {timeout:g} s: {detail}")
            return False
        if elapsed - last_report >= report:
            log(f"loading {served_name}: {elapsed:.0f}/{timeout:g} s, {detail}")
            last_report = elapsed
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-name", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--report", type=float, default=15)
    parser.add_argument("--unit", default="")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    ok = wait(
        f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}",
        args.served_name,
        args.timeout,
        args.report,
        lambda m: print(f"wait-ready{' ' + args.unit if args.unit else ''}: {m}", flush=True),
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp /usr/local/lib/vllm-fleet/wait-ready
echo "installed 7 vllm-fleet tools in /usr/local/lib/vllm-fleet"
