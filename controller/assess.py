"""What the program says and refuses from a host's survey (controller/survey.py reads it): the judgement of
each deployment's swap, made by the function the swap calls on the host right before it stops anything
(host/judgement.judge, with the same inputs), and what the preview says of it.

A brownfield server has hand-written units, stray engines and listeners the stack knows nothing of.
`assess` turns the judgement into what the preview says: units the stack adopts (`deployments[].replaces`)
and GPU holders the guard will stop (notes), and anything that holds a deployment's port or GPUs without
being managed, adopted or allowed (errors that name it and the key to add). The swap transaction, a node's
check and the GPU guard judge again on the host right before they act.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from host.contract import Survey, owner_key
from host.judgement import Judgement, judge, judge_node
from models.config import ResolvedDeployment
from models.hosts import Host
from render.plan import node_plan, swap_plan


def judgement(stack: str, rd: ResolvedDeployment, found: Survey) -> Judgement:
    """What the host's swap will decide and refuse for this deployment, from the survey: the same call,
    with the same inputs, that host/transaction.py makes there."""
    old = found.deployment(owner_key(stack, rd.deployment.name)).record
    # The survey compared the engine that serves with the launch of the rendered unit (controller/survey.py
    # asked it), as the swap's survey compares it with the staged one.
    return judge(swap_plan(rd, stack), found, found.claims, old)


def node_conflicts(stack: str, rd: ResolvedDeployment, surveys: Mapping[str, Survey]) -> list[str]:
    """What each node after the head of a model across hosts refuses, from its host's survey: the call
    (host/judgement.judge_node) that node's unit step makes there before anything stops. A node without a
    survey (cordoned, or an offline preview without one) is not judged here."""
    problems = []
    for rank, node in enumerate(rd.node_hosts[1:], start=1):
        found = surveys.get(node.name)
        if found is not None:
            problems += judge_node(node_plan(rd, stack, rank), found, found.claims)
    return problems


def assess(
    stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: Survey
) -> tuple[list[str], list[str]]:
    """(errors, notes) for the deployments on `host`, from what `found` says runs there."""
    errors: list[str] = []
    notes: list[str] = []
    for rd in deployments:
        dep = rd.deployment
        where = f"host {host.name!r}, deployment {dep.name!r}"
        key = f"vllm-fleet:deployments[{dep.name}]"
        put_away = found.deployment(owner_key(stack, dep.name)).put_away
        judged = judgement(stack, rd, found)
        # The engine a take-over adopts in place is not stopped: its own line says what happens to it.
        in_place = judged.adoption.unit if judged.adoption is not None and judged.adoption.in_place else None
        for name in dep.replaces:
            unit = found.unit(name)
            if name in put_away and (unit is None or unit.managed):
                continue  # taken over already: its file is kept in the deployment's adopted/, nothing runs it
            if name == in_place:
                continue
            if unit is None:
                notes.append(f"{where}: {name} ({key}.replaces) is not on the host; nothing to adopt")
            else:
                state = f"{unit.active_state}, {'enabled' if unit.enabled else 'disabled'}"
                notes.append(
                    f"{where}: takes over {name} ({state}): stopped, disabled and its unit file moved into the "
                    "deployment's adopted/ in the swap, so nothing starts it again; pulumi destroy puts it back"
                )
        same = found.unit(rd.unit_name)
        if same is not None and not same.managed and rd.unit_name != in_place:
            notes.append(
                f"{where}: the hand-made {rd.unit_name} ({same.active_state}) is replaced by the managed unit of that name"
            )
        notes.extend(f"{where}: {line}" for line in adoption_lines(rd, judged))
        errors.extend(f"{where}: {conflict}" for conflict in judged.conflicts)
        notes.extend(f"{where}: {note}" for note in judged.notes)
    return errors, notes


def adoption_lines(rd: ResolvedDeployment, judged: Judgement) -> list[str]:
    """What a first take-over does with the hand-made engine that serves now: adopts it in place, or
    replaces it, the new engine first where GPUs are free beside it, else stopping it first, because its
    launch differs from the stack's (each difference said)."""
    adopted = judged.adoption
    if adopted is None:
        return []
    who = f"{adopted.unit} (PID {adopted.pid})" if adopted.pid else adopted.unit
    if adopted.in_place:
        return [
            f"adopts {who} in place: it already runs the stack's launch, keeps serving {list(adopted.ids)} on port "
            f"{rd.deployment.port} and nothing restarts; its unit file becomes the managed one (enabled: a reboot "
            "starts it), its hand-made file is kept in the deployment's adopted/ (pulumi destroy puts it back). "
            f"Until the next swap it keeps its own launch; the managed launch (serving {list(rd.served_model_names)}) "
            "and the front door (API keys, TLS, metrics allow-list) take effect at the next swap of this deployment"
        ]
    how = (
        "so the managed engine starts first beside it and the port moves to the front door once it answers"
        if judged.decision.mode == "port-move"
        else "so the take-over stops it and starts the managed unit"
    )
    return [f"cannot adopt {who} in place, {how}: " + "; ".join(adopted.differences)]
