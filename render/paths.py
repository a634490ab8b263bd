"""Where things are: the templates and host programs in this repository, and the paths on a host."""

from __future__ import annotations

from pathlib import Path

from models.config import ResolvedDeployment

# The templates and script bodies live beside the components that ship them.
FILES = Path(__file__).resolve().parent.parent / "components" / "files"
# The programs that run on hosts (see host/__init__.py).
HOST_PROGRAMS = Path(__file__).resolve().parent.parent / "host"

TOOLS_DIR = "/usr/local/lib/vllm-fleet"
STATE_DIR = "/var/lib/vllm-fleet"
ETC_DIR = "/etc/vllm-fleet"
# The front door: Debian's nginx run by its own unit with its own configuration, one site per deployment.
FRONT_DOOR_UNIT = "vllm-fleet-frontdoor.service"
FRONT_DOOR_DIR = f"{ETC_DIR}/frontdoor"
UNIT_DIR = "/etc/systemd/system"
# Host tools installed by the Host component; the unit and the steps' scripts call them by name.
HOST_TOOLS: dict[str, Path] = {
    "gpu-release-guard": HOST_PROGRAMS / "gpu_release_guard.py",
    "wait-ready": HOST_PROGRAMS / "wait_ready.py",
    "model-sync": HOST_PROGRAMS / "model_sync.py",
    "vllm-args-check": HOST_PROGRAMS / "vllm_args_check.py",
    "swap": HOST_PROGRAMS / "swap.py",
    "survey": HOST_PROGRAMS / "survey.py",
    "prewarm": HOST_PROGRAMS / "prewarm.py",
    "node-watch": HOST_PROGRAMS / "node_watch.py",
    "clean-shm": FILES / "clean-shm.sh",
}


def deployment_state_dir(stack: str, deployment: str) -> str:
    return f"{STATE_DIR}/deployments/{stack}.{deployment}"


def node_state_dir(stack: str, rd: ResolvedDeployment, rank: int) -> str:
    return deployment_state_dir(stack, f"{rd.deployment.name}.node{rank}")
