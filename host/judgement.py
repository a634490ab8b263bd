"""The one judgement of a swap: how it runs, where the new engine goes, and what on the host is in its way.

The preview (controller/survey.py, from the survey it ran over SSH) and the swap transaction on the host
(host/swap.py, from the survey it runs right before it stops anything) call `judge` with the same inputs:
the plan, the survey's facts, the other deployments' claims and which units run. So what the preview
forecasts and refuses is what the host will do and refuse. Standard library only: it runs on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from host.contract import FRONT_DOOR_UNIT, RUNNING_STATES, ActiveRecord, Claims, Placement, Plan


@dataclass(frozen=True)
class Decision:
    mode: str  # blue-green | stop-start
    placement: Placement
    reason: str


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


def decide(
    plan: Plan, old: ActiveRecord | None, old_running: bool, busy: frozenset[int], replaces_running: bool
) -> Decision:
    """How the swap runs and where the new engine goes, from what runs now.

    `busy` are GPUs held by processes the swap will not stop (another deployment, a foreign process).
    Blue/green needs a running old engine behind the front door, another unit name for the new one, and
    enough of the deployment's GPUs that neither the old engine nor anything else holds."""
    needed = plan.gpus_needed
    free = [g for g in plan.gpus if g not in busy]
    first_port = plan.backend_ports[0]
    if old is None or not old_running:
        gpus = tuple(free[:needed]) if len(free) >= needed else tuple(plan.gpus[:needed])
        why = "hand-made units it replaces stop first" if replaces_running else "nothing of this deployment serves"
        return Decision("stop-start", Placement(gpus, first_port), why)
    previous = old.placement
    # Stop-start keeps the old engine's GPUs and port when they still fit.
    keep = [g for g in old.gpus if g in plan.gpus] + [g for g in free if g not in old.gpus]
    keep_port = previous.port if previous is not None and previous.port in plan.backend_ports else first_port
    stop_first = Placement(tuple(keep[:needed]), keep_port)
    if old.unit == plan.unit_name:
        return Decision("stop-start", stop_first, f"{plan.unit_name} itself changes, so it restarts in place")
    if plan.swap_mode != "auto":
        return Decision("stop-start", stop_first, f"deployments[].swapMode is {plan.swap_mode}")
    if previous is None:
        return Decision("stop-start", stop_first, f"{old.unit} listens on the public port {plan.port} itself")
    if replaces_running:
        return Decision("stop-start", stop_first, "hand-made units it replaces still run")
    spare = [g for g in free if g not in old.gpus]
    if len(spare) < needed:
        held = sorted(set(plan.gpus) & busy)
        return Decision(
            "stop-start",
            stop_first,
            f"the new engine needs {needed} GPU(s) beside {old.unit} on GPU {','.join(map(str, old.gpus))}, and "
            f"{len(spare)} of deployments[].gpus {list(plan.gpus)} are free"
            + (f" (GPU {','.join(map(str, held))} held by other processes)" if held else ""),
        )
    other_port = next(p for p in plan.backend_ports if p != previous.port)
    placement = Placement(tuple(spare[:needed]), other_port)
    return Decision(
        "blue-green",
        placement,
        f"GPU {','.join(map(str, placement.gpus)) or '-'} free beside {old.unit}; it serves until the new engine answers",
    )


def holder_text(entry: Mapping[str, Any]) -> str:
    unit = entry.get("unit") or "no systemd unit"
    return f"PID {entry['pid']} ({entry.get('cmd') or entry.get('name') or '?'}) of {unit}"


def leaving_units(plan: Plan, old: ActiveRecord | None) -> tuple[str, ...]:
    """Every unit that may hold the deployment's GPUs or port now and must stop for the new one."""
    return tuple(u for u in dict.fromkeys([old.unit if old else "", plan.unit_name, *plan.replaces]) if u)


def judge(
    plan: Plan,
    found: Mapping[str, Any],
    others: Mapping[str, Claims],
    is_running: Callable[[str], bool],
    old: ActiveRecord | None,
) -> Judgement:
    """Decide the swap and judge every listener and GPU holder the survey `found` against it.

    A holder is the deployment's own when its unit is one the swap stops (`leaving_units`) or a unit
    vllm-fleet made for this deployment; the front door may hold the public port. Anything else on the
    public or an engine port refuses. On the GPUs the new engine gets: another deployment's unit, a
    hand-made unit and (unless foreignGpuProcesses is stop) a process of no unit refuse; a process of no
    unit with `stop` is left to the GPU-release guard. On the deployment's other GPUs they are only said:
    the engine runs beside them, but a blue/green swap has fewer GPUs to start on."""
    key = plan.config_key
    units = {u["name"]: u for u in found.get("units", [])}
    leaving = leaving_units(plan, old)
    replaces_running = any(is_running(u) for u in plan.replaces)
    old_running = old is not None and is_running(old.unit)

    def ours(unit: str | None) -> bool:
        return unit is not None and (unit in leaving or (units.get(unit) or {}).get("owner") == plan.owner)

    claimed_by_others = frozenset(g for owner, held in others.items() if owner != plan.owner for g in held.gpus)
    busy = frozenset(
        gpu
        for holder in found.get("gpuHolders", [])
        if not ours(holder.get("unit"))
        for gpu in holder.get("gpus", [])
        if gpu in plan.gpus
    ) | (claimed_by_others & frozenset(plan.gpus))
    decision = decide(plan, old, old_running, busy, replaces_running)
    conflicts: list[str] = []
    notes: list[str] = []
    # In blue/green the new unit starts beside the old one: it is not among what stops.
    stopping = {u for u in leaving if decision.mode == "stop-start" or u != plan.unit_name}

    def stops(unit: str | None) -> bool:
        return unit is not None and (unit in stopping or (units.get(unit) or {}).get("owner") == plan.owner)

    for listener in found.get("listeners", []):
        port, unit = listener["port"], listener.get("unit")
        if port not in (plan.port, *plan.backend_ports) or stops(unit):
            continue
        if port == plan.port and unit == FRONT_DOOR_UNIT:
            continue
        if port != plan.port and ours(unit):
            continue  # the old engine on the other backend port: it serves until the switch
        what = "its front door's port" if port == plan.port else f"one of its engine ports ({key}.backendPorts)"
        fix = f"add {unit} to {key}.replaces to take it over, or stop it" if unit else "stop it"
        conflicts.append(
            f"port {port}, {what}, is held by {holder_text(listener)}, which this stack does not manage; {fix}"
        )
    for holder in found.get("gpuHolders", []):
        unit_name = holder.get("unit")
        if stops(unit_name) or (decision.mode == "blue-green" and ours(unit_name)):
            continue
        chosen = sorted(set(holder.get("gpus", [])) & set(decision.placement.gpus))
        elsewhere = sorted(set(holder.get("gpus", [])) & set(plan.gpus) - set(chosen))
        unit = units.get(unit_name or "")
        if chosen:
            gpus = ",".join(map(str, chosen))
            if unit is not None and unit.get("managed"):
                conflicts.append(
                    f"GPU {gpus} is held by {holder_text(holder)}, a unit of deployment {unit.get('owner')}; "
                    f"give {key}.gpus other GPUs or destroy that deployment first"
                )
            elif unit_name is not None and unit_name.endswith(".service"):
                conflicts.append(
                    f"GPU {gpus} is held by {holder_text(holder)}, which this stack does not manage; "
                    f"add {unit_name} to {key}.replaces to take it over, or stop it"
                )
            elif plan.foreign_gpu_processes == "stop":
                notes.append(
                    f"GPU {gpus} is held by {holder_text(holder)}; the GPU-release guard will stop it ({key}.foreignGpuProcesses: stop)"
                )
            else:
                conflicts.append(
                    f"GPU {gpus} is held by {holder_text(holder)}, which belongs to no unit vllm-fleet manages; "
                    f"stop it, or set {key}.foreignGpuProcesses: stop to let the GPU-release guard stop it"
                )
        elif elsewhere:
            notes.append(
                f"GPU {','.join(map(str, elsewhere))} of {key}.gpus is held by {holder_text(holder)}; the deployment "
                "runs on its other GPUs and a swap cannot start the new model there beside the old one"
            )
    conflicts.extend(waiting_units(plan, found, leaving, decision))
    both = decision.placement.gpus + (old.gpus if old is not None and decision.mode == "blue-green" else ())
    wanted = Claims(frozenset(both), frozenset({plan.port, *plan.backend_ports}), frozenset({plan.unit_name}))
    conflicts.extend(claim_conflicts(plan.owner, wanted, others))
    return Judgement(old, decision, leaving, conflicts, notes, replaces_running, old_running)


def waiting_units(plan: Plan, found: Mapping[str, Any], leaving: Sequence[str], decision: Decision) -> list[str]:
    """Hand-made vLLM units that do not run now but are enabled, so the next boot starts them: one that
    would claim the deployment's port or the GPUs its engine gets fails there, restarting in a loop, and
    its own clean-up (the reference server's `rm -f /dev/shm/psm_*`) breaks the engines starting beside
    it. Running ones are judged by what they hold (listeners, GPU holders)."""
    key = plan.config_key
    problems = []
    for unit in found.get("units", []):
        name = unit["name"]
        launch = unit.get("launch")
        if unit.get("managed") or name in leaving or not unit.get("enabled") or launch is None:
            continue
        if unit.get("activeState") in RUNNING_STATES:
            continue
        claims = []
        if launch.get("port") in (plan.port, *plan.backend_ports):
            claims.append(f"port {launch['port']}")
        gpus = launch.get("gpus")
        shared = sorted(set(decision.placement.gpus) if gpus is None else set(gpus) & set(decision.placement.gpus))
        if shared:
            claims.append(
                f"GPU {','.join(map(str, shared))}" + (" (it sets no CUDA_VISIBLE_DEVICES)" if gpus is None else "")
            )
        if claims:
            problems.append(
                f"{name} is a hand-made vLLM unit, enabled but not running: the next boot starts it and it claims "
                f"{' and '.join(claims)} of this deployment; add {name} to {key}.replaces to take it over "
                f"(stopped, disabled, its file backed up), or disable it (`systemctl disable {name}`)"
            )
    return problems


def running_in(found: Mapping[str, Any]) -> Callable[[str], bool]:
    """Whether a unit runs, as the survey saw it."""
    states = {u["name"]: u.get("activeState") for u in found.get("units", [])}
    return lambda unit: states.get(unit) in RUNNING_STATES
