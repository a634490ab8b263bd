"""The shared model storage of a host: its directory layout, owner and size."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from components.component import FleetComponent
from components.host import GpuHost
from models.hosts import Storage
from render.steps import storage_delete_script, storage_script


@dataclass(frozen=True)
class SharedStorageArgs:
    storage: Storage
    host: GpuHost
    # Directories of the models the stack keeps on this storage (keep: true), read by model removals.
    kept_dirs: tuple[str, ...] = ()


def parse_usage(stdout: str) -> dict[str, int]:
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    return {k: int(v) for k, v in json.loads(lines[-1]).items()} if lines else {}


class SharedStorage(FleetComponent):
    TYPE = "vllm-fleet:index:SharedStorage"
    path: pulumi.Output[str]
    bytes_used: pulumi.Output[int]
    bytes_free: pulumi.Output[int]

    def __init__(self, name: str, args: SharedStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        self.config = args.storage
        self.host = args.host
        self.layout = self.add_step(
            "layout",
            args.host.target,
            create=storage_script(args.storage, args.kept_dirs, pulumi.get_stack()),
            delete=storage_delete_script(args.storage, pulumi.get_stack()),
            # The host's `step` tool runs it (and its delete, before the tools go).
            depends_on=[*args.host.installed],
            timeout_seconds=300,
        )
        usage = self.layout.stdout.apply(parse_usage)
        self.path = pulumi.Output.from_input(args.storage.path)
        # Measured when the layout step last ran (a Command has no read: `pulumi refresh` cannot update it).
        self.bytes_used = usage.apply(lambda u: u.get("bytesUsed", 0))
        self.bytes_free = usage.apply(lambda u: u.get("bytesFree", 0))
        self.register_outputs({"path": self.path, "bytesUsed": self.bytes_used, "bytesFree": self.bytes_free})
