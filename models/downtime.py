"""How long a swap leaves clients without answers, estimated before it runs (the preview says it).

Blue/green keeps the old engine serving until the new one answers: zero, as long as the deployment's
GPUs hold both. Stop-then-start is out for the engine's start: a fixed part (engine and worker start,
compilation, CUDA graph capture) plus reading the weights. The rates are the reference server's own
lazy load, a published prefetch figure (REFERENCE.md) and a page-cache rate: a TP8 load on a machine
with 8 GPUs where bench/device/ holds such a record (bench/device/tp8_load.py), else the one measured on
an H200 box (bench/device/load_rate.py); docs/swaps.md ("On paper, for the reference server") tabulates them for the
reference server's models. Where the deployment has started on this host before, its measured start
replaces the estimate.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Engine start without the weights on the reference's class of server (init, compile, graph capture):
# an estimate; MiniMax-M2.5 (215 GB) loaded in 75 s there in all, so it is at most about that.
FIXED_START_SECONDS = 60.0
# Kimi-K2.5 INT4, 547 GB read lazily (mmap) from /shared: 30-36 min, about 0.28 GB/s. The reference
# server's own figure; nothing measured elsewhere replaces it.
LAZY_GB_PER_SECOND = 547 / (33 * 60)
# `--safetensors-load-strategy prefetch` (vllm#36012): DeepSeek-V3-0324 (~690 GB) weights in 435 s
# instead of 1500 s on the slower of its two servers, about 1.6 GB/s. A published measurement on other
# hardware, kept because nothing measured here applies: prefetch is bound by the storage's sequential
# read rate, and /shared's is unknown. On the H200 box (bench/device/h200-load-2026-12-01.json) a
# prefetch thread gained nothing over lazy reads from its local disk (`cold_single_prefetch` 1.46 GB/s,
# `cold_single` 1.43), both disk-bound; its page-cache rate below is the ceiling prefetch can reach.
PREFETCH_GB_PER_SECOND = 690 / 435
# Weights already in the page cache (pre-warmed while the old model served), loaded by a TP8 engine's
# workers: 8 processes, each reading every tensor through safe_open's mmap and copying its 1/8 slice to
# the GPU, measured on an H200 box: bench/device/h200-load-2026-12-01.json, `warm_tp8.checkpoint_gbps`
# (16 GB checkpoint in 1.9 s; a second run, h200-load-2026-12-01-run2.json, gave 8.63). The 8 workers
# shared that box's one GPU, yet 8 processes copying disjoint whole tensors reached 18.55 GB/s into it
# (`warm_disjoint8`): the bound was most likely each worker's walk over every tensor (mapping its
# pages, copying strided slices), not the GPU's link (pinned copies ran at 53 GB/s) nor the page
# cache. 4 workers gave 10.0 (`warm_tp4`; 9.03 in the second run): one constant, the slower TP8
# figure, serves every TP size. One process: 6.48 (`warm_single.copy_into_params_gbps`). The
# reference server's CPUs, RAM and PCIe RTX PRO 6000 cards are not that box's, so this is a measured
# stand-in for the pre-warmed load, not the reference's own. A TP8 record from a machine with 8 GPUs
# replaces it (warm_rate below).
WARM_GB_PER_SECOND = 8.41
WARM_SOURCE = "bench/device/h200-load-2026-12-01.json, `warm_tp8.checkpoint_gbps` (8 workers sharing one H200)"

ROOT = Path(__file__).resolve().parents[1]
# Where bench/device/tp8_load.py's records are committed, as <gpu>x8-tp8-load-<date>.json.
DEVICE_RECORDS = ROOT / "bench" / "device"
TP8_RECORD_GLOB = "*-tp8-load-*.json"
TP8_MIN_CHECKPOINT_GB = 120.0  # issue 50: a checkpoint this large at least, so the load is not a cache's


@dataclass(frozen=True)
class WarmRate:
    gb_per_second: float
    source: str  # the file and key it came from, as docs/swaps.md cites it


def _cited(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def read_tp8_record(path: Path) -> WarmRate:
    """The pre-warmed TP8 rate of a bench/device/tp8_load.py record: 8 processes on 8 distinct GPUs
    loaded their slices of a checkpoint the page cache held in full, as vLLM's default loader does, without
    error; the rate is the checkpoint's size over the time from the first start to the last end (the slower
    of its passes). ValueError, naming the file, when the record does not say all of that."""
    record: Any = json.loads(path.read_text())
    warm: Any = record.get("warm_tp") if isinstance(record, dict) else None

    def require(ok: bool, why: str) -> None:
        if not ok:
            raise ValueError(f"{_cited(path)}: {why}; it gives no warm TP8 rate")

    require(isinstance(warm, dict), "no `warm_tp` section")
    require(record.get("kind") == "tp-load", f"kind {record.get('kind')!r}, not a tp8_load.py record")
    require(record.get("tp") == 8, f"TP {record.get('tp')}, not 8")
    require(not any(k in warm for k in ("error", "errors", "skipped")), "its warm load failed or was skipped")
    gpus = {entry.get("gpu") for entry in warm.get("per_gpu") or [] if isinstance(entry, dict)}
    require(
        warm.get("processes") == 8 and len(gpus - {None}) == 8, f"its warm load ran on GPUs {sorted(map(str, gpus))}"
    )
    require(warm.get("slices_as_planned") is True, "its processes did not copy the slices planned")
    resident = warm.get("resident_before")
    require(isinstance(resident, float | int) and resident >= 0.99, f"the page cache held {resident} of the checkpoint")
    size = warm.get("checkpoint_gb")
    require(isinstance(size, float | int) and size >= TP8_MIN_CHECKPOINT_GB, f"a {size} GB checkpoint")
    rate = warm.get("checkpoint_gbps")
    require(isinstance(rate, float | int) and rate > 0, f"rate {rate!r}")
    return WarmRate(float(rate), f"{_cited(path)}, `warm_tp.checkpoint_gbps` (TP8, each process on a GPU of its own)")


@functools.cache
def warm_rate(directory: Path) -> WarmRate:
    """The pre-warmed rate: the newest TP8 record in `directory` that gives one (by its date_utc), else the
    H200 box's stand-in. A record that gives none is left out (tests/test_downtime_estimate.py says why)."""
    found = []
    for path in sorted(directory.glob(TP8_RECORD_GLOB)):
        try:
            rate = read_tp8_record(path)
        except (ValueError, OSError, KeyError, TypeError, AttributeError):
            continue
        found.append((str(json.loads(path.read_text()).get("date_utc", "")), path.name, rate))
    if not found:
        return WarmRate(WARM_GB_PER_SECOND, WARM_SOURCE)
    return max(found, key=lambda item: (item[0], item[1]))[2]


@dataclass(frozen=True)
class DowntimeEstimate:
    mode: str  # blue-green | stop-start
    seconds: float
    basis: str


def load_seconds(size_gb: float, rate_gb_per_second: float) -> float:
    return FIXED_START_SECONDS + size_gb / rate_gb_per_second


def stop_start_estimate(size_gb: float, prefetch: bool, prewarmed: bool) -> DowntimeEstimate:
    if prewarmed:
        rate, how = warm_rate(DEVICE_RECORDS).gb_per_second, "pre-warmed page cache"
    elif prefetch:
        rate, how = PREFETCH_GB_PER_SECOND, "prefetch"
    else:
        rate, how = LAZY_GB_PER_SECOND, "lazy reads"
    seconds = load_seconds(size_gb, rate)
    return DowntimeEstimate(
        "stop-start",
        seconds,
        f"{FIXED_START_SECONDS:.0f} s start + {size_gb:g} GB at {rate:.2f} GB/s ({how})",
    )


def describe(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


# The reference server's models (REFERENCE.md section 1): what docs/swaps.md's table shows.
REFERENCE_MODELS = (("Kimi-K2.5 INT4", 547.0, 8), ("MiniMax-M2.5", 215.0, 4))


def reference_table() -> str:
    """docs/swaps.md's table, from the same formula the preview uses: `python -m models.downtime`."""
    lines = [
        "| model | size | stop-then-start, lazy reads (today) | with prefetch | pre-warmed | blue/green |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, size_gb, tp in REFERENCE_MODELS:
        cells = [
            describe(stop_start_estimate(size_gb, prefetch, warm).seconds)
            for prefetch, warm in ((False, False), (True, False), (False, True))
        ]
        blue_green = (
            "0 s (needs its 8 GPUs free beside the old engine: 16 in all)"
            if tp == 8
            else "0 s when the other model uses 4 GPUs or fewer"
        )
        lines.append(f"| {name} (TP{tp}) | {size_gb:g} GB | {' | '.join(cells)} | {blue_green} |")
    warm = warm_rate(DEVICE_RECORDS)
    lines += ["", f"Pre-warmed: {warm.gb_per_second:.2f} GB/s, {warm.source}."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference_table())
