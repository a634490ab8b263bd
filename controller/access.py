"""The stack's access config and its secrets (API keys, the TLS key and certificate), read and checked
before any resource exists; components/access.py builds each deployment's access step from them."""

from __future__ import annotations

from pathlib import Path

import pulumi
from pulumi.runtime import config as runtime_config

from controller.key_files import key_file_text
from models.access import access_problems, parse_api_keys
from models.config import StackConfig
from render.access import AccessInputs, check_certificate


def read_access(config: pulumi.Config, stack: StackConfig) -> AccessInputs:
    """Read and check `vllm-fleet:access`, `apiKeys` and the TLS key before any resource exists; a problem
    stops the preview with the key and the fix (never with a secret's value)."""
    raw_keys = runtime_config.get_config("vllm-fleet:apiKeys")
    try:
        keys = parse_api_keys(raw_keys)
    except ValueError as error:
        raise pulumi.RunError(str(error)) from None
    tls_key: pulumi.Input[str] | None = config.get_secret("tlsPrivateKey")
    key_text = key_file_text(config, "tlsPrivateKeyFile", "it generates the sandbox's CA and certificate")
    if key_text is not None:
        tls_key = pulumi.Output.secret(key_text)
    certificate = None
    if stack.access.tls is not None:
        cert_path = Path(stack.access.tls.certificate_file).expanduser()
        if not cert_path.is_file():
            raise pulumi.RunError(
                f"vllm-fleet:access.tls.certificateFile: {cert_path} does not exist on this machine; fix the path "
                "(for the dev sandbox, `sandbox/host.sh up` generates it)"
            )
        try:
            certificate = check_certificate(cert_path.read_text(), str(cert_path))
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
    return AccessInputs(pulumi.Output.secret(keys), tls_key, certificate, len(keys))
