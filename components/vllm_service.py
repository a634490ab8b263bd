"""A vLLM deployment: its unit staged on the host, then activated (a swap, when the model changed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from components.component import FleetComponent
from components.deployment_args import DeploymentArgs
from components.front_door import FrontDoor
from components.host import GpuHost
from components.model_download import ModelDownload
from components.outputs import plain_output
from components.remote import RemoteCommand
from host.contract import StartForecastRecord
from render.launch import engine_environment, vllm_arguments
from render.paths import endpoint_url
from render.plan import activation_timeout
from render.steps import (
    activate_script,
    deactivate_script,
    node_activate_script,
    node_deactivate_script,
    node_stage_delete_script,
    node_stage_script,
    stage_delete_script,
    stage_script,
)
from render.units import secret_env_file


@dataclass(frozen=True)
class VllmServiceArgs(DeploymentArgs):
    download: ModelDownload
    front_door: FrontDoor
    hf_token: pulumi.Input[str] | None
    # Rolling swaps: deployments whose activation (a swap, when the model changed) must have finished,
    # so this one stops serving only once they serve again.
    after: Sequence[VllmService] = ()
    # A deployment across hosts: the host and the model download of every node after the head, in rank order.
    nodes: Sequence[tuple[GpuHost, ModelDownload]] = ()
    # Its access step (components/access.py): the site the swap writes includes its files.
    access: pulumi.Resource | None = None
    # Drift repairs (controller/drift.activation_repairs): a count one above the host's re-activates.
    repairs: int = 0
    # The forecast of its engine's start the activation carries (controller/forecast.plan_forecast).
    forecast: StartForecastRecord | None = None


class VllmService(FleetComponent):
    TYPE = "vllm-fleet:index:VllmService"
    endpoint: pulumi.Output[str]
    served_model_name: pulumi.Output[str]
    unit_name: pulumi.Output[str]
    model_path: pulumi.Output[str]
    launch: pulumi.Output[dict[str, Any]]
    unit: RemoteCommand
    # Its stdout ends with the post-deploy report (components/deploy_report.py reads it).
    serving: RemoteCommand

    def __init__(self, name: str, args: VllmServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        rd = args.deployment
        target = args.host.target
        env_file = pulumi.Output.from_input(args.hf_token or "").apply(lambda token: secret_env_file(token or None))
        self.unit = self.add_step(
            "unit",
            target,
            create=stage_script(rd, args.stack),
            delete=stage_delete_script(rd, args.stack),
            stdin=env_file,
            depends_on=[args.download.files, *args.host.installed, args.front_door.proxy],
            timeout_seconds=300,
            owns_singleton=True,
        )
        # Start, readiness and a possible rollback (which waits for the old model again) must all fit, and
        # then the post-deploy report with its smoke benchmark (up to 15 minutes, as its own step had).
        activation_minutes = math.ceil(2 * activation_timeout(rd) / 60) + 5 + 15
        earlier = [e.serving for e in args.after]
        # Every node stages its launch of the new model and checks it (its vLLM parses it, its GPUs are
        # judged) while the old model serves; then each node installs it beside the launch it runs, and the
        # head's swap moves them all: node-watch runs the launch of the model the head runs, so the nodes
        # follow the head to the new model, and back to the old one if the head rolls back.
        # On a cordoned host a node's steps may not change (controller/cordon.py): it would lag behind.
        spans = [f"node {rank} of deployment {rd.deployment.name!r}" for rank in range(1, len(args.nodes) + 1)]
        node_stages = [
            self.add_step(
                f"node{rank}-unit",
                node.target,
                create=node_stage_script(rd, args.stack, rank),
                delete=node_stage_delete_script(rd, args.stack, rank),
                stdin=env_file,
                depends_on=[download.files, *node.installed],
                timeout_seconds=300,
                owns_singleton=True,
                spans=spans[rank - 1],
            )
            for rank, (node, download) in enumerate(args.nodes, start=1)
        ]
        self.node_servings = [
            self.add_step(
                f"node{rank}-serving",
                node.target,
                create=node_activate_script(rd, args.stack, rank),
                delete=node_deactivate_script(rd, args.stack, rank),
                depends_on=[self.unit, *node_stages, *earlier],
                timeout_seconds=60 * activation_minutes,
                owns_singleton=True,
                spans=spans[rank - 1],
            )
            for rank, (node, _) in enumerate(args.nodes, start=1)
        ]
        self.serving = self.add_step(
            "serving",
            target,
            create=activate_script(rd, args.stack, args.repairs, args.forecast),
            delete=deactivate_script(rd, args.stack),
            depends_on=[
                self.unit,
                *self.node_servings,
                *earlier,
                *([args.access] if args.access is not None else []),
            ],
            timeout_seconds=60 * activation_minutes,
            owns_singleton=True,
        )
        self.endpoint = pulumi.Output.from_input(endpoint_url(rd))
        self.served_model_name = pulumi.Output.from_input(rd.served_model_name)
        self.unit_name = pulumi.Output.from_input(rd.unit_name)
        self.model_path = pulumi.Output.from_input(rd.load_path)
        # The engine's command line and environment as data: `pulumi preview` shows stack outputs whole,
        # while a step's script is cut to its first lines when it is created.
        self.launch = plain_output(
            {
                "execStart": [rd.host.runtime.python, *vllm_arguments(rd)],
                "environment": engine_environment(rd),
            }
        )
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "servedModelName": self.served_model_name,
                "unitName": self.unit_name,
                "modelPath": self.model_path,
                "launch": self.launch,
            }
        )
