"""After each deploy, what the deployment serves, as stack outputs: the serving step's `swap start` runs
host/status.py on the host once the deployment serves (and the smoke benchmark when the deployment enables
it) and prints its answer as one JSON line (render/report.py); this component reads it from that step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.component import FleetComponent
from components.deployment_args import DeploymentArgs
from components.outputs import plain_output
from components.vllm_service import VllmService
from render import report
from render.paths import endpoint_url


@dataclass(frozen=True)
class DeployReportArgs(DeploymentArgs):
    service: VllmService


class DeployReport(FleetComponent):
    TYPE = "vllm-fleet:index:DeployReport"
    numbers: pulumi.Output[dict[str, Any]]
    status: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: DeployReportArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        rd = args.deployment
        entry = report.spec(rd, args.stack)
        endpoint = endpoint_url(rd)
        owner = entry["owner"]
        self.numbers = args.service.serving.stdout.apply(
            lambda out: report.numbers(endpoint, report.last_json(out).get("deployments", {}).get(owner, {}))
        )
        # What `make status` needs to ask the host and compare, from the outputs alone.
        self.status = plain_output(entry)
        self.register_outputs({"numbers": self.numbers, "status": self.status})
