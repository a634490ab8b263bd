"""Who may call a deployment: its access files beside the front door (render/access.py).

One step per deployment. Its script holds what is public (listen line, certificate, /metrics allow
list); the API keys' map and the TLS private key reach the host on its stdin, a secret. A change of
keys, certificate or /metrics addresses changes this step only: it rewrites the files and reloads the
front door gracefully, and the deployment's engine keeps running. The serving step depends on it, so
the site that includes these files is written after them and removed before them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi

from components.component import FleetComponent
from components.deployment_args import DeploymentArgs
from components.front_door import FrontDoor
from components.host import GpuHost
from models.config import ResolvedDeployment
from render.access import AccessInputs, access_delete_script, access_script, keys_map, stdin_bundle


@dataclass(frozen=True)
class DeploymentAccessArgs(DeploymentArgs):
    front_door: FrontDoor
    # Client name -> key (vllm-fleet:apiKeys) and the TLS private key: secrets.
    api_keys: pulumi.Input[Mapping[str, str]]
    tls_private_key: pulumi.Input[str] | None
    # The certificate chain's PEM text (public), when access.tls is set.
    certificate: str | None


class DeploymentAccess(FleetComponent):
    TYPE = "vllm-fleet:index:DeploymentAccess"
    step: pulumi.CustomResource

    def __init__(self, name: str, args: DeploymentAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, opts)
        rd = args.deployment
        open_access = rd.access.open

        def bundle(values: list[object]) -> str:
            keys, tls_key = values
            assert isinstance(keys, Mapping)
            # No key at all serves everyone who reaches the port (the preview refuses that for a production
            # stack on a non-loopback address unless access.open says so); one key or more: only them.
            text = keys_map(args.stack, rd.deployment.name, dict(keys), open_access or not keys)
            return stdin_bundle(text, tls_key if isinstance(tls_key, str) else None)

        stdin = pulumi.Output.all(args.api_keys, args.tls_private_key or "").apply(bundle)
        self.step = self.add_step(
            "files",
            args.host.target,
            create=access_script(rd, args.stack, args.certificate),
            delete=access_delete_script(rd, args.stack),
            stdin=stdin,
            depends_on=[args.front_door.proxy],
            timeout_seconds=120,
            # A replacement removes the old files before the new ones are written, never after.
            owns_singleton=True,
        )
        self.register_outputs({})


def build_access(
    inputs: AccessInputs,
    resolved: Sequence[ResolvedDeployment],
    stack: str,
    hosts: Mapping[str, GpuHost],
    front_doors: Mapping[str, FrontDoor],
) -> dict[str, pulumi.Resource]:
    """Each deployment's access step, by deployment name (what its serving step waits for)."""
    steps: dict[str, pulumi.Resource] = {}
    for rd in resolved:
        access = DeploymentAccess(
            f"{rd.deployment.name}-access",
            DeploymentAccessArgs(
                deployment=rd,
                stack=stack,
                host=hosts[rd.host.name],
                front_door=front_doors[rd.host.name],
                api_keys=inputs.api_keys,
                tls_private_key=inputs.tls_private_key,
                certificate=inputs.certificate,
            ),
        )
        steps[rd.deployment.name] = access.step
    return steps
