"""How long a swap leaves clients without answers, estimated before it runs (the preview says it).

Blue/green keeps the old engine serving until the new one answers: zero, as long as the deployment's
GPUs hold both. Stop-then-start is out for the engine's start: a fixed part (engine and worker start,
compilation, CUDA graph capture) plus reading the weights. The rates are the reference server's own
lazy load, a published prefetch figure (REFERENCE.md) and a page-cache rate measured on an H200 box
(tests/device/load_rate.py); the README's "Swap downtime" section tabulates them for the reference
server's models. Where the deployment has started on this host before, its measured start replaces the
estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

# Engine start without the weights on the reference's class of server (init, compile, graph capture):
# an estimate; MiniMax-M2.5 (215 GB) loaded in 75 s there in all, so it is at most about that.
FIXED_START_SECONDS = 60.0
# Kimi-K2.5 INT4, 547 GB read lazily (mmap) from /shared: 30-36 min, about 0.28 GB/s. The reference
# server's own figure; nothing measured elsewhere replaces it.
LAZY_GB_PER_SECOND = 547 / (33 * 60)
# `--safetensors-load-strategy prefetch` (vllm#36012): DeepSeek-V3-0324 (~690 GB) weights in 435 s
# instead of 1500 s on the slower of its two servers, about 1.6 GB/s. A published measurement on other
# hardware, kept because nothing measured here applies: prefetch is bound by the storage's sequential
# read rate, and /shared's is unknown. On the H200 box (tests/device/h200-load-2026-12-01.json) a
# prefetch thread gained nothing over lazy reads from its local disk (`cold_single_prefetch` 1.46 GB/s,
# `cold_single` 1.43), both disk-bound; its page-cache rate below is the ceiling prefetch can reach.
PREFETCH_GB_PER_SECOND = 690 / 435
# Weights already in the page cache (pre-warmed while the old model served), loaded by a TP8 engine's
# workers: 8 processes, each reading every tensor through safe_open's mmap and copying its 1/8 slice to
# the GPU, measured on an H200 box: tests/device/h200-load-2026-12-01.json, `warm_tp8.checkpoint_gbps`
# (16 GB checkpoint in 1.9 s; a second run, h200-load-2026-12-01-run2.json, gave 8.63). The 8 workers
# shared that box's one GPU, yet 8 processes copying disjoint whole tensors reached 18.55 GB/s into it
# (`warm_disjoint8`): the bound was most likely each worker's walk over every tensor (mapping its
# pages, copying strided slices), not the GPU's link (pinned copies ran at 53 GB/s) nor the page
# cache. 4 workers gave 10.0 (`warm_tp4`; 9.03 in the second run): one constant, the slower TP8
# figure, serves every TP size. One process: 6.48 (`warm_single.copy_into_params_gbps`). The
# reference server's CPUs, RAM and PCIe RTX PRO 6000 cards are not that box's, so this is a measured
# stand-in for the pre-warmed load, not the reference's own.
WARM_GB_PER_SECOND = 8.41


@dataclass(frozen=True)
class DowntimeEstimate:
    mode: str  # blue-green | stop-start
    seconds: float
    basis: str


def load_seconds(size_gb: float, rate_gb_per_second: float) -> float:
    return FIXED_START_SECONDS + size_gb / rate_gb_per_second


def stop_start_estimate(size_gb: float, prefetch: bool, prewarmed: bool) -> DowntimeEstimate:
    if prewarmed:
        rate, how = WARM_GB_PER_SECOND, "pre-warmed page cache"
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


# The reference server's models (REFERENCE.md section 1): what the README's "Swap downtime" table shows.
REFERENCE_MODELS = (("Kimi-K2.5 INT4", 547.0, 8), ("MiniMax-M2.5", 215.0, 4))


def reference_table() -> str:
    """The README's table, from the same formula the preview uses: `python -m models.downtime`."""
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
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference_table())
