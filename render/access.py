"""Pure functions that render who may call a deployment: the front door's access files and their step.

Each deployment has, beside the front door's configuration:
  access/<stack>.<deployment>/server.conf   its listen line and TLS (certificate tls.crt, key tls.key, 0600)
  access/<stack>.<deployment>/api.conf      the key check of every /v1/ request
  access/<stack>.<deployment>/metrics.conf  who may read /metrics (allow ...; deny all)
  keys/<stack>.<deployment>.conf            (0600) the map of the accepted `Authorization` headers
The deployment's site (written by its swap, host/tools/swap.py) includes them by path and never changes when
they do: adding or removing a key, a certificate or a /metrics address rewrites these files and reloads
nginx gracefully, and no engine restarts. The keys and the TLS key reach the host on stdin only.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from host.contract import owner_key
from models.config import ResolvedDeployment
from render.paths import FRONT_DOOR_DIR, FRONT_DOOR_UNIT
from render.scripts import ParamValue, Script, step_script

if TYPE_CHECKING:  # the secrets' types only: render runs no Pulumi
    import pulumi


@dataclass(frozen=True)
class AccessInputs:
    """What the stack's access config and secrets give every deployment's access step (read by
    controller/access.py before any resource exists)."""

    api_keys: pulumi.Output[Mapping[str, str]]
    tls_private_key: pulumi.Input[str] | None
    certificate: str | None
    # How many keys the front door accepts (none: it asks for none); the count is no secret.
    key_count: int = 0


ACCESS_ROOT = f"{FRONT_DOOR_DIR}/access"
KEYS_DIR = f"{FRONT_DOOR_DIR}/keys"
# Separates the two secrets on the access step's stdin: the keys' map, then the TLS private key.
STDIN_SEPARATOR = "VLLM_FLEET_STDIN_PART"
TLS_PROTOCOLS = "TLSv1.2 TLSv1.3"


def access_dir(stack: str, deployment: str) -> str:
    return f"{ACCESS_ROOT}/{owner_key(stack, deployment)}"


def keys_file(stack: str, deployment: str) -> str:
    return f"{KEYS_DIR}/{owner_key(stack, deployment)}.conf"


def key_variable(stack: str, deployment: str) -> str:
    """The nginx variable that is 1 when a request carries an accepted key (names allow [a-z0-9_] only)."""
    return "vllm_fleet_key_" + hashlib.sha256(owner_key(stack, deployment).encode()).hexdigest()[:16]


def plan_fields(rd: ResolvedDeployment, stack: str) -> dict[str, object]:
    """What the swap needs to write the site and to check the front door through it (host/tools/swap.py Plan)."""
    return {"access_dir": access_dir(stack, rd.deployment.name), "keys_file": keys_file(stack, rd.deployment.name)}


def _listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def server_conf(rd: ResolvedDeployment, stack: str) -> str:
    directory = access_dir(stack, rd.deployment.name)
    tls = rd.access.tls is not None
    lines = [
        f"# Managed by vllm-fleet: address and TLS of deployment {owner_key(stack, rd.deployment.name)}.",
        f"listen {_listen(rd.deployment.bind_address, rd.deployment.port)}{' ssl' if tls else ''};",
    ]
    if tls:
        # Plain HTTP on this port is refused by nginx (400, "The plain HTTP request was sent to HTTPS port").
        lines += [
            f"ssl_certificate {directory}/tls.crt;",
            f"ssl_certificate_key {directory}/tls.key;",
            f"ssl_protocols {TLS_PROTOCOLS};",
            "ssl_prefer_server_ciphers off;",
            "ssl_session_timeout 1h;",
        ]
    return "\n".join(lines) + "\n"


def api_conf(rd: ResolvedDeployment, stack: str) -> str:
    variable = key_variable(stack, rd.deployment.name)
    return (
        f"# Managed by vllm-fleet: every /v1/ request of {owner_key(stack, rd.deployment.name)} carries an accepted key\n"
        f"# (the map in {keys_file(stack, rd.deployment.name)}; it accepts any request when the stack is open).\n"
        f"if (${variable} = 0) {{\n"
        "    add_header WWW-Authenticate 'Bearer realm=\"vllm-fleet\"' always;\n"
        "    return 401;\n"
        "}\n"
    )


def metrics_conf(rd: ResolvedDeployment, stack: str) -> str:
    lines = [
        f"# Managed by vllm-fleet: who may read /metrics of {owner_key(stack, rd.deployment.name)} (access.metricsFrom)."
    ]
    lines += [f"allow {network};" for network in rd.access.metrics_from]
    lines.append("deny all;")
    return "\n".join(lines) + "\n"


def _header_pattern(key: str) -> str:
    # Keys are [A-Za-z0-9._-] (models/access.py); a regex match is case-sensitive where a map's plain
    # strings are not, and `.` is the only character to escape.
    return "~^Bearer " + key.replace(".", "[.]") + "$"


def keys_map(stack: str, deployment: str, keys: Mapping[str, str], open_access: bool) -> str:
    """The http-level map of accepted `Authorization` headers (a secret: it holds the keys)."""
    variable = key_variable(stack, deployment)
    lines = [
        f"# Managed by vllm-fleet: the API keys of {owner_key(stack, deployment)} (vllm-fleet:apiKeys); 0600.",
        f"map $http_authorization ${variable} {{",
        f"    default {1 if open_access else 0};",
    ]
    for name in sorted(keys):
        lines.append(f'    "{_header_pattern(keys[name])}" 1;  # {name}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def stdin_bundle(keys_map_text: str, tls_private_key: str | None) -> str:
    """The access step's stdin: the keys' map, the separator line, the TLS private key (may be empty)."""
    key = (tls_private_key or "").strip()
    if key and "PRIVATE KEY-----" not in key:
        raise ValueError("vllm-fleet:tlsPrivateKey is not a PEM private key")
    if STDIN_SEPARATOR in keys_map_text or STDIN_SEPARATOR in key:
        raise ValueError(f"a secret contains {STDIN_SEPARATOR}")
    return f"{keys_map_text}{STDIN_SEPARATOR}\n{key + chr(10) if key else ''}"


def check_certificate(text: str, path: str) -> str:
    """The certificate chain's PEM text, or an error naming the config key."""
    if "-----BEGIN CERTIFICATE-----" not in text or "PRIVATE KEY" in text:
        raise ValueError(
            f"vllm-fleet:access.tls.certificateFile: {path} is not a PEM certificate chain (or holds a private "
            "key, which belongs in the secret vllm-fleet:tlsPrivateKey)"
        )
    return text.strip() + "\n"


def describe(rd: ResolvedDeployment) -> str:
    metrics = ", ".join(rd.access.metrics_from) or "nobody"
    return f"TLS {'on' if rd.access.tls else 'off'}, /metrics from {metrics}"


def _files_params(stack: str, name: str) -> dict[str, ParamValue]:
    """Where a deployment's access files live: what the access step writes and its delete removes."""
    return {
        "OWNER": owner_key(stack, name),
        "ACCESS_DIR": access_dir(stack, name),
        "KEYS_FILE": keys_file(stack, name),
        "FRONT_DOOR_DIR": FRONT_DOOR_DIR,
        "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT,
        "SITE": f"{FRONT_DOOR_DIR}/sites/{owner_key(stack, name)}.conf",
    }


def access_script(rd: ResolvedDeployment, stack: str, certificate: str | None) -> Script:
    name = rd.deployment.name
    for network in rd.access.metrics_from:
        ipaddress.ip_network(network)  # validated by the model; nginx gets nothing else
    params: dict[str, ParamValue] = {
        **_files_params(stack, name),
        "SEPARATOR": STDIN_SEPARATOR,
        "SERVER_CONF": server_conf(rd, stack),
        "API_CONF": api_conf(rd, stack),
        "METRICS_CONF": metrics_conf(rd, stack),
        "CERTIFICATE": certificate or "",
        "SUMMARY": describe(rd),
    }
    return step_script("access", params)


def access_delete_script(rd: ResolvedDeployment, stack: str) -> Script:
    return step_script("access-delete", _files_params(stack, rd.deployment.name))
