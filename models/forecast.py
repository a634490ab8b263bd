"""How long a model's start on a host will take, and what that rests on: the preview says both.

A swap to model M on host H is forecast from the best that is known, in this order:

  1. M's own starts on H, whichever deployment made them (host/start_records.py keeps the last few of each
     model, the survey reports them as `starts`): each start's seconds, with the weights' part scaled by
     what differs now (the checkpoint's size, and the share of it the page cache will hold, pre-warmed or
     not), and the median of those: one start slowed by something else that ran on the host (a busy CPU, a
     cold disk) does not become the forecast. The basis names the last start. A different loader is said,
     not scaled: nothing measured says by how much.
  2. What the catalog knows of M (`referenceLoad`: the reference server's own starts of it), measured
     elsewhere: said as such.
  3. The rates of models/downtime.py, one per way of reading (lazy, prefetch, the page cache).

Facts the host does not report (its RAM in the reference server's recorded survey, the filesystem of the
model's directory) are named as unknown, never assumed. Pure functions over the survey's start records
(host/contract.StartRecord); controller/forecast.py reads the rest of the facts from the survey.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from host.contract import StartRecord
from models import downtime
from models.config import GIB_PER_GB, ReferenceLoad, ResolvedDeployment

# Left free by the pre-warm when a deployment does not say (deployments[].prewarmMarginGib's default).
DEFAULT_MARGIN_GIB = 8.0
# A share of the page cache that differs by less than this from the recorded start's is the same.
SAME_SHARE = 0.1
# A size within this ratio of the recorded one is the same checkpoint.
SAME_SIZE = 0.02
# How many of a model's last starts on a host the forecast takes the median of (the host keeps as many).
RECENT_STARTS = 5


@dataclass(frozen=True)
class Target:
    """The start a swap will make: the model and how it will be loaded."""

    model: str  # the stack's name
    repo: str
    revision: str
    size_gb: float
    load_format: str | None = None  # what the launch passes; None: vLLM's default
    load_strategy: str | None = None
    # The page cache's share expected at the start: the pre-warm's margin (None: no pre-warm) and a
    # staging copy (read as it is copied, so its pages are there).
    prewarm_margin_gib: float | None = DEFAULT_MARGIN_GIB
    staged: bool = False
    reference: ReferenceLoad | None = None


@dataclass(frozen=True)
class HostFacts:
    """What the host's survey says, as the forecast reads it."""

    name: str
    mem_available_gib: float | None = None  # None: the survey did not report it
    filesystem: str | None = None  # of the model's directory; None: not reported
    records: tuple[StartRecord, ...] = ()  # the survey's `starts`


@dataclass(frozen=True)
class StartForecast:
    seconds: float
    basis: str  # the sentence the preview prints after the figure
    source: str  # "own start" | "catalog" | "rates"


def expected_share(target: Target, facts: HostFacts) -> float | None:
    """The share of the checkpoint the page cache will hold when the engine starts: all of a staging copy;
    what the pre-warm's budget (MemAvailable less its margin) holds; none without a pre-warm. None when
    MemAvailable is not reported."""
    if target.staged:
        return 1.0
    if target.prewarm_margin_gib is None:
        return 0.0
    if facts.mem_available_gib is None:
        return None
    size_gib = target.size_gb * GIB_PER_GB
    return max(0.0, min(1.0, (facts.mem_available_gib - target.prewarm_margin_gib) / size_gib)) if size_gib else 1.0


def pinned(revision: str) -> bool:
    """Whether a revision names one commit (a branch such as `main` is resolved on the host)."""
    return re.fullmatch(r"[0-9a-f]{40}", revision) is not None


def same_checkpoint(target: Target, record: StartRecord) -> bool:
    """Whether a record loaded the checkpoint the target loads: its repository at its pinned revision (any
    revision the host resolved, for a target that names a branch)."""
    loaded = record.loaded
    return loaded.repo == target.repo and (not pinned(target.revision) or loaded.revision == target.revision)


def own_starts(target: Target, records: Sequence[StartRecord]) -> list[StartRecord]:
    """The model's own starts among the host's records, oldest first: its checkpoint's (same_checkpoint)
    where there are any, else another revision of its repository's, else (records without a manifest)
    those of the same name."""

    def matches(record: StartRecord, exact: bool) -> bool:
        loaded = record.loaded
        if loaded.repo:
            return same_checkpoint(target, record) if exact else loaded.repo == target.repo
        return bool(loaded.model) and loaded.model == target.model

    for exact in (True, False):
        own = [r for r in records if matches(r, exact)]
        if own:
            return sorted(own, key=lambda r: r.at)
    return []


def last_start(target: Target, records: Sequence[StartRecord]) -> StartRecord | None:
    """The model's own last start among the host's records (own_starts)."""
    own = own_starts(target, records)
    return own[-1] if own else None


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at))


def _phase(record: StartRecord, name: str) -> float | None:
    return record.phases.phase(name) if record.phases is not None else None


def _reported(record: StartRecord, name: str) -> float | None:
    value = record.phases.reported.get(name) if record.phases is not None else None
    return float(value) if isinstance(value, int | float) else None


def _loader(format_: str | None, strategy: str | None) -> str:
    return f"--load-format {format_ or 'auto'}, --safetensors-load-strategy {strategy or 'lazy'}"


def prior_cold_rate(target: Target) -> tuple[float, str]:
    """GB/s of a load that reads from storage, before this host measured one: the catalog's reference
    start (all of it counted as the weights': an upper bound of their time), else downtime.py's rate."""
    if target.reference is not None:
        return target.size_gb / target.reference.typical_seconds, "the catalog's reference load"
    if target.load_strategy == "prefetch":
        return downtime.PREFETCH_GB_PER_SECOND, "the published prefetch rate"
    return downtime.LAZY_GB_PER_SECOND, "the reference server's lazy rate"


def _weights_rates(size_gb: float, weights: float, share: float, cold_prior: float) -> tuple[float, float]:
    """(page cache GB/s, storage GB/s) of a recorded load of `size_gb` in `weights` seconds with `share` of
    it resident: the side the record mostly read is measured, the other one is a prior."""
    warm, cold = downtime.WARM_GB_PER_SECOND, cold_prior
    if share >= 0.5:
        left = weights - size_gb * (1 - share) / cold
        if left > 0:
            warm = size_gb * share / left
    else:
        left = weights - size_gb * share / warm
        if left > 0:
            cold = size_gb * (1 - share) / left
    return warm, cold


def from_own_start(target: Target, facts: HostFacts, record: StartRecord) -> StartForecast:
    """The start of `target` from one of its own starts on the host, scaled by what differs now."""
    loaded = record.loaded
    seconds = record.seconds
    weights = _phase(record, "weights")
    size0 = loaded.size_bytes / 1e9 if loaded.size_bytes else None
    said: list[str] = []
    parts = (
        [f"weights {weights:.0f} s" + (f" at {size0 / weights:.2f} GB/s" if size0 and weights >= 1 else "")]
        if weights
        else []
    )
    for label, figure in (
        ("compile", _reported(record, "compileSeconds")),
        ("graphs", _reported(record, "graphsSeconds")),
    ):
        if figure is not None:
            parts.append(f"{label} {figure:.0f} s")
    parts.append(f"{seconds:.0f} s in all")
    same = same_checkpoint(target, record)
    who = f"{loaded.model or target.model}" + ("" if same else f"@{str(loaded.revision)[:12]}")
    head = f"from the start of {who} on {facts.name} at {_when(record.at)} ({record.owner}): {', '.join(parts)}"
    forecast = seconds
    if weights is not None and size0:
        rest = seconds - weights
        new_weights = weights
        # The same checkpoint is the size the host measured; another revision, the size the stack says.
        size1 = size0 if same else target.size_gb
        if abs(size1 / size0 - 1) > SAME_SIZE:
            new_weights *= size1 / size0
            said.append(f"weights scaled to {size1:g} GB from {size0:g} GB")
        share0, share1 = loaded.resident_share, expected_share(target, facts)
        if share1 is None:
            said.append("the page cache's share at this start is unknown (MemAvailable not reported)")
        elif share0 is None:
            said.append("how much of it the page cache held then was not measured")
        elif abs(share1 - share0) > SAME_SHARE:
            cold_prior, _ = prior_cold_rate(target)
            warm, cold = _weights_rates(size0, weights, share0, cold_prior)
            new_weights = size1 * (share1 / warm + (1 - share1) / cold)
            said.append(f"{share1:.0%} of it in the page cache instead of {share0:.0%}")
        forecast = rest + new_weights
    elif weights is None:
        said.append("its phases are unknown (no vLLM lines in its journal): not scaled")
    then = (loaded.load_format, loaded.load_strategy)
    if then != (target.load_format, target.load_strategy):
        said.append(
            f"it loaded with {_loader(*then)}, this start with {_loader(target.load_format, target.load_strategy)}: not scaled for it"
        )
    return StartForecast(forecast, head + "".join(f"; {s}" for s in said), "own start")


def from_own_starts(target: Target, facts: HostFacts, own: Sequence[StartRecord]) -> StartForecast:
    """The median of the forecasts from each of the model's recent starts here, said from the last one."""
    last = from_own_start(target, facts, own[-1])
    if len(own) == 1:
        return last
    each = sorted(from_own_start(target, facts, record).seconds for record in own)
    median = statistics.median(each)
    return StartForecast(
        median,
        f"{last.basis}; the median of its last {len(own)} starts here, each scaled the same way: {median:.0f} s "
        f"({each[0]:.0f}-{each[-1]:.0f} s)",
        "own start",
    )


def _unknowns(target: Target, facts: HostFacts, model_path: str) -> list[str]:
    unknown = []
    if facts.mem_available_gib is None and target.prewarm_margin_gib is not None and not target.staged:
        unknown.append(f"the RAM of {facts.name} (MemAvailable)")
    if facts.filesystem is None:
        unknown.append(f"the filesystem of {model_path}")
    return unknown


def forecast_start(target: Target, facts: HostFacts, model_path: str) -> StartForecast:
    """The start of `target` on the host of `facts`: seconds and the sentence that says what they rest on."""
    own = own_starts(target, facts.records)[-RECENT_STARTS:]
    if own:
        return from_own_starts(target, facts, own)
    unknown = _unknowns(target, facts, model_path)
    tail = f"; unknown: {', '.join(unknown)}" if unknown else ""
    none_here = f"no start of {target.model} on {facts.name} yet"
    if target.reference is not None:
        reference = target.reference
        figure = downtime.describe(reference.seconds)
        if reference.up_to_seconds is not None:
            figure = f"{downtime.describe(reference.seconds)} to {downtime.describe(reference.up_to_seconds)}"
        return StartForecast(
            reference.typical_seconds,
            f"from the catalog's reference load of {target.model}: {figure} on {reference.where} ({none_here}){tail}",
            "catalog",
        )
    share = expected_share(target, facts)
    estimate = downtime.stop_start_estimate(
        target.size_gb, target.load_strategy == "prefetch", share is not None and share >= 1.0
    )
    return StartForecast(
        estimate.seconds, f"from the rates of models/downtime.py: {estimate.basis} ({none_here}){tail}", "rates"
    )


def target_of(rd: ResolvedDeployment, load_format: str | None, load_strategy: str | None) -> Target:
    """The start a deployment's swap makes, loaded with the flags its launch renders (render/launch.py)."""
    return Target(
        model=rd.model_name,
        repo=rd.model.repo,
        revision=rd.model.revision,
        size_gb=rd.model.size_gb,
        load_format=load_format,
        load_strategy=load_strategy,
        prewarm_margin_gib=rd.deployment.prewarm_margin_gib,
        staged=rd.host.staging_path is not None and not rd.multi_node,
        reference=rd.model.reference_load,
    )
