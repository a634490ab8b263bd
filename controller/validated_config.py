"""The stack config as last validated, kept so that a run whose config and models did not change validates nothing.

Validation is pydantic's (models/base.py): its import and the build of the config's validator cost ~60 ms,
more than the rest of the program's own Python, and a no-op `pulumi up` runs the program twice. What came
out of it, a frozen `StackConfig` already checked against the rules across keys, is kept in a file per stack
beside the code cache, under a key of everything it came from: the raw `vllm-fleet:` values, every file of
models/ (the code, the rules and the catalog of presets), the packages validation runs (pydantic, PyYAML)
and Python's version. A run with another key validates as before and replaces the file. A file that
cannot be read is a miss; one that cannot be written is not kept. An invalid config is never kept: it
fails in every run, with the same message.

The raw values hold no secret: the loader is given none (controller/program.read_raw), so none is kept.
The file is pickled: like `__pycache__` and the code cache it is written by this checkout's program into
its own `.cache`, and whoever can write it can write the code.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import pickle
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from models.config import StackConfig
from models.loader import parse_stack_config

ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = ROOT / ".cache" / "validated-config"
MODELS_DIR = ROOT / "models"


# What validation runs besides models/: pydantic (and its core), the YAML parser of the catalog, and what
# the models' types come from.
PACKAGES = ("pydantic", "pydantic_core", "yaml", "annotated_types", "typing_extensions")


def validation_inputs(models_dir: Path = MODELS_DIR) -> bytes:
    """What validation depends on besides the raw values: every file of models/ (the code, the rules, the
    catalog), the packages it runs (where each one's module file is, its size and time, which installing
    another version rewrites; pydantic's version besides) and Python's version. Read on every run (~1 ms); a
    change of any of them validates again."""
    digest = hashlib.sha256(sys.version.encode())
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)  # finds a package without importing it
        if spec is not None and spec.origin is not None:
            with contextlib.suppress(OSError):
                origin = Path(spec.origin)
                stat = origin.stat()
                digest.update(f"{package}\0{origin}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
                if package == "pydantic":
                    digest.update(origin.with_name("version.py").read_bytes())
    for path in sorted(models_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(models_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


def cache_key(raw: Mapping[str, Any], inputs: bytes) -> str:
    values = json.dumps(raw, sort_keys=True, default=repr).encode()
    return hashlib.sha256(inputs + values).hexdigest()


def load(
    stack: str,
    raw: Mapping[str, Any],
    cache_dir: Path = CACHE_DIR,
    inputs: bytes | None = None,
    parse: Callable[[Mapping[str, Any]], StackConfig] = parse_stack_config,
) -> StackConfig:
    """The validated config of these raw values: the kept one when the key matches, else `parse` (which
    raises ConfigError for an invalid config) and kept for the next run."""
    key = cache_key(raw, validation_inputs() if inputs is None else inputs)
    path = cache_dir / f"{stack}.pickle"
    kept = _read(path)
    if kept is not None and kept[0] == key and isinstance(kept[1], StackConfig):
        return kept[1]
    config = parse(raw)
    _write(path, (key, config))
    return config


def _read(path: Path) -> tuple[str, Any] | None:
    try:
        with path.open("rb") as handle:
            kept = pickle.load(handle)
    except Exception:  # a missing, truncated or outdated file (a class renamed) is a miss
        return None
    return kept if isinstance(kept, tuple) and len(kept) == 2 else None


def _write(path: Path, kept: tuple[str, StackConfig]) -> None:
    """Atomically: two runs of one stack at once (a preview beside an up) each leave a whole file."""
    with contextlib.suppress(OSError, pickle.PicklingError):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL))
        temporary.replace(path)
