"""The stack this run of the program builds: its `vllm-fleet:` config read from the engine and validated,
the rules on where it runs (passphrase, backend), and the secrets that travel beside the config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
from pulumi.runtime import config as runtime_config

from controller import config_limit, known_hosts, probe
from controller.access import read_access
from controller.key_files import key_file_text
from controller.profiling import start_if_asked
from models.backend import refusal
from models.config import ResolvedDeployment, StackConfig, StackTier
from models.loader import (
    CONTROLLER_KEYS,
    KNOWN_KEYS,
    SECRET_KEYS,
    STRUCTURED_KEYS,
    ConfigError,
    parse_stack_config,
)
from render.access import AccessInputs

# A production stack's secrets must not be encrypted with the dev sandbox's passphrase, which
# scripts/env.sh sets by default and this repository publishes.
DEV_PASSPHRASE = "vllm-fleet-dev-sandbox"


@dataclass(frozen=True)
class Stack:
    """What the components are built from: the validated config and what travels beside it."""

    name: str
    config: StackConfig
    deployments: list[ResolvedDeployment]
    # The SSH private key, as the steps' secret input and as text for the survey (it runs before any step).
    private_key: pulumi.Input[str]
    key_text: str
    hf_token: pulumi.Output[str] | None
    access: AccessInputs
    # VLLM_FLEET_OFFLINE=1 renders without touching any host: previews of stacks this machine must not reach.
    offline: bool
    # Each host's pinned SSH host key and the known_hosts file it came from (controller/known_hosts.py).
    host_keys: known_hosts.HostKeys = field(default_factory=known_hosts.HostKeys)


def read_raw(config: pulumi.Config) -> dict[str, object]:
    """The stack's `vllm-fleet:` values as the loader takes them (namespace stripped)."""
    raw: dict[str, object] = {
        key: config.get_object(key) if key in STRUCTURED_KEYS else config.get(key)
        for key in (*KNOWN_KEYS, *CONTROLLER_KEYS)
        if config.get(key) is not None
    }
    # Keys this program does not read are typos; pass them on so the loader names them.
    for full_key in {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}:
        namespace, _, key = full_key.partition(":")
        if namespace == "vllm-fleet" and key not in raw and key not in SECRET_KEYS:
            raw[key] = "<unknown>"
    for key in SECRET_KEYS:
        # Present but not encrypted: the loader refuses it with the command that fixes it.
        if not runtime_config.is_config_secret(f"vllm-fleet:{key}") and config.get(key) is not None:
            raw[key] = "<plaintext>"
    return raw


def passphrase_refusal(tier: StackTier, stack_file: Path, env: Mapping[str, str]) -> str | None:
    """Why a production stack may not run with the dev sandbox's passphrase, or None when it may."""
    uses_passphrase = stack_file.is_file() and "encryptionsalt:" in stack_file.read_text()
    if tier is StackTier.PRODUCTION and uses_passphrase and env.get("PULUMI_CONFIG_PASSPHRASE") == DEV_PASSPHRASE:
        return (
            f"vllm-fleet:tier is production, but {stack_file} is encrypted with the dev sandbox's passphrase "
            "(the default of scripts/env.sh, published in this repository): export PULUMI_CONFIG_PASSPHRASE with a "
            "passphrase of your own before `pulumi stack init`, or use a cloud secrets provider "
            "(`pulumi stack change-secrets-provider`)"
        )
    return None


def ssh_key(config: pulumi.Config, offline: bool) -> tuple[str, pulumi.Input[str]]:
    """The SSH private key's text (for the survey) and the steps' secret input: from the key file that
    vllm-fleet:sshPrivateKeyFile names, else the secret vllm-fleet:sshPrivateKey."""
    secret_key = config.get_secret("sshPrivateKey")
    # The key's text also serves the host survey, which runs before any resource exists.
    key_text = key_file_text(config, "sshPrivateKeyFile", "it generates the key")
    if key_text is not None:
        return key_text, pulumi.Output.secret(key_text)
    if secret_key is not None:
        return runtime_config.get_config("vllm-fleet:sshPrivateKey") or "", secret_key
    if offline:
        return "", pulumi.Output.secret("")  # never used: an offline run connects to nothing
    raise pulumi.RunError(
        "vllm-fleet:sshPrivateKey is not set: run `pulumi config set --secret vllm-fleet:sshPrivateKey < KEYFILE` "
        "(or set vllm-fleet:sshPrivateKeyFile to a key file on this machine)"
    )


def load() -> Stack:
    """Read and check the stack before anything is declared; a problem stops the preview with the key
    and the fix (pulumi.RunError)."""
    start_if_asked()
    name = pulumi.get_stack()
    config = pulumi.Config("vllm-fleet")
    try:
        stack = parse_stack_config(read_raw(config))
    except ConfigError as error:
        # Nothing has been registered yet: the preview stops here with the key, the value and the fix.
        raise pulumi.RunError(f"invalid stack config (Pulumi.{name}.yaml):\n{error}") from None
    if (passphrase := passphrase_refusal(stack.tier, Path(f"Pulumi.{name}.yaml"), os.environ)) is not None:
        raise pulumi.RunError(passphrase)
    # A production stack's state must be where every operator sees it and its lock holds (models/backend.py).
    if (backend_refusal := refusal(stack.tier, os.environ)) is not None:
        raise pulumi.RunError(backend_refusal)
    # The hosts' keys: each one's own hostKey, else its line of vllm-fleet:knownHostsFile, read on every run
    # (the file is not part of the config the engine passes).
    try:
        stack, host_keys, key_notes = known_hosts.resolve(stack, Path.cwd())
    except known_hosts.KnownHostsError as error:
        raise pulumi.RunError(f"invalid stack config (Pulumi.{name}.yaml):\n{error}") from None
    for note in key_notes:
        pulumi.log.warn(note)
    if (too_large := config_limit.warning(os.environ, len(stack.hosts))) is not None:
        pulumi.log.warn(too_large)
    offline = probe.offline(os.environ)
    key_text, private_key = ssh_key(config, offline)
    hf_token = config.get_secret("hfToken")
    access = read_access(config, stack)
    resolved = stack.resolved_deployments()
    return Stack(name, stack, resolved, private_key, key_text, hf_token, access, offline, host_keys)
