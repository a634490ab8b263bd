"""What model-sync keeps in a model's directory and how it checks it: the manifest
(DIR/.vllm-fleet/manifest.json: `repo@sha` and, per file, its size, mtime and hash), the hash a file must
have (sha256 for LFS files, git blob sha1 for the rest), the stat-only test of whether verified files
changed since, and the download client's leftovers (.cache/huggingface/download). prewarm reads the same
manifest. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.console import listed, say
from host.contract import (
    MANIFEST,
    MANIFEST_DIR,
    MODEL_CHANGED,
    MODEL_INCOMPLETE,
    MODEL_NO_MANIFEST,
    MODEL_VERIFIED,
    ModelFiles,
)
from host.swap_files import write_file

# Where `hf download` keeps its partial files and per-file metadata, inside the model's directory.
HF_CACHE = Path(".cache") / "huggingface"
CHUNK = 8 * 1024 * 1024


def log(message: str) -> None:
    # Exits at once when the controller's SSH session is gone: `hf download` dies with model-sync
    # (hf_download._die_with_parent), so the next run resumes from a clean state.
    say("model-sync", message)


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str  # git blob sha1, for the small ones


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
    document = {"repo": repo, "revision": sha, "files": entries, "complete": complete}
    write_file(manifest_path(directory), json.dumps(document, indent=1, sort_keys=True))


def stat_entry(path: Path) -> dict[str, int]:
    return stat_entry_of(path.stat())


def stat_entry_of(st: os.stat_result) -> dict[str, int]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def changed_files(directory: Path, manifest: Mapping[str, Any]) -> list[str]:
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


def changed_since_verified(directory: Path, changed: Sequence[str], most: int | None = None) -> str:
    """How the tools name files that changed since model-sync verified them, and what repairs them: the
    download step of the stack that keeps this directory, which has the mirror, the token and the revision."""
    return (
        f"{len(changed)} file(s) in {directory} changed since they were verified: {listed(changed, most)}. "
        "Run `pulumi up` where the stack is deployed from: its download step fetches them again and verifies them."
    )


def verified_unchanged(directory: Path) -> tuple[bool, str]:
    """model-sync's check: whether the directory's files are those its verified manifest records (sizes and
    mtimes, no byte read), and the line that says so or what is wrong."""
    manifest = read_manifest(directory)
    if manifest is None:
        return (
            False,
            f"{directory} has no verified manifest; run `pulumi up` where the stack is deployed from to download it",
        )
    changed = changed_files(directory, manifest)
    if changed:
        return False, changed_since_verified(directory, changed)
    return True, f"{manifest['repo']}@{manifest['revision']}: {len(manifest['files'])} files unchanged"


# Per stack and model directory, the drift repairs that stack's download step made there: the preview
# renders one more while files are missing or changed, which re-runs the step, and the step records it here
# once the files are verified again. Kept in the host's state, not in the model directory, which an operator
# may delete whole.
REPAIRS_DIR = "model-repairs"


def _repairs_name(directory: Path) -> str:
    return hashlib.sha256(str(directory).encode()).hexdigest()[:24]


def record_repairs(state_root: Path, stack: str, directory: Path, repairs: int) -> None:
    path = state_root / REPAIRS_DIR / stack / _repairs_name(directory)
    write_file(path, f"{repairs} {directory}\n")


def recorded_repairs(state_root: Path, directory: Path) -> dict[str, int]:
    """Per stack, the repairs its download step recorded for `directory`."""
    found: dict[str, int] = {}
    for path in (state_root / REPAIRS_DIR).glob(f"*/{_repairs_name(directory)}"):
        try:
            count, _, recorded_dir = path.read_text().strip().partition(" ")
            if recorded_dir == str(directory):
                found[path.parent.name] = int(count)
        except (OSError, ValueError):
            continue
    return found


def model_state(directory: Path, state_root: Path) -> ModelFiles:
    """A model directory against its verified manifest, by sizes and mtimes (no byte read): what the
    survey, `make status` and the unit's own start check judge it by; with the repairs recorded for it."""
    manifest = read_manifest(directory)
    repairs = recorded_repairs(state_root, directory)
    if manifest is None:
        return ModelFiles(str(directory), MODEL_NO_MANIFEST, repairs=repairs)
    changed = tuple(sorted(changed_files(directory, manifest)))
    state = MODEL_INCOMPLETE if not manifest.get("complete") else MODEL_CHANGED if changed else MODEL_VERIFIED
    return ModelFiles(str(directory), state, manifest.get("repo"), manifest.get("revision"), changed, repairs)


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
