"""Where things are: the templates in this repository, the paths on a host, and the URL clients call."""

from __future__ import annotations

from pathlib import Path

from host import contract
from models.config import ResolvedDeployment

# The templates (units, the front door's nginx configuration) and the scripts sent whole live with the code
# that renders them.
TEMPLATES = Path(__file__).resolve().parent / "templates"
# Where things live on a host: the contract with the host tools (host/contract.py) says it once.
TOOLS_DIR = contract.TOOLS_DIR
STATE_DIR = contract.STATE_DIR
ETC_DIR = contract.ETC_DIR
FRONT_DOOR_UNIT = contract.FRONT_DOOR_UNIT
FRONT_DOOR_DIR = contract.FRONT_DOOR_DIR
UNIT_DIR = contract.UNIT_DIR
deployment_state_dir = contract.deployment_state_dir


def node_state_dir(stack: str, rd: ResolvedDeployment, rank: int) -> str:
    return deployment_state_dir(stack, f"{rd.deployment.name}.node{rank}")


def url_host(address: str) -> str:
    """An address as the host part of a URL: an IPv6 address in brackets."""
    return f"[{address}]" if ":" in address else address


def endpoint_url(rd: ResolvedDeployment) -> str:
    """What clients call: publicUrl, else the front door at the host's address and the deployment's port."""
    if rd.deployment.public_url:
        return rd.deployment.public_url
    scheme = "https" if rd.access.tls is not None else "http"
    return f"{scheme}://{url_host(rd.host.address)}:{rd.deployment.port}/v1"


def metrics_url(endpoint: str) -> str:
    """The deployment's /metrics through its front door, from its API endpoint."""
    return endpoint.rstrip("/").removesuffix("/v1") + "/metrics"
