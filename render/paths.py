"""Where things are: the templates in this repository, and the paths on a host."""

from __future__ import annotations

from pathlib import Path

from host import contract
from models.config import ResolvedDeployment

# The templates and script bodies live beside the components that ship them.
FILES = Path(__file__).resolve().parent.parent / "components" / "files"
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
