"""The one judgement of a swap: how it runs, where the new engine goes, and what on the host is in its way.

The preview (controller/assess.py, from the survey it ran over SSH) and the swap transaction on the host
(host/tools/swap.py, from the survey it runs right before it stops anything) call `judge` with the same inputs:
the plan, the survey (host/contract.Survey) and the other deployments' claims. So what the preview
forecasts and refuses is what the host will do and refuse. Who holds a GPU and whether it may be stopped is
one rule (`holder_verdict`, one table), which the GPU-release guard applies too at every engine start.
Standard library only: it runs on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from host.contract import (
    FRONT_DOOR_UNIT,
    SAME_UNIT,
    TAKE_OVER,
    ActiveRecord,
    Claims,
    EngineReading,
    GpuHolder,
    Launch,
    NodePlan,
    Placement,
    Plan,
    ProcessUnit,
    Survey,
    Unit,
)
from host.unit_file import KEEPS_RUNNING, bridge_stem


@dataclass(frozen=True)
class Decision:
    """How a swap runs. `mode`: blue-green (the new unit beside the old one), bridge (the deployment's own
    unit restarts with a new launch while its bridge serves on `placement`), port-move (the new engine first,
    on `placement`, beside one that holds the public port; `then`: where the managed unit takes over from
    its bridge), rewrite (the unit's new text, no restart), adopt (the hand-made engine that serves keeps
    serving as the managed unit's), stop-start."""

    mode: str
    placement: Placement
    reason: str
    then: Placement | None = None

    @property
    def beside(self) -> bool:
        """The new engine starts while the one that serves keeps serving."""
        return self.mode in ("blue-green", "bridge", "port-move")


@dataclass(frozen=True)
class Adoption:
    """The hand-made engine a first take-over finds serving the deployment, and how its launch differs from
    the stack's. No difference: it is adopted in place (nothing restarts)."""

    unit: str
    pid: int | None
    gpus: tuple[int, ...]
    ids: tuple[str, ...]  # the model ids it serves (its --served-model-name, or its --model path)
    argv: tuple[str, ...]  # its command line, which the managed unit keeps running until the next swap
    differences: tuple[str, ...]

    @property
    def in_place(self) -> bool:
        return not self.differences


@dataclass(frozen=True)
class Judgement:
    old: ActiveRecord | None
    decision: Decision
    # Units that may hold this deployment's GPUs or port now and stop for the new engine.
    leaving: tuple[str, ...]
    # What refuses the swap (each names the holder and the key that fixes it), and what is only said.
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replaces_running: bool = False
    old_running: bool = False
    adoption: Adoption | None = None
    # The survey's reading of the engine that serves against the stack's launch (None: none was asked or runs).
    reading: EngineReading | None = None


def claim_conflicts(owner: str, wanted: Claims, others: Mapping[str, Claims]) -> list[str]:
    """Sentences for every GPU, port or unit name another live deployment holds."""
    problems = []
    for other, held in sorted(others.items()):
        if other == owner:
            continue
        for gpu in sorted(wanted.gpus & held.gpus):
            problems.append(
                f"GPU {gpu} is claimed by deployment {other} on this host; the two stacks overlap. Give this "
                f"deployment other GPUs (deployments[].gpus) or destroy {other} first."
            )
        for port in sorted(wanted.ports & held.ports):
            problems.append(
                f"port {port} is claimed by deployment {other} on this host; choose another deployments[].port"
            )
        for unit in sorted(wanted.units & held.units):
            problems.append(
                f"unit {unit} belongs to deployment {other} on this host; set deployments[].unitName or use another model name"
            )
    return problems


# A hand-made engine bound to one of these answers the managed unit's readiness check on loopback.
LOOPBACK_REACHABLE = frozenset({None, "0.0.0.0", "::", "127.0.0.1", "localhost"})


def adoption(plan: Plan, found: Survey, old: ActiveRecord | None) -> Adoption | None:
    """The hand-made engine a first take-over finds serving: the one running vLLM unit of the managed
    unit's name or of `replaces`, judged against the stack's launch: where it listens and on which GPUs
    (the survey's reading of its unit), and its launch as the host's vLLM reads it and the stack's (the
    survey's EngineReading, from its process). None once vllm-fleet serves the deployment (`old`), or when
    no such engine runs."""
    if old is not None:
        return None
    running = [
        unit
        for unit in found.units
        if unit.name in (plan.unit_name, *plan.replaces) and not unit.managed and unit.running and unit.launch
    ]
    if len(running) != 1:
        return None
    unit = running[0]
    launch = unit.launch
    assert launch is not None
    key = plan.config_key
    differences = []
    if unit.name != plan.unit_name:
        differences.append(
            f"it runs as {unit.name}, not as the managed unit {plan.unit_name} (set {key}.unitName: "
            f"{unit.name.removesuffix('.service')} to take it over under its own name)"
        )
    if launch.port != plan.port:
        differences.append(f"it listens on port {launch.port}, the deployment on {plan.port} ({key}.port)")
    if launch.bind_address not in LOOPBACK_REACHABLE:
        differences.append(
            f"it listens on {launch.bind_address} only, where the managed readiness check cannot reach it"
        )
    gpus = tuple(range(found.gpu_count)) if launch.gpus is None else launch.gpus
    if not set(gpus) <= set(plan.gpus) or len(gpus) != plan.gpus_needed:
        differences.append(
            f"it runs on GPU {','.join(map(str, gpus)) or 'none'}, the stack on {plan.gpus_needed} of {list(plan.gpus)} ({key}.gpus)"
        )
    read = found.readings.get(plan.owner)
    if read is None or read.unit != unit.name or read.kind != TAKE_OVER:
        differences.append(
            "its launch was not read on the host (no survey asked for it), so it is not known to be the stack's"
        )
    else:
        differences += read.differences
    # The unit's main process (a listener's PID may be an engine process that inherited the socket).
    pid = unit.main_pid or next((entry.pid for entry in found.listeners if entry.unit == unit.name), None)
    return Adoption(unit.name, pid, gpus, launch.served_names, launch.argv, tuple(differences))


def _gpus(gpus: Sequence[int]) -> str:
    return ",".join(map(str, gpus)) or "-"


def new_engine_first(
    plan: Plan, free: Sequence[int], serving: str, serving_gpus: Sequence[int], replaces_running: bool
) -> Decision | None:
    """The new engine first beside `serving`, which holds the public port itself (a hand-made engine that
    cannot be adopted in place, or one adopted in place at the first take-over): on GPUs of the deployment
    neither it nor anything else holds, behind the front door, the port moving to the front door once it
    answers (host/port_move.py). Where the managed unit is `serving` itself, the stack's launch serves
    first as its bridge and the unit takes over from it on the GPUs `serving` frees (`then`). None: no room
    for it (stop-then-start)."""
    needed = plan.gpus_needed
    if plan.swap_mode != "auto" or replaces_running or len(plan.backend_ports) < 2:
        return None
    spare = [g for g in free if g not in serving_gpus]
    if len(spare) < needed:
        return None
    first = Placement(tuple(spare[:needed]), plan.backend_ports[0])
    why = (
        f"new engine first: GPU {_gpus(first.gpus)} free beside {serving}, which keeps serving on port {plan.port} "
        "until the new engine answers; the gap is the port's move to the front door"
    )
    if serving != plan.unit_name:
        return Decision("port-move", first, why)
    freed = [g for g in free if g not in first.gpus]
    freed = [g for g in serving_gpus if g in freed] + [g for g in freed if g not in serving_gpus]
    if len(freed) < needed:
        return None
    then = Placement(tuple(freed[:needed]), plan.backend_ports[1])
    bridge = f"{bridge_stem(plan.unit_stem)}.service"
    return Decision(
        "port-move",
        first,
        f"{why}; the stack's launch serves first as {bridge}, then {plan.unit_name} takes over from it on GPU "
        f"{_gpus(then.gpus)} (two loads)",
        then,
    )


def decide(
    plan: Plan,
    old: ActiveRecord | None,
    old_running: bool,
    busy: frozenset[int],
    replaces_running: bool,
    reading: EngineReading | None = None,
    hand_made: Adoption | None = None,
) -> Decision:
    """How the swap runs and where the new engine goes, from what runs now.

    `busy` are GPUs held by processes the swap will not stop (another deployment, a foreign process).
    Blue/green needs a running old engine behind the front door, another unit name for the new one, and
    enough of the deployment's GPUs that neither the old engine nor anything else holds; the deployment's
    own unit restarting with a new launch goes blue/green through its bridge on such GPUs, and one whose
    launch does not change is rewritten while its engine runs on (`reading`: the survey's comparison of the
    engine that serves with the stack's launch). An engine on the public port itself (`hand_made`, one that
    cannot be adopted; or one adopted in place) makes room for the new engine first where GPUs allow."""
    needed = plan.gpus_needed
    free = [g for g in plan.gpus if g not in busy]
    first_port = plan.backend_ports[0]
    if old is None or not old_running:
        if old is None and hand_made is not None:
            first = new_engine_first(plan, free, hand_made.unit, hand_made.gpus, False)
            if first is not None:
                return first
        gpus = tuple(free[:needed]) if len(free) >= needed else tuple(plan.gpus[:needed])
        why = "hand-made units it replaces stop first" if replaces_running else "nothing of this deployment serves"
        return Decision("stop-start", Placement(gpus, first_port), why)
    previous = old.placement
    # Stop-start keeps the old engine's GPUs and port when they still fit.
    keep = [g for g in old.gpus if g in plan.gpus] + [g for g in free if g not in old.gpus]
    keep_port = previous.port if previous is not None and previous.port in plan.backend_ports else first_port
    stop_first = Placement(tuple(keep[:needed]), keep_port)
    if previous is None:
        # Adopted in place (or from before the front door): the engine holds the public port itself.
        first = new_engine_first(plan, free, old.unit, old.gpus, replaces_running)
        if first is not None:
            return first
        return Decision("stop-start", stop_first, f"{old.unit} listens on the public port {plan.port} itself")
    if old.unit == plan.unit_name:
        return restart(plan, old, previous, free, stop_first, reading)
    if plan.swap_mode != "auto":
        return Decision("stop-start", stop_first, f"deployments[].swapMode is {plan.swap_mode}")
    if replaces_running:
        return Decision("stop-start", stop_first, "hand-made units it replaces still run")
    spare = [g for g in free if g not in old.gpus]
    if len(spare) < needed:
        return Decision("stop-start", stop_first, no_room(plan, old, spare, busy))
    other_port = next(p for p in plan.backend_ports if p != previous.port)
    placement = Placement(tuple(spare[:needed]), other_port)
    return Decision(
        "blue-green",
        placement,
        f"GPU {','.join(map(str, placement.gpus)) or '-'} free beside {old.unit}; it serves until the new engine answers",
    )


def no_room(plan: Plan, old: ActiveRecord, spare: Sequence[int], busy: frozenset[int]) -> str:
    held = sorted(set(plan.gpus) & busy)
    return (
        f"the new engine needs {plan.gpus_needed} GPU(s) beside {old.unit} on GPU {','.join(map(str, old.gpus))}, and "
        f"{len(spare)} of deployments[].gpus {list(plan.gpus)} are free"
        + (f" (GPU {','.join(map(str, held))} held by other processes)" if held else "")
    )


def restart(
    plan: Plan,
    old: ActiveRecord,
    own: Placement,
    free: Sequence[int],
    stop_first: Placement,
    reading: EngineReading | None,
) -> Decision:
    """The deployment's own unit, serving behind the front door, replaced by its new text: rewritten while
    its engine runs on when its launch is unchanged; else restarted with the new launch, blue/green through
    its bridge where the deployment's GPUs hold a second engine, or stop-then-start in place."""
    if reading is not None and reading.kind == SAME_UNIT and reading.same_launch:
        changes = f": {', '.join(reading.unit_changes)} change" if reading.unit_changes else ""
        return Decision("rewrite", own, f"{KEEPS_RUNNING}{changes}")
    if reading is None or reading.kind != SAME_UNIT:
        what = f"{plan.unit_name} itself changes"
    else:
        what = f"its launch changes ({'; '.join(reading.differences)})"
    if plan.swap_mode != "auto":
        return Decision(
            "stop-start", stop_first, f"{what}; deployments[].swapMode is {plan.swap_mode}, so it restarts in place"
        )
    spare = [g for g in free if g not in old.gpus]
    if len(spare) < plan.gpus_needed:
        held = [g for g in plan.gpus if g not in free]
        room = (
            f"the new launch needs {plan.gpus_needed} GPU(s) beside it on GPU {_gpus(old.gpus)} and "
            f"{len(spare)} of deployments[].gpus {list(plan.gpus)} are free"
            + (f" (GPU {_gpus(held)} held by other processes)" if held else "")
        )
        return Decision("stop-start", stop_first, f"{what}, so it restarts in place: {room}")
    other_port = next(p for p in plan.backend_ports if p != own.port)
    bridge = Placement(tuple(spare[: plan.gpus_needed]), other_port)
    name = f"{bridge_stem(plan.unit_stem)}.service"
    return Decision(
        "bridge",
        bridge,
        f"{what}: blue/green through {name} on GPU {_gpus(bridge.gpus)} beside {plan.unit_name}: two loads, "
        "0 s downtime expected",
    )


class Holder(Enum):
    """Who holds a GPU, as the one GPU-holder rule (`holder_verdict`) sorts a process by its unit."""

    OWN = "the deployment's own"  # its unit, or one it takes over: what the swap stops for the new engine
    LEFTOVER = "left by a vllm-fleet unit that no longer runs"
    DEPLOYMENT = "another deployment's running unit"
    HAND_MADE = "a running unit vllm-fleet does not manage"
    FOREIGN = "no running unit"  # a login session, cron, nohup, or the leftover of a stopped hand-made unit


# Who may be stopped to free a GPU the deployment's engine gets: the swap's judgement (the preview's too)
# and the GPU-release guard at every start of the engine, boots and crash restarts included, read this one
# table. FOREIGN is stopped only with deployments[].foreignGpuProcesses: stop.
MAY_STOP: dict[Holder, bool] = {
    Holder.OWN: True,
    Holder.LEFTOVER: True,
    Holder.DEPLOYMENT: False,
    Holder.HAND_MADE: False,
    Holder.FOREIGN: False,
}


@dataclass(frozen=True)
class HolderVerdict:
    holder: Holder
    may_stop: bool


def holder_verdict(unit: ProcessUnit | None, is_own: Callable[[str], bool], foreign: str) -> HolderVerdict:
    """The one GPU-holder rule: who a process holding one of the deployment's GPUs is, by its systemd unit
    (None: it runs in none), and whether it may be stopped (MAY_STOP; a FOREIGN one when `foreign` is
    "stop"). `is_own(unit name)`: whether that unit is the deployment's own or one it takes over."""
    if unit is None:
        holder = Holder.FOREIGN
    elif is_own(unit.name):
        holder = Holder.OWN
    elif unit.managed:
        holder = Holder.DEPLOYMENT if unit.running else Holder.LEFTOVER
    else:
        holder = Holder.HAND_MADE if unit.running else Holder.FOREIGN
    return HolderVerdict(holder, MAY_STOP[holder] or (holder is Holder.FOREIGN and foreign == "stop"))


def holder_sentence(
    holder: GpuHolder, gpus: Sequence[int], verdict: HolderVerdict, key: str, hand_made_fix: str
) -> str:
    """What the preview and the swap say of a holder of `gpus` (which the new engine gets) that is not the
    deployment's own: why it may or may not be stopped, and the fix that names the config key."""
    held = f"GPU {','.join(map(str, gpus))} is held by {holder.describe()}"
    unit = holder.unit
    if verdict.holder is Holder.DEPLOYMENT:
        owner = unit.owner if unit is not None else None
        return f"{held}, a unit of deployment {owner}; give {key}.gpus other GPUs or destroy that deployment first"
    if verdict.holder is Holder.HAND_MADE:
        return f"{held}, which this stack does not manage; {hand_made_fix}"
    if verdict.holder is Holder.LEFTOVER:
        return f"{held}, which no longer runs; the GPU-release guard will stop what it left"
    if verdict.may_stop:
        return f"{held}; the GPU-release guard will stop it ({key}.foreignGpuProcesses: stop)"
    return (
        f"{held}, which belongs to no unit vllm-fleet manages; "
        f"stop it, or set {key}.foreignGpuProcesses: stop to let the GPU-release guard stop it"
    )


def enabled_hand_made_units(found: Survey, leaving: Sequence[str] = ()) -> Iterator[tuple[Unit, Launch]]:
    """(unit, its launch) of each hand-made vLLM unit that does not run but is enabled: the next boot starts it."""
    for unit in found.units:
        launch = unit.launch
        if unit.managed or unit.name in leaving or not unit.enabled or launch is None:
            continue
        if not unit.running:
            yield unit, launch


def _owner(unit: Unit | None) -> str | None:
    return None if unit is None else unit.owner


def _is_managed(unit: Unit | None) -> bool:
    return unit is not None and unit.managed


def leaving_units(plan: Plan, old: ActiveRecord | None) -> tuple[str, ...]:
    """Every unit that may hold the deployment's GPUs or port now and must stop for the new one."""
    return tuple(u for u in dict.fromkeys([old.unit if old else "", plan.unit_name, *plan.replaces]) if u)


def judge(plan: Plan, found: Survey, others: Mapping[str, Claims], old: ActiveRecord | None) -> Judgement:
    """Decide the swap and judge every listener and GPU holder the survey `found` against it.

    A holder is the deployment's own when its unit is one the swap stops (`leaving_units`) or a unit
    vllm-fleet made for this deployment; the front door may hold the public port. Anything else on the
    public or an engine port refuses. On the GPUs the new engine gets, the one GPU-holder rule
    (`holder_verdict`) decides: what may not be stopped refuses, what may is said and left to the
    GPU-release guard (and counts as room for a new engine beside the old one). On the deployment's other
    GPUs they are only said: the engine runs beside them, but a blue/green swap has fewer GPUs to start on.

    The survey's reading of the engine that serves (`found.readings`, asked with the stack's launch) decides
    the rest: on a first take-over, a hand-made engine that already runs the stack's launch is adopted in
    place (`adoption`), and nothing stops; the deployment's own unit whose launch does not change is
    rewritten, its engine running on."""
    key = plan.config_key
    leaving = leaving_units(plan, old)
    # Hand-made units it replaces that run: not the deployment's own engine, which a take-over may have put
    # under a replaced unit's name (vllm-minimax-m25.service is the managed unit of MiniMax on the server).
    replaces_running = any(
        found.running(u)
        for u in plan.replaces
        if u != (old.unit if old is not None else None) and not _is_managed(found.unit(u))
    )
    old_running = old is not None and found.running(old.unit)

    def ours(unit: str | None) -> bool:
        return unit is not None and (unit in leaving or _owner(found.unit(unit)) == plan.owner)

    claimed_by_others = frozenset(g for owner, held in others.items() if owner != plan.owner for g in held.gpus)
    # What holds a GPU and may not be stopped; what the GPU-release guard stops makes room.
    busy = frozenset(
        gpu
        for holder in found.gpu_holders
        if not ours(holder.unit_name) and not holder_verdict(holder.unit, ours, plan.foreign_gpu_processes).may_stop
        for gpu in holder.gpus
        if gpu in plan.gpus
    ) | (claimed_by_others & frozenset(plan.gpus))
    reading = found.readings.get(plan.owner)
    adopted = adoption(plan, found, old)
    if adopted is not None and adopted.in_place:
        who = f"{adopted.unit} (PID {adopted.pid})" if adopted.pid else adopted.unit
        decision = Decision(
            "adopt",
            Placement(adopted.gpus, plan.port),
            f"{who} already runs the stack's launch: it keeps serving and nothing restarts",
        )
    else:
        hand_made = adopted if adopted is not None and adopted.unit in leaving else None
        decision = decide(plan, old, old_running, busy, replaces_running, reading, hand_made)
    conflicts: list[str] = []
    notes: list[str] = []
    # In blue/green the new unit starts beside the old one: it is not among what stops; nor in a port move to
    # another unit. A port move under the managed unit's own name (`then`: its bridge serves first) stops
    # that unit, the hand-made engine on the public port, at the move. Adopted in place, the hand-made
    # engine becomes the managed unit's: what it holds is the deployment's own.
    beside_it = decision.mode == "blue-green" or (decision.mode == "port-move" and decision.then is None)
    stopping = {u for u in leaving if not beside_it or u != plan.unit_name}

    def stops(unit: str | None) -> bool:
        return unit is not None and (unit in stopping or _owner(found.unit(unit)) == plan.owner)

    for listener in found.listeners:
        port, unit = listener.port, listener.unit
        if port not in (plan.port, *plan.backend_ports) or stops(unit):
            continue
        if port == plan.port and unit == FRONT_DOOR_UNIT:
            continue
        if port != plan.port and ours(unit):
            continue  # the old engine on the other backend port: it serves until the switch
        what = "its front door's port" if port == plan.port else f"one of its engine ports ({key}.backendPorts)"
        fix = f"add {unit} to {key}.replaces to take it over, or stop it" if unit else "stop it"
        conflicts.append(
            f"port {port}, {what}, is held by PID {listener.pid} ({listener.cmd or '?'}) of "
            f"{unit or 'no systemd unit'}, which this stack does not manage; {fix}"
        )
    for holder in found.gpu_holders:
        verdict = holder_verdict(holder.unit, ours, plan.foreign_gpu_processes)
        if verdict.holder is Holder.OWN:
            continue  # stopped by the swap, or (blue/green) the old engine serving beside the new one
        chosen = sorted(set(holder.gpus) & set(decision.placement.gpus))
        elsewhere = sorted(set(holder.gpus) & set(plan.gpus) - set(chosen))
        if chosen:
            fix = f"add {holder.unit_name} to {key}.replaces to take it over, or stop it"
            sentence = holder_sentence(holder, chosen, verdict, key, fix)
            (notes if verdict.may_stop else conflicts).append(sentence)
        elif elsewhere:
            notes.append(
                f"GPU {','.join(map(str, elsewhere))} of {key}.gpus is held by {holder.describe()}; the deployment "
                "runs on its other GPUs and a swap cannot start the new model there beside the old one"
            )
    conflicts.extend(waiting_units(plan, found, leaving, decision))
    claims = Claims(
        engines_gpus(decision, old, adopted), frozenset({plan.port, *plan.backend_ports}), frozenset({plan.unit_name})
    )
    conflicts.extend(claim_conflicts(plan.owner, claims, others))
    return Judgement(old, decision, leaving, conflicts, notes, replaces_running, old_running, adopted, reading)


def engines_gpus(decision: Decision, old: ActiveRecord | None, adopted: Adoption | None = None) -> frozenset[int]:
    """The GPUs the deployment's engines hold while the swap runs: the new engine's, and the old one's while
    the new one starts beside it."""
    gpus = set(decision.placement.gpus) | set(decision.then.gpus if decision.then is not None else ())
    if decision.beside:
        gpus |= set(old.gpus if old is not None else adopted.gpus if adopted is not None else ())
    return frozenset(gpus)


def waiting_units(plan: Plan, found: Survey, leaving: Sequence[str], decision: Decision) -> list[str]:
    """Hand-made vLLM units that do not run now but are enabled, so the next boot starts them: one that
    would claim the deployment's port or the GPUs its engine gets fails there, restarting in a loop, and
    its own clean-up (the reference server's `rm -f /dev/shm/psm_*`) breaks the engines starting beside
    it. Running ones are judged by what they hold (listeners, GPU holders)."""
    key = plan.config_key
    problems = []
    for unit, launch in enabled_hand_made_units(found, leaving):
        claims = []
        if launch.port in (plan.port, *plan.backend_ports):
            claims.append(f"port {launch.port}")
        gpus = launch.gpus
        shared = sorted(set(decision.placement.gpus) if gpus is None else set(gpus) & set(decision.placement.gpus))
        if shared:
            claims.append(
                f"GPU {','.join(map(str, shared))}" + (" (it sets no CUDA_VISIBLE_DEVICES)" if gpus is None else "")
            )
        if claims:
            problems.append(
                f"{unit.name} is a hand-made vLLM unit, enabled but not running: the next boot starts it and it "
                f"claims {' and '.join(claims)} of this deployment; add {unit.name} to {key}.replaces to take it "
                f"over (stopped, disabled, its file backed up), or disable it (on host: `systemctl disable {unit.name}`)"
            )
    return problems


def judge_node(plan: NodePlan, found: Survey, others: Mapping[str, Claims]) -> list[str]:
    """What refuses a swap of a model across hosts on node `plan.rank`, from that node's survey: the same
    GPU-holder rule as the head's (`holder_verdict`, the deployment's own node unit being its own), no
    hand-made vLLM unit waiting, enabled, to take its GPUs at the next boot, and no claim of another
    deployment. Each sentence names the node and the fix."""
    key = plan.config_key
    where = plan.where
    wanted = set(plan.gpus)

    def ours(unit: str) -> bool:
        return unit == plan.unit_name or _owner(found.unit(unit)) == plan.deployment_owner

    conflicts = []
    for holder in found.gpu_holders:
        held = sorted(set(holder.gpus) & wanted)
        verdict = holder_verdict(holder.unit, ours, plan.foreign_gpu_processes)
        if held and not verdict.may_stop:
            fix = f"stop and disable it on {plan.host}"
            conflicts.append(f"{where}: {holder_sentence(holder, held, verdict, key, fix)}")
    for unit, launch in enabled_hand_made_units(found):
        shared = sorted(wanted if launch.gpus is None else set(launch.gpus) & wanted)
        if shared:
            conflicts.append(
                f"{where}: {unit.name} is a hand-made vLLM unit, enabled but not running: the next boot starts "
                f"it on GPU {','.join(map(str, shared))} of this node; disable it (on {plan.host}: "
                f"`systemctl disable {unit.name}`)"
            )
    claims = Claims(frozenset(plan.gpus), frozenset(), frozenset({plan.unit_name}))
    conflicts.extend(f"{where}: {problem}" for problem in claim_conflicts(plan.owner, claims, others))
    return conflicts
