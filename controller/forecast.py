"""What a swap will cost, said in the preview: the swap's mode as the host will decide it (the judgement,
controller/assess.py), the downtime to expect (the last start of the deployment on that host, else an
estimate from the model's size and load strategy, models/downtime.py), and a checkpoint the host's page
cache cannot hold."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from controller.assess import judgement
from host.contract import Survey, owner_key
from models import downtime
from models.config import GIB_PER_GB, LoadStrategy, ResolvedDeployment
from models.hosts import Host
from render.launch import load_strategy_flag
from render.units import render_unit

# vLLM prefetches on its own only when the checkpoint is at most this share of the available RAM.
PAGE_CACHE_SHARE = 0.9


def forecasts(stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: Survey) -> list[str]:
    """One line per deployment whose engine may restart (its model or its unit changes): the swap's mode,
    why, and the downtime to expect."""
    lines = []
    for rd in deployments:
        forecast = swap_forecast(stack, rd, found)
        if forecast is not None:
            lines.append(f"host {host.name!r}, deployment {rd.deployment.name!r}: {forecast}")
    return lines


def parser_notes(stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: Survey) -> list[str]:
    """Where the survey waited for the host's vLLM to read a launch it had not read before (the first
    preview after a change): how long, once per host."""
    notes = {
        reading.note
        for rd in deployments
        if (reading := found.readings.get(owner_key(stack, rd.deployment.name))) is not None and reading.note
    }
    return [f"host {host.name!r}: {note}" for note in sorted(notes)]


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
    """What the swap will do, decided as the host will decide it, and the downtime to expect: for a change
    of model or a first take-over, and for every change of the deployment's own unit (rewritten while its
    engine runs on, or restarted)."""
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
    elif not active_unit:
        return None
    elif active_unit == rd.unit_name:
        return restart_forecast(stack, rd, found)
    else:
        old_unit = active_unit
    decision = judgement(stack, rd, found).decision
    if decision.mode == "adopt":
        return f"the take-over of {old_unit} adopts it in place ({decision.reason}); expected downtime 0 s"
    if decision.mode == "port-move":
        return f"the swap from {old_unit} to {rd.unit_name} will run new engine first ({decision.reason}); {PORT_MOVE}"
    why = NODES if rd.multi_node else decision.reason
    head = f"the swap from {old_unit} to {rd.unit_name} will run {decision.mode.replace('-', '/', 1) if decision.mode == 'blue-green' else 'stop-then-start'} ({why})"
    if decision.mode == "blue-green":
        return f"{head}; expected downtime 0 s"
    return f"{head}; {stop_start_downtime(rd, found, state.last_start_seconds)}"


# Why a model across hosts restarts stop-then-start (render/plan.py renders its swapMode so).
NODES = "a model across hosts (deployments[].nodes) stays stop-then-start: its nodes' GPUs hold one engine each"
# What clients wait through when the new engine starts first: the public port's move to the front door (the
# old engine lets its socket go as its stop begins, the front door binds it then).
PORT_MOVE = "expected downtime: the port's move, about 1 s"


def stop_start_downtime(rd: ResolvedDeployment, found: Survey, last: float | None) -> str:
    """The downtime of a stop-then-start: the deployment's last start on this host, else an estimate."""
    if last is not None and last > 0:
        return f"expected downtime about {downtime.describe(last)} (the last start of this deployment here took {last:.1f} s)"
    available_gib = found.memory.available_mib / 1024
    # A staging copy on local disk reads about as fast as the page cache (the copy's pages stay cached too).
    prewarmed = rd.host.staging_path is not None or 0 < rd.model.size_gb * GIB_PER_GB <= available_gib - 8
    estimate = downtime.stop_start_estimate(
        rd.model.size_gb, load_strategy_flag(rd) is LoadStrategy.PREFETCH, prewarmed
    )
    return f"expected downtime about {downtime.describe(estimate.seconds)} ({estimate.basis})"


def unit_changes(stack: str, rd: ResolvedDeployment, found: Survey) -> bool:
    """Whether this update makes the deployment's own unit change on the host (its text, its secret file as
    last staged, or an engine that does not serve): the activation then runs and decides how."""
    unit = found.unit(rd.unit_name)
    if unit is None:
        return True
    rendered = hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest()
    return unit.sha256 != rendered or unit.env_matches_staged is False or unit.stopped


def restart_forecast(stack: str, rd: ResolvedDeployment, found: Survey) -> str | None:
    """The deployment's own unit changes: its engine keeps running (a launch that does not change), restarts
    blue/green through its bridge, or stops then starts, with why and the downtime to expect."""
    if not unit_changes(stack, rd, found):
        return None
    judged = judgement(stack, rd, found)
    decision = judged.decision
    unit = rd.unit_name
    if decision.mode == "rewrite":
        return f"{unit}: {decision.reason}; expected downtime 0 s"
    if decision.mode == "bridge":
        return f"{unit} restarts with its new launch: {decision.reason}"
    if decision.mode == "port-move":
        return f"{unit} will run new engine first ({decision.reason}); {PORT_MOVE}"
    why = NODES if rd.multi_node else decision.reason
    last = found.deployment(owner_key(stack, rd.deployment.name)).last_start_seconds
    return f"{unit} will run stop-then-start ({why}); {stop_start_downtime(rd, found, last)}"
