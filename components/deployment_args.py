"""What each component of one deployment starts from; a module of its own because it names the host
component, which is a FleetComponent itself (components/component.py)."""

from __future__ import annotations

from dataclasses import dataclass

from components.host import GpuHost
from models.config import ResolvedDeployment


@dataclass(frozen=True)
class DeploymentArgs:
    """What each component of one deployment starts from (its Args add the rest): the deployment, the
    stack and the host its steps run on."""

    deployment: ResolvedDeployment
    stack: str
    host: GpuHost
