"""The machines of a stack: each GPU server (`vllm-fleet:hosts`: its address and SSH, its GPUs, the vLLM
already installed, its staging disk, its cordon, its cluster network) and the storage its models live on
(`vllm-fleet:storage`). Deployments (models/config.py) name them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from models.base import ConfigModel
from models.types import (
    SSH_HOST_KEY_PATTERN,
    AbsPath,
    Float,
    Int,
    IpAddress,
    Label,
    Name,
    UnixUser,
    VersionString,
    check_address,
    not_a_system_directory,
)


class Interconnect(StrEnum):
    PCIE = "pcie"
    NVLINK = "nvlink"
    NONE = "none"


class GpuSpec(ConfigModel):
    """What the host has; preflight compares it with what nvidia-smi reports."""

    count: Annotated[Int, Field(ge=0, le=64)]
    model: Label = "none"
    memory_gib: Annotated[Float, Field(gt=0, le=4096)] = 1.0
    interconnect: Interconnect = Interconnect.PCIE
    compute_capability: Annotated[str, StringConstraints(pattern=r"^\d{1,2}\.\d$")] | None = None


class Runtime(ConfigModel):
    """The vLLM installation already on the host (the project does not install CUDA stacks)."""

    python: AbsPath = "/root/ml-env/bin/python3"
    vllm_version: VersionString | None = None


class ClusterNetwork(ConfigModel):
    """Where the other nodes of a multi-node deployment reach this host: an address on a private network
    (the engines' traffic is unencrypted and can run code) and the interface that carries it."""

    address: IpAddress
    interface: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,15}$")]


DEFAULT_SSH_PORT = 22  # a host's port unless it names one; OpenSSH's known_hosts names others ([address]:port)


class Host(ConfigModel):
    name: Name
    address: Annotated[str, AfterValidator(check_address)]
    port: Annotated[Int, Field(ge=1, le=65535)] = DEFAULT_SSH_PORT
    user: UnixUser = "root"
    host_key: Annotated[str, StringConstraints(pattern=SSH_HOST_KEY_PATTERN)] | None = None
    gpus: GpuSpec
    runtime: Runtime = Runtime()
    # Host-local disk (an NVMe) that models are copied to before a swap, while the old model serves; the
    # engine then loads from there instead of the shared storage. Unset: it loads from the storage.
    staging_path: Annotated[AbsPath, AfterValidator(not_a_system_directory)] | None = None
    # Bounded SSH connection: attempts x seconds is the longest a step waits for an unreachable host.
    dial_attempts: Annotated[Int, Field(ge=1, le=20)] = 3
    dial_timeout_seconds: Annotated[Int, Field(ge=1, le=120)] = 10
    # Out of service: what runs there keeps running, `pulumi up` runs no step there and never contacts it,
    # and a change of what it should serve is refused until the cordon is lifted.
    cordon: bool = False
    # This host's address and interface for multi-node deployments (VLLM_HOST_IP, GLOO/NCCL_SOCKET_IFNAME).
    cluster: ClusterNetwork | None = None


class Storage(ConfigModel):
    name: Name
    host: Name
    path: Annotated[AbsPath, AfterValidator(not_a_system_directory)]
    hf_home: AbsPath | None = None
    capacity_gb: Annotated[Float, Field(gt=0)]
    free_margin_gb: Annotated[Float, Field(ge=0)] = 50.0
    owner: UnixUser = "root"

    @property
    def effective_hf_home(self) -> str:
        return self.hf_home or f"{self.path}/huggingface"
