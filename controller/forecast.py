"""What a swap will cost, said in the preview: the swap's mode as the host will decide it (the judgement,
controller/assess.py), the engine's loader as picked from the host's facts (models/load_choice.py), and
the start to expect with what it rests on (models/forecast.py: the incoming model's own starts on that
host, else the catalog's figure for it, else the rates of models/downtime.py). A checkpoint the host's
page cache cannot hold is named.

The forecast also travels with the activation step (the swap plan's forecast fields), so that the host
keeps it beside the start that came (host/start_records.py). It is made afresh only when a start comes;
otherwise the step renders the forecast the host reports its last activation carried, so that an unchanged
stack renders an unchanged step."""

from __future__ import annotations

from collections.abc import Sequence

from controller.assess import judgement
from controller.drift import applied
from host.contract import StartForecastRecord, Survey, filesystem_of, owner_key
from host.judgement import Decision
from models import downtime
from models.config import GIB_PER_GB, ResolvedDeployment, StackConfig
from models.forecast import HostFacts, StartForecast, forecast_start, target_of
from models.hosts import Host
from models.load_choice import LoadChoice, LoadFacts, pick_loader
from models.vllm_flags import vllm_release
from render.launch import load_choice, load_strategy_flag

# vLLM prefetches on its own only when the checkpoint is at most this share of the available RAM.
PAGE_CACHE_SHARE = 0.9


# ---- the loader, from the host's facts ----------------------------------------------------------------


def load_facts(rd: ResolvedDeployment, found: Survey) -> LoadFacts:
    """The loader pick's facts for a deployment from its host's survey: the host's RAM (MemTotal: a fact
    that stays put, see models/load_choice.py), the filesystem of the directory the engine loads from, the
    loaders' extras beside vLLM, and the release the launch is rendered for (the host's own when the stack
    pins none: controller/checks.host_versions)."""
    total = found.memory.total_mib
    return LoadFacts(
        checkpoint_gb=rd.model.size_gb,
        mem_total_gib=total / 1024 if total > 0 else None,
        filesystem=filesystem_of(rd.load_path, found.mounts) if found.mounts else None,
        extras=found.vllm_extras,
        vllm_release=vllm_release(rd.host.runtime.vllm_version or found.vllm_version),
        model_path=rd.load_path,
    )


def with_load_choice(rd: ResolvedDeployment, found: Survey) -> tuple[ResolvedDeployment, LoadChoice]:
    """The deployment with its loader picked from its host's facts where the stack leaves it to `auto` (a
    value the stack sets wins), and the pick with its reasons. The pick becomes the deployment's serving
    settings, so the launch renders it; a multi-node deployment's rendezvous port does not follow it (it is
    hashed from the loader the stack states: ResolvedDeployment.master_port)."""
    choice = pick_loader(load_facts(rd, found), rd.serving.load_format, rd.serving.safetensors_load_strategy)
    # Not validated again (model_copy): the pick is one of the values the fields take (models/load_choice.py).
    serving = rd.serving.model_copy(
        update={"load_format": choice.load_format, "safetensors_load_strategy": choice.load_strategy}
    )
    return rd.model_copy(update={"serving": serving}), choice


# ---- the start, from the host's records ----------------------------------------------------------------


def host_facts(host: str, found: Survey, model_path: str) -> HostFacts:
    """The forecast's facts from a host's survey: MemAvailable (the pre-warm's budget now; 0: not reported),
    the filesystem holding `model_path`, the start records."""
    available = found.memory.available_mib
    return HostFacts(
        name=host,
        mem_available_gib=available / 1024 if available > 0 else None,
        filesystem=filesystem_of(model_path, found.mounts) if found.mounts else None,
        records=found.starts,
    )


def start_forecast(rd: ResolvedDeployment, found: Survey) -> StartForecast:
    """The start of the deployment's engine on its host, loaded as its launch renders it."""
    strategy = load_strategy_flag(rd)
    target = target_of(rd, load_choice(rd).load_format, strategy.value if strategy is not None else None)
    return forecast_start(target, host_facts(rd.host.name, found, rd.load_path), rd.load_path)


def start_comes(stack: str, rd: ResolvedDeployment, found: Survey) -> bool:
    """Whether this update starts the deployment's engine: a first start, a take-over that is no adoption
    in place, a swap to another unit, or its unit changed (as the host has it installed) in its launch."""
    state = found.deployment(owner_key(stack, rd.deployment.name))
    if state.unit != rd.unit_name:
        return judgement(stack, rd, found).decision.mode != "adopt"
    installed = found.unit(rd.unit_name)
    if installed is None:
        return True
    if installed.sha256 == applied(rd, stack).unit_sha256:
        return False
    # Its unit changes: no start where the launch stays and the unit is rewritten under the running engine.
    return judgement(stack, rd, found).decision.mode != "rewrite"


def plan_forecast(stack: str, rd: ResolvedDeployment, found: Survey) -> StartForecastRecord | None:
    """The forecast the deployment's activation carries: made now when a start comes, else the one its
    last activation carried (the host reports it), so that nothing changes while nothing starts."""
    if not start_comes(stack, rd, found):
        return found.deployment(owner_key(stack, rd.deployment.name)).forecast
    said = start_forecast(rd, found)
    return StartForecastRecord(round(said.seconds, 1), said.basis, said.source, found.at)


# ---- the preview's lines -------------------------------------------------------------------------------


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


def forecasts(
    stack: str,
    config: StackConfig,
    host: Host,
    deployments: Sequence[ResolvedDeployment],
    found: Survey,
    choices: dict[str, LoadChoice] | None = None,
) -> list[str]:
    """The preview's lines of what each deployment's swap will cost (`swap_forecast`), and, where the
    stack keeps other models on disk for a swap back (models[].keep), what a swap to each would cost here
    (with the deployment's own model's next start, when no swap says it): an operator planning the swap
    reads it before changing the stack. `choices`: the loaders picked from the host's facts (with_load_choice),
    by deployment."""
    lines = []
    for rd in deployments:
        where = f"host {host.name!r}, deployment {rd.deployment.name!r}"
        choice = (choices or {}).get(rd.deployment.name)
        swap, says_start = _swap(stack, rd, found, choice)
        if swap is not None:
            lines.append(f"{where}: {swap}")
        kept = [name for name, spec in config.models.items() if spec.keep and name != rd.model_name]
        if not kept:
            continue
        parts = [] if says_start else [f"a restart of {rd.model_name}: {_start(rd, found, choice)}"]
        for name in kept:
            spec = config.models[name]
            # Not validated again (model_copy): the model is the stack's, validated, and apply() validates
            # the serving settings it merges.
            other = rd.model_copy(
                update={"model_name": name, "model": spec, "serving": rd.deployment.overrides.apply(spec.serving)}
            )
            other, picked = with_load_choice(other, found)
            parts.append(f"a swap to {name} (kept on disk): {_start(other, found, picked)}")
        lines += [f"{where}: {part}" for part in parts]
    return lines


def _start(rd: ResolvedDeployment, found: Survey, choice: LoadChoice | None) -> str:
    """ "about N (the basis); loader: ..." for the deployment's model. `choice`: the pick from the host's
    facts that made its serving settings (None: picked here from the same facts)."""
    said = start_forecast(rd, found)
    picked = choice or load_choice(rd, load_facts(rd, found))
    loader = picked.describe()
    if picked.load_strategy is not None and load_strategy_flag(rd) is None:
        loader += " (the flag is left out for the host's vLLM: the pre-warm reads the files instead)"
    return f"about {downtime.describe(said.seconds)} ({said.basis}); loader: {loader}"


def swap_forecast(stack: str, rd: ResolvedDeployment, found: Survey, choice: LoadChoice | None = None) -> str | None:
    """What the swap will do, decided as the host will decide it, and the downtime to expect: the start of
    the model that comes (its own starts on this host first), never the last start of the one that goes."""
    return _swap(stack, rd, found, choice)[0]


def _swap(stack: str, rd: ResolvedDeployment, found: Survey, choice: LoadChoice | None) -> tuple[str | None, bool]:
    """(swap_forecast's line, whether it says the start of the engine: no adoption in place)."""
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
        return None, False
    elif active_unit == rd.unit_name:
        return restart_forecast(stack, rd, found, choice)
    else:
        old_unit = active_unit
    decision = judgement(stack, rd, found).decision
    if decision.mode == "adopt":
        return f"the take-over of {old_unit} adopts it in place ({decision.reason}); expected downtime 0 s", False
    return _new_engine(f"the swap from {old_unit} to {rd.unit_name}", decision, rd, found, choice), True


def _new_engine(
    subject: str, decision: Decision, rd: ResolvedDeployment, found: Survey, choice: LoadChoice | None
) -> str:
    """`subject` (a swap, or a unit that restarts) starting a new engine as `decision` says: new engine
    first, blue/green or stop-then-start, with why, the downtime to expect and the new engine's start."""
    start = _start(rd, found, choice)
    if decision.mode == "port-move":
        return f"{subject} will run new engine first ({decision.reason}); {PORT_MOVE}; the new engine's start: {start}"
    why = NODES if rd.multi_node else decision.reason
    if decision.mode == "blue-green":
        return f"{subject} will run blue/green ({why}); expected downtime 0 s; the new engine's start: {start}"
    return f"{subject} will run stop-then-start ({why}); expected downtime: the start of {rd.model_name}, {start}"


# Why a model across hosts restarts stop-then-start (render/plan.py renders its swapMode so).
NODES = "a model across hosts (deployments[].nodes) stays stop-then-start: its nodes' GPUs hold one engine each"
# What clients wait through when the new engine starts first: the public port's move to the front door (the
# old engine lets its socket go as its stop begins, the front door binds it then).
PORT_MOVE = "expected downtime: the port's move, about 1 s"


def unit_changes(stack: str, rd: ResolvedDeployment, found: Survey) -> bool:
    """Whether this update makes the deployment's own unit change on the host (its text, its secret file as
    last staged, or an engine that does not serve): the activation then runs and decides how."""
    unit = found.unit(rd.unit_name)
    if unit is None:
        return True
    return unit.sha256 != applied(rd, stack).unit_sha256 or unit.env_matches_staged is False or unit.stopped


def restart_forecast(
    stack: str, rd: ResolvedDeployment, found: Survey, choice: LoadChoice | None = None
) -> tuple[str | None, bool]:
    """The deployment's own unit changes: its engine keeps running (a launch that does not change), restarts
    blue/green through its bridge, or stops then starts, with why and the start to expect (the model's own
    starts on this host first: models/forecast.py); and whether the line says the engine's start."""
    if not unit_changes(stack, rd, found):
        return None, False
    decision = judgement(stack, rd, found).decision
    unit = rd.unit_name
    if decision.mode == "rewrite":
        return f"{unit}: {decision.reason}; expected downtime 0 s", False
    if decision.mode == "bridge":
        return f"{unit} restarts with its new launch: {decision.reason}; each load: {_start(rd, found, choice)}", True
    return _new_engine(unit, decision, rd, found, choice), True
