"""Who may call a deployment: the `vllm-fleet:access` key, the API keys and the rules that tie them to tiers.

The front door (nginx) enforces all of it: TLS with the stack's certificate, an `Authorization: Bearer`
key from `vllm-fleet:apiKeys` on every `/v1/` request, `/metrics` only from the addresses listed here,
and nothing else of vLLM (its development endpoints: sleep, wake_up, collective_rpc, ...) proxied at all.
The keys and the TLS private key are secrets: they never become fields of these models (see
`parse_api_keys`, which validates them without ever putting a key into a message).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

from models.base import ConfigModel
from models.types import NAME_PATTERN

# What an API key may be made of: long enough to guess at no rate, and only characters that need no
# quoting in the front door's configuration (`openssl rand -hex 32` makes one).
API_KEY_PATTERN = re.compile(r"[A-Za-z0-9._-]{16,256}")
API_KEYS_COMMAND = "pulumi config set --secret --path 'vllm-fleet:apiKeys.<client>' < <file with the key>"


class Tls(ConfigModel):
    """The front door's certificate: a PEM file on this machine (the chain, the server's certificate
    first), relative to the project or absolute. Its private key is the secret `vllm-fleet:tlsPrivateKey`
    (or `vllm-fleet:tlsPrivateKeyFile`, a file on this machine, as the sandbox generates one)."""

    certificate_file: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]{1,255}$")] = Field(
        description="the PEM chain, server certificate first, a file beside the stack file"
    )


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/24)") from None


def _networks(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_network(v) for v in values)


class Access(ConfigModel):
    """`vllm-fleet:access`: how every deployment's front door lets clients in."""

    open: bool = Field(
        False,
        description="Serve without API keys, said explicitly: a production stack that binds a non-loopback address "
        "without keys is refused unless this is true.",
    )
    tls: Tls | None = None
    metrics_from: Annotated[tuple[str, ...], AfterValidator(_networks)] = Field(
        (), description="Addresses or networks allowed to read /metrics (the Prometheus host); nobody else."
    )


def parse_api_keys(value: Any) -> dict[str, str]:
    """`vllm-fleet:apiKeys` (client name -> key, a JSON object or its text) as a dict; the messages of its
    errors name the client, never the key."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(
                f"vllm-fleet:apiKeys must be an object of client name -> key; set each with `{API_KEYS_COMMAND}`"
            ) from None
    if not isinstance(value, Mapping):
        raise ValueError(
            f"vllm-fleet:apiKeys must be an object of client name -> key; set each with `{API_KEYS_COMMAND}`"
        )
    keys: dict[str, str] = {}
    problems = []
    for name, key in value.items():
        if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
            problems.append(f"vllm-fleet:apiKeys: client name {name!r} must be lowercase letters, digits and '-'")
        elif not isinstance(key, str) or not API_KEY_PATTERN.fullmatch(key.strip()):
            problems.append(
                f"vllm-fleet:apiKeys.{name}: the key must be 16-256 letters, digits, '.', '_' or '-' "
                "(`openssl rand -hex 32` makes one); the value is not shown"
            )
        else:
            keys[name] = key.strip()
    if len(set(keys.values())) != len(keys):
        problems.append("vllm-fleet:apiKeys: two clients have the same key; give each client its own")
    if problems:
        raise ValueError("\n".join(problems))
    return keys


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def access_problems(
    access: Access,
    tier: str,
    bind_addresses: Mapping[str, str],
    key_count: int,
    has_tls_key: bool,
) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the access configuration against the deployments' bind addresses
    (deployment name -> bindAddress) and which secrets are set."""
    errors: list[str] = []
    warnings: list[str] = []
    if access.open and key_count:
        errors.append(
            "vllm-fleet:access.open is true, but vllm-fleet:apiKeys lists keys; remove one or the other "
            "(open means no key is asked for)"
        )
    if access.tls is not None and not has_tls_key:
        errors.append(
            "vllm-fleet:access.tls: the certificate's private key is not set; run "
            "`pulumi config set --secret vllm-fleet:tlsPrivateKey < KEY.pem` (or set vllm-fleet:tlsPrivateKeyFile)"
        )
    if access.tls is None and has_tls_key:
        errors.append(
            "vllm-fleet:tlsPrivateKey is set but vllm-fleet:access.tls is not; add access.tls.certificateFile "
            "or remove the key"
        )
    # In config order: the mapping is built from vllm-fleet:deployments, so its index is the entry's.
    for i, (name, address) in enumerate(bind_addresses.items()):
        if is_loopback(address):
            continue
        if not key_count and not access.open:
            message = (
                f"vllm-fleet:deployments[{i}].bindAddress: deployment {name!r} listens on {address} and no API key "
                f"is set, so anyone who reaches the host may use it; add keys with `{API_KEYS_COMMAND}`, or say "
                "that it is meant to be open with vllm-fleet:access.open: true"
            )
            (errors if tier == "production" else warnings).append(message)
        if access.tls is None and not access.open and tier == "production":
            warnings.append(
                f"vllm-fleet:deployments[{i}].bindAddress: deployment {name!r} listens on {address} without TLS: "
                "API keys cross the network in clear text; set vllm-fleet:access.tls"
            )
    return errors, warnings
