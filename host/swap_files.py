"""Files the swap writes on the host, each whole or not at all: written aside and renamed into place.
Standard library only."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def file_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def write_file(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".vllm-fleet-tmp")
    temporary.write_text(text, encoding="utf-8")
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
