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

    count: Annotated[Int, Field(ge=0, le=64, description="how many GPUs the host has")]
    model: Label = Field("none", description="the GPUs' model, as nvidia-smi names it")
    memory_gib: Annotated[
        Float, Field(gt=0, le=4096, description="each GPU's memory, for the rule that the weights and a KV cache fit")
    ] = 1.0
    interconnect: Interconnect = Field(Interconnect.PCIE, description="how the GPUs talk to each other")
    compute_capability: Annotated[str, StringConstraints(pattern=r"^\d{1,2}\.\d$")] | None = Field(
        None, description="the GPUs' CUDA compute capability (e.g. `12.0`)"
    )


class Runtime(ConfigModel):
    """The vLLM installation already on the host (the project does not install CUDA stacks)."""

    python: AbsPath = Field(
        "/root/ml-env/bin/python3",
        description="the python of the host's vLLM venv; the engines and vllm-args-check run with it",
    )
    vllm_version: VersionString | None = Field(
        None,
        description="optional: the vLLM release the venv must have (an assertion; unset, the survey reads it and "
        "version-dependent rendering follows that reading)",
    )


class ClusterNetwork(ConfigModel):
    """Where the other nodes of a multi-node deployment reach this host: an address on a private network
    (the engines' traffic is unencrypted and can run code) and the interface that carries it."""

    address: IpAddress = Field(description="this host's address on the private network (`VLLM_HOST_IP`)")
    interface: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,15}$")] = Field(
        description="that network's interface (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`)"
    )


DEFAULT_SSH_PORT = 22  # a host's port unless it names one; OpenSSH's known_hosts names others ([address]:port)


class Host(ConfigModel):
    name: Name = Field(description="the host's name, which storage and deployments refer to")
    address: Annotated[str, AfterValidator(check_address)] = Field(
        description="the address the controller reaches the host's sshd at (an IP address or a DNS name)"
    )
    port: Annotated[Int, Field(ge=1, le=65535, description="sshd's port")] = DEFAULT_SSH_PORT
    user: UnixUser = Field("root", description="the user the controller logs in as over SSH")
    host_key: Annotated[str, StringConstraints(pattern=SSH_HOST_KEY_PATTERN)] | None = Field(
        None,
        description="the host's SSH key as `ssh-keyscan -t ed25519 ADDRESS` prints it; wins over `knownHostsFile` "
        "([host-keys.md](host-keys.md))",
    )
    gpus: GpuSpec
    runtime: Runtime = Runtime()
    staging_path: Annotated[AbsPath, AfterValidator(not_a_system_directory)] | None = Field(
        None,
        description="Host-local disk (an NVMe) that models are copied to before a swap, while the old model serves; "
        "the engine then loads from there instead of the shared storage. Unset: it loads from the storage.",
    )
    dial_attempts: Annotated[
        Int,
        Field(
            ge=1,
            le=20,
            description="Bounded SSH connection: attempts x seconds is the longest a step waits for an unreachable "
            "host.",
        ),
    ] = 3
    dial_timeout_seconds: Annotated[
        Int, Field(ge=1, le=120, description="seconds one SSH connection attempt may take")
    ] = 10
    cordon: bool = Field(
        False,
        description="Out of service: what runs there keeps running, `pulumi up` runs no step there and never "
        "contacts it, and a change of what it should serve is refused until the cordon is lifted.",
    )
    cluster: ClusterNetwork | None = Field(
        None,
        description="This host's address and interface for multi-node deployments (VLLM_HOST_IP, "
        "GLOO/NCCL_SOCKET_IFNAME).",
    )


class Storage(ConfigModel):
    name: Name = Field(description="the storage's name")
    host: Name = Field(description="the host it belongs to (one storage per host)")
    path: Annotated[AbsPath, AfterValidator(not_a_system_directory)] = Field(
        description="where models live on the host (e.g. `/shared`)"
    )
    hf_home: AbsPath | None = Field(None, description="`HF_HOME` for downloads; default `<path>/huggingface`")
    capacity_gb: Annotated[
        Float, Field(gt=0, description="the storage's size: the models wanted there must fit it, less `freeMarginGb`")
    ]
    free_margin_gb: Annotated[Float, Field(ge=0, description="space always left free")] = 50.0
    owner: UnixUser = Field("root", description="the Unix user that owns the model files")

    @property
    def effective_hf_home(self) -> str:
        return self.hf_home or f"{self.path}/huggingface"
