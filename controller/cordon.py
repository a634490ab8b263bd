"""Cordoned hosts: what the stack last applied there stays as it is, and no step runs there.

A cordoned host (`hosts[].cordon: true`) is never contacted by the program (no SSH probe, no survey), its
steps ignore every input change (pulumi's `ignoreChanges`), and a step that would be created or deleted
there is refused before anything runs, naming the steps. To know which steps exist, the program reads the
stack's last checkpoint with `pulumi stack export` (the engine's own command; the state has no other
read API for a running program): a step belongs to a host by the address, port and user in its
`triggers` (components/remote.py puts them there).

The program makes one `CordonedSteps` and hands it to every host's connection (components/remote.py's
`connect`): each step declared on a cordoned host is checked and recorded there, and once every step is
declared `check_removals` refuses the steps of the state that are declared no more.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from functools import cache

import pulumi

from host.processes import run_captured
from models.hosts import Host

# A host's steps: its commands and the copy of its host package (components/remote.py).
STEP_TYPES = ("command:remote:Command", "command:remote:CopyToRemote")


class CordonViolation(pulumi.RunError):
    pass


def host_identity(host: Host) -> tuple[str, int, str]:
    return (host.address, host.port, host.user)


@cache
def applied_steps() -> dict[tuple[str, int, str], dict[str, str]]:
    """The steps in the stack's last checkpoint, by the host they ran on: each step's name and the command
    it ran (its `create` input)."""
    cli = shutil.which("pulumi") or "pulumi"
    result = run_captured(
        [cli, "stack", "export", "--stack", pulumi.get_stack()],
        timeout=120,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
    )
    if result.returncode != 0:
        raise CordonViolation(
            f"cannot read the stack's last checkpoint to keep cordoned hosts as they are "
            f"(`pulumi stack export` exited {result.returncode}: {result.stderr.strip()[:300]})"
        )
    resources = json.loads(result.stdout).get("deployment", {}).get("resources") or []
    by_host: dict[tuple[str, int, str], dict[str, str]] = {}
    for resource in resources:
        inputs = resource.get("inputs") or {}
        triggers = inputs.get("triggers")
        if resource.get("type") not in STEP_TYPES or not isinstance(triggers, list) or len(triggers) < 3:
            continue
        key = (str(triggers[0]), int(triggers[1]), str(triggers[2]))
        by_host.setdefault(key, {})[str(resource["urn"]).rsplit("::", 1)[-1]] = str(inputs.get("create") or "")
    return by_host


def check_step(host: Host, name: str, create: str | None = None, spans: str | None = None) -> None:
    """Refuse a step that would be created on a cordoned host (it has no such step in the state), and one
    of a node of a model across hosts (`spans` names it) whose command would change: ignored there, it
    would leave that node on the old launch while the head moves on."""
    applied = applied_steps().get(host_identity(host), {})
    if name not in applied:
        raise CordonViolation(
            f"host {host.name!r} is cordoned (vllm-fleet:hosts[].cordon: true), but the stack would create step "
            f"{name!r} there; nothing was changed. Put back what that host serves, or lift the cordon to apply it"
        )
    if spans is not None and create is not None and applied[name] != create:
        raise CordonViolation(
            f"host {host.name!r} is cordoned (vllm-fleet:hosts[].cordon: true), but {spans} runs there and the "
            f"stack changes it (step {name!r}); a model across hosts changes on every node or on none, so nothing "
            "was changed. Put the deployment back as it was, or lift the cordon to apply it"
        )


def check_removals(host: Host, registered: set[str]) -> None:
    """Refuse steps of a cordoned host that the program no longer declares (they would be deleted there)."""
    gone = sorted(set(applied_steps().get(host_identity(host), {})) - registered)
    if gone:
        raise CordonViolation(
            f"host {host.name!r} is cordoned (vllm-fleet:hosts[].cordon: true), but the stack would delete "
            f"{', '.join(gone)} there; nothing was changed. Put back what that host serves, or lift the cordon"
        )


class CordonedSteps:
    """The steps the program declares on cordoned hosts, by host name (components/remote.py's StepLedger)."""

    def __init__(self) -> None:
        self.declared: dict[str, set[str]] = {}

    def declare(self, host: Host, name: str, create: str | None = None, spans: str | None = None) -> None:
        check_step(host, name, create, spans)
        self.declared.setdefault(host.name, set()).add(name)

    def check_removals(self, hosts: Sequence[Host]) -> None:
        """Once every step is declared: refuse the state's steps on cordoned hosts that no step declares."""
        for host in hosts:
            if host.cordon:
                check_removals(host, self.declared.get(host.name, set()))
