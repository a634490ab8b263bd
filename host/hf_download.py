"""The Hugging Face side of model-sync: which files a revision has (one request to the Hub), `hf download`
started while that request runs and run again when a reset connection ends it, a progress line while it
runs, and the hashing of each file as soon as the client has renamed it into place (`Hasher`).
Runs with the host's vLLM python, which brings huggingface_hub.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from host.model_files import HF_CACHE, Identity, RemoteFile, hash_handle, identity, log, stat_entry_of


def _die_with_parent() -> None:
    """In the `hf download` child: receive SIGTERM when model-sync exits, however it exits."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


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


@dataclass(eq=False)
class Hasher:
    """Hashes the files of a download while `hf download` runs, each one once the client is done with it.

    `hf download` writes a file as .cache/huggingface/download/*.incomplete, renames it into place and then
    writes its .metadata (commit, etag, time) there. A file counts as done, and is hashed early, only when
    it is at its final path with the size the repository gives and its metadata names this commit and is
    no older than the file: a file still being written or one the client is about to replace is left
    alone. Each hash is kept with the identity (inode, size, mtime, ctime) the file had before and after
    it was read; `finish`, called after the client exits, hashes every file that has no hash for the
    identity it has then, so a file that changed after it was hashed is read again, never trusted."""

    directory: Path
    sha: str
    files: list[RemoteFile]
    workers: int | None = None  # hashing threads (default: one per CPU, at most 4)
    poll: float = 0.1  # seconds between looks for files the client is done with
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    # path -> (identity when hashed, digest)
    results: dict[str, tuple[Identity, str]] = field(default_factory=dict, init=False)
    queued: dict[str, Identity] = field(default_factory=dict, init=False)  # path -> identity it had when queued
    early: int = field(default=0, init=False)  # files whose hash was ready when the client exited (set by `finish`)
    jobs: queue.Queue[tuple[RemoteFile, Identity] | None] = field(default_factory=queue.Queue, init=False)
    stopping: threading.Event = field(default_factory=threading.Event, init=False)
    stopped: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        count = self.workers if self.workers is not None else min(4, os.cpu_count() or 1)
        self.hashers = [threading.Thread(target=self.work, daemon=True) for _ in range(max(1, count))]

    def start(self) -> None:
        for hasher in self.hashers:
            hasher.start()
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
        for _ in self.hashers:
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
        return _spawn_hf([interpreter, "-c", HF_PRESTART, cli], subprocess.PIPE)
    except OSError:
        return None


def _spawn_hf(argv: list[str], stdin: int | None) -> subprocess.Popen[str]:
    """An `hf` process whose output is dropped (its errors kept) and which ends when model-sync does."""
    return subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_die_with_parent
    )


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
            else:
                process = _spawn_hf(command, None)
                _, stderr = process.communicate()
            returncode = process.returncode
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
