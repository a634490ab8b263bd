"""What already runs on a host, read while the program is evaluated, so `pulumi preview` names it.

A brownfield server has hand-written units, stray engines and listeners the stack knows nothing of.
`survey` runs host/survey.py there over SSH (read-only: the host package piped into the host's python3
by render/host_bundle.py, so it needs no tool installed yet); `assess` turns its answer into what the
preview says: units the stack adopts (`deployments[].replaces`) and foreign GPU processes the guard will
stop (notes), and anything that holds a deployment's port or GPUs without being managed, adopted or
allowed (errors that name it and the key to add). The judgement itself is host/judgement.py's `judge`,
the function the swap calls on the host right before it stops anything. pulumi-command's Command does nothing in a preview, hence plain OpenSSH here, as in
`probe_ssh`. The swap transaction and the GPU guard check again on the host right before they act.

A survey is cached per stack and host under .cache/, keyed on that host's config and the survey's
source: a config change surveys afresh. A survey that found every deployment of the host active in the
unit the config names (nothing left to do) is kept for an hour, so a no-op `pulumi up` opens no SSH
session. One that found work to do (a swap, a first deployment) is kept only for PENDING_SECONDS, from
the preview to the update of one `pulumi up --yes` (an up that waits longer at its prompt reads the host
again: one SSH session, the same facts). Once that up has done the work, the next run reads the host
again instead of forecasting, from what ran before it, a swap that has already happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from host.contract import RUNNING_STATES, ActiveRecord, Claims, owner_key
from host.facts import engine_flags, unit_environment, unit_launch
from host.judgement import Judgement, judge, judge_node, running_in
from models import downtime
from models.config import GIB_PER_GB, LoadStrategy, ResolvedDeployment
from models.hosts import Host
from render import host_bundle
from render.launch import load_strategy_flag
from render.plan import node_plan, swap_plan
from render.units import render_unit

CACHE_SECONDS = 3600
PENDING_SECONDS = 30
# A deployment's unit in one of these serves nothing: drift that the next activation repairs.
STOPPED_STATES = frozenset({"inactive", "failed"})
# Surveys at once: each is one `ssh` process, so a fleet's surveys take about as long as its slowest.
SURVEY_WORKERS = 16
# vLLM prefetches on its own only when the checkpoint is at most this share of the available RAM.
PAGE_CACHE_SHARE = 0.9


class SurveyFailed(Exception):
    pass


def cache_key(host: Host, deployments: Sequence[ResolvedDeployment]) -> str:
    material = json.dumps(
        {
            "host": host.model_dump(mode="json"),
            "deployments": [rd.deployment.model_dump(mode="json") for rd in deployments],
            # An adapter's new revision changes no deployment entry; what the host has recorded differs.
            "adapters": [[a.model_dump(mode="json") for a in rd.adapters] for rd in deployments],
            "survey": host_bundle.version(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


def ssh_survey(host: Host, private_key: str, timeout: float = 60) -> dict[str, Any]:
    survey: dict[str, Any] = json.loads(
        ssh_python(
            host,
            private_key,
            "host.survey",
            ["--python", host.runtime.python],
            timeout,
            "the survey of what runs there",
        )
    )
    return survey


def ssh_python(
    host: Host, private_key: str, module: str, args: Sequence[str], timeout: float = 60, what: str = "host/status.py"
) -> str:
    """Run a module of the host package in the host's python3 over plain OpenSSH, the package sent along
    on stdin (nothing needs to be installed there); its stdout."""
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-survey-") as private:
        key_file = Path(private) / "key"
        key_file.touch(mode=0o600)
        key_file.write_text(private_key if private_key.endswith("\n") else private_key + "\n")
        known_hosts = Path(private) / "known_hosts"
        address = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        known_hosts.write_text(f"{address} {host.host_key}\n" if host.host_key else "")
        command = [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={host.dial_timeout_seconds}",
            "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "StrictHostKeyChecking=" + ("yes" if host.host_key else "no"),
            "-i", str(key_file), "-p", str(host.port), f"{host.user}@{host.address}",
            " ".join(["python3", "-", *(shlex.quote(a) for a in args)]),
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command,
                input=host_bundle.bootstrap_source(module),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SurveyFailed(f"host {host.name!r}: {what} took over {timeout:g} s") from None
    if result.returncode != 0:
        raise SurveyFailed(
            f"host {host.name!r}: {what} failed (exit {result.returncode}): {result.stderr.strip()[-400:]}"
        )
    return result.stdout


def survey(
    stack: str, host: Host, deployments: Sequence[ResolvedDeployment], private_key: str, cache_dir: Path
) -> dict[str, Any]:
    key = cache_key(host, deployments)
    path = cache_dir / f"{stack}.{host.name}.json"
    try:
        cached = json.loads(path.read_text())
        kept_for = CACHE_SECONDS if cached["converged"] else PENDING_SECONDS
        if cached["key"] == key and time.time() - cached["at"] < kept_for:
            return dict(cached["survey"])
    except (OSError, ValueError, KeyError):
        pass
    found = ssh_survey(host, private_key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    record = {"key": key, "at": time.time(), "converged": converged(stack, deployments, found), "survey": found}
    temporary.write_text(json.dumps(record))
    temporary.replace(path)
    return found


def converged(stack: str, deployments: Sequence[ResolvedDeployment], found: Mapping[str, Any]) -> bool:
    """Whether `found` shows every deployment active in the unit its config names: nothing to swap."""
    return all(active_entry(stack, rd.deployment.name, found).get("unit") == rd.unit_name for rd in deployments)


def survey_all(
    stack: str, hosts: Sequence[Host], deployments: Sequence[ResolvedDeployment], private_key: str, cache_dir: Path
) -> dict[str, dict[str, Any]]:
    """`survey` of every host at once, by host name; one SurveyFailed naming each host that failed."""
    by_host: dict[str, list[ResolvedDeployment]] = {host.name: [] for host in hosts}
    for rd in deployments:
        by_host.setdefault(rd.host.name, []).append(rd)

    def one(host: Host) -> dict[str, Any] | SurveyFailed:
        try:
            return survey(stack, host, by_host[host.name], private_key, cache_dir)
        except SurveyFailed as error:
            return error

    with ThreadPoolExecutor(max_workers=max(1, min(SURVEY_WORKERS, len(hosts)))) as pool:
        results = dict(zip((host.name for host in hosts), pool.map(one, hosts), strict=True))
    failures = [str(result) for result in results.values() if isinstance(result, SurveyFailed)]
    if failures:
        raise SurveyFailed("\n".join(failures))
    return {name: result for name, result in results.items() if not isinstance(result, SurveyFailed)}


def repairs(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> int:
    """The drift-repair count the deployment's activation step renders: the host's count (written by each
    activation), plus one when its unit file is missing or differs from the rendered unit (edited by hand).
    A unit that is stopped (inactive or failed) counts as well: the swap starts it again.
    A changed count changes the step, so `pulumi up` re-activates and the swap puts the staged unit back;
    once it has, the host's count equals the rendered one and nothing changes until the next drift."""
    record = active_entry(stack, rd.deployment.name, found)
    if not record:
        return 0  # never activated here: the first activation runs anyway
    done = int(record.get("repairs") or 0)
    if record.get("unit") != rd.unit_name:
        return done  # a swap to another unit is pending: it installs the unit anyway
    unit = {u["name"]: u for u in found.get("units", [])}.get(rd.unit_name)
    if unit is not None and "sha256" not in unit:
        return done  # a survey from before unit digests
    expected = hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest()
    # A unit stopped by hand (or failed for good) serves nothing although the stack says it does.
    stopped = unit is not None and unit.get("activeState") in STOPPED_STATES
    return done + 1 if unit is None or unit["sha256"] != expected or stopped else done


def active_entry(stack: str, deployment: str, found: Mapping[str, Any]) -> dict[str, Any]:
    """The survey's entry for a deployment's active record on this host ({} when it has none there)."""
    return dict((found.get("active") or {}).get(owner_key(stack, deployment)) or {})


def _adapters_on_host(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> dict[str, Any]:
    return active_entry(stack, rd.deployment.name, found).get("adapters") or {}


def adapter_repairs(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> int:
    """The drift-repair count the deployment's adapters step renders: the host's count, plus one when its
    engine's adapters differ from the wanted ones (one loaded or unloaded by hand), which re-runs the step."""
    on_host = _adapters_on_host(stack, rd, found)
    done = int(on_host.get("repairs") or 0)
    return done + 1 if on_host.get("drift") else done


def adapter_lines(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> list[str]:
    """What this update does to the deployment's LoRA adapters: added, updated, removed, and that no
    engine restarts for it (the adapters step loads them at runtime)."""
    if rd.serving.lora is None:
        return []
    on_host = _adapters_on_host(stack, rd, found)
    before: dict[str, str] = on_host.get("wanted") or {}
    after = {a.name: a for a in rd.adapters}
    changes = [f"adds {n} ({a.spec.repo}@{a.spec.revision[:12]})" for n, a in after.items() if n not in before]
    changes += [
        f"updates {n} ({before[n][:12]} -> {a.spec.revision[:12]})"
        for n, a in after.items()
        if n in before and before[n] != a.spec.revision
    ]
    changes += [f"removes {n}" for n in before if n not in after]
    lines = []
    if changes:
        lines.append(
            f"deployment {rd.deployment.name!r}: LoRA adapters: {', '.join(changes)}; loaded into the serving "
            "engine at runtime, no restart"
        )
    for problem in on_host.get("drift") or []:
        lines.append(f"deployment {rd.deployment.name!r}: {problem}; this update loads the wanted adapters again")
    return lines


def surveyed_claims(found: Mapping[str, Any]) -> dict[str, Claims]:
    """Every live deployment's claims on the surveyed host, as the host's own judgement reads them."""
    return {name: Claims.from_dict(held) for name, held in (found.get("claims") or {}).items()}


def judgement(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> Judgement:
    """What the host's swap will decide and refuse for this deployment, from the survey: the same call,
    with the same inputs, that host/transaction.py makes there."""
    claims = surveyed_claims(found)
    old = ActiveRecord.from_survey(active_entry(stack, rd.deployment.name, found))
    # The stack's launch as the host reads the staged unit (host/transaction.py parses the same text).
    unit_text = render_unit(rd, stack).text
    wanted = unit_launch(unit_text, unit_environment(unit_text))
    return judge(swap_plan(rd, stack), found, claims, running_in(found), old, wanted)


def node_conflicts(stack: str, rd: ResolvedDeployment, surveys: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What each node after the head of a model across hosts refuses, from its host's survey: the call
    (host/judgement.judge_node) that node's unit step makes there before anything stops. A node without a
    survey (cordoned, or an offline preview without one) is not judged here."""
    problems = []
    for rank, node in enumerate(rd.node_hosts[1:], start=1):
        found = surveys.get(node.name)
        if found is not None:
            problems += judge_node(node_plan(rd, stack, rank), found, surveyed_claims(found))
    return problems


def assess(
    stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """(errors, notes) for the deployments on `host`, from what `found` says runs there."""
    errors: list[str] = []
    notes: list[str] = []
    units = {u["name"]: u for u in found.get("units", [])}
    for rd in deployments:
        dep = rd.deployment
        where = f"host {host.name!r}, deployment {dep.name!r}"
        key = f"vllm-fleet:deployments[{dep.name}]"
        adopted = active_entry(stack, dep.name, found).get("adopted") or []
        judged = judgement(stack, rd, found)
        # The engine a take-over adopts in place is not stopped: its own line says what happens to it.
        in_place = judged.adoption.unit if judged.adoption is not None and judged.adoption.in_place else None
        for name in dep.replaces:
            unit = units.get(name)
            if name in adopted and (unit is None or unit.get("managed")):
                continue  # taken over already: its file is kept in the deployment's adopted/, nothing runs it
            if name == in_place:
                continue
            if unit is None:
                notes.append(f"{where}: {name} ({key}.replaces) is not on the host; nothing to adopt")
            else:
                state = f"{unit['activeState']}, {'enabled' if unit['enabled'] else 'disabled'}"
                notes.append(
                    f"{where}: takes over {name} ({state}): stopped, disabled and its unit file moved into the "
                    "deployment's adopted/ in the swap, so nothing starts it again; pulumi destroy puts it back"
                )
        same = units.get(rd.unit_name)
        if same is not None and not same["managed"] and rd.unit_name != in_place:
            notes.append(
                f"{where}: the hand-made {rd.unit_name} ({same['activeState']}) is replaced by the managed unit of that name"
            )
        notes.extend(f"{where}: {line}" for line in adoption_lines(rd, judged))
        errors.extend(f"{where}: {conflict}" for conflict in judged.conflicts)
        notes.extend(f"{where}: {note}" for note in judged.notes)
        notes.extend(memory_notes(rd, found))
    return errors, notes


def adoption_lines(rd: ResolvedDeployment, judged: Judgement) -> list[str]:
    """What a first take-over does with the hand-made engine that serves now: adopts it in place, or
    stops and starts because its launch differs from the stack's (each difference said)."""
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
    return [
        f"cannot adopt {who} in place, so the take-over stops it and starts the managed unit: "
        + "; ".join(adopted.differences)
    ]


def forecasts(stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: dict[str, Any]) -> list[str]:
    """One line per deployment whose model changes: the swap's mode, why, and the downtime to expect."""
    lines = []
    for rd in deployments:
        forecast = swap_forecast(stack, rd, found)
        if forecast is not None:
            lines.append(f"host {host.name!r}, deployment {rd.deployment.name!r}: {forecast}")
    return lines


def memory_notes(rd: ResolvedDeployment, found: dict[str, Any]) -> list[str]:
    """A checkpoint the host's RAM cannot hold is read from storage on every load, whatever the strategy."""
    total_gib = found.get("memory", {}).get("totalMib", 0) / 1024
    size_gib = rd.model.size_gb * GIB_PER_GB
    if total_gib <= 0 or size_gib <= PAGE_CACHE_SHARE * total_gib:
        return []
    return [
        f"host {rd.host.name!r}, deployment {rd.deployment.name!r}: {rd.model_name} is {size_gib:.0f} GiB, over "
        f"{PAGE_CACHE_SHARE:.0%} of the host's {total_gib:.0f} GiB RAM: the page cache cannot hold it, so "
        "safetensorsLoadStrategy prefetch and the pre-warm before a swap cannot speed its load; expect the "
        "storage's own read rate"
    ]


def swap_forecast(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> str | None:
    """What the swap will do, decided as the host will decide it, and the downtime to expect."""
    active = found.get("active", {}).get(owner_key(stack, rd.deployment.name)) or {}
    units = {u["name"]: u for u in found.get("units", [])}
    # A first take-over: hand-made units of this deployment (those it replaces, or one of its unit's name)
    # serve now, and stop before the managed engine starts.
    hand_made = [
        name
        for name in dict.fromkeys([rd.unit_name, *rd.deployment.replaces])
        if name in units and not units[name].get("managed") and units[name].get("activeState") in RUNNING_STATES
    ]
    if not active.get("unit") and hand_made:
        old_unit = " and ".join(hand_made)
    elif not active.get("unit") or active["unit"] == rd.unit_name:
        return None
    else:
        old_unit = active["unit"]
    decision = judgement(stack, rd, found).decision
    if decision.mode == "adopt":
        return f"the take-over of {old_unit} adopts it in place ({decision.reason}); expected downtime 0 s"
    head = f"the swap from {old_unit} to {rd.unit_name} will run {decision.mode.replace('-', '/', 1) if decision.mode == 'blue-green' else 'stop-then-start'} ({decision.reason})"
    if decision.mode == "blue-green":
        return f"{head}; expected downtime 0 s"
    last = active.get("lastStartSeconds")
    if isinstance(last, int | float) and last > 0:
        return f"{head}; expected downtime about {downtime.describe(last)} (the last start of this deployment here took {last:.1f} s)"
    available_gib = found.get("memory", {}).get("availableMib", 0) / 1024
    # A staging copy on local disk reads about as fast as the page cache (the copy's pages stay cached too).
    prewarmed = rd.host.staging_path is not None or 0 < rd.model.size_gb * GIB_PER_GB <= available_gib - 8
    estimate = downtime.stop_start_estimate(
        rd.model.size_gb, load_strategy_flag(rd) is LoadStrategy.PREFETCH, prewarmed
    )
    return f"{head}; expected downtime about {downtime.describe(estimate.seconds)} ({estimate.basis})"


def client_ids(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(served, kept): the model ids clients can send the deployment's port today, and those a take-over
    keeps by default. Served: what its managed units serve and what the running hand-made units it
    replaces serve (a launch without --served-model-name serves its --model path). Kept: the hand-made
    engines' ids, and the ids the managed unit already kept beside its served name (read from its launch
    whatever its state, so a crashed engine changes nothing); never a managed served name, so a swap to
    another served name is the stack's own change."""
    owner = owner_key(stack, rd.deployment.name)
    active_unit = active_entry(stack, rd.deployment.name, found).get("unit")
    served: list[str] = []
    kept: list[str] = []
    for unit in found.get("units", []):
        launch = unit.get("launch") or {}
        names = list(launch.get("servedNames") or [])
        ours = unit.get("owner") == owner and unit["name"] in (active_unit, rd.unit_name)
        replaced = unit["name"] in rd.deployment.replaces or (unit["name"] == rd.unit_name and not unit.get("managed"))
        running = unit.get("activeState") in RUNNING_STATES
        if ours:
            # An engine adopted in place serves its own ids (all of them kept); a managed launch serves
            # the stack's served name first, then what it kept.
            kept += names if unit.get("adoptedInPlace") else names[1:]
            if running:
                served += names
        elif replaced and running and launch.get("port") == rd.deployment.port:
            kept += names
            served += names
    return list(dict.fromkeys(served)), list(dict.fromkeys(kept))


def with_client_ids(stack: str, rd: ResolvedDeployment, found: dict[str, Any]) -> ResolvedDeployment:
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
    stack: str, rd: ResolvedDeployment, found: dict[str, Any], asks_key: bool = False
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


def key_warnings(stack: str, rd: ResolvedDeployment, found: dict[str, Any], asks_key: bool) -> list[str]:
    """A take-over puts the front door, which asks for one of vllm-fleet:apiKeys when the stack has keys,
    in front of hand-made engines that took requests without a key: their clients start getting 401."""
    if not asks_key or active_entry(stack, rd.deployment.name, found).get("unit"):
        return []
    keyless = [
        unit["name"]
        for unit in found.get("units", [])
        if (unit["name"] in rd.deployment.replaces or (unit["name"] == rd.unit_name and not unit.get("managed")))
        and unit.get("activeState") in RUNNING_STATES
        and (unit.get("launch") or {}).get("port") == rd.deployment.port
        and "--api-key" not in engine_flags(list((unit.get("launch") or {}).get("argv") or []))
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
