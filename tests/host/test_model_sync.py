"""model-sync's hashing while `hf download` runs: on files written by hand the way the client writes them,
and end to end with the real `hf` CLI against the project's mirror running in-process on loopback."""

from __future__ import annotations

import argparse
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host import contract, hf_download, model_files
from host.hf_download import Hasher
from host.model_files import RemoteFile
from host.tools import model_sync
from sandbox import sandbox_env
from sandbox.hf_mirror import HFMirror

SHA = "a" * 40


def remote_for(rel: str, data: bytes) -> RemoteFile:
    return RemoteFile(rel, len(data), hashlib.sha256(data).hexdigest(), "0" * 40)


def client_writes(directory: Path, rel: str, data: bytes, sha: str = SHA) -> None:
    """What `hf download` does for one file: write it aside, rename it into place, then its metadata."""
    download = directory / model_files.HF_CACHE / "download"
    download.mkdir(parents=True, exist_ok=True)
    partial = download / f"{rel}.incomplete"
    partial.write_bytes(data)
    os.replace(partial, directory / rel)
    (download / f"{rel}.metadata").write_text(f"{sha}\netag\n{time.time()}\n")


def wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def hasher_for(tmp_path: Path) -> Iterator[Any]:
    made: list[Hasher] = []

    def make(*files: RemoteFile) -> Hasher:
        hasher = Hasher(tmp_path, SHA, list(files), workers=2, poll=0.01)
        hasher.start()
        made.append(hasher)
        return hasher

    yield make
    for hasher in made:
        hasher.stop()


def hashed_while_running(
    tmp_path: Path, hasher_for: Any, written: bytes, wanted: bytes | None = None
) -> tuple[RemoteFile, Hasher]:
    """model.safetensors, listed with the hash of `wanted` (default: `written`), once the client wrote it as
    `written` and the hasher hashed that while the client runs."""
    remote = remote_for("model.safetensors", written if wanted is None else wanted)
    hasher = hasher_for(remote)
    client_writes(tmp_path, remote.path, written)
    wait_until(lambda: remote.path in hasher.results)
    return remote, hasher


def stop_watching(hasher: Hasher) -> None:
    """End the hasher's watcher: from now on only `finish` can notice a change."""
    hasher.stopping.set()
    hasher.watcher.join()


def test_a_file_the_client_finished_is_hashed_while_it_runs(tmp_path: Path, hasher_for: Any) -> None:
    remote, hasher = hashed_while_running(tmp_path, hasher_for, os.urandom(3 << 20))
    found = hasher.finish()
    assert found[remote.path][1] == remote.sha256
    assert found[remote.path][0] == model_files.stat_entry(tmp_path / remote.path)
    assert hasher.early == 1


def test_a_file_still_growing_in_place_is_not_hashed_early(tmp_path: Path, hasher_for: Any) -> None:
    data = os.urandom(1 << 20)
    remote = remote_for("model.safetensors", data)
    hasher = hasher_for(remote)
    target = tmp_path / remote.path
    with target.open("wb") as handle:
        for offset in range(0, len(data), 64 << 10):
            handle.write(data[offset : offset + (64 << 10)])
            handle.flush()
            time.sleep(0.005)
        # Full size now, but the client has not said it is done with it (no metadata): still not hashed.
        time.sleep(0.1)
        assert hasher.results == {}
    # Its metadata written, the file counts as done.
    (tmp_path / model_files.HF_CACHE / "download").mkdir(parents=True)
    (tmp_path / model_files.HF_CACHE / "download" / f"{remote.path}.metadata").write_text(
        f"{SHA}\netag\n{time.time()}\n"
    )
    wait_until(lambda: remote.path in hasher.results)
    assert hasher.finish()[remote.path][1] == remote.sha256


def test_metadata_of_another_commit_or_older_than_the_file_is_not_done(tmp_path: Path, hasher_for: Any) -> None:
    data = b"x" * 1000
    other, stale = remote_for("other.bin", data), remote_for("stale.bin", data)
    hasher = hasher_for(other, stale)
    client_writes(tmp_path, other.path, data, sha="b" * 40)
    client_writes(tmp_path, stale.path, data)
    # Written after the client's metadata, as a user editing it would: the client will fetch it again.
    os.utime(tmp_path / stale.path, (time.time() + 10, time.time() + 10))
    time.sleep(0.1)
    assert hasher.results == {}
    # Once the client is gone, whatever is in place is hashed: they are still checked, only later.
    found = hasher.finish()
    assert {rel: digest for rel, (_, digest) in found.items()} == {
        other.path: other.sha256,
        stale.path: stale.sha256,
    }
    assert hasher.early == 0


def test_a_file_replaced_after_its_hash_is_hashed_again(tmp_path: Path, hasher_for: Any) -> None:
    old, new = os.urandom(1 << 20), os.urandom(1 << 20)
    remote, hasher = hashed_while_running(tmp_path, hasher_for, old, wanted=new)
    stop_watching(hasher)
    client_writes(tmp_path, remote.path, new)
    assert hasher.finish()[remote.path][1] == remote.sha256
    assert hasher.early == 0


def test_a_file_changed_in_place_after_its_hash_is_hashed_again(tmp_path: Path, hasher_for: Any) -> None:
    data = os.urandom(1 << 20)
    remote, hasher = hashed_while_running(tmp_path, hasher_for, data)
    stop_watching(hasher)
    with (tmp_path / remote.path).open("r+b") as handle:  # same size, one byte flipped
        handle.seek(5000)
        handle.write(bytes([data[5000] ^ 1]))
    found = hasher.finish()
    assert found[remote.path][1] != remote.sha256


def test_a_missing_or_short_file_is_left_out(tmp_path: Path, hasher_for: Any) -> None:
    missing, short = remote_for("missing.bin", b"abc"), remote_for("short.bin", b"abcdef")
    hasher = hasher_for(missing, short)
    client_writes(tmp_path, short.path, b"abc")
    assert hasher.finish() == {}


def test_small_files_get_their_git_blob_sha1(tmp_path: Path, hasher_for: Any) -> None:
    data = b'{"model_type": "bench"}\n'
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    remote = RemoteFile("config.json", len(data), None, blob)
    hasher = hasher_for(remote)
    client_writes(tmp_path, remote.path, data)
    assert hasher.finish()[remote.path][1] == blob


# ---- end to end: `model-sync sync` with the real client against the mirror --------------------------------

REPO = "acme/hash-while"
SHARDS = [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HFMirror]:
    root = tmp_path_factory.mktemp("mirror-root")
    repo = root / REPO
    repo.mkdir(parents=True)
    for name in SHARDS:
        (repo / name).write_bytes(os.urandom(2 << 20))
    (repo / "config.json").write_text('{"model_type": "none"}\n')
    with HFMirror(root) as m:
        yield m


def control(mirror: HFMirror, method: str, path: str, body: Any = None) -> Any:
    return sandbox_env.mirror(path, method, body, url=mirror.url)


def client_requests(mirror: HFMirror, count: int) -> list[str]:
    """The paths of the requests since the stats were reset, once there are `count` (the mirror logs a
    request after answering it)."""
    paths: list[str] = []

    def logged() -> bool:
        paths[:] = [e["path"] for e in control(mirror, "GET", "/_mirror/stats")["log"] if "/_mirror/" not in e["path"]]
        return len(paths) >= count

    wait_until(logged)
    time.sleep(0.1)
    logged()
    return paths


@pytest.fixture
def client_env(mirror: HFMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in [k for k in os.environ if k.startswith("HF_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HF_ENDPOINT", mirror.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    control(mirror, "DELETE", "/_mirror/faults")
    yield
    control(mirror, "DELETE", "/_mirror/faults")


def sync(directory: Path) -> int:
    return model_sync.main(["sync", "--repo", REPO, "--revision", "main", "--dir", str(directory)])


def synced(directory: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What a sync into `directory` printed; it must succeed."""
    assert sync(directory) == 0
    return capsys.readouterr().out


def on_dir(command: str, directory: Path) -> int:
    """model-sync's `check` or `verify` of `directory`: its exit status."""
    return model_sync.main([command, "--dir", str(directory)])


def shard_fault(mirror: HFMirror, shard: str, **fault: Any) -> None:
    """Make the mirror misbehave on the downloads of `shard` (the fields of sandbox/hf_mirror.py's Fault)."""
    sandbox_env.add_fault({"path_glob": f"*/resolve/*/{shard}", **fault}, url=mirror.url)


def complete_manifest(directory: Path) -> dict[str, Any]:
    """The manifest a sync left in `directory`, which must say the download is complete."""
    manifest = model_files.read_manifest(directory)
    assert manifest is not None and manifest["complete"] is True
    return manifest


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    """Where the test syncs the model to."""
    return tmp_path / "model"


def test_sync_hashes_while_downloading_and_records_the_manifest(
    mirror: HFMirror, client_env: None, directory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The last shard's answer is held back: the others are in place meanwhile, and are hashed then.
    shard_fault(mirror, SHARDS[-1], delay_s=2.0)
    out = synced(directory, capsys)
    hashed_early = int(out.split("hashed 5 file(s), ")[1].split(" of them")[0])
    assert hashed_early >= len(SHARDS) - 1, out
    assert f"{REPO}@{mirror.sha(REPO)} complete and verified: 5 files" in out
    manifest = complete_manifest(directory)
    for rel, entry in manifest["files"].items():
        data = (directory / rel).read_bytes()
        if rel.endswith(".safetensors"):
            assert entry["hash"] == hashlib.sha256(data).hexdigest()
        else:
            assert entry["hash"] == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert {k: entry[k] for k in ("size", "mtime_ns")} == model_files.stat_entry(directory / rel)
    assert on_dir("check", directory) == 0
    assert on_dir("verify", directory) == 0


def test_a_file_corrupted_in_transit_is_caught_and_fetched_again(
    mirror: HFMirror, client_env: None, directory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard_fault(mirror, SHARDS[1], corrupt_at_byte=12345)
    out = synced(directory, capsys)
    assert f"attempt 1: 1 file(s) failed verification and were removed: {SHARDS[1]}" in out
    assert len(complete_manifest(directory)["files"]) == 5
    assert on_dir("verify", directory) == 0


def test_a_file_corrupted_on_every_fetch_fails_the_sync(mirror: HFMirror, client_env: None, directory: Path) -> None:
    shard_fault(mirror, SHARDS[2], corrupt_at_byte=7, times=None)
    with pytest.raises(SystemExit, match=f"still fail verification after a second download: {SHARDS[2]}"):
        sync(directory)
    assert not (directory / SHARDS[2]).exists()
    manifest = model_files.read_manifest(directory)
    assert manifest is None


def test_verify_repair_leaves_only_the_bad_file_for_the_download_step_to_fetch(
    mirror: HFMirror, client_env: None, directory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sync(directory) == 0
    target = directory / SHARDS[0]
    data = bytearray(target.read_bytes())
    data[100] ^= 1  # same size, and the mtime put back: only the bytes tell
    stat = target.stat()
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert on_dir("check", directory) == 0
    capsys.readouterr()
    args = argparse.Namespace(dir=str(directory), repair=True, progress_every=10.0)
    assert model_sync.verify(args) == 0
    out = capsys.readouterr().out
    assert "run `pulumi up` where the stack is deployed from" in out
    # The directory is incomplete now (what the survey counts as drift), and the next sync, the download
    # step's, fetches that one file.
    assert (
        not target.exists() and model_files.model_state(directory, directory / "state").state == "incomplete download"
    )
    assert sync(directory) == 0
    assert "hashed 1 file(s)" in capsys.readouterr().out
    assert on_dir("verify", directory) == 0


def test_stop_ends_the_threads_without_hashing_what_is_queued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed download: the hashing threads end after the hash in hand, the queued ones are dropped."""
    data = os.urandom(1 << 20)
    files = [remote_for(f"f{i}.bin", data) for i in range(8)]
    for f in files:
        client_writes(tmp_path, f.path, data)
    entered, release = threading.Event(), threading.Event()
    real_hash = model_files.hash_handle

    def held_hash(handle: Any, remote: RemoteFile) -> str:
        entered.set()
        release.wait(5)
        return real_hash(handle, remote)

    monkeypatch.setattr(hf_download, "hash_handle", held_hash)
    hasher = Hasher(tmp_path, SHA, files, workers=1, poll=0.01)
    hasher.start()
    wait_until(lambda: entered.is_set() and len(hasher.queued) == len(files))
    hasher.stop()
    hasher.stop()  # twice is harmless (sync's `finally` after `finish`)
    release.set()
    for thread in [*hasher.hashers, hasher.watcher]:
        thread.join(timeout=5)
        assert not thread.is_alive()
    assert len(hasher.results) == 1


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each `prestart_hf` call gave."""
    seen: list[Any] = []
    real = hf_download.prestart_hf

    def recording() -> Any:
        seen.append(real())
        return seen[-1]

    monkeypatch.setattr(model_sync, "prestart_hf", recording)
    return seen


def test_the_client_started_early_runs_the_download(client_env: None, tmp_path: Path, started: list[Any]) -> None:
    assert sync(tmp_path / "model") == 0
    assert len(started) == 1 and started[0] is not None
    assert started[0].returncode == 0


def test_not_enough_space_ends_the_started_client_before_any_byte(
    mirror: HFMirror, client_env: None, tmp_path: Path, started: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_sync, "free_bytes", lambda directory: 1000)
    control(mirror, "POST", "/_mirror/reset-stats")
    with pytest.raises(SystemExit, match=r"not enough space .* Nothing was downloaded"):
        sync(tmp_path / "model")
    assert started[0] is not None and started[0].returncode is not None
    log = control(mirror, "GET", "/_mirror/stats")["log"]
    assert [e["path"] for e in log if "/resolve/" in e["path"]] == []
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [contract.MANIFEST_DIR]


def test_an_hf_that_is_no_python_script_is_run_as_it_is(
    client_env: None, tmp_path: Path, started: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = hf_download.hf_cli()
    wrapper = tmp_path / "hf"
    wrapper.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(hf_download, "hf_cli", lambda: str(wrapper))
    assert sync(tmp_path / "model") == 0
    assert started == [None]
    assert on_dir("verify", tmp_path / "model") == 0


def test_repo_files_come_from_one_request_and_match_the_tree(mirror: HFMirror, client_env: None) -> None:
    from huggingface_hub import HfApi, RepoFile

    control(mirror, "POST", "/_mirror/reset-stats")
    sha, files = hf_download.repo_files(REPO, "main", mirror.url)
    assert client_requests(mirror, 1) == [f"/api/models/{REPO}/revision/main"]
    assert sha == mirror.sha(REPO)
    tree = HfApi(endpoint=mirror.url).list_repo_tree(REPO, revision=sha, recursive=True)
    expected = [
        RemoteFile(e.path, e.size, e.lfs.sha256 if e.lfs else None, e.blob_id) for e in tree if isinstance(e, RepoFile)
    ]
    assert files == sorted(expected, key=lambda f: f.path)
    assert len(files) == 5 and sum(f.sha256 is not None for f in files) == 4


def test_repo_files_fall_back_to_the_tree_when_the_info_lacks_file_metadata(
    mirror: HFMirror, client_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    expected = hf_download.repo_files(REPO, "main", mirror.url)
    real = huggingface_hub.get_session

    class WithoutBlobs:
        def get(self, *args: Any, **kwargs: Any) -> Any:
            response = real().get(*args, **kwargs)
            data = response.json()
            for sibling in data["siblings"]:
                sibling.pop("blobId")
            monkeypatch.setattr(response, "json", lambda: data)
            return response

    monkeypatch.setattr(huggingface_hub, "get_session", WithoutBlobs)
    control(mirror, "POST", "/_mirror/reset-stats")
    assert hf_download.repo_files(REPO, "main", mirror.url) == expected
    assert [path.split("?")[0] for path in client_requests(mirror, 2)] == [
        f"/api/models/{REPO}/revision/main",
        f"/api/models/{REPO}/tree/{expected[0]}",
    ]
    assert len(expected[1]) == 5


def test_an_hf_whose_interpreter_is_gone_is_not_started_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "hf"
    script.write_text(f"#!{tmp_path}/no-such/python3\n")
    monkeypatch.setattr(hf_download, "hf_cli", lambda: str(script))
    assert hf_download.prestart_hf() is None
