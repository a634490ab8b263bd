"""The checks against the hosts before any step is declared: every reachable host answers on SSH, and
what already runs there (surveyed over SSH, controller/survey.py) does not conflict with the stack.

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
from typing import Any

import pulumi

from controller import survey as host_survey
from controller.probe import HostUnreachable, probe_all
from controller.program import Stack
from models.config import StackConfig
from models.rules import stack_errors
from render.launch import load_strategy_note

SURVEY_CACHE = Path(".cache") / "survey"


def host_versions(
    config: StackConfig, surveys: Mapping[str, Mapping[str, Any]]
) -> tuple[StackConfig, list[str], list[str]]:
    """(config, errors, notes): the config as the hosts' own vLLM releases make it. Where
    `hosts[].runtime.vllmVersion` is not set, the version the survey read on the host decides the
    version-dependent rendering (and the rules that depend on it run again); where it is set, it is an
    assertion, and a host that runs another release refuses the preview."""
    errors: list[str] = []
    notes: list[str] = []
    hosts = []
    for host in config.hosts:
        reading = ((surveys.get(host.name) or {}).get("vllm") or {}).get("version")
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


def with_host_versions(stack: Stack, surveys: Mapping[str, Mapping[str, Any]]) -> tuple[Stack, list[str]]:
    """`host_versions` for the program's stack: its deployments resolved again, the notes logged."""
    config, errors, notes = host_versions(stack.config, surveys)
    for note in notes:
        pulumi.log.info(note)
    if config is stack.config:
        return stack, errors
    return dataclasses.replace(stack, config=config, deployments=config.resolved_deployments()), errors


@dataclass(frozen=True)
class Repairs:
    """Per deployment, the drift-repair counts its steps render: its activation's (controller/survey.repairs)
    and its adapters step's (controller/survey.adapter_repairs)."""

    activations: dict[str, int] = field(default_factory=dict)
    adapters: dict[str, int] = field(default_factory=dict)


def check_hosts(stack: Stack) -> tuple[Stack, Repairs]:
    """Probe and survey the hosts, log what each swap will do, and refuse conflicts (pulumi.RunError).
    Returns the stack as the hosts' vLLM releases make it (`with_host_versions`) and the drift-repair
    counts its steps render."""
    reachable = [h for h in stack.config.hosts if not h.cordon]
    repairs = Repairs()
    for host_config in stack.config.hosts:
        if host_config.cordon:
            pulumi.log.info(f"host {host_config.name!r} is cordoned: not contacted, no step runs there")
    recorded = os.environ.get("VLLM_FLEET_SURVEY_FILE")
    if stack.offline and not recorded:
        load_notes(stack)
        return stack, repairs
    if stack.offline:
        # An offline preview judged against surveys recorded beforehand ({host name: survey}), e.g. what
        # the reference server runs (make preview-prod): the same assessment, no host contacted.
        surveys = {name: found for name, found in json.loads(Path(str(recorded)).read_text()).items()}
        reachable = [h for h in reachable if h.name in surveys]
    else:
        # All hosts at once; an error names every host that failed.
        try:
            probe_all(reachable)
            surveys = host_survey.survey_all(stack.name, reachable, stack.deployments, stack.key_text, SURVEY_CACHE)
        except (HostUnreachable, host_survey.SurveyFailed) as error:
            raise pulumi.RunError(str(error)) from None
    stack, conflicts = with_host_versions(stack, surveys)
    resolved = [
        host_survey.with_client_ids(stack.name, rd, surveys[rd.host.name]) if rd.host.name in surveys else rd
        for rd in stack.deployments
    ]
    stack = dataclasses.replace(stack, deployments=resolved)
    load_notes(stack)
    for host_config in reachable:
        on_host = [rd for rd in resolved if rd.host.name == host_config.name]
        found = surveys[host_config.name]
        errors, notes = host_survey.assess(stack.name, host_config, on_host, found)
        for rd in on_host:
            repairs.activations[rd.deployment.name] = host_survey.repairs(stack.name, rd, found)
            if repairs.activations[rd.deployment.name] > int(
                host_survey.active_entry(stack.name, rd.deployment.name, found).get("repairs") or 0
            ):
                pulumi.log.warn(
                    f"deployment {rd.deployment.name!r}: {rd.unit_name} on host {host_config.name!r} is missing, stopped or "
                    "was edited by hand; this update activates the stack's unit again"
                )
            repairs.adapters[rd.deployment.name] = host_survey.adapter_repairs(stack.name, rd, found)
            for line in host_survey.adapter_lines(stack.name, rd, found):
                pulumi.log.info(line)
        for rd in on_host:
            info, warnings = host_survey.client_id_lines(stack.name, rd, found, asks_key=stack.access.key_count > 0)
            notes += warnings
            for line in info:
                pulumi.log.info(line)
        for note in notes:
            pulumi.log.warn(note)
        for forecast in host_survey.forecasts(stack.name, host_config, on_host, found):
            pulumi.log.info(forecast)
        conflicts += errors
    for rd in resolved:
        conflicts += host_survey.node_conflicts(stack.name, rd, surveys)
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
