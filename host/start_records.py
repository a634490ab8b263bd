"""What each start of a managed engine loaded and where its time went, kept on the host for the forecast.

The swap writes a record once its new engine serves (host/transaction_base.py): the model (the stack's
name, its repository and revision from model-sync's manifest, its directory, size and files), how it
was loaded (the launch's --load-format, --safetensors-load-strategy and --model-loader-extra-config;
None where the launch leaves vLLM's default), whether the swap pre-warmed it and how much of it the page
cache held right before the start, the start's seconds by the swap's own clock and its phases from the
journal (host/start_phases.py). One record per model on the host, whichever deployment started it, in
/var/lib/vllm-fleet/starts/ (it outlives the deployment; it goes with the host's tools): the forecast of
a swap to model M on this host starts from M's own last start here. The survey reports them all
(`starts`). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from host.contract import STATE_DIR
from host.facts import engine_flags
from host.model_files import read_manifest
from host.start_phases import StartPhases

STARTS = "starts"  # beside deployments/ and claims/ in the host's state directory


@dataclass(frozen=True)
class Loaded:
    """What an engine loaded, and how."""

    model: str  # the stack's name for it ("" from a plan before the name was in it)
    directory: str  # where the engine read it (a staging copy, or the storage's directory)
    repo: str | None = None  # from model-sync's manifest; None without one
    revision: str | None = None
    size_bytes: int | None = None
    files: int | None = None
    load_format: str | None = None  # the launch's flags; None: vLLM's default
    load_strategy: str | None = None
    loader_extra_config: dict[str, Any] | None = None
    tensor_parallel: int = 1
    prewarm: str = "none"  # "page cache", "staging copy" or "none"
    resident_share: float | None = None  # of its files in the page cache before the start; None: not measured

    @property
    def identity(self) -> str:
        """The model as the host knows it: its repository at its revision, else its directory."""
        return f"{self.repo}@{self.revision}" if self.repo and self.revision else self.directory


def loaded_from(
    model: str,
    directory: Path,
    argv: list[str],
    prewarm: str,
    resident_share: float | None,
) -> Loaded:
    """What the launch `argv` loads from `directory` (its manifest read there)."""
    manifest = read_manifest(directory) or {}
    listed: Mapping[str, Any] = manifest.get("files") or {}
    size = sum(int(entry.get("size") or 0) for entry in listed.values()) if listed else None
    flags = engine_flags(argv)
    extra = flags.get("--model-loader-extra-config")
    try:
        extra_config = json.loads(extra[-1]) if extra else None
    except ValueError:
        extra_config = None
    tp = (flags.get("--tensor-parallel-size") or ("1",))[-1]
    return Loaded(
        model=model,
        directory=str(directory),
        repo=manifest.get("repo"),
        revision=manifest.get("revision"),
        size_bytes=size,
        files=len(listed) if listed else None,
        load_format=(flags.get("--load-format") or (None,))[-1],
        load_strategy=(flags.get("--safetensors-load-strategy") or (None,))[-1],
        loader_extra_config=extra_config if isinstance(extra_config, dict) else None,
        tensor_parallel=int(tp) if tp.isdigit() else 1,
        prewarm=prewarm,
        resident_share=resident_share,
    )


@dataclass(frozen=True)
class StartRecord:
    at: float  # seconds since the epoch, when the unit started
    owner: str  # the deployment that started it (stack.deployment)
    unit: str
    mode: str  # stop-start | blue-green
    seconds: float  # start to ready, by the swap's clock
    loaded: Loaded
    phases: StartPhases | None = None  # None: the journal had no vLLM line of it
    version: int = field(default=1)

    def to_dict(self) -> dict[str, Any]:
        """The record as the host keeps it and the survey reports it: the survey's camelCase keys."""
        data = {_camel(key): value for key, value in asdict(self).items()}
        data["loaded"] = {_camel(key): value for key, value in asdict(self.loaded).items()}
        data["phases"] = self.phases.to_dict() if self.phases is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartRecord:
        """The record as to_dict wrote it (what is not a field of it is left out)."""
        known = {_camel(f.name): f.name for f in fields(cls)} | {"loaded": "", "phases": ""}
        loaded = {_camel(f.name): f.name for f in fields(Loaded)}
        phases = data.get("phases")
        return cls(
            **{known[key]: value for key, value in data.items() if known.get(key)},
            loaded=Loaded(**{loaded[key]: value for key, value in data["loaded"].items() if key in loaded}),
            phases=StartPhases.from_dict(phases) if phases else None,
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def record_file(root: Path, identity: str) -> Path:
    """The one record of a model on this host: a readable name and a digest of its identity."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", identity)[:80]
    return root / STARTS / f"{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}.json"


def write_record(root: Path, record: StartRecord) -> Path:
    """Write `record` as its model's record, whole or not at all."""
    path = record_file(root, record.loaded.identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record.to_dict(), sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def read_records(root: Path = Path(STATE_DIR)) -> list[dict[str, Any]]:
    """Every model's last start on this host as the survey reports it (plain JSON), oldest first. A file
    that is not a record (a half-written one cannot be: they are renamed into place) is skipped."""
    directory = root / STARTS
    found = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            found.append(StartRecord.from_dict(json.loads(path.read_text(encoding="utf-8"))).to_dict())
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda record: record["at"])


def started_at(phases: StartPhases | None, seconds: float) -> float:
    """When the unit started: its journal's "Starting", else now less the measured start."""
    return phases.started_at if phases is not None else time.time() - seconds
