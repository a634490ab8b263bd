"""One model's files on one storage: downloaded with `hf download`, verified, kept or removed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pulumi

from components.component import FleetComponent
from components.storage import SharedStorage
from models.config import ModelSpec
from render.steps import download_delete_script, download_script

# Slowest download rate a step is given time for; the reference download ran at ~20 GB/min.
SLOWEST_GB_PER_MINUTE = 4.0


@dataclass(frozen=True)
class ModelDownloadArgs:
    model_name: str
    model: ModelSpec
    storage: SharedStorage
    hf_endpoint: str | None
    hf_token: pulumi.Input[str] | None
    # Drift repairs (controller/drift.download_repairs): a count one above the host's fetches again.
    repairs: int = 0


def download_timeout_minutes(size_gb: float) -> int:
    return 30 + math.ceil(size_gb / SLOWEST_GB_PER_MINUTE)


class ModelDownload(FleetComponent):
    TYPE = "vllm-fleet:index:ModelDownload"
    model_path: pulumi.Output[str]

    def __init__(self, name: str, args: ModelDownloadArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        storage = args.storage.config
        host = args.storage.host.config
        token_line = pulumi.Output.from_input(args.hf_token or "").apply(lambda t: t + "\n")
        self.files = self.add_step(
            "files",
            args.storage.host.target,
            create=download_script(
                args.model_name, args.model, storage, host, args.hf_endpoint, pulumi.get_stack(), args.repairs
            ),
            delete=download_delete_script(args.model_name, args.model, storage, host, pulumi.get_stack()),
            stdin=token_line,
            depends_on=[args.storage.layout, *args.storage.host.installed],
            timeout_seconds=60 * download_timeout_minutes(args.model.size_gb),
        )
        self.model_path = pulumi.Output.from_input(f"{storage.path}/{args.model.dir}")
        self.register_outputs({"modelPath": self.model_path, "repo": args.model.repo, "revision": args.model.revision})
