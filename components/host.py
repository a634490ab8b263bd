"""A GPU server: its SSH connection, its preflight facts and the vllm-fleet tools installed on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi

from components.remote import Target, connect, remote_step
from models.config import Host
from render.steps import TOOL_GROUPS, preflight_script, tool_group_script, tools_delete_script, tools_script


@dataclass(frozen=True)
class GpuHostArgs:
    host: Host
    private_key: pulumi.Input[str]


def parse_facts(stdout: str) -> dict[str, Any]:
    """The preflight script prints progress, then one JSON line of facts last."""
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        return {}
    facts: dict[str, Any] = json.loads(lines[-1])
    return facts


class GpuHost(pulumi.ComponentResource):
    facts: pulumi.Output[dict[str, Any]]
    target: Target

    TYPE = "vllm-fleet:index:GpuHost"

    def __init__(self, name: str, args: GpuHostArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(self.TYPE, name, None, opts)
        self.config = args.host
        self.target = connect(args.host, args.private_key)
        self.preflight = remote_step(
            f"{name}-preflight",
            self.target,
            create=preflight_script(args.host),
            parent=self,
            timeout_seconds=300,
        )
        # Tools are shared by every deployment of the host; removing them waits for the last one.
        self.tools = remote_step(
            f"{name}-tools",
            self.target,
            create=tools_script(),
            delete=tools_delete_script(),
            parent=self,
            depends_on=[self.preflight],
            timeout_seconds=300,
        )
        # The tools in groups (TOOL_GROUPS). No delete: the files go with the directory, which the
        # tools step removes once no deployment of any stack is left on the host.
        self.tool_steps = [
            remote_step(
                f"{name}-tools-{group}",
                self.target,
                create=tool_group_script(group),
                parent=self,
                depends_on=[self.tools],
                timeout_seconds=120,
            )
            for group in sorted(TOOL_GROUPS)
        ]
        # What a step that runs a tool waits for.
        self.installed: list[pulumi.Resource] = [self.tools, *self.tool_steps]
        self.facts = self.preflight.stdout.apply(parse_facts)
        self.register_outputs({"facts": self.facts, "address": args.host.address})
