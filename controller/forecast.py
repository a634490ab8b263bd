"""What a swap will cost, said in the preview: the swap's mode as the host will decide it (the judgement,
controller/assess.py), the downtime to expect (the last start of the deployment on that host, else an
estimate from the model's size and load strategy, models/downtime.py), and a checkpoint the host's page
cache cannot hold."""

from __future__ import annotations

from collections.abc import Sequence

from controller.assess import judgement
from host.contract import Survey, owner_key
from models import downtime
from models.config import GIB_PER_GB, LoadStrategy, ResolvedDeployment
from models.hosts import Host
from render.launch import load_strategy_flag

# vLLM prefetches on its own only when the checkpoint is at most this share of the available RAM.
PAGE_CACHE_SHARE = 0.9


def forecasts(stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: Survey) -> list[str]:
    """One line per deployment whose model changes: the swap's mode, why, and the downtime to expect."""
    lines = []
    for rd in deployments:
        forecast = swap_forecast(stack, rd, found)
        if forecast is not None:
            lines.append(f"host {host.name!r}, deployment {rd.deployment.name!r}: {forecast}")
    return lines


def memory_notes(rd: ResolvedDeployment, found: Survey) -> list[str]:
    """A checkpoint the host's RAM cannot hold is read from storage on every load, whatever the strategy."""
    total_gib = found.memory.total_mib / 1024
    size_gib = rd.model.size_gb * GIB_PER_GB
    if total_gib <= 0 or size_gib <= PAGE_CACHE_SHARE * total_gib:
        return []
    return [
        f"host {rd.host.name!r}, deployment {rd.deployment.name!r}: {rd.model_name} is {size_gib:.0f} GiB, over "
        f"{PAGE_CACHE_SHARE:.0%} of the host's {total_gib:.0f} GiB RAM: the page cache cannot hold it, so "
        "safetensorsLoadStrategy prefetch and the pre-warm before a swap cannot speed its load; expect the "
        "storage's own read rate"
    ]


def swap_forecast(stack: str, rd: ResolvedDeployment, found: Survey) -> str | None:
    """What the swap will do, decided as the host will decide it, and the downtime to expect."""
    state = found.deployment(owner_key(stack, rd.deployment.name))
    active_unit = state.unit
    # A first take-over: hand-made units of this deployment (those it replaces, or one of its unit's name)
    # serve now, and stop before the managed engine starts.
    hand_made = [
        name
        for name in dict.fromkeys([rd.unit_name, *rd.deployment.replaces])
        if (unit := found.unit(name)) is not None and not unit.managed and unit.running
    ]
    if not active_unit and hand_made:
        old_unit = " and ".join(hand_made)
    elif not active_unit or active_unit == rd.unit_name:
        return None
    else:
        old_unit = active_unit
    decision = judgement(stack, rd, found).decision
    if decision.mode == "adopt":
        return f"the take-over of {old_unit} adopts it in place ({decision.reason}); expected downtime 0 s"
    head = f"the swap from {old_unit} to {rd.unit_name} will run {decision.mode.replace('-', '/', 1) if decision.mode == 'blue-green' else 'stop-then-start'} ({decision.reason})"
    if decision.mode == "blue-green":
        return f"{head}; expected downtime 0 s"
    last = state.last_start_seconds
    if last is not None and last > 0:
        return f"{head}; expected downtime about {downtime.describe(last)} (the last start of this deployment here took {last:.1f} s)"
    available_gib = found.memory.available_mib / 1024
    # A staging copy on local disk reads about as fast as the page cache (the copy's pages stay cached too).
    prewarmed = rd.host.staging_path is not None or 0 < rd.model.size_gb * GIB_PER_GB <= available_gib - 8
    estimate = downtime.stop_start_estimate(
        rd.model.size_gb, load_strategy_flag(rd) is LoadStrategy.PREFETCH, prewarmed
    )
    return f"{head}; expected downtime about {downtime.describe(estimate.seconds)} ({estimate.basis})"
