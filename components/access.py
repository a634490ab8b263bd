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
from pathlib import Path

import pulumi
from pulumi.runtime import config as runtime_config

from components.front_door import FrontDoor
from components.host import GpuHost
from components.remote import remote_step
from models.access import access_problems, parse_api_keys
from models.config import ResolvedDeployment, StackConfig
from models.loader import ConfigError, read_key_file
from render import access as render_access


@dataclass(frozen=True)
class DeploymentAccessArgs:
    deployment: ResolvedDeployment
    stack: str
    host: GpuHost
    front_door: FrontDoor
    # Client name -> key (vllm-fleet:apiKeys) and the TLS private key: secrets.
    api_keys: pulumi.Input[Mapping[str, str]]
    tls_private_key: pulumi.Input[str] | None
    # The certificate chain's PEM text (public), when access.tls is set.
    certificate: str | None


class DeploymentAccess(pulumi.ComponentResource):
    TYPE = "vllm-fleet:index:DeploymentAccess"
    step: pulumi.CustomResource

    def __init__(self, name: str, args: DeploymentAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(self.TYPE, name, None, opts)
        rd = args.deployment
        open_access = rd.access.open

        def bundle(values: list[object]) -> str:
            keys, tls_key = values
            assert isinstance(keys, Mapping)
            # No key at all serves everyone who reaches the port (the preview refuses that for a production
            # stack on a non-loopback address unless access.open says so); one key or more: only them.
            text = render_access.keys_map(args.stack, rd.deployment.name, dict(keys), open_access or not keys)
            return render_access.stdin_bundle(text, tls_key if isinstance(tls_key, str) else None)

        stdin = pulumi.Output.all(args.api_keys, args.tls_private_key or "").apply(bundle)
        self.step = remote_step(
            f"{name}-files",
            args.host.target,
            create=render_access.access_script(rd, args.stack, args.certificate),
            delete=render_access.access_delete_script(rd, args.stack),
            stdin=stdin,
            parent=self,
            depends_on=[args.front_door.proxy],
            timeout_seconds=120,
            # A replacement removes the old files before the new ones are written, never after.
            owns_singleton=True,
        )
        self.register_outputs({})


@dataclass(frozen=True)
class AccessInputs:
    """What the stack's access config and secrets give every deployment's access step."""

    api_keys: pulumi.Output[Mapping[str, str]]
    tls_private_key: pulumi.Input[str] | None
    certificate: str | None


def read_access(config: pulumi.Config, stack: StackConfig) -> AccessInputs:
    """Read and check `vllm-fleet:access`, `apiKeys` and the TLS key before any resource exists; a problem
    stops the preview with the key and the fix (never with a secret's value)."""
    raw_keys = runtime_config.get_config("vllm-fleet:apiKeys")
    try:
        keys = parse_api_keys(raw_keys)
    except ValueError as error:
        raise pulumi.RunError(str(error)) from None
    key_file = config.get("tlsPrivateKeyFile")
    tls_key: pulumi.Input[str] | None = config.get_secret("tlsPrivateKey")
    if key_file is not None:
        try:
            text = read_key_file("tlsPrivateKeyFile", key_file, "it generates the sandbox's CA and certificate")
        except ConfigError as error:
            raise pulumi.RunError(str(error)) from None
        tls_key = pulumi.Output.secret(text)
    certificate = None
    if stack.access.tls is not None:
        cert_path = Path(stack.access.tls.certificate_file).expanduser()
        if not cert_path.is_file():
            raise pulumi.RunError(
                f"vllm-fleet:access.tls.certificateFile: {cert_path} does not exist on this machine; fix the path "
                "(for the dev sandbox, `sandbox/host.sh up` generates it)"
            )
        try:
            certificate = render_access.check_certificate(cert_path.read_text(), str(cert_path))
        except ValueError as error:
            raise pulumi.RunError(str(error)) from None
    errors, warnings = access_problems(
        stack.access,
        stack.tier.value,
        {d.name: d.bind_address for d in stack.deployments},
        len(keys),
        tls_key is not None,
    )
    for warning in warnings:
        pulumi.log.warn(warning)
    if errors:
        raise pulumi.RunError(f"invalid stack config (Pulumi.{pulumi.get_stack()}.yaml):\n" + "\n".join(errors))
    return AccessInputs(pulumi.Output.secret(keys), tls_key, certificate)


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
