"""A GPU server: its SSH connection, its preflight facts and the vllm-fleet tools installed on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi

from components.component import FleetComponent
from components.remote import StepLedger, Target, connect, remote_copy
from models.hosts import Host
from render import host_bundle
from render.steps import preflight_script, tools_delete_script, tools_script


@dataclass(frozen=True)
class GpuHostArgs:
    host: Host
    # The stack's name: the preflight records under it the host key the stack's steps pin.
    stack: str
    private_key: pulumi.Input[str]
    # Where the steps of a cordoned host are declared (controller/cordon.py's CordonedSteps).
    cordoned: StepLedger


def parse_facts(stdout: str) -> dict[str, Any]:
    """The preflight script prints progress, then one JSON line of facts last."""
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        return {}
    facts: dict[str, Any] = json.loads(lines[-1])
    return facts


class GpuHost(FleetComponent):
    TYPE = "vllm-fleet:index:GpuHost"
    facts: pulumi.Output[dict[str, Any]]
    target: Target

    def __init__(self, name: str, args: GpuHostArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        self.config = args.host
        self.target = connect(args.host, args.private_key, args.cordoned)
        self.preflight = self.add_step(
            "preflight",
            self.target,
            create=preflight_script(args.host, args.stack),
            timeout_seconds=300,
        )
        # The host package (render/host_bundle.py), one archive of every host tool, goes as a file: a
        # changed tool changes the copy and the tools step that installs it.
        self.archive = remote_copy(
            f"{name}-tools-archive",
            self.target,
            source=host_bundle.archive_file(),
            remote_path=host_bundle.incoming_path(),
            parent=self,
            depends_on=[self.preflight],
        )
        # Tools are shared by every deployment of the host; removing them waits for the last one.
        self.tools = self.add_step(
            "tools",
            self.target,
            create=tools_script(
                f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{self.TYPE}$command:remote:CopyToRemote"
                f"::{name}-tools-archive"
            ),
            delete=tools_delete_script(),
            depends_on=[self.archive],
            timeout_seconds=300,
        )
        # What a step that runs a tool waits for.
        self.installed: list[pulumi.Resource] = [self.tools]
        self.facts = self.preflight.stdout.apply(parse_facts)
        self.register_outputs({"facts": self.facts, "address": args.host.address})
