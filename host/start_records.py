"""What each start of a managed engine loaded and where its time went, kept on the host for the forecast.

The swap writes a record once its new engine serves (host/transaction_base.py): the model (the stack's
name, its repository and revision from model-sync's manifest, its directory, size and files), how it
was loaded (the launch's --load-format, --safetensors-load-strategy and --model-loader-extra-config;
None where the launch leaves vLLM's default), whether the swap pre-warmed it and how much of it the page
cache held right before the start, the start's seconds by the swap's own clock and its phases from the
journal (host/start_phases.py), and the forecast the swap came with beside the downtime it made. One file
per model on the host, whichever deployment started it, with its last few starts, in
/var/lib/vllm-fleet/starts/ (it outlives the deployment; it goes with the host's tools): the forecast of
a swap to model M on this host starts from M's own starts here. The survey reports them all (`starts`).
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from host.contract import STARTS_KEPT, STATE_DIR, Loaded, Plan, StartForecastRecord, StartPhases, StartRecord
from host.facts import engine_flags
from host.model_files import read_manifest
from host.swap_files import write_file

STARTS = "starts"  # beside deployments/ and claims/ in the host's state directory


def checkpoint_bytes(directory: Path, manifest: Mapping[str, Any] | None = None) -> int | None:
    """The size of the model in `directory` as model-sync's manifest lists it (None without one)."""
    found = read_manifest(directory) if manifest is None else manifest
    listed: Mapping[str, Any] = (found or {}).get("files") or {}
    return sum(int(entry.get("size") or 0) for entry in listed.values()) if listed else None


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
    size = checkpoint_bytes(directory, manifest)
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


def record_file(root: Path, identity: str) -> Path:
    """The file of a model's starts on this host: a readable name and a digest of its identity."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", identity)[:80]
    return root / STARTS / f"{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}.json"


def _read_file(path: Path) -> list[StartRecord]:
    """The starts one file holds, oldest first ([] when it is no record file: a half-written one cannot be,
    they are renamed into place)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [StartRecord.from_dict(entry) for entry in data["starts"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def write_record(root: Path, record: StartRecord) -> Path:
    """Add `record` to its model's file, which keeps that model's last STARTS_KEPT starts here (whichever
    deployment made them): written whole or not at all."""
    path = record_file(root, record.loaded.identity)
    kept = sorted([*_read_file(path), record], key=lambda r: r.at)[-STARTS_KEPT:]
    write_file(path, json.dumps({"starts": [r.to_dict() for r in kept]}, sort_keys=True) + "\n")
    return path


def read_records(root: Path = Path(STATE_DIR)) -> list[StartRecord]:
    """Every model's last starts on this host (STARTS_KEPT of each at most), oldest first."""
    directory = root / STARTS
    found = [r for path in sorted(directory.glob("*.json")) if directory.is_dir() for r in _read_file(path)]
    return sorted(found, key=lambda record: record.at)


def forecast_of_this_start(plan: Plan, records: list[StartRecord]) -> StartForecastRecord | None:
    """The plan's forecast, when it was made for this start: the controller renders the forecast of its last
    swap again while no start comes, so a start the plan did not foresee (the activation restarting a unit
    stopped by hand) would otherwise be paired with an older start's forecast. Made before the deployment's
    last recorded start: not this one's."""
    forecast = StartForecastRecord.of_plan(plan)
    earlier = [r.at for r in records if r.owner == plan.owner]
    if forecast is None or (earlier and forecast.made_at <= max(earlier)):
        return None
    return forecast


def started_at(phases: StartPhases | None, seconds: float) -> float:
    """When the unit started: its journal's "Starting", else now less the measured start."""
    return phases.started_at if phases is not None else time.time() - seconds
