#!/usr/bin/env python3
"""vllm-fleet model-sync: download a pinned Hugging Face revision and prove every byte of it.

    model-sync sync   --repo ORG/NAME --revision REV --dir DIR [--margin-gb N]
    model-sync check  --dir DIR        # stat-only: have the verified files changed since? (ExecStartPre)
    model-sync verify --dir DIR [--repair]   # re-hash everything; --repair removes the bad files for `pulumi up`

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
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from host.contract import MANIFEST_DIR, STATE_DIR
from host.hf_download import Hasher, cancel_hf, prestart_hf, repo_files, run_hf_download
from host.locks import take_lock
from host.model_files import (
    RemoteFile,
    changed_files,
    expected_hash,
    forget_file,
    hash_file,
    log,
    read_manifest,
    record_repairs,
    remove_partials,
    verified_unchanged,
    write_manifest,
)


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def sync(args: argparse.Namespace) -> int:
    """Download and verify, then record the download step's repair count (--stack, --repairs): the files
    are what the manifest says again, so the preview stops counting this directory as drift."""
    status = sync_files(args)
    if status == 0 and args.stack:
        record_repairs(Path(STATE_DIR), args.stack, Path(args.dir), args.repairs)
    return status


def sync_files(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST_DIR).mkdir(exist_ok=True)
    lock = (directory / MANIFEST_DIR / "lock").open("w")

    def waiting(waited: float) -> None:
        if waited % 30 == 0:
            log(f"waiting for another download into {directory} to finish")

    # A download of an interrupted run may still be finishing: wait for it, then continue from it.
    if not take_lock(lock, args.lock_wait, 1, waiting):
        raise SystemExit(f"model-sync: another download into {directory} still runs after {args.lock_wait:.0f} s")
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


class Refused(Exception):
    """The model directory fails check or verify: main prints the reason on stderr and exits 1."""


def manifest_of(directory: Path, missing: str) -> dict[str, Any]:
    manifest = read_manifest(directory)
    if manifest is None:
        raise Refused(f"{directory} has no {missing}")
    return manifest


def check(args: argparse.Namespace) -> int:
    unchanged, message = verified_unchanged(Path(args.dir))
    if not unchanged:
        raise Refused(message)
    print(f"model-sync: {message}")
    return 0


def verify(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    manifest = manifest_of(directory, "manifest to verify against")
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
    # Fetching them again needs what only the stack's download step has (the mirror or endpoint, the token):
    # the bad files go, so the next `pulumi up` sees the directory incomplete and its download step fetches
    # exactly these files and verifies them, while the engine keeps serving what it loaded.
    for rel in bad:
        forget_file(directory, rel)
    files = {rel: entry for rel, entry in manifest["files"].items() if rel not in bad}
    write_manifest(directory, manifest["repo"], manifest["revision"], files, complete=False)
    print(
        f"model-sync: removed {len(bad)} bad file(s) from {directory}; run `pulumi up` where the stack is deployed "
        "from: its download step fetches them again and verifies them"
    )
    return 0


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
    p_sync.add_argument("--stack", default="", help="the stack whose download step this is")
    p_sync.add_argument("--repairs", type=int, default=0, help="its drift-repair count, recorded once verified")
    p_check = sub.add_parser("check")
    p_check.add_argument("--dir", required=True)
    p_verify = sub.add_parser("verify")
    p_verify.add_argument("--dir", required=True)
    p_verify.add_argument("--repair", action="store_true")
    p_verify.add_argument("--progress-every", type=float, default=10.0)
    args = parser.parse_args(argv)
    handlers = {"sync": sync, "check": check, "verify": verify}
    try:
        return handlers[args.command](args)
    except Refused as refused:
        print(f"model-sync: {refused}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
