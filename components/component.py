"""What every component of the fleet does alike: it registers under its constant type token (its class's
`TYPE`), and its steps are its children, named after it (`<name>-<part>`) and made the one way
components/remote.py makes every step."""

from __future__ import annotations

from typing import ClassVar, Unpack

import pulumi

from components.remote import RemoteCommand, StepOptions, Target, remote_step


class FleetComponent(pulumi.ComponentResource):
    # "vllm-fleet:index:<class name>", written out in each class: a renamed class keeps its resources.
    TYPE: ClassVar[str]

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None) -> None:
        super().__init__(self.TYPE, name, None, opts)

    def add_step(self, part: str, target: Target, **options: Unpack[StepOptions]) -> RemoteCommand:
        """This component's step `<name>-<part>` on `target`'s host (components.remote.remote_step)."""
        return remote_step(f"{self.pulumi_resource_name}-{part}", target, parent=self, **options)
