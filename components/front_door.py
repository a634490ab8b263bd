"""A host's front door: Debian's nginx on each deployment's public port, in front of its engines.

Clients keep one address across swaps. The step installs nginx when the host lacks it and runs it as
vllm-fleet-frontdoor.service with a configuration of its own; which engine a deployment's site points
at is the swap's business on the host (host/tools/swap.py), since only the host knows when the new engine
is ready. Deployments depend on it, so it is removed after the last of their sites.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.component import FleetComponent
from components.host import GpuHost
from render.paths import FRONT_DOOR_UNIT
from render.steps import front_door_delete_script, front_door_script


@dataclass(frozen=True)
class FrontDoorArgs:
    host: GpuHost


class FrontDoor(FleetComponent):
    TYPE = "vllm-fleet:index:FrontDoor"

    def __init__(self, name: str, args: FrontDoorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        # Installing nginx on a fresh server runs apt: minutes, not seconds.
        self.proxy = self.add_step(
            "proxy",
            args.host.target,
            create=front_door_script(),
            delete=front_door_delete_script(),
            # The host's `step` tool runs it (and its delete, before the tools go).
            depends_on=[*args.host.installed],
            timeout_seconds=900,
            owns_singleton=True,
        )
        self.unit_name = pulumi.Output.from_input(FRONT_DOOR_UNIT)
        self.register_outputs({"unitName": self.unit_name})
