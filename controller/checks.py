"""The checks against the hosts before any step is declared: every reachable host answers on SSH, and
what already runs there (surveyed over SSH, controller/survey.py) does not conflict with the stack.

Contacting a host while the program runs makes an unreachable one fail fast, in previews too, and lets
the preview name what already runs there (hand-made units, stray GPU processes). A cordoned host is not
contacted at all: it may be down for repair.
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from controller import survey as host_survey
from controller.probe import HostUnreachable, probe_all
from controller.program import Stack

SURVEY_CACHE = Path(".cache") / "survey"


def check_hosts(stack: Stack) -> dict[str, int]:
    """Probe and survey the hosts, log what each swap will do, and refuse conflicts (pulumi.RunError).
    Returns, per deployment, the drift-repair count its activation renders (controller/survey.repairs)."""
    reachable = [h for h in stack.config.hosts if not h.cordon]
    repairs: dict[str, int] = {}
    for host_config in stack.config.hosts:
        if host_config.cordon:
            pulumi.log.info(f"host {host_config.name!r} is cordoned: not contacted, no step runs there")
    if stack.offline:
        return repairs
    resolved = stack.deployments
    # All hosts at once; an error names every host that failed.
    try:
        probe_all(reachable)
        surveys = host_survey.survey_all(stack.name, reachable, resolved, stack.key_text, SURVEY_CACHE)
    except (HostUnreachable, host_survey.SurveyFailed) as error:
        raise pulumi.RunError(str(error)) from None
    conflicts: list[str] = []
    for host_config in reachable:
        on_host = [rd for rd in resolved if rd.host.name == host_config.name]
        found = surveys[host_config.name]
        errors, notes = host_survey.assess(stack.name, host_config, on_host, found)
        for rd in on_host:
            repairs[rd.deployment.name] = host_survey.repairs(stack.name, rd, found)
            if repairs[rd.deployment.name] > int(
                found.get("active", {}).get(f"{stack.name}.{rd.deployment.name}", {}).get("repairs") or 0
            ):
                pulumi.log.warn(
                    f"deployment {rd.deployment.name!r}: {rd.unit_name} on host {host_config.name!r} is missing, stopped or "
                    "was edited by hand; this update activates the stack's unit again"
                )
        for note in notes:
            pulumi.log.warn(note)
        for forecast in host_survey.forecasts(stack.name, host_config, on_host, found):
            pulumi.log.info(forecast)
        conflicts += errors
    if conflicts:
        raise pulumi.RunError(
            "what runs on the hosts conflicts with the stack; nothing was changed:\n" + "\n".join(conflicts)
        )
    return repairs
