"""Keep compiled the source text that Python compiles afresh in every run of the program.

`__pycache__` keeps the bytecode of modules, not of code that modules generate while they import:
`dataclasses` writes the text of each data class's `__init__`, `__repr__`, `__eq__`, `__hash__` and
frozen `__setattr__` and execs it, and `typing` compiles every string annotation into a forward reference
(pydantic resolves each field's, and every module here has `from __future__ import annotations`). The
program's imports make 89 data classes (ours, pydantic's, annotated_types', parver's) and ~880 forward
references: 20 of their ~125 ms went into compiling the same text as in the run before (measured on the
dev stack's program, interleaved runs with and without this cache: 123 -> 103 ms). A no-op `pulumi up`
runs the program twice.

`install` has those two modules compile through a cache kept in a file per Python version (the bytecode
format), read once at the start and written back at exit when this run compiled anything new. A miss
compiles as before; a cache file that cannot be read is ignored, one that cannot be written is not kept.
The code is the same code: the text, the file name, the mode and the flags (none inherited) are the key.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
import typing
from pathlib import Path
from types import CodeType
from typing import Any

# Beside the host package's cache (render/host_bundle.py), gitignored.
CACHE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "python-code"
# A cache that grew past this (text that changed run after run) starts again from what one run compiles.
MAX_ENTRIES = 20_000

Key = tuple[str, str, str]  # (file name, mode, source text)


class CodeCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.codes: dict[Key, CodeType] = read(path) if path is not None else {}
        self.misses = 0
        self.hits = 0

    def compile(self, source: Any, filename: Any, mode: str, flags: int = 0, dont_inherit: bool = False) -> Any:
        """builtins.compile for the modules patched: cached when it is a plain compile of text. The callers
        (dataclasses, typing) have no `from __future__` imports of their own, so a compile that inherits
        their flags is one that inherits none (dont_inherit, so this module's own are not taken)."""
        if not (isinstance(source, str) and isinstance(filename, str) and flags == 0 and not dont_inherit):
            return builtins.compile(source, filename, mode, flags, dont_inherit)
        key = (filename, mode, source)
        code = self.codes.get(key)
        if code is None:
            code = builtins.compile(source, filename, mode, 0, True)
            self.codes[key] = code
            self.misses += 1
        else:
            self.hits += 1
        return code

    def exec(self, source: Any, globals: Any = None, locals: Any = None) -> None:
        """builtins.exec for dataclasses, which passes the text of the functions it generates."""
        if isinstance(source, str):
            source = self.compile(source, "<string>", "exec")
        builtins.exec(source, globals, locals)

    def save(self) -> None:
        """Write the cache back when this run compiled text it did not hold; atomically, as a run beside
        this one may write it too (the last one's is kept; both are whole)."""
        if self.path is None or self.misses == 0:
            return
        codes = self.codes if len(self.codes) <= MAX_ENTRIES else {}
        with contextlib.suppress(OSError, ValueError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(marshal.dumps(codes))
            temporary.replace(self.path)


def read(path: Path) -> dict[Key, CodeType]:
    try:
        loaded = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {k: v for k, v in loaded.items() if isinstance(v, CodeType)}


def cache_file(directory: Path = CACHE_DIR) -> Path:
    """One file per bytecode format: another Python reads and writes its own."""
    return directory / f"{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


def install(path: Path | None = None, save_at_exit: bool = True) -> CodeCache:
    """Have dataclasses and typing compile through the cache (by the names they look up first, their
    module's globals) from now on; `uninstall` undoes it."""
    cache = CodeCache(cache_file() if path is None else path)
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]
    typing.compile = cache.compile  # type: ignore[attr-defined]
    if save_at_exit:
        atexit.register(cache.save)
    return cache


def uninstall() -> None:
    for module, name in ((dataclasses, "exec"), (typing, "compile")):
        module.__dict__.pop(name, None)
