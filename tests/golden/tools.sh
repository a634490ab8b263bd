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
APPS_QUERY = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]


def parse_gpu_memory(text: str) -> list[GpuMemory]:
    rows = parse_csv(text, ["index", "memory.used"])
    return [GpuMemory(int(r["index"]), _number(r["memory.used"])) for r in rows]


def parse_compute_apps(text: str) -> list[ComputeApp]:
    rows = parse_csv(text, ["pid", "process_name", "used_memory"])
    return [ComputeApp(int(r["pid"]), r["process_name"], _number(r["used_memory"])) for r in rows]


Runner = Callable[[list[str]], str]


def run_nvidia_smi(args: list[str]) -> str:
    binary = os.environ.get("VLLM_FLEET_NVIDIA_SMI", "nvidia-smi")
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def read_memory(run: Runner) -> list[GpuMemory]:
    return parse_gpu_memory(run(MEMORY_QUERY))


def read_apps(run: Runner) -> list[ComputeApp]:
    return parse_compute_apps(run(APPS_QUERY))


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


def unit_is_active(unit: str) -> bool:
    result = subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False)
    return result.returncode == 0


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
) -> GuardResult:
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
        for app in read_apps(run):
            if app.pid in exclude:
                continue  # this guard and the unit start that runs it
            visible = gpus_of(app.pid)
            unit = unit_lookup(app.pid)
            if unit and unit != own_unit and unit.startswith("vllm-") and is_active(unit):
                if visible is not None and visible & wanted:
                    conflicts.append(f"PID {app.pid} ({app.name}, {app.used_mib} MiB) of running unit {unit}")
                continue  # another deployment's process on its own GPUs
            if visible is None or visible & wanted:
                strays.append(app)
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
        f"http://{args.host}:{args.port}",
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
echo "installed 5 vllm-fleet tools in /usr/local/lib/vllm-fleet"
