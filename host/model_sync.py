#!/usr/bin/env python3
"""vllm-fleet model-sync: download a pinned Hugging Face revision and prove every byte of it.

    model-sync sync   --repo ORG/NAME --revision REV --dir DIR [--margin-gb N]
    model-sync check  --dir DIR        # stat-only: have the verified files changed since? (ExecStartPre)
    model-sync verify --dir DIR [--repair]   # re-hash everything, as a user would before trusting a disk

A manifest in DIR/.vllm-fleet/manifest.json records `repo@sha` and, per file, its size, mtime and hash
as checked against the repository's metadata (sha256 for LFS files, git blob sha1 for the rest). Later
runs compare sizes and mtimes with it instead of re-reading 500 GB. The download itself is `hf download`
(the client users know, honouring HF_ENDPOINT and HF_TOKEN from the environment), started while the
repository's metadata is fetched and watched by a thread that prints progress and by one that hashes each
file as soon as the client has renamed it into place, so verifying adds little to the download; partial
files a killed run left behind are removed before it starts.
Runs with the host's vLLM python, which brings huggingface_hub.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import queue
import shutil
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.contract import MANIFEST, MANIFEST_DIR

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
    """The commit `revision` names and its files. One request: the repository's info with each file's
    size, blob id and LFS sha256 (what `HfApi.model_info(files_metadata=True)` asks, through the same
    session, headers, token and error mapping, without importing `HfApi`: that import would cost more
    than the request); the tree of that commit, through `HfApi`, where the answer lacks any of them."""
    from urllib.parse import quote

    from huggingface_hub import constants, get_session, hf_raise_for_status
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    url = f"{endpoint or constants.ENDPOINT}/api/models/{repo}/revision/{quote(revision, safe='')}"
    response = get_session().get(url, headers=build_hf_headers(), params={"blobs": True})
    hf_raise_for_status(response)
    info = response.json()
    sha = info.get("sha") or revision
    siblings = info.get("siblings") or []
    if siblings and all(s.get("size") is not None and s.get("blobId") is not None for s in siblings):
        files = [
            RemoteFile(s["rfilename"], int(s["size"]), s["lfs"]["sha256"] if s.get("lfs") else None, s["blobId"])
            for s in siblings
        ]
        return sha, sorted(files, key=lambda f: f.path)
    from huggingface_hub import HfApi

    files = []
    for entry in HfApi(endpoint=endpoint).list_repo_tree(repo, revision=sha, recursive=True):
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
    with path.open("rb") as handle:
        return hash_handle(handle, remote)


def hash_handle(handle: Any, remote: RemoteFile) -> str:
    if remote.sha256 is not None:
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1()
        digest.update(f"blob {remote.size}\0".encode())
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
    return stat_entry_of(path.stat())


def stat_entry_of(st: os.stat_result) -> dict[str, int]:
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


# What identifies one version of a file's bytes without reading them: inode, size, mtime and ctime. A file
# hashed under one identity and found under the same one later still holds the bytes that were hashed.
Identity = tuple[int, int, int, int]


def identity(st: os.stat_result) -> Identity:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Hasher:
    """Hashes the files of a download while `hf download` runs, each one once the client is done with it.

    `hf download` writes a file as .cache/huggingface/download/*.incomplete, renames it into place and then
    writes its .metadata (commit, etag, time) there. A file counts as done, and is hashed early, only when
    it is at its final path with the size the repository gives and its metadata names this commit and is
    no older than the file: a file still being written or one the client is about to replace is left
    alone. Each hash is kept with the identity (inode, size, mtime, ctime) the file had before and after
    it was read; `finish`, called after the client exits, hashes every file that has no hash for the
    identity it has then, so a file that changed after it was hashed is read again, never trusted."""

    def __init__(
        self, directory: Path, sha: str, files: list[RemoteFile], workers: int | None = None, poll: float = 0.1
    ) -> None:
        self.directory = directory
        self.sha = sha
        self.files = files
        self.poll = poll
        self.lock = threading.Lock()
        self.results: dict[str, tuple[Identity, str]] = {}  # path -> (identity when hashed, digest)
        self.queued: dict[str, Identity] = {}  # path -> identity it had when queued
        self.early = 0  # files whose hash was ready when the client exited (set by `finish`)
        self.jobs: queue.Queue[tuple[RemoteFile, Identity] | None] = queue.Queue()
        self.stopping = threading.Event()
        self.stopped = False
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        count = workers if workers is not None else min(4, os.cpu_count() or 1)
        self.workers = [threading.Thread(target=self.work, daemon=True) for _ in range(max(1, count))]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        self.watcher.start()

    def client_done(self, remote: RemoteFile, st: os.stat_result) -> bool:
        metadata = self.directory / HF_CACHE / "download" / f"{remote.path}.metadata"
        try:
            lines = metadata.read_text().split("\n")
            return len(lines) >= 3 and lines[0] == self.sha and float(lines[2]) >= st.st_mtime - 1
        except (OSError, ValueError):
            return False  # not written yet, or being written

    def in_place(self, remote: RemoteFile) -> os.stat_result | None:
        """The file at its final path, when it is a regular file of the size the repository gives."""
        try:
            st = (self.directory / remote.path).stat()
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) and st.st_size == remote.size else None

    def has_hash(self, remote: RemoteFile, ident: Identity) -> bool:
        hashed = self.results.get(remote.path)
        return hashed is not None and hashed[0] == ident

    def want(self, remote: RemoteFile, ident: Identity) -> None:
        """Queue a hash of the file as it is now, unless it has one or one is coming."""
        with self.lock:
            if self.has_hash(remote, ident) or self.queued.get(remote.path) == ident:
                return
            self.queued[remote.path] = ident
        self.jobs.put((remote, ident))

    def watch(self) -> None:
        while not self.stopping.wait(self.poll):
            for remote in self.files:
                if self.stopping.is_set():
                    return
                st = self.in_place(remote)
                if st is None:
                    continue
                ident = identity(st)
                with self.lock:
                    settled = self.has_hash(remote, ident) or self.queued.get(remote.path) == ident
                if not settled and self.client_done(remote, st):
                    self.want(remote, ident)

    def work(self) -> None:
        while (job := self.jobs.get()) is not None:
            remote, ident = job
            digest = None
            try:
                with (self.directory / remote.path).open("rb") as handle:
                    if identity(os.fstat(handle.fileno())) == ident:
                        digest = hash_handle(handle, remote)
                        if identity(os.fstat(handle.fileno())) != ident:
                            digest = None  # changed while being read
            except OSError:
                pass  # gone or replaced: whoever finds it in place again queues it again
            finally:
                with self.lock:
                    if self.queued.get(remote.path) == ident:
                        del self.queued[remote.path]
                    if digest is not None:
                        self.results[remote.path] = (ident, digest)
                self.jobs.task_done()

    def finish(self) -> dict[str, tuple[dict[str, int], str]]:
        """After the client exited: hash every file in place that has no hash for the identity it has now,
        end the threads, and return, per file whose hash is that of its current identity, the manifest's
        stat entry for it and the digest. A file missing, of the wrong size or changing meanwhile is left
        out: it failed verification."""
        self.stopping.set()
        self.watcher.join()
        for remote in self.files:
            st = self.in_place(remote)
            if st is None:
                continue
            with self.lock:
                self.early += self.has_hash(remote, identity(st))
            self.want(remote, identity(st))
        self.jobs.join()
        self.stop()
        found: dict[str, tuple[dict[str, int], str]] = {}
        for remote in self.files:
            st = self.in_place(remote)
            hashed = self.results.get(remote.path)
            if st is not None and hashed is not None and hashed[0] == identity(st):
                found[remote.path] = (stat_entry_of(st), hashed[1])
        return found

    def stop(self) -> None:
        """End the threads, dropping hashes still queued (the download failed); `finish` calls it too."""
        self.stopping.set()
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
        while True:
            try:
                self.jobs.get_nowait()
            except queue.Empty:
                break
            self.jobs.task_done()
        for _ in self.workers:
            self.jobs.put(None)


def hf_cli() -> str:
    candidate = Path(sys.executable).with_name("hf")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("hf")
    if found is None:
        raise SystemExit("model-sync: the `hf` CLI (huggingface_hub) is not installed next to " + sys.executable)
    return found


# Run in the interpreter named by the `hf` script's #! line while model-sync asks the Hub what to fetch:
# the CLI's imports (most of its start-up) are done by the time the command line arrives on stdin; then
# the script itself runs as it would on its own. End of input instead: nothing to download, exit.
HF_PRESTART = """
import sys
if sys.path and sys.path[0] == "":
    sys.path[0] = sys.argv[1].rpartition("/")[0]  # where a script's own folder goes, not the cwd
try:
    import huggingface_hub.cli.hf
except Exception:
    pass
line = sys.stdin.readline()
if line:
    import json, runpy
    sys.argv = json.loads(line)
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def prestart_hf() -> subprocess.Popen[str] | None:
    """An `hf` process already importing its code, waiting for its command line (see `run_hf_download`);
    None where `hf` is not a Python script with a plain #! line, which then just starts when needed."""
    try:
        cli = hf_cli()
        with open(cli, "rb") as script:
            first = script.readline(4096).decode().strip()
    except (SystemExit, OSError, UnicodeDecodeError):
        return None
    interpreter = first[2:]
    if not first.startswith("#!/") or " " in interpreter or not Path(interpreter).name.startswith("python"):
        return None
    try:
        return subprocess.Popen(
            [interpreter, "-c", HF_PRESTART, cli],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,
        )
    except OSError:
        return None


def cancel_hf(process: subprocess.Popen[str] | None) -> None:
    if process is not None and process.poll() is None:
        process.kill()
        process.communicate()


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
    started: subprocess.Popen[str] | None = None,
) -> None:
    """`hf download`, run again when it fails: the client retries a cleanly closed connection itself,
    but gives up on a reset one, and a fresh run resumes from the files already complete. `started`, from
    `prestart_hf`, runs the first attempt."""
    command = [hf_cli(), "download", repo, *(only or []), "--revision", sha, "--local-dir", str(directory)]
    log(f"running: {' '.join(command)}")
    for attempt in range(1, attempts + 1):
        progress = Progress(directory, [f for f in files if only is None or f.path in only], every)
        progress.start()
        try:
            # The CLI's own progress bars are carriage-return animations; our thread prints plain lines.
            if started is not None:
                process, started = started, None
                _, stderr = process.communicate(json.dumps(command) + "\n")
                returncode = process.returncode
            else:
                result = subprocess.run(
                    command,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    check=False,
                    preexec_fn=_die_with_parent,
                )
                stderr, returncode = result.stderr, result.returncode
        finally:
            progress.done.set()
        if returncode == 0:
            return
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        if attempt == attempts or not transient(stderr):
            raise SystemExit(f"model-sync: hf download failed (exit {returncode}, attempt {attempt}):\n{tail}")
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
    # The client starts up while the Hub is asked what to fetch; it fetches nothing before it is told to.
    started = prestart_hf()
    try:
        return download_and_verify(args, directory, manifest, started)
    finally:
        cancel_hf(started)


def download_and_verify(
    args: argparse.Namespace,
    directory: Path,
    manifest: dict[str, Any] | None,
    started: subprocess.Popen[str] | None,
) -> int:
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
        hasher = Hasher(directory, sha, [by_path[rel] for rel in todo])
        hasher.start()
        try:
            run_hf_download(args.repo, sha, directory, files, only, args.progress_every, started=started)
            started = None
            hashed = hasher.finish()
        finally:
            hasher.stop()
        log(f"hashed {len(todo)} file(s), {hasher.early} of them while downloading")
        bad = []
        for rel in todo:
            remote = by_path[rel]
            entry = hashed.get(rel)
            if entry is None or entry[1] != expected_hash(remote):
                bad.append(rel)
                forget_file(directory, rel)
            else:
                verified[rel] = {**entry[0], "hash": expected_hash(remote)}
        if bad:
            log(f"attempt {attempt}: {len(bad)} file(s) failed verification and were removed: {', '.join(bad)}")
    bad = [f.path for f in files if f.path not in verified]
    if bad:
        raise SystemExit(f"model-sync: files still fail verification after a second download: {', '.join(bad)}")
    write_manifest(directory, args.repo, sha, verified)
    # The client leaves its per-file lock files behind after a resumed run (a killed run's were removed
    # above, and hf exited): nothing partial may stay in a verified model directory.
    remove_partials(directory)
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
