"""The model ids clients send a deployment's port, before and after an update, from the host's survey: a
take-over keeps the ids its hand-made engines served (unless deployments[].alsoServedAs says which), and
the preview says each id that would disappear and each client that would start to need an API key."""

from __future__ import annotations

from controller.assess import judgement
from host.contract import Survey, owner_key
from host.facts import engine_flags
from models.config import ResolvedDeployment


def client_ids(stack: str, rd: ResolvedDeployment, found: Survey) -> tuple[list[str], list[str]]:
    """(served, kept): the model ids clients can send the deployment's port today, and those a take-over
    keeps by default. Served: what its managed units serve and what the running hand-made units it
    replaces serve (a launch without --served-model-name serves its --model path). Kept: the hand-made
    engines' ids, and the ids the managed unit already kept beside its served name (read from its launch
    whatever its state, so a crashed engine changes nothing); never a managed served name, so a swap to
    another served name is the stack's own change."""
    owner = owner_key(stack, rd.deployment.name)
    active_unit = found.deployment(owner).unit
    served: list[str] = []
    kept: list[str] = []
    for unit in found.units:
        launch = unit.launch
        names = list(launch.served_names) if launch is not None else []
        ours = unit.owner == owner and unit.name in (active_unit, rd.unit_name)
        replaced = unit.name in rd.deployment.replaces or (unit.name == rd.unit_name and not unit.managed)
        if ours:
            # An engine adopted in place serves its own ids (all of them kept); a managed launch serves
            # the stack's served name first, then what it kept.
            kept += names if unit.adopted_in_place else names[1:]
            if unit.running:
                served += names
        elif replaced and unit.running and launch is not None and launch.port == rd.deployment.port:
            kept += names
            served += names
    return list(dict.fromkeys(served)), list(dict.fromkeys(kept))


def with_client_ids(stack: str, rd: ResolvedDeployment, found: Survey) -> ResolvedDeployment:
    """The deployment serving, besides its served name, the ids a take-over keeps (`client_ids`), unless
    deployments[].alsoServedAs says which (a take-over must not turn every client's request into a 404)."""
    if rd.deployment.also_served_as is not None:
        return rd
    extra = [i for i in client_ids(stack, rd, found)[1] if i != rd.served_model_name]
    if not extra:
        return rd
    # Not validated again (model_copy): the ids are what the host's engines answer to today, which the unit
    # passes to vLLM systemd-quoted (render/units.py); no rule of Deployment reads them.
    deployment = rd.deployment.model_copy(update={"also_served_as": extra})
    return rd.model_copy(update={"deployment": deployment})


def client_id_lines(
    stack: str, rd: ResolvedDeployment, found: Survey, asks_key: bool = False
) -> tuple[list[str], list[str]]:
    """(info, warnings): the ids clients can send before and after this update, and each that disappears."""
    before = client_ids(stack, rd, found)[0]
    after = list(rd.served_model_names)
    where = f"host {rd.host.name!r}, deployment {rd.deployment.name!r}"
    if not before or before == after:
        return [], key_warnings(stack, rd, found, asks_key)
    adopted = judgement(stack, rd, found).adoption
    if adopted is not None and adopted.in_place:
        # Adopted in place, the engine keeps its own ids until the next swap starts the stack's launch.
        info = [
            f"{where}: model ids clients can send on port {rd.deployment.port}: today {before}; after this update "
            f"{list(adopted.ids)} (adopted in place); after its next swap {after}"
        ]
    else:
        info = [
            f"{where}: model ids clients can send on port {rd.deployment.port}: today {before}; after this update {after}"
        ]
    gone = [i for i in before if i not in after]
    warnings = [
        f"{where}: clients that send model id {i!r} get 404 after this update; add it to "
        f"vllm-fleet:deployments[{rd.deployment.name}].alsoServedAs to keep it"
        for i in gone
    ]
    return info, warnings + key_warnings(stack, rd, found, asks_key)


def key_warnings(stack: str, rd: ResolvedDeployment, found: Survey, asks_key: bool) -> list[str]:
    """A take-over puts the front door, which asks for one of vllm-fleet:apiKeys when the stack has keys,
    in front of hand-made engines that took requests without a key: their clients start getting 401."""
    if not asks_key or found.deployment(owner_key(stack, rd.deployment.name)).unit:
        return []
    keyless = [
        unit.name
        for unit in found.units
        if (unit.name in rd.deployment.replaces or (unit.name == rd.unit_name and not unit.managed))
        and unit.running
        and unit.launch is not None
        and unit.launch.port == rd.deployment.port
        and "--api-key" not in engine_flags(list(unit.launch.argv))
    ]
    if not keyless:
        return []
    when = "after the next swap" if judgement(stack, rd, found).decision.mode == "adopt" else "after this update"
    return [
        f"host {rd.host.name!r}, deployment {rd.deployment.name!r}: {', '.join(keyless)} answers on port "
        f"{rd.deployment.port} without an API key; {when} the front door asks for one of vllm-fleet:apiKeys and "
        "clients that send none get 401. Give every client a key first, or set vllm-fleet:access.open: true "
        "to keep the port open"
    ]
