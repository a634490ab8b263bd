"""A deployment's LoRA adapters: loaded into its running engine at runtime, after its swap, no restart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components.component import FleetComponent
from components.deployment_args import DeploymentArgs
from components.model_download import ModelDownload
from components.vllm_service import VllmService
from render.steps import adapters_delete_script, adapters_script


@dataclass(frozen=True)
class DeploymentAdaptersArgs(DeploymentArgs):
    service: VllmService
    # The adapters' downloads on the deployment's storage, which must be complete before they load.
    downloads: Sequence[ModelDownload]
    # Drift repairs (controller/drift.adapter_repairs): a count one above the host's re-applies the adapters.
    repairs: int = 0


class DeploymentAdapters(FleetComponent):
    """Its step's script lists the adapters, so adding, updating or removing one changes this step alone:
    the unit and the serving step (a swap) stay as they are."""

    TYPE = "vllm-fleet:index:DeploymentAdapters"
    names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: DeploymentAdaptersArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        rd = args.deployment
        self.loaded = self.add_step(
            "loaded",
            args.host.target,
            create=adapters_script(rd, args.stack, args.repairs),
            delete=adapters_delete_script(rd, args.stack),
            depends_on=[args.service.serving, *(d.files for d in args.downloads)],
            timeout_seconds=600,
        )
        self.names = pulumi.Output.from_input([a.name for a in rd.adapters])
        self.register_outputs({"names": self.names})
