"""Files the host package writes, each whole or not at all: written aside and renamed into place
(`write_file` is the one way every host module does it). Standard library only."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def file_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def write_file(path: Path, data: str | bytes, mode: int | None = None, *, make_parent: bool = True) -> None:
    """The host package's one way to write a file whole: `data` goes to a temporary file beside `path` (named
    per process, so two writers never share one), which is renamed over it, so a reader sees the old file or
    the whole new one. `mode` when given, else the umask's; text as UTF-8. Not synced: a crash may lose the
    new file, never leave half of it."""
    if make_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, bytes):
        temporary.write_bytes(data)
    else:
        temporary.write_text(data, encoding="utf-8")
    if mode is not None:
        os.chmod(temporary, mode)
    temporary.replace(path)


def restore_file(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        write_file(path, text, 0o644)


def same_file(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()


def install_file(source: Path, target: Path, mode: int) -> None:
    temporary = target.with_name(target.name + ".vllm-fleet-tmp")
    shutil.copyfile(source, temporary)
    os.chmod(temporary, mode)
    temporary.replace(target)


def remove_drop_in(path: Path) -> None:
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only when empty: an operator's own drop-ins stay
