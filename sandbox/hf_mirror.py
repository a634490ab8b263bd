"""A Hugging Face Hub-compatible mirror served on loopback, for tests and benchmarks.

No hub is reachable from these machines, yet the project's download path must be exercised with the real
`huggingface_hub` client (``hf download`` / ``snapshot_download`` / ``HfApi``). This server speaks the subset of
the Hub protocol that client uses (measured against huggingface_hub 2.4.0):

- ``GET /api/models/ORG/NAME[/revision/REV]``: repo info (``sha``, ``siblings``; sizes and LFS data with
  ``?blobs=true``). snapshot_download calls it to resolve a branch to a commit (skipped for a 40-hex sha).
- ``GET /api/models/ORG/NAME/tree/REV[/PATH]?recursive=&expand=``: file listing with git blob oids and LFS
  sha256/size, cursor-paginated through a ``Link: <...>; rel="next"`` header as on the Hub.
- ``POST /api/models/ORG/NAME/paths-info/REV``: ``HfApi.get_paths_info`` (form-encoded ``paths``/``expand``).
- ``HEAD``/``GET /ORG/NAME/resolve/REV/PATH``: the file, with ``X-Repo-Commit`` and ``ETag`` (git blob sha1 for
  small files, sha256 for LFS files, also sent as ``X-Linked-Etag``/``X-Linked-Size``), ``Range`` support.
- Errors carry the ``X-Error-Code`` the client maps to its exceptions: RepoNotFound (401), GatedRepo (401),
  RevisionNotFound (404), EntryNotFound (404), plus an ``X-Error-Message`` header and a ``{"error": ...}`` body.
  ``X-Xet-Hash`` is never sent, which keeps the client on plain HTTP downloads.
- ``GET /api/agent-harnesses``: the ``hf`` CLI fetches this registry on every run; an empty one is served.

Repos are read from ``ROOT/ORG/NAME/<files>`` (what ``sandbox.tiny_models`` writes). A repo's main revision is
a commit sha derived from its files' contents, reachable as ``main``, ``refs/heads/main`` or the sha; each folder
of ``ROOT/ORG/NAME/.revisions/`` is another revision, reachable by its sha alone (``sandbox.tiny_adapters``
writes one, so an adapter can be updated from one pinned revision to another).
Changing a file changes the sha, so a test can publish a "new revision" by editing the folder.

Test hooks live under ``/_mirror/``: request/byte statistics, and fault injection (drop or reset a connection
after N body bytes, stall, delay, corrupt a byte, answer with an error status) so retry and verification logic
can be tested against the real client.

CLI: ``python -m sandbox.hf_mirror --root DIR --host 127.0.0.1 --port PORT [--token T] [--gated REPO ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import hmac
import ipaddress
import json
import logging
import mimetypes
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO, Self, cast
from urllib.parse import parse_qs, unquote, urlsplit

# Hub defaults: LFS is decided by .gitattributes patterns there; these are the patterns of the Hub's default
# .gitattributes that model repos use, plus a size threshold so any big file is treated like LFS too.
LFS_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.gguf",
    "*.npy",
    "*.npz",
    "*.zip",
    "*.tar",
    "*.tar.*",
    "*.gz",
    "*.zst",
)
DEFAULT_LFS_THRESHOLD = 1024 * 1024
# The Hub returns 1000 tree entries per page, 50 with expand=true; pagination is part of what clients must get
# right, so the mirror does the same (and tests can lower it).
TREE_PAGE_SIZE = 1000
TREE_PAGE_SIZE_EXPANDED = 50
# Files are streamed with sendfile in chunks this large: Python never touches the bytes on the fast path.
SEND_CHUNK = 8 * 1024 * 1024
HASH_CHUNK = 4 * 1024 * 1024
MAX_LOG_ENTRIES = 10_000
COMMIT_SALT = b"vllm-fleet hf-mirror commit v1\n"
# Folders and files that are never part of a repo: VCS data, a client's own cache inside a --local-dir, and
# temporary files of a writer that is not done yet.
# REVISIONS_DIR holds a repo's revisions other than main, one folder each (served by their sha only).
REVISIONS_DIR = ".revisions"
IGNORED_DIRS = frozenset({".git", ".cache", "__pycache__", REVISIONS_DIR})
IGNORED_FILE_GLOBS: tuple[str, ...] = ("*.incomplete", ".*.tmp", "*.lock")
LOG = logging.getLogger("hf_mirror")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MAIN_REFS = frozenset({"main", "refs/heads/main"})
_EPOCH_ISO = "1970-01-01T00:00:00.000Z"


# --------------------------------------------------------------------------------------------------------------
# Repository model
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileEntry:
    """One file of a repo snapshot, with the digests the Hub protocol exposes."""

    path: str  # repo-relative, "/"-separated
    abspath: str
    size: int
    oid: str  # git blob sha1 of the file, or of its LFS pointer for LFS files (as on the Hub)
    sha256: str | None  # LFS files only: sha256 of the content
    pointer_size: int | None  # LFS files only: size of the LFS pointer file

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def etag(self) -> str:
        # The client stores blobs under this name and, for 64-hex values, compares it with the local file's
        # sha256 to skip re-downloads; that is why LFS files use the sha256 and small files the blob sha1.
        return self.sha256 if self.sha256 is not None else self.oid


@dataclass(frozen=True)
class RepoSnapshot:
    repo_id: str
    sha: str
    files: dict[str, FileEntry]  # sorted by path
    dirs: dict[str, str]  # directory path -> tree oid
    last_modified: str
    config: dict[str, Any] | None
    safetensors_params: dict[str, int]


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file the Hub stores in git for an LFS file (its blob sha1 is the tree's oid)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class HashCache:
    """Digests keyed by (path, size, mtime_ns, inode): a file is hashed once, never per request.

    A per-key lock makes concurrent first requests for the same big file wait for one hash instead of each
    hashing it again.
    """

    def __init__(self) -> None:
        self._digests: dict[tuple[str, int, int, int, str], str] = {}
        self._locks: dict[tuple[str, int, int, int, str], threading.Lock] = {}
        self._guard = threading.Lock()
        self.files_hashed = 0  # how many times a file was actually read and hashed (tests assert on it)

    def _cached(self, key: tuple[str, int, int, int, str]) -> str | None:
        """The digest of `key` when a request hashed it already."""
        with self._guard:
            return self._digests.get(key)

    def digest(self, abspath: str, st: os.stat_result, kind: str) -> str:
        """kind: "sha256" (content) or "git-sha1" (git blob sha1 of the content)."""
        key = (abspath, st.st_size, st.st_mtime_ns, st.st_ino, kind)
        with self._guard:
            if (cached := self._digests.get(key)) is not None:
                return cached
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            # Another request may have hashed it while this one waited for the lock.
            if (cached := self._cached(key)) is not None:
                return cached
            if kind == "sha256":
                h = hashlib.sha256()
            else:
                h = hashlib.sha1()
                h.update(b"blob %d\0" % st.st_size)
            with open(abspath, "rb") as f:
                while chunk := f.read(HASH_CHUNK):
                    h.update(chunk)
            value = h.hexdigest()
            with self._guard:
                self.files_hashed += 1
                self._digests[key] = value
                self._locks.pop(key, None)
            return value


class RepoStore:
    """Reads ROOT/ORG/NAME folders into snapshots, re-using digests and whole snapshots while files are unchanged.

    Every request re-stats the repo's files (cheap) so edits on disk show up as a new commit sha at once;
    contents are only re-hashed for files whose size/mtime/inode changed.
    """

    def __init__(self, root: Path, lfs_threshold: int = DEFAULT_LFS_THRESHOLD) -> None:
        self.root = root
        self.lfs_threshold = lfs_threshold
        self.hashes = HashCache()
        self._snapshots: dict[str, tuple[tuple[tuple[str, int, int, int], ...], RepoSnapshot]] = {}
        self._guard = threading.Lock()
        self._small_cache: dict[tuple[str, int, int, int], Any] = {}

    def repo_ids(self) -> list[str]:
        ids: list[str] = []
        if not self.root.is_dir():
            return ids
        for org in sorted(self.root.iterdir()):
            if not org.is_dir() or not _NAME_RE.match(org.name):
                continue
            for name in sorted(org.iterdir()):
                if name.is_dir() and _NAME_RE.match(name.name):
                    ids.append(f"{org.name}/{name.name}")
        return ids

    def repo_dir(self, repo_id: str) -> Path | None:
        parts = repo_id.split("/")
        if len(parts) != 2 or not all(_NAME_RE.match(p) for p in parts):
            return None
        path = self.root / parts[0] / parts[1]
        return path if path.is_dir() else None

    def _is_lfs(self, rel: str, size: int) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return size >= self.lfs_threshold or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS)

    def _walk(self, repo: Path) -> Iterator[tuple[str, str, os.stat_result]]:
        for dirpath, dirnames, filenames in os.walk(repo):
            dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
            for filename in sorted(filenames):
                if any(fnmatch.fnmatch(filename, g) for g in IGNORED_FILE_GLOBS):
                    continue
                abspath = os.path.join(dirpath, filename)
                try:
                    st = os.stat(abspath)
                except FileNotFoundError:
                    continue  # removed while we walked
                if not os.path.isfile(abspath):
                    continue
                rel = os.path.relpath(abspath, repo).replace(os.sep, "/")
                yield rel, abspath, st

    def snapshot(self, repo_id: str) -> RepoSnapshot | None:
        repo = self.repo_dir(repo_id)
        return None if repo is None else self._snapshot_of(repo_id, repo_id, repo)

    def snapshot_at(self, repo_id: str, revision: str) -> RepoSnapshot | None:
        """The repo at `revision`: main (by name or sha), or a folder of REVISIONS_DIR whose sha it is.
        None when the repo does not exist; the main snapshot when no revision matches (callers check)."""
        main = self.snapshot(repo_id)
        if main is None or revision in _MAIN_REFS or revision == main.sha:
            return main
        return next((snap for snap in self._other_revisions(repo_id).values() if snap.sha == revision), main)

    def revisions(self, repo_id: str) -> dict[str, str]:
        """The repo's revisions by label (main and each folder of REVISIONS_DIR) -> commit sha."""
        main = self.snapshot(repo_id)
        if main is None:
            return {}
        return {"main": main.sha, **{label: snap.sha for label, snap in self._other_revisions(repo_id).items()}}

    def _other_revisions(self, repo_id: str) -> dict[str, RepoSnapshot]:
        """Each folder of the repo's REVISIONS_DIR as a snapshot, by its label."""
        repo = self.repo_dir(repo_id)
        others = repo / REVISIONS_DIR if repo is not None else None
        if others is None or not others.is_dir():
            return {}
        return {
            folder.name: self._snapshot_of(repo_id, f"{repo_id}@{folder.name}", folder)
            for folder in sorted(others.iterdir())
            if folder.is_dir()
        }

    def _snapshot_of(self, repo_id: str, cache_key: str, folder: Path) -> RepoSnapshot:
        stats = sorted(self._walk(folder))
        signature = tuple((rel, st.st_size, st.st_mtime_ns, st.st_ino) for rel, _, st in stats)
        with self._guard:
            cached = self._snapshots.get(cache_key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        snap = self._build(repo_id, stats)
        with self._guard:
            self._snapshots[cache_key] = (signature, snap)
        return snap

    def _build(self, repo_id: str, stats: list[tuple[str, str, os.stat_result]]) -> RepoSnapshot:
        files: dict[str, FileEntry] = {}
        newest = 0.0
        for rel, abspath, st in stats:
            newest = max(newest, st.st_mtime)
            if self._is_lfs(rel, st.st_size):
                sha256 = self.hashes.digest(abspath, st, "sha256")
                pointer = lfs_pointer(sha256, st.st_size)
                files[rel] = FileEntry(rel, abspath, st.st_size, git_blob_sha1(pointer), sha256, len(pointer))
            else:
                oid = self.hashes.digest(abspath, st, "git-sha1")
                files[rel] = FileEntry(rel, abspath, st.st_size, oid, None, None)
        # Directory oids only need to be stable and content-derived; they are not real git tree hashes.
        dirs: dict[str, str] = {}
        for rel in files:
            parts = rel.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                d = "/".join(parts[:depth])
                if d not in dirs:
                    h = hashlib.sha1(b"tree\0")
                    for other, entry in files.items():
                        if other.startswith(d + "/"):
                            h.update(f"{other}\0{entry.oid}\n".encode())
                    dirs[d] = h.hexdigest()
        commit = hashlib.sha1(COMMIT_SALT)
        for rel, entry in files.items():
            commit.update(f"{rel}\0{entry.oid}\n".encode())
        last_modified = (
            datetime.fromtimestamp(newest, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z") if files else _EPOCH_ISO
        )
        return RepoSnapshot(
            repo_id=repo_id,
            sha=commit.hexdigest(),
            files=dict(sorted(files.items())),
            dirs=dict(sorted(dirs.items())),
            last_modified=last_modified,
            config=self._read_config(files.get("config.json")),
            safetensors_params=self._count_params(files),
        )

    def _cached_small(self, entry: FileEntry, kind: str, compute: Any) -> Any:
        st = os.stat(entry.abspath)
        key = (entry.abspath + "\0" + kind, st.st_size, st.st_mtime_ns, st.st_ino)
        with self._guard:
            if key in self._small_cache:
                return self._small_cache[key]
        value = compute(entry)
        with self._guard:
            self._small_cache[key] = value
        return value

    def _read_config(self, entry: FileEntry | None) -> dict[str, Any] | None:
        if entry is None or entry.size > 1024 * 1024:
            return None

        def load(e: FileEntry) -> dict[str, Any] | None:
            try:
                with open(e.abspath, "rb") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                return None
            if not isinstance(data, dict):
                return None
            # The Hub's info only carries a few routing fields of the config.
            return {k: data[k] for k in ("architectures", "model_type") if k in data}

        return cast("dict[str, Any] | None", self._cached_small(entry, "config", load))

    def _count_params(self, files: dict[str, FileEntry]) -> dict[str, int]:
        """Parameter counts per dtype from the safetensors headers (the Hub's `safetensors` info field)."""

        def header_counts(e: FileEntry) -> dict[str, int]:
            counts: dict[str, int] = {}
            try:
                with open(e.abspath, "rb") as f:
                    (length,) = struct.unpack("<Q", f.read(8))
                    if length > 100 * 1024 * 1024:
                        return counts
                    header = json.loads(f.read(length))
            except (OSError, ValueError, struct.error):
                return counts
            for name, info in header.items():
                if name == "__metadata__" or not isinstance(info, dict):
                    continue
                n = 1
                for dim in info.get("shape", []):
                    n *= int(dim)
                counts[str(info.get("dtype"))] = counts.get(str(info.get("dtype")), 0) + n
            return counts

        total: dict[str, int] = {}
        for rel, entry in files.items():
            if rel.endswith(".safetensors"):
                for dtype, n in self._cached_small(entry, "safetensors", header_counts).items():
                    total[dtype] = total.get(dtype, 0) + n
        return dict(sorted(total.items()))


# --------------------------------------------------------------------------------------------------------------
# Faults and statistics
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """One injected fault. It applies to the next `times` requests whose method and path match.

    path_glob is matched (fnmatch, so "*" crosses "/") against the unquoted URL path, e.g. "*.safetensors" or
    "/acme/tiny-chat-a/resolve/*/config.json".
    """

    id: int
    path_glob: str
    method: str = "GET"
    times: int | None = 1  # None: every matching request until the fault is deleted
    status: int | None = None  # answer with this HTTP status (and a JSON error) instead of the real response
    delay_s: float = 0.0  # sleep before sending the response headers
    drop_after_bytes: int | None = None  # end the connection after this many body bytes
    drop_mode: str = "close"  # "close": orderly FIN (client sees a short body); "reset": TCP RST
    stall_s: float = 0.0  # with drop_after_bytes: sleep this long at the drop point first
    corrupt_at_byte: int | None = None  # flip (XOR 0xFF) the body byte at this offset of the response body
    hits: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


_FAULT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "path_glob": str,
    "method": str,
    "times": (int, type(None)),
    "status": (int, type(None)),
    "delay_s": (int, float),
    "drop_after_bytes": (int, type(None)),
    "drop_mode": str,
    "stall_s": (int, float),
    "corrupt_at_byte": (int, type(None)),
}


def parse_fault(data: Any, fault_id: int) -> Fault:
    if not isinstance(data, dict) or "path_glob" not in data:
        raise ValueError('a fault is a JSON object with at least "path_glob"')
    unknown = set(data) - set(_FAULT_FIELDS)
    if unknown:
        raise ValueError(f"unknown fault fields: {sorted(unknown)}")
    for key, value in data.items():
        # bool is an int subclass; reject it so {"times": true} is not silently 1.
        if isinstance(value, bool) or not isinstance(value, _FAULT_FIELDS[key]):
            raise ValueError(f"fault field {key!r} has the wrong type")
    fault = Fault(id=fault_id, **data)
    fault.method = fault.method.upper()
    if fault.drop_mode not in ("close", "reset"):
        raise ValueError('drop_mode must be "close" or "reset"')
    if fault.times is not None and fault.times < 1:
        raise ValueError("times must be >= 1 or null")
    return fault


@dataclass
class Stats:
    requests: dict[str, int] = field(default_factory=dict)  # "METHOD /path" -> count
    by_method: dict[str, int] = field(default_factory=dict)
    bytes_sent: dict[str, int] = field(default_factory=dict)  # "/path" -> body bytes actually sent
    connections: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "by_method": dict(self.by_method),
            "bytes_sent": dict(self.bytes_sent),
            "total_bytes_sent": sum(self.bytes_sent.values()),
            "total_requests": sum(self.by_method.values()),
            "connections": self.connections,
            "log": list(self.log),
        }


@dataclass
class MirrorState:
    """Everything request handlers share; guarded by `lock` where mutable."""

    store: RepoStore
    token: str | None = None
    gated: frozenset[str] = frozenset()
    rate_limit_bytes_per_s: float | None = None
    tree_page_size: int = TREE_PAGE_SIZE
    tree_page_size_expanded: int = TREE_PAGE_SIZE_EXPANDED
    log_path: Path | None = None
    stats: Stats = field(default_factory=Stats)
    faults: list[Fault] = field(default_factory=list)
    next_fault_id: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.method == method and fnmatch.fnmatchcase(path, fault.path_glob):
                    fault.hits += 1
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self.faults.remove(fault)
                    return fault
        return None

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            key = f"{entry['method']} {entry['path']}"
            self.stats.requests[key] = self.stats.requests.get(key, 0) + 1
            self.stats.by_method[entry["method"]] = self.stats.by_method.get(entry["method"], 0) + 1
            if entry["bytes"]:
                self.stats.bytes_sent[entry["path"]] = self.stats.bytes_sent.get(entry["path"], 0) + entry["bytes"]
            self.stats.log.append(entry)
            del self.stats.log[:-MAX_LOG_ENTRIES]
            if self.log_path is not None:
                # Opened per entry (append mode) so that the file is complete at any moment, even if the
                # process is killed, and nothing needs closing on shutdown.
                with self.log_path.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(entry, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------------------------


class HttpError(Exception):
    """An error answer in the Hub's format: status, X-Error-Code, X-Error-Message and a JSON body."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}


class _ConnectionDroppedError(Exception):
    """Raised after a fault ended the connection on purpose; the handler must not write anything more."""


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _parse_bool(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes")


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """Parse a single `bytes=` range into inclusive (start, end).

    Returns None when the header is absent or not something we honour (multiple ranges, other units,
    malformed): RFC 9110 lets a server ignore Range and answer 200 with the whole body. Returns "unsatisfiable"
    when the range lies outside the file (416).
    """
    if not header:
        return None
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if m is None or (m.group(1) == "" and m.group(2) == ""):
        return None
    first, last = m.group(1), m.group(2)
    if first == "":
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(size - suffix, 0), size - 1
    start = int(first)
    if last and int(last) < start:
        return None  # syntactically invalid: RFC 9110 says to ignore the header
    if start >= size:
        return "unsatisfiable"
    end = min(int(last), size - 1) if last else size - 1
    return start, end


class MirrorHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 for keep-alive: the client reuses connections for HEAD then GET of every file. This requires
    # every response to carry Content-Length, which all paths below do.
    protocol_version = "HTTP/1.1"
    server_version = "hf-mirror/1"
    # Idle keep-alive connections are closed after this long so handler threads do not pile up.
    timeout = 120

    # -- plumbing ----------------------------------------------------------------------------------------

    @property
    def state(self) -> MirrorState:
        return cast("_MirrorHTTPServer", self.server).state

    def setup(self) -> None:
        super().setup()
        cast("_MirrorHTTPServer", self.server).track(self.connection, add=True)
        with self.state.lock:
            self.state.stats.connections += 1

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            cast("_MirrorHTTPServer", self.server).track(self.connection, add=False)

    def end_headers(self) -> None:
        self._headers_sent = True
        super().end_headers()

    def log_message(self, *args: Any) -> None:
        # Requests are recorded as structured entries (see MirrorState.record); the default stderr lines
        # would only add noise to test output.
        return

    def _handle(self) -> None:
        self._dispatch(self.command)  # the request's method, as parsed by BaseHTTPRequestHandler

    # The methods the mirror answers: one dispatch for them all.
    do_GET = do_HEAD = do_POST = do_DELETE = _handle

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        # Split before unquoting: the client quotes a revision like "refs/heads/main" into one segment.
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        path = unquote(url.path)
        self._entry: dict[str, Any] = {
            "method": method,
            "path": path,
            "query": url.query,
            "range": self.headers.get("Range"),
            "status": None,
            "bytes": 0,
            "fault": None,
            "time": round(time.time(), 3),
            # Who asked: each sandbox host reaches the mirror from a loopback address of its own
            # (sandbox/host.sh), so a test reads what its host asked for while other hosts download.
            "client": self.client_address[0],
        }
        self._headers_sent = False
        try:
            self._body_bytes = self._read_request_body()
            fault = None if path.startswith("/_mirror/") else self.state.take_fault(method, path)
            if fault is not None:
                self._entry["fault"] = fault.id
                if fault.delay_s:
                    time.sleep(fault.delay_s)
                if fault.status is not None:
                    raise HttpError(fault.status, f"injected fault {fault.id}", None, {"Retry-After": "1"})
            self._route(method, segments, parse_qs(url.query), fault)
        except HttpError as err:
            self._send_error(err, method)
        except _ConnectionDroppedError:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-response; nothing left to tell it
        except Exception as exc:
            # One bad request must not end the connection's thread silently: log it, answer 500 if we still can.
            self.close_connection = True
            LOG.exception("%s %s failed", method, path)
            if not self._headers_sent:
                self._send_error(HttpError(500, f"internal error: {exc}"), method)
        finally:
            self.state.record(self._entry)

    def _read_request_body(self) -> bytes:
        # Always drain a request body, even one we ignore, or the next request on this keep-alive connection
        # would start in the middle of it.
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            raise HttpError(400, "invalid Content-Length") from exc
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, data: Any, method: str, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self._entry["status"] = status
        if method != "HEAD":
            self.wfile.write(body)
            self._entry["bytes"] = len(body)

    def _send_error(self, err: HttpError, method: str) -> None:
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        # The client reads X-Error-Message on HEAD (which has no body) and the JSON body on GET.
        headers["X-Error-Message"] = err.message.encode("ascii", "replace").decode()
        self._send_json(err.status, {"error": err.message}, method, headers)

    # -- routing -----------------------------------------------------------------------------------------

    def _route(self, method: str, seg: list[str], query: dict[str, list[str]], fault: Fault | None) -> None:
        if seg[:1] == ["_mirror"]:
            self._control(method, seg[1:])
            return
        if seg == ["api", "agent-harnesses"] and method == "GET":
            # hf >= 2.x fetches this registry (user-agent "agent" detection) on every CLI run unless a cached
            # copy is fresh; an empty one is cached by the client for a day and detects nothing.
            self._send_json(200, {"standardEnvVars": [], "harnesses": {}}, method)
            return
        if seg[:2] == ["api", "models"]:
            if len(seg) == 2 and method == "GET":
                self._send_json(200, [self._model_summary(r) for r in self.state.store.repo_ids()], method)
                return
            if len(seg) >= 4:
                repo_id, rest = f"{seg[2]}/{seg[3]}", seg[4:]
                if not rest and method == "GET":
                    self._model_info(repo_id, "main", query, method)
                    return
                if len(rest) == 2 and rest[0] == "revision" and method == "GET":
                    self._model_info(repo_id, rest[1], query, method)
                    return
                if len(rest) >= 2 and rest[0] == "tree" and method == "GET":
                    self._tree(repo_id, rest[1], "/".join(rest[2:]), query, method)
                    return
                if len(rest) == 2 and rest[0] == "paths-info" and method == "POST":
                    self._paths_info(repo_id, rest[1], method)
                    return
            raise HttpError(404, "Not Found")
        if len(seg) >= 5 and seg[2] == "resolve" and method in ("GET", "HEAD"):
            self._resolve(f"{seg[0]}/{seg[1]}", seg[3], "/".join(seg[4:]), method, fault)
            return
        raise HttpError(404, "Not Found")

    # -- repo lookups and auth ---------------------------------------------------------------------------

    def _snapshot(self, repo_id: str, revision: str = "main") -> RepoSnapshot:
        snap = self.state.store.snapshot_at(repo_id, revision)
        if snap is None:
            # The Hub answers 401 (not 404) for a missing repo, so that private repos cannot be probed.
            raise HttpError(401, "Repository not found", "RepoNotFound")
        return snap

    def _check_revision(self, snap: RepoSnapshot, revision: str) -> None:
        if revision not in _MAIN_REFS and revision != snap.sha:
            raise HttpError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _check_access(self, repo_id: str) -> None:
        """Gated repos: metadata stays public (as on the Hub); file contents need the mirror's token."""
        if repo_id not in self.state.gated:
            return
        auth = self.headers.get("Authorization") or ""
        if not auth:
            raise HttpError(
                401,
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to "
                "access it. Please log in.",
                "GatedRepo",
            )
        scheme, _, presented = auth.partition(" ")
        expected = self.state.token
        # compare_digest: a token check should not leak, through timing, how much of a guess was right.
        if scheme.lower() != "bearer" or expected is None or not hmac.compare_digest(presented.strip(), expected):
            # The Hub's exact wording for a bad token; the client special-cases it to not claim "repo not found".
            raise HttpError(401, "Invalid credentials in Authorization header")

    # -- API endpoints -----------------------------------------------------------------------------------

    def _model_summary(self, repo_id: str, revision: str = "main") -> dict[str, Any]:
        snap = self._snapshot(repo_id, revision)
        return {
            "_id": snap.sha[:24],
            "id": repo_id,
            "modelId": repo_id,
            "private": False,
            "gated": "manual" if repo_id in self.state.gated else False,
            "downloads": 0,
            "likes": 0,
            "tags": self._tags(snap),
            "library_name": "transformers",
            "createdAt": _EPOCH_ISO,
            "lastModified": snap.last_modified,
            "sha": snap.sha,
        }

    @staticmethod
    def _tags(snap: RepoSnapshot) -> list[str]:
        tags = ["transformers"]
        if any(p.endswith(".safetensors") for p in snap.files):
            tags.append("safetensors")
        if snap.config and isinstance(snap.config.get("model_type"), str):
            tags.append(snap.config["model_type"])
        return tags

    def _model_info(self, repo_id: str, revision: str, query: dict[str, list[str]], method: str) -> None:
        snap = self._snapshot(repo_id, revision)
        self._check_revision(snap, revision)
        blobs = _parse_bool(_first(query, "blobs"))
        siblings: list[dict[str, Any]] = []
        for entry in snap.files.values():
            sibling: dict[str, Any] = {"rfilename": entry.path}
            if blobs:
                sibling["size"] = entry.size
                sibling["blobId"] = entry.oid
                if entry.is_lfs:
                    sibling["lfs"] = {"sha256": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
            siblings.append(sibling)
        info = self._model_summary(repo_id, revision)
        info.update(
            {
                "author": repo_id.split("/", 1)[0],
                "disabled": False,
                "pipeline_tag": "text-generation",
                "siblings": siblings,
                "spaces": [],
                "usedStorage": sum(e.size for e in snap.files.values()),
            }
        )
        if snap.config is not None:
            info["config"] = snap.config
        if snap.safetensors_params:
            info["safetensors"] = {
                "parameters": snap.safetensors_params,
                "total": sum(snap.safetensors_params.values()),
            }
        self._send_json(200, info, method)

    def _file_json(self, snap: RepoSnapshot, entry: FileEntry, expand: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "file", "oid": entry.oid, "size": entry.size, "path": entry.path}
        if entry.is_lfs:
            item["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
        if expand:
            item["lastCommit"] = self._last_commit(snap)
        return item

    def _dir_json(self, snap: RepoSnapshot, path: str, expand: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "directory", "oid": snap.dirs[path], "size": 0, "path": path}
        if expand:
            item["lastCommit"] = self._last_commit(snap)
        return item

    @staticmethod
    def _last_commit(snap: RepoSnapshot) -> dict[str, str]:
        return {"id": snap.sha, "title": "Mirror snapshot", "date": snap.last_modified}

    def _tree(self, repo_id: str, revision: str, path: str, query: dict[str, list[str]], method: str) -> None:
        snap = self._snapshot(repo_id, revision)
        self._check_revision(snap, revision)
        path = path.strip("/")
        if path and path not in snap.dirs:
            raise HttpError(404, f"Entry not found: {path}", "EntryNotFound")
        recursive = _parse_bool(_first(query, "recursive"))
        expand = _parse_bool(_first(query, "expand"))
        prefix = f"{path}/" if path else ""
        items: list[tuple[str, bool]] = []  # (path, is_dir)
        for d in snap.dirs:
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix) :]):
                items.append((d, True))
        for p in snap.files:
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]):
                items.append((p, False))
        items.sort()
        page_size = self.state.tree_page_size_expanded if expand else self.state.tree_page_size
        try:
            start = int((query.get("cursor") or ["0"])[0])
        except ValueError as exc:
            raise HttpError(400, "invalid cursor") from exc
        page = items[start : start + page_size]
        headers: dict[str, str] = {}
        if start + page_size < len(items):
            # Same mechanism as the Hub (and GitHub): an absolute next-page URL in a Link header.
            host = self.headers.get("Host") or f"127.0.0.1:{self.connection.getsockname()[1]}"
            next_query = f"recursive={str(recursive).lower()}&expand={str(expand).lower()}&cursor={start + page_size}"
            headers["Link"] = f'<http://{host}{urlsplit(self.path).path}?{next_query}>; rel="next"'
        body = [
            self._dir_json(snap, p, expand) if is_dir else self._file_json(snap, snap.files[p], expand)
            for p, is_dir in page
        ]
        self._send_json(200, body, method, headers)

    def _paths_info(self, repo_id: str, revision: str, method: str) -> None:
        snap = self._snapshot(repo_id, revision)
        self._check_revision(snap, revision)
        # HfApi.get_paths_info posts a form (paths=a&paths=b&expand=False); accept JSON too for other callers.
        content_type = (self.headers.get("Content-Type") or "").lower()
        paths: list[str]
        if "json" in content_type:
            try:
                data = json.loads(self._body_bytes or b"{}")
            except ValueError as exc:
                raise HttpError(400, "invalid JSON body") from exc
            raw_paths = data.get("paths", []) if isinstance(data, dict) else []
            paths = [raw_paths] if isinstance(raw_paths, str) else [str(p) for p in raw_paths]
            expand = bool(data.get("expand")) if isinstance(data, dict) else False
        else:
            form = parse_qs(self._body_bytes.decode("utf-8", "replace"))
            paths = form.get("paths", [])
            expand = _parse_bool(_first(form, "expand"))
        result: list[dict[str, Any]] = []
        seen: set[str] = set()
        for raw in paths:
            p = raw.strip("/")
            if p in seen:
                continue
            seen.add(p)
            # Unknown paths are left out, not reported as errors: that is what the Hub does.
            if p in snap.files:
                result.append(self._file_json(snap, snap.files[p], expand))
            elif p in snap.dirs:
                result.append(self._dir_json(snap, p, expand))
        self._send_json(200, result, method)

    # -- file downloads ----------------------------------------------------------------------------------

    def _resolve(self, repo_id: str, revision: str, path: str, method: str, fault: Fault | None) -> None:
        snap = self._snapshot(repo_id, revision)
        self._check_access(repo_id)
        self._check_revision(snap, revision)
        entry = snap.files.get(path)
        if entry is None:
            # X-Repo-Commit on a 404 lets the client cache the file's absence for this commit, as on the Hub.
            raise HttpError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": snap.sha})
        headers = {
            "X-Repo-Commit": snap.sha,
            "ETag": f'"{entry.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": mimetypes.guess_type(entry.path)[0] or "application/octet-stream",
        }
        if entry.is_lfs:
            # On the Hub these come with the redirect to the CDN; the client prefers them over ETag and
            # Content-Length, so sending them keeps both paths consistent.
            headers["X-Linked-Etag"] = f'"{entry.etag}"'
            headers["X-Linked-Size"] = str(entry.size)
        wanted = parse_range(self.headers.get("Range"), entry.size)
        if wanted == "unsatisfiable":
            raise HttpError(416, "Requested range not satisfiable", None, {"Content-Range": f"bytes */{entry.size}"})
        if isinstance(wanted, tuple):
            start, end = wanted
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        else:
            start, end, status = 0, entry.size - 1, 200
        length = end - start + 1
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self._entry["status"] = status
        if method == "HEAD" or length == 0:
            return
        with open(entry.abspath, "rb") as f:
            self._send_file(f, start, length, fault)

    def _send_file(self, f: BinaryIO, start: int, length: int, fault: Fault | None) -> None:
        """Stream `length` bytes from `start`, applying rate limit and faults; sendfile on the fast path."""
        sock = self.connection
        limit = length
        drop = fault is not None and fault.drop_after_bytes is not None and fault.drop_after_bytes < length
        if drop and fault is not None and fault.drop_after_bytes is not None:
            limit = fault.drop_after_bytes
        corrupt_at = fault.corrupt_at_byte if fault is not None else None
        rate = self.state.rate_limit_bytes_per_s
        # Under a rate limit, send about 20 slices a second so the pacing is smooth.
        chunk = SEND_CHUNK if not rate else max(1024, int(rate / 20))
        sent = 0
        began = time.monotonic()
        while sent < limit:
            count = min(chunk, limit - sent)
            if corrupt_at is not None and sent <= corrupt_at < sent + count:
                # The one slow path: read the slice, flip the byte, send it from Python.
                f.seek(start + sent)
                data = bytearray(f.read(count))
                data[corrupt_at - sent] ^= 0xFF
                sock.sendall(data)
                n = len(data)
            else:
                n = sock.sendfile(f, offset=start + sent, count=count)
                if n == 0:
                    # The file shrank under us: the promised Content-Length cannot be met, so this connection
                    # must not be reused; the client sees a short body and retries.
                    self.close_connection = True
                    break
            sent += n
            self._entry["bytes"] = sent
            if rate:
                ahead = sent / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        if drop and fault is not None:
            if fault.stall_s:
                time.sleep(fault.stall_s)
            self._drop_connection(fault.drop_mode)
            raise _ConnectionDroppedError

    def _drop_connection(self, mode: str) -> None:
        sock = self.connection
        try:
            if mode == "reset":
                # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            else:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- control endpoints -------------------------------------------------------------------------------

    def _control(self, method: str, seg: list[str]) -> None:
        state = self.state
        what = "/".join(seg)
        if what == "stats" and method == "GET":
            with state.lock:
                stats = state.stats.to_json()
            self._send_json(200, stats, method)
        elif what == "reset-stats" and method == "POST":
            with state.lock:
                state.stats = Stats()
            self._send_json(200, {"ok": True}, method)
        elif what == "faults" and method == "GET":
            with state.lock:
                faults = [f.to_json() for f in state.faults]
            self._send_json(200, faults, method)
        elif what == "faults" and method == "POST":
            try:
                payload = json.loads(self._body_bytes or b"null")
                specs = payload if isinstance(payload, list) else [payload]
                with state.lock:
                    added = []
                    for spec in specs:
                        added.append(parse_fault(spec, state.next_fault_id))
                        state.next_fault_id += 1
                    state.faults.extend(added)
            except ValueError as exc:
                raise HttpError(400, str(exc)) from exc
            self._send_json(200, [f.to_json() for f in added], method)
        elif what == "faults" and method == "DELETE":
            with state.lock:
                state.faults.clear()
            self._send_json(200, {"ok": True}, method)
        elif what == "config" and method == "POST":
            try:
                payload = json.loads(self._body_bytes or b"{}")
                if not isinstance(payload, dict):
                    raise ValueError("expected a JSON object")
                with state.lock:
                    if "rate_limit_bytes_per_s" in payload:
                        rate = payload["rate_limit_bytes_per_s"]
                        state.rate_limit_bytes_per_s = float(rate) if rate else None
                    if "tree_page_size" in payload:
                        state.tree_page_size = int(payload["tree_page_size"])
                    if "tree_page_size_expanded" in payload:
                        state.tree_page_size_expanded = int(payload["tree_page_size_expanded"])
            except (ValueError, TypeError) as exc:
                raise HttpError(400, str(exc)) from exc
            self._send_json(200, {"ok": True}, method)
        elif what == "repos" and method == "GET":
            repos = {}
            for repo_id in state.store.repo_ids():
                snap = state.store.snapshot(repo_id)
                if snap is not None:
                    repos[repo_id] = snap.sha
            self._send_json(200, repos, method)
        else:
            raise HttpError(404, "Not Found")


class _MirrorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client must never keep the process alive
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: MirrorState, family: socket.AddressFamily) -> None:
        self.address_family = family
        self.state = state
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, MirrorHandler)

    def track(self, conn: socket.socket, *, add: bool) -> None:
        with self._open_lock:
            if add:
                self._open.add(conn)
            else:
                self._open.discard(conn)

    def close_all_connections(self) -> None:
        # Idle keep-alive connections would otherwise keep handler threads blocked in readline after stop().
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------


def check_loopback(host: str) -> tuple[str, socket.AddressFamily]:
    """Return (bind address, family) for a loopback host, or raise ValueError: this server never listens on
    anything reachable from outside the machine."""
    if host == "localhost":
        return "127.0.0.1", socket.AF_INET
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError as exc:
        raise ValueError(f"--host must be a loopback address (127.0.0.0/8, ::1 or localhost), got {host!r}") from exc
    if not ip.is_loopback:
        raise ValueError(f"refusing to bind non-loopback address {host!r}")
    return str(ip), socket.AF_INET6 if ip.version == 6 else socket.AF_INET


class HFMirror:
    """The mirror as an object: start() in a background thread, use .url, stop(). Also a context manager.

    Hashes of every file are computed in start() (before the first request), so the first HEAD of a big file
    is as fast as any other.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        gated: Iterable[str] = (),
        rate_limit_bytes_per_s: float | None = None,
        lfs_threshold: int = DEFAULT_LFS_THRESHOLD,
        log_file: Path | str | None = None,
        prehash: bool = True,
    ) -> None:
        self.root = Path(root)
        self.host, self._family = check_loopback(host)
        self.port = port
        self.state = MirrorState(
            store=RepoStore(self.root, lfs_threshold),
            token=token,
            gated=frozenset(gated),
            rate_limit_bytes_per_s=rate_limit_bytes_per_s,
            log_path=Path(log_file) if log_file is not None else None,
        )
        self._prehash = prehash
        self._server: _MirrorHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if self._family == socket.AF_INET6 else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        if self._prehash:
            for repo_id in self.state.store.repo_ids():
                self.state.store.snapshot(repo_id)
        self._server = _MirrorHTTPServer((self.host, self.port), self.state, self._family)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="hf-mirror", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.close_all_connections()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sha(self, repo_id: str) -> str:
        snap = self.state.store.snapshot(repo_id)
        if snap is None:
            raise KeyError(repo_id)
        return snap.sha


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hugging Face-compatible mirror of ORG/NAME folders, on loopback.")
    parser.add_argument("--root", type=Path, required=True, help="folder holding ORG/NAME/<files>")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (printed)")
    parser.add_argument("--token", help="token that gated repos require as 'Authorization: Bearer TOKEN'")
    parser.add_argument("--gated", nargs="+", action="extend", default=[], metavar="REPO", help="gated repo ids")
    parser.add_argument("--log-file", type=Path, help="append one JSON line per request here")
    parser.add_argument("--rate-limit-bytes-per-s", type=float, help="cap each response's body rate")
    parser.add_argument("--lfs-threshold-bytes", type=int, default=DEFAULT_LFS_THRESHOLD)
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"--root {args.root} is not a folder")
    try:
        mirror = HFMirror(
            args.root,
            host=args.host,
            port=args.port,
            token=args.token,
            gated=args.gated,
            rate_limit_bytes_per_s=args.rate_limit_bytes_per_s,
            lfs_threshold=args.lfs_threshold_bytes,
            log_file=args.log_file,
        )
    except ValueError as exc:
        parser.error(str(exc))
    stop = threading.Event()
    # Signal handlers only set a flag: server.shutdown() blocks until serve_forever returns, so it must run
    # outside the handler, here in the main thread.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    mirror.start()
    print(f"hf-mirror listening on {mirror.url}", flush=True)
    while not stop.wait(0.5):
        pass
    mirror.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
