"""The checks against the hosts before any step is declared: every reachable host answers on SSH, and
what runs there (surveyed over SSH in every run, controller/survey.py) does not conflict with the stack;
what drifted from it is counted for repair (controller/drift.py), and what each swap will do is said.

Contacting a host while the program runs makes an unreachable one fail fast, in previews too, and lets
the preview name what already runs there (hand-made units, stray GPU processes). A cordoned host is not
contacted at all: it may be down for repair.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from controller import assess, client_ids, drift, forecast
from controller import survey as host_survey
from controller.known_hosts import changed_note
from controller.probe import HostUnreachable, probe_all
from controller.program import Stack
from host.contract import MODEL_NO_MANIFEST, StartForecastRecord, Survey
from models.config import StackConfig
from models.hosts import Host
from models.rules import stack_errors
from render.checkout import CACHE
from render.launch import load_strategy_note

SURVEY_CACHE = Path(CACHE) / "survey"


def host_versions(config: StackConfig, surveys: Mapping[str, Survey]) -> tuple[StackConfig, list[str], list[str]]:
    """(config, errors, notes): the config as the hosts' own vLLM releases make it. Where
    `hosts[].runtime.vllmVersion` is not set, the version the survey read on the host decides the
    version-dependent rendering (and the rules that depend on it run again); where it is set, it is an
    assertion, and a host that runs another release refuses the preview."""
    errors: list[str] = []
    notes: list[str] = []
    hosts = []
    for host in config.hosts:
        found = surveys.get(host.name)
        reading = found.vllm_version if found is not None else None
        pin = host.runtime.vllm_version
        if reading is None:
            hosts.append(host)
            continue
        release = str(reading).split("+", 1)[0]  # a local build tag (+cpu, +g1234abc) is not the release
        if pin is not None:
            if release != pin:
                errors.append(
                    f"host {host.name!r}: vllm-fleet:hosts[{host.name}].runtime.vllmVersion pins {pin}, but "
                    f"{host.runtime.python} there has vLLM {reading}; set it to {release} or remove it to let the host's "
                    "vLLM decide"
                )
            hosts.append(host)
            continue
        # Not validated again (model_copy): the rules across keys run on the new config below, and the release,
        # read from the host's own vLLM, reaches a script only shell-quoted (render/scripts.py).
        hosts.append(host.model_copy(update={"runtime": host.runtime.model_copy(update={"vllm_version": release})}))
        notes.append(f"host {host.name!r} runs vLLM {reading}: the launch is rendered for that release")
    if hosts == list(config.hosts):
        return config, errors, notes
    config = config.model_copy(update={"hosts": tuple(hosts)})
    return config, errors + stack_errors(config), notes


def with_host_versions(stack: Stack, surveys: Mapping[str, Survey]) -> tuple[Stack, list[str]]:
    """`host_versions` for the program's stack: its deployments resolved again, the notes logged."""
    config, errors, notes = host_versions(stack.config, surveys)
    for note in notes:
        pulumi.log.info(note)
    if config is stack.config:
        return stack, errors
    return dataclasses.replace(stack, config=config, deployments=config.resolved_deployments()), errors


@dataclass(frozen=True)
class Repairs:
    """What the steps render from the hosts' facts: the drift-repair counts (controller/drift.py), per
    deployment its activation's and its adapters step's, per (storage, download name) its download step's;
    and per deployment the start forecast its activation carries (controller/forecast.plan_forecast)."""

    activations: dict[str, int] = field(default_factory=dict)
    adapters: dict[str, int] = field(default_factory=dict)
    downloads: dict[tuple[str, str], int] = field(default_factory=dict)
    forecasts: dict[str, StartForecastRecord] = field(default_factory=dict)


def model_dirs(config: StackConfig) -> dict[str, list[str]]:
    """Per host, the directories of the downloads on its storage, which the survey checks against their
    verified manifests."""
    dirs: dict[str, list[str]] = {}
    for store in config.storage:
        dirs.setdefault(store.host, []).extend(
            f"{store.path}/{spec.dir}" for spec in config.downloads_on(store.name).values()
        )
    return dirs


def read_facts(stack: Stack, reachable: list[Host]) -> dict[str, Survey]:
    """Each reachable host's survey: recorded ones for an offline preview, else read over SSH (or, in the
    update of one `pulumi up`, the preview's), with a line saying how old they are."""
    recorded = os.environ.get("VLLM_FLEET_SURVEY_FILE")
    if stack.offline:
        # An offline preview judged against surveys recorded beforehand ({host name: survey}), e.g. what
        # the reference server runs (make preview-prod): the same assessment, no host contacted.
        surveys = {name: Survey.from_dict(found) for name, found in json.loads(Path(str(recorded)).read_text()).items()}
        pulumi.log.info(f"facts about the hosts: recorded in {recorded} (an offline preview contacts no host)")
        return surveys
    window = host_survey.reuse_seconds()
    try:
        probe_all(reachable)
        facts = host_survey.survey_all(
            stack.name,
            reachable,
            stack.deployments,
            model_dirs(stack.config),
            stack.key_text,
            SURVEY_CACHE,
            preview=pulumi.runtime.is_dry_run(),
            operation=host_survey.pulumi_operation(),
            window=window,
            host_keys=stack.host_keys,
        )
    except (HostUnreachable, host_survey.SurveyFailed) as error:
        raise pulumi.RunError(f"{error}\n{cordon_advice(stack, str(error))}") from None
    if reachable:
        pulumi.log.info(host_survey.age_line(facts, window))
    return facts.surveys


def cordon_advice(stack: Stack, message: str) -> str:
    """The fix for hosts that did not answer, as commands: cordon each while it is down (nothing is asked
    of it or runs there until the cordon is lifted)."""
    commands = [
        f"pulumi config set --stack {stack.name} --path 'vllm-fleet:hosts[{index}].cordon' true"
        for index, host in enumerate(stack.config.hosts)
        if f"host {host.name!r}" in message
    ]
    return "A host that is down for repair can be cordoned until it is back: " + "; ".join(commands)


def check_hosts(stack: Stack) -> tuple[Stack, Repairs]:
    """Probe and survey the hosts, log what each swap will do and what drifted, and refuse conflicts
    (pulumi.RunError). Returns the stack as the hosts' vLLM releases make it (`with_host_versions`) and the
    drift-repair counts its steps render."""
    reachable = [h for h in stack.config.hosts if not h.cordon]
    repairs = Repairs()
    for host_config in stack.config.hosts:
        if host_config.cordon:
            pulumi.log.info(f"host {host_config.name!r} is cordoned: not contacted, no step runs there")
    if stack.offline and not os.environ.get("VLLM_FLEET_SURVEY_FILE"):
        load_notes(stack)
        return stack, repairs
    surveys = read_facts(stack, reachable)
    reachable = [h for h in reachable if h.name in surveys]
    stack, conflicts = with_host_versions(stack, surveys)
    resolved = [
        client_ids.with_client_ids(stack.name, rd, surveys[rd.host.name]) if rd.host.name in surveys else rd
        for rd in stack.deployments
    ]
    # The loaders left to `auto`, picked from the hosts' facts (a node of a deployment across hosts runs the
    # head's launch: the head's facts pick it).
    choices = {}
    for index, rd in enumerate(resolved):
        if rd.host.name in surveys:
            resolved[index], choices[rd.deployment.name] = forecast.with_load_choice(rd, surveys[rd.host.name])
    stack = dataclasses.replace(stack, deployments=resolved)
    load_notes(stack)
    for store in stack.config.storage:
        found = surveys.get(store.host)
        if found is None:
            continue
        for name, spec in stack.config.downloads_on(store.name).items():
            directory = f"{store.path}/{spec.dir}"
            count, problem = drift.download_repairs(stack.name, directory, found)
            repairs.downloads[(store.name, name)] = count
            if problem is not None:
                # A directory with no verified files is a first download as often as a deleted one: said, not warned.
                files = found.models.get(directory)
                fresh = files is not None and files.state == MODEL_NO_MANIFEST
                (pulumi.log.info if fresh else pulumi.log.warn)(drift.download_line(name, store.host, directory, found))
    for host_config in reachable:
        on_host = [rd for rd in resolved if rd.host.name == host_config.name]
        found = surveys[host_config.name]
        if (key_changed := changed_note(stack.name, host_config, stack.host_keys, found)) is not None:
            pulumi.log.warn(key_changed)
        errors, notes = assess.assess(stack.name, host_config, on_host, found)
        for rd in on_host:
            count, problems = drift.activation_repairs(stack.name, rd, found)
            repairs.activations[rd.deployment.name] = count
            if problems:
                pulumi.log.warn(
                    f"deployment {rd.deployment.name!r} on host {host_config.name!r}: {'; '.join(problems)}; "
                    "this update activates the stack's unit again"
                )
            repairs.adapters[rd.deployment.name] = drift.adapter_repairs(stack.name, rd, found)
            planned = forecast.plan_forecast(stack.name, rd, found)
            if planned is not None:
                repairs.forecasts[rd.deployment.name] = planned
            for line in drift.adapter_lines(stack.name, rd, found):
                pulumi.log.info(line)
            notes += forecast.memory_notes(rd, found)
        for rd in on_host:
            info, warnings = client_ids.client_id_lines(stack.name, rd, found, asks_key=stack.access.key_count > 0)
            notes += warnings
            for line in info:
                pulumi.log.info(line)
        for note in notes:
            pulumi.log.warn(note)
        for line in forecast.forecasts(stack.name, stack.config, host_config, on_host, found, choices):
            pulumi.log.info(line)
        for line in forecast.parser_notes(stack.name, host_config, on_host, found):
            pulumi.log.info(line)
        conflicts += errors
    for rd in resolved:
        conflicts += assess.node_conflicts(stack.name, rd, surveys)
    if conflicts:
        raise pulumi.RunError(
            "what runs on the hosts conflicts with the stack; nothing was changed:\n" + "\n".join(conflicts)
        )
    return stack, repairs


def load_notes(stack: Stack) -> None:
    for rd in stack.deployments:
        note = load_strategy_note(rd)
        if note is not None:
            pulumi.log.warn(note)
