"""The loopback Hugging Face mirror, tested against the real huggingface_hub client (2.4.0).

The mirror runs in-process on port 0 (one per module); the client runs both in-process (HfApi,
hf_hub_download, snapshot_download, always with an explicit `endpoint=`) and as the `hf` CLI in a subprocess
with HF_ENDPOINT pointing at the mirror. A guard fixture makes any in-process attempt to reach a
non-loopback address fail the test instead of sending traffic.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandbox.processes import run_captured

# Set before huggingface_hub is imported: it reads these into constants at import time.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_UPDATE_CHECK", "1")

import httpx2
import pytest
from huggingface_hub import HfApi, RepoFile, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from sandbox import hf_mirror, sandbox_env
from sandbox.hf_mirror import REVISIONS_DIR, HFMirror, check_loopback, parse_range
from sandbox.tiny_adapters import TERSE_REPO, generate_default_adapters
from sandbox.tiny_models import generate

# Run the module the way a developer would (python -m), from the folder its package lives in, wherever
# these tests and the module end up being moved to.
MODULE = hf_mirror.__name__
REPO_ROOT = Path(hf_mirror.__file__).resolve().parents[MODULE.count(".")]
TOKEN = "hf_mirror_test_token"
GATED = "acme/tiny-chat-b"
BIG_SIZE = 12 * 1024 * 1024 + 123  # just over the client's 10 MiB read chunk, so a resume uses Range
CLIENT_CHUNK = constants.DOWNLOAD_CHUNK_SIZE


# --------------------------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mirror-root")
    generate(root, "acme/tiny-chat-a", 1)
    generate(root, "acme/tiny-chat-b", 2)
    big = root / "acme" / "big"
    big.mkdir(parents=True)
    (big / "weights.bin").write_bytes(random.Random(0).randbytes(BIG_SIZE))
    (big / "config.json").write_text('{"model_type": "none"}\n')
    generate_default_adapters(root)
    nested = root / "acme" / "nested"
    (nested / "sub" / "deeper").mkdir(parents=True)
    (nested / "top.txt").write_text("top\n")
    (nested / "sub" / "a.txt").write_text("a\n")
    (nested / "sub" / "deeper" / "b.txt").write_text("b\n")
    return root


@pytest.fixture(scope="module")
def mirror(root: Path) -> Iterator[HFMirror]:
    with HFMirror(root, token=TOKEN, gated=[GATED]) as m:
        yield m


@pytest.fixture(autouse=True)
def clean_mirror(mirror: HFMirror) -> None:
    # The mirror is shared by the module's tests: each starts with no faults, default settings, empty stats.
    control(mirror, "DELETE", "/_mirror/faults")
    control(
        mirror,
        "POST",
        "/_mirror/config",
        {"rate_limit_bytes_per_s": None, "tree_page_size": 1000, "tree_page_size_expanded": 50},
    )
    control(mirror, "POST", "/_mirror/reset-stats")


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail, rather than send traffic, if anything in-process tries to reach beyond loopback."""
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def is_loopback(host: Any) -> bool:
        try:
            check_loopback(str(host))
        except ValueError:
            return False
        return True

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not is_loopback(host):
            raise AssertionError(f"test tried to resolve non-loopback host {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address[0]):
            raise AssertionError(f"test tried to connect to non-loopback address {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    # Telemetry would call the default endpoint; keep it off even if huggingface_hub was imported earlier.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)


def control(mirror: HFMirror, method: str, path: str, body: Any = None) -> Any:
    return sandbox_env.mirror(path, method, body, url=mirror.url)


def calls(mirror: HFMirror) -> list[tuple[str, str, int | None, str | None]]:
    """The client's requests since the last reset, as (method, path, status, range), control calls left out."""
    log = control(mirror, "GET", "/_mirror/stats")["log"]
    return [
        (e["method"], e["path"], e["status"], e["range"])
        for e in log
        if not e["path"].startswith("/_mirror/") and e["path"] != "/api/agent-harnesses"
    ]


def repo_files(root: Path, repo_id: str) -> dict[str, bytes]:
    base = root / repo_id
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def downloaded_files(local_dir: Path) -> dict[str, bytes]:
    # The client keeps its bookkeeping (metadata, tree cache) under local_dir/.cache/huggingface.
    return {
        p.relative_to(local_dir).as_posix(): p.read_bytes()
        for p in sorted(local_dir.rglob("*"))
        if p.is_file() and ".cache" not in p.relative_to(local_dir).parts
    }


def run_hf(mirror: HFMirror, hf_home: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real `hf` CLI in a subprocess, pointed at the mirror and nowhere else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=mirror.url,
        HF_HOME=str(hf_home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        NO_COLOR="1",
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return run_captured([sys.executable, "-m", "huggingface_hub.cli.hf", *args], env=env, timeout=120)


def git_blob_sha1(data: bytes) -> str:
    # Computed here independently of the mirror: what `git hash-object` prints for the file.
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# The CLI end to end
# --------------------------------------------------------------------------------------------------------------


def test_cli_download_by_sha_is_byte_identical(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    sha = mirror.sha("acme/tiny-chat-a")
    out = tmp_path / "out"
    result = run_hf(
        mirror, tmp_path / "hf-home", "download", "acme/tiny-chat-a", "--revision", sha, "--local-dir", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert downloaded_files(out) == repo_files(root, "acme/tiny-chat-a")

    # What the client asked for: no revision lookup for a sha, one tree listing, then HEAD + GET per file.
    seen = calls(mirror)
    files = sorted(repo_files(root, "acme/tiny-chat-a"))
    assert seen[0] == ("GET", f"/api/models/acme/tiny-chat-a/tree/{sha}", 200, None)
    resolved = [(m, p) for m, p, _, _ in seen[1:]]
    prefix = f"/acme/tiny-chat-a/resolve/{sha}/"
    assert sorted(resolved) == sorted([("HEAD", prefix + f) for f in files] + [("GET", prefix + f) for f in files])
    assert all(status == 200 for _, _, status, _ in seen)


def test_cli_second_download_into_same_dir_transfers_nothing(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    sha = mirror.sha("acme/tiny-chat-a")
    out = tmp_path / "out"
    first = run_hf(mirror, tmp_path / "h1", "download", "acme/tiny-chat-a", "--revision", sha, "--local-dir", str(out))
    assert first.returncode == 0, first.stderr
    control(mirror, "POST", "/_mirror/reset-stats")
    second = run_hf(mirror, tmp_path / "h2", "download", "acme/tiny-chat-a", "--revision", sha, "--local-dir", str(out))
    assert second.returncode == 0, second.stderr
    # Pinned to a sha, with the tree listing cached in local_dir/.cache: not a single request.
    assert calls(mirror) == []

    by_branch = run_hf(mirror, tmp_path / "h3", "download", "acme/tiny-chat-a", "--local-dir", str(out))
    assert by_branch.returncode == 0, by_branch.stderr
    # By branch name, only the revision is resolved; nothing is downloaded again.
    assert calls(mirror) == [("GET", "/api/models/acme/tiny-chat-a/revision/main", 200, None)]
    assert downloaded_files(out) == repo_files(root, "acme/tiny-chat-a")


def test_cli_download_main_into_cache(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    result = run_hf(mirror, tmp_path / "home", "download", "acme/tiny-chat-a")
    assert result.returncode == 0, result.stderr
    # The standard cache layout: hub/models--ORG--NAME/snapshots/<commit sha>/ of symlinks into blobs/.
    snapshot = tmp_path / "home/hub/models--acme--tiny-chat-a/snapshots" / mirror.sha("acme/tiny-chat-a")
    assert str(snapshot) in result.stdout
    assert downloaded_files(snapshot) == repo_files(root, "acme/tiny-chat-a")
    assert calls(mirror)[0] == ("GET", "/api/models/acme/tiny-chat-a/revision/main", 200, None)


def test_cli_gated_repo_needs_the_token(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    denied = run_hf(mirror, tmp_path / "h1", "download", GATED, "--local-dir", str(out))
    assert denied.returncode != 0
    assert GATED in denied.stderr + denied.stdout
    assert not (out / "config.json").exists()

    wrong = run_hf(mirror, tmp_path / "h2", "download", GATED, "--local-dir", str(out), token="not-the-token")
    assert wrong.returncode != 0
    assert "Invalid credentials" in wrong.stderr + wrong.stdout

    allowed = run_hf(mirror, tmp_path / "h3", "download", GATED, "--local-dir", str(out), token=TOKEN)
    assert allowed.returncode == 0, allowed.stderr
    assert downloaded_files(out) == repo_files(root, GATED)


def test_cli_missing_repo_and_revision_fail_clearly(mirror: HFMirror, tmp_path: Path) -> None:
    missing_repo = run_hf(mirror, tmp_path / "h", "download", "acme/nope", "--local-dir", str(tmp_path / "o1"))
    assert missing_repo.returncode != 0
    assert "not found" in missing_repo.stderr.lower()
    missing_rev = run_hf(
        mirror, tmp_path / "h", "download", "acme/tiny-chat-a", "--revision", "v9", "--local-dir", str(tmp_path / "o2")
    )
    assert missing_rev.returncode != 0
    assert "revision not found" in missing_rev.stderr.lower()


# --------------------------------------------------------------------------------------------------------------
# The library: errors, metadata, pagination
# --------------------------------------------------------------------------------------------------------------


def test_client_error_types(mirror: HFMirror, tmp_path: Path) -> None:
    # token=False: a developer's HF_TOKEN or stored login must not leak into the "no token" cases.
    kwargs: dict[str, Any] = {"endpoint": mirror.url, "cache_dir": tmp_path / "cache", "token": False}
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("acme/nope", "config.json", **kwargs)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("acme/tiny-chat-a", "config.json", revision="v9", **kwargs)
    with pytest.raises(RevisionNotFoundError):
        snapshot_download("acme/tiny-chat-a", revision="0" * 40, **kwargs)
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download("acme/tiny-chat-a", "nope.json", **kwargs)
    with pytest.raises(GatedRepoError):
        hf_hub_download(GATED, "config.json", **kwargs)
    with pytest.raises(HfHubHTTPError, match="Invalid credentials"):
        hf_hub_download(GATED, "config.json", **{**kwargs, "token": "wrong"})
    path = hf_hub_download(GATED, "config.json", **{**kwargs, "token": TOKEN})
    assert Path(path).read_bytes() == (mirror.root / GATED / "config.json").read_bytes()


def test_refs_heads_main_and_sha_resolve_to_the_same_commit(mirror: HFMirror) -> None:
    api = HfApi(endpoint=mirror.url)
    sha = mirror.sha("acme/tiny-chat-a")
    assert api.model_info("acme/tiny-chat-a").sha == sha
    assert api.model_info("acme/tiny-chat-a", revision="refs/heads/main").sha == sha
    assert api.model_info("acme/tiny-chat-a", revision=sha).sha == sha
    assert mirror.sha("acme/tiny-chat-b") != sha


def test_model_info_reports_lfs_sha256_and_sizes(mirror: HFMirror, root: Path) -> None:
    api = HfApi(endpoint=mirror.url)
    sha = mirror.sha("acme/tiny-chat-a")
    info = api.model_info("acme/tiny-chat-a", revision=sha, files_metadata=True)
    assert info.sha == sha
    assert info.siblings is not None
    siblings = {s.rfilename: s for s in info.siblings}
    assert set(siblings) == set(repo_files(root, "acme/tiny-chat-a"))
    for name, sibling in siblings.items():
        path = root / "acme/tiny-chat-a" / name
        assert sibling.size == path.stat().st_size
        if name.endswith(".safetensors"):
            assert sibling.lfs is not None
            assert sibling.lfs.sha256 == sha256_of(path)
            assert sibling.lfs.size == sibling.size
        else:
            assert sibling.lfs is None
            assert sibling.blob_id == git_blob_sha1(path.read_bytes())
    assert info.safetensors is not None
    assert info.safetensors.total > 0
    assert api.model_info(GATED).gated == "manual"


def test_tree_listing_paginates_and_matches_paths_info(mirror: HFMirror, root: Path) -> None:
    api = HfApi(endpoint=mirror.url)
    sha = mirror.sha("acme/tiny-chat-a")
    control(mirror, "POST", "/_mirror/config", {"tree_page_size": 3, "tree_page_size_expanded": 4})
    listed = list(api.list_repo_tree("acme/tiny-chat-a", revision=sha, recursive=True))
    expanded = list(api.list_repo_tree("acme/tiny-chat-a", revision=sha, recursive=True, expand=True))
    assert [f.path for f in listed] == sorted(repo_files(root, "acme/tiny-chat-a"))
    assert [f.path for f in expanded] == [f.path for f in listed]
    pages = [c for c in calls(mirror) if "/tree/" in c[1]]
    assert len(pages) == 4 + 3, "10 files in pages of 3 (plain) and 4 (expanded)"

    shards = [p for p in repo_files(root, "acme/tiny-chat-a") if p.endswith(".safetensors")]
    infos = api.get_paths_info("acme/tiny-chat-a", [*shards, "config.json", "missing.bin"], revision=sha)
    by_path = {i.path: i for i in infos}
    assert set(by_path) == {*shards, "config.json"}, "unknown paths are left out, as on the Hub"
    tree = {f.path: f for f in listed}
    for shard in shards:
        info, listed_file = by_path[shard], tree[shard]
        assert isinstance(info, RepoFile)
        assert isinstance(listed_file, RepoFile)
        assert info.lfs is not None
        assert info.lfs.sha256 == sha256_of(root / "acme/tiny-chat-a" / shard)
        assert info.blob_id == listed_file.blob_id


def test_nested_folders_in_tree(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    api = HfApi(endpoint=mirror.url)
    top = {(type(e).__name__, e.path) for e in api.list_repo_tree("acme/nested")}
    assert top == {("RepoFile", "top.txt"), ("RepoFolder", "sub")}
    deep = {e.path for e in api.list_repo_tree("acme/nested", path_in_repo="sub", recursive=True)}
    assert deep == {"sub/a.txt", "sub/deeper", "sub/deeper/b.txt"}
    out = Path(snapshot_download("acme/nested", endpoint=mirror.url, local_dir=tmp_path / "o", cache_dir=tmp_path))
    assert downloaded_files(out) == repo_files(root, "acme/nested")


def test_safetensors_headers_parse_with_the_clients_parser(mirror: HFMirror) -> None:
    # get_safetensors_metadata reads the index, then each shard's header through a Range request.
    meta = HfApi(endpoint=mirror.url).get_safetensors_metadata("acme/tiny-chat-a")
    assert meta.sharded
    assert len(meta.files_metadata) == 3
    assert sum(meta.parameter_count.values()) > 80_000
    assert any(r is not None and r.startswith("bytes=0-") for _, _, _, r in calls(mirror))


def test_new_revision_when_files_change(mirror: HFMirror, root: Path) -> None:
    shutil.copytree(root / "acme/tiny-chat-a", root / "acme/mutable")
    try:
        old_sha = mirror.sha("acme/mutable")
        assert old_sha == mirror.sha("acme/tiny-chat-a"), "the commit sha depends on content only"
        (root / "acme/mutable/README.md").write_text("changed\n")
        new_sha = mirror.sha("acme/mutable")
        assert new_sha != old_sha
        api = HfApi(endpoint=mirror.url)
        assert api.model_info("acme/mutable").sha == new_sha
        with pytest.raises(RevisionNotFoundError):
            api.model_info("acme/mutable", revision=old_sha)
    finally:
        shutil.rmtree(root / "acme/mutable")


# --------------------------------------------------------------------------------------------------------------
# Faults: what the client does when the connection breaks or the bytes are wrong
# --------------------------------------------------------------------------------------------------------------


def test_connection_closed_mid_file_is_resumed_with_range(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    sha = mirror.sha("acme/big")
    drop_at = CLIENT_CHUNK + 1_000_000
    sandbox_env.add_fault({"path_glob": "*/weights.bin", "drop_after_bytes": drop_at}, url=mirror.url)
    path = hf_hub_download(
        "acme/big", "weights.bin", revision=sha, endpoint=mirror.url, local_dir=tmp_path / "o", cache_dir=tmp_path
    )
    assert Path(path).read_bytes() == (root / "acme/big/weights.bin").read_bytes()
    gets = [c for c in calls(mirror) if c[0] == "GET"]
    # The client resumes within the same process, from the last whole 10 MiB chunk it wrote.
    assert gets == [
        ("GET", f"/acme/big/resolve/{sha}/weights.bin", 200, None),
        ("GET", f"/acme/big/resolve/{sha}/weights.bin", 206, f"bytes={CLIENT_CHUNK}-"),
    ]
    stats = control(mirror, "GET", "/_mirror/stats")
    assert stats["bytes_sent"][f"/acme/big/resolve/{sha}/weights.bin"] == drop_at + BIG_SIZE - CLIENT_CHUNK


def test_connection_closed_early_restarts_from_zero(mirror: HFMirror, root: Path, tmp_path: Path) -> None:
    sandbox_env.add_fault({"path_glob": "*/weights.bin", "drop_after_bytes": 1000}, url=mirror.url)
    path = hf_hub_download("acme/big", "weights.bin", endpoint=mirror.url, local_dir=tmp_path / "o", cache_dir=tmp_path)
    assert sha256_of(Path(path)) == sha256_of(root / "acme/big/weights.bin")
    ranges = [c[3] for c in calls(mirror) if c[0] == "GET"]
    assert ranges == [None, None], "less than one client chunk was written, so there is nothing to resume from"


def test_client_does_not_retry_after_connection_reset(mirror: HFMirror, tmp_path: Path) -> None:
    # Worth knowing for the project's downloader: a TCP RST mid-body surfaces as httpx2.ReadError, which
    # huggingface_hub 2.4's http_get does not treat as retryable (it retries ConnectError, timeouts and
    # RemoteProtocolError only). Anything that wraps the client must retry such failures itself.
    sandbox_env.add_fault(
        {"path_glob": "*/weights.bin", "drop_after_bytes": CLIENT_CHUNK + 1000, "drop_mode": "reset"}, url=mirror.url
    )
    with pytest.raises(httpx2.TransportError):
        hf_hub_download("acme/big", "weights.bin", endpoint=mirror.url, local_dir=tmp_path / "o", cache_dir=tmp_path)
    assert [c[0] for c in calls(mirror) if c[0] == "GET"] == ["GET"]


def test_corrupted_byte_is_not_caught_by_client_but_by_lfs_sha256(mirror: HFMirror, tmp_path: Path) -> None:
    # The client checks sizes, not hashes, on plain HTTP downloads: verifying against the listed sha256 is
    # the caller's job, and the mirror's metadata is what makes that possible.
    sandbox_env.add_fault({"path_glob": "*/weights.bin", "corrupt_at_byte": 5}, url=mirror.url)
    path = Path(
        hf_hub_download("acme/big", "weights.bin", endpoint=mirror.url, local_dir=tmp_path / "o", cache_dir=tmp_path)
    )
    (info,) = HfApi(endpoint=mirror.url).get_paths_info("acme/big", ["weights.bin"])
    assert isinstance(info, RepoFile)
    assert info.lfs is not None
    assert sha256_of(path) != info.lfs.sha256
    data = bytearray(path.read_bytes())
    data[5] ^= 0xFF
    assert hashlib.sha256(data).hexdigest() == info.lfs.sha256


def test_injected_status_and_fault_lifecycle(mirror: HFMirror) -> None:
    added = sandbox_env.add_fault({"path_glob": "/api/models/*", "status": 503, "times": 2}, url=mirror.url)
    assert added[0]["times"] == 2
    api = HfApi(endpoint=mirror.url)
    conn = http.client.HTTPConnection(mirror.host, mirror.port, timeout=10)
    for _ in range(2):
        conn.request("GET", "/api/models/acme/tiny-chat-a")
        response = conn.getresponse()
        response.read()
        assert response.status == 503
    conn.close()
    assert control(mirror, "GET", "/_mirror/faults") == [], "a fault is gone once used `times` times"
    assert api.model_info("acme/tiny-chat-a").sha == mirror.sha("acme/tiny-chat-a")

    conn = http.client.HTTPConnection(mirror.host, mirror.port, timeout=10)
    conn.request("POST", "/_mirror/faults", body=json.dumps({"path_glob": "*", "times": True}))
    response = conn.getresponse()
    assert response.status == 400, "bad fault specs are rejected, not half-applied"
    response.read()
    conn.close()


# --------------------------------------------------------------------------------------------------------------
# HTTP details
# --------------------------------------------------------------------------------------------------------------


def test_resolve_headers_ranges_and_keep_alive(mirror: HFMirror, root: Path) -> None:
    sha = mirror.sha("acme/tiny-chat-a")
    shard = "model-00001-of-00003.safetensors"
    data = (root / "acme/tiny-chat-a" / shard).read_bytes()
    connections_before = mirror.state.stats.connections
    conn = http.client.HTTPConnection(mirror.host, mirror.port, timeout=10)

    def fetch(method: str, path: str, headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response, response.read()

    head, _ = fetch("HEAD", f"/acme/tiny-chat-a/resolve/main/{shard}")
    assert head.status == 200
    assert head.headers["X-Repo-Commit"] == sha
    assert head.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert head.headers["X-Linked-Etag"] == head.headers["ETag"]
    assert head.headers["X-Linked-Size"] == head.headers["Content-Length"] == str(len(data))
    assert head.headers["Accept-Ranges"] == "bytes"
    assert "X-Xet-Hash" not in head.headers

    small, _ = fetch("HEAD", "/acme/tiny-chat-a/resolve/main/config.json")
    config = (root / "acme/tiny-chat-a/config.json").read_bytes()
    assert small.headers["ETag"] == f'"{git_blob_sha1(config)}"'
    assert "X-Linked-Etag" not in small.headers

    size = len(data)
    for header, first, last in [
        ("bytes=10-19", 10, 19),
        ("bytes=100-", 100, size - 1),
        ("bytes=-7", size - 7, size - 1),
    ]:
        part, body = fetch("GET", f"/acme/tiny-chat-a/resolve/{sha}/{shard}", {"Range": header})
        assert part.status == 206, header
        assert body == data[first : last + 1]
        assert part.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
    beyond, _ = fetch("GET", f"/acme/tiny-chat-a/resolve/{sha}/{shard}", {"Range": f"bytes={len(data)}-"})
    assert beyond.status == 416
    assert beyond.headers["Content-Range"] == f"bytes */{len(data)}"
    whole, body = fetch("GET", f"/acme/tiny-chat-a/resolve/{sha}/{shard}")
    assert whole.status == 200
    assert body == data

    for path, status, code in [
        ("/acme/nope/resolve/main/config.json", 401, "RepoNotFound"),
        ("/acme/tiny-chat-a/resolve/v9/config.json", 404, "RevisionNotFound"),
        ("/acme/tiny-chat-a/resolve/main/nope.json", 404, "EntryNotFound"),
        (f"/{GATED}/resolve/main/config.json", 401, "GatedRepo"),
    ]:
        err, body = fetch("GET", path)
        assert (err.status, err.headers["X-Error-Code"]) == (status, code)
        assert "error" in json.loads(body)
    conn.close()
    assert mirror.state.stats.connections == connections_before + 1, "all of the above on one keep-alive connection"


def test_files_are_hashed_once_not_per_request(mirror: HFMirror) -> None:
    hashed = mirror.state.store.hashes.files_hashed
    conn = http.client.HTTPConnection(mirror.host, mirror.port, timeout=10)
    for _ in range(20):
        conn.request("HEAD", "/acme/big/resolve/main/weights.bin")
        conn.getresponse().read()
    conn.close()
    assert mirror.state.store.hashes.files_hashed == hashed


def test_rate_limit_paces_the_body(mirror: HFMirror) -> None:
    import time

    control(mirror, "POST", "/_mirror/config", {"rate_limit_bytes_per_s": 2_000_000})
    conn = http.client.HTTPConnection(mirror.host, mirror.port, timeout=10)
    began = time.monotonic()
    conn.request("GET", "/acme/big/resolve/main/weights.bin", headers={"Range": "bytes=0-999999"})
    body = conn.getresponse().read()
    elapsed = time.monotonic() - began
    conn.close()
    assert len(body) == 1_000_000
    assert 0.4 < elapsed < 5


def test_parse_range_edge_cases() -> None:
    assert parse_range(None, 10) is None
    assert parse_range("bytes=0-0", 10) == (0, 0)
    assert parse_range("bytes=5-100", 10) == (5, 9)
    assert parse_range("bytes=-100", 10) == (0, 9)
    assert parse_range("bytes=10-", 10) == "unsatisfiable"
    assert parse_range("bytes=5-2", 10) is None, "an invalid range is ignored"
    assert parse_range("bytes=0-1,3-4", 10) is None, "multiple ranges: ignored, the whole body is sent"
    assert parse_range("items=0-1", 10) is None


# --------------------------------------------------------------------------------------------------------------
# The command line server
# --------------------------------------------------------------------------------------------------------------


def test_cli_server_prints_port_serves_and_stops_on_sigterm(root: Path, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", MODULE, "--root", str(root), "--port", "0", "--log-file", str(log)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""))
        reader.start()
        reader.join(timeout=60)
        assert line, "the server printed nothing within 60 s"
        assert line[0].startswith("hf-mirror listening on http://127.0.0.1:"), line
        port = int(line[0].rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/models/acme/tiny-chat-a")
        assert json.loads(conn.getresponse().read())["id"] == "acme/tiny-chat-a"
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        entries = [json.loads(x) for x in log.read_text().splitlines()]
        assert entries[0]["path"] == "/api/models/acme/tiny-chat-a"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com", "::"])
def test_non_loopback_hosts_are_refused(root: Path, host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        HFMirror(root, host=host)
    result = run_captured(
        [sys.executable, "-m", MODULE, "--root", str(root), "--host", host], cwd=REPO_ROOT, timeout=60
    )
    assert result.returncode == 2
    assert "loopback" in result.stderr


def test_another_revision_downloads_by_its_sha_and_main_stays_main(
    mirror: HFMirror, root: Path, tmp_path: Path
) -> None:
    shas = mirror.state.store.revisions(TERSE_REPO)
    assert set(shas) == {"main", "shorter"} and shas["main"] == mirror.sha(TERSE_REPO) != shas["shorter"]
    out = tmp_path / "shorter"
    result = run_hf(
        mirror, tmp_path / "hf-home", "download", TERSE_REPO, "--revision", shas["shorter"], "--local-dir", str(out)
    )
    assert result.returncode == 0, result.stderr
    revision_dir = root / TERSE_REPO / REVISIONS_DIR / "shorter"
    assert downloaded_files(out) == {p.name: p.read_bytes() for p in revision_dir.iterdir()}
    # The revision's info names its own commit; main's does not list the revisions folder.
    info = json.loads(urllib.request.urlopen(f"{mirror.url}/api/models/{TERSE_REPO}/revision/{shas['shorter']}").read())
    assert info["sha"] == shas["shorter"]
    main = json.loads(urllib.request.urlopen(f"{mirror.url}/api/models/{TERSE_REPO}").read())
    assert main["sha"] == shas["main"] and all(REVISIONS_DIR not in s["rfilename"] for s in main["siblings"])
    assert run_hf(mirror, tmp_path / "hf-home", "download", TERSE_REPO, "--revision", "0" * 40).returncode != 0
