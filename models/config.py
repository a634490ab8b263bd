"""The stack config, one model per `vllm-fleet:` key of `Pulumi.<stack>.yaml`.

The machines the deployments name (hosts, storage) are in hosts.py. Field-level rules live on the fields
(types.py, vllm_flags.py); rules that relate several keys (GPUs of a host, ports, memory and disk budgets)
live in rules.py, which the loader applies to a parsed `StackConfig`.
Secrets (the SSH key, the Hugging Face token) are never fields here: they travel as `pulumi.Output`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Optional, Self

from pydantic import AfterValidator, Field, StringConstraints, create_model, model_validator
from pydantic.fields import FieldInfo

from models.access import Access
from models.adapters import AdapterSpec, LoraLimits, ResolvedAdapter, adapter_download_name
from models.base import ConfigModel
from models.hosts import Host, Storage
from models.monitoring import Monitoring
from models.types import (
    AttentionBackend,
    BindAddress,
    ClientModelId,
    EngineArg,
    EnvName,
    EnvValue,
    Float,
    HfRepo,
    Int,
    KnownHostsPath,
    Label,
    Name,
    ParserName,
    Revision,
    ServedName,
    SystemdServiceName,
    UnitStem,
)
from models.vllm_flags import loader_config, no_managed_env, no_managed_flags

GIB_PER_GB = 1e9 / 2**30

ExtraArgs = Annotated[tuple[EngineArg, ...], AfterValidator(no_managed_flags)]
LoadFormat = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,40}$")]
LoaderConfig = Annotated[dict[str, Any], AfterValidator(loader_config)]
Environment = Annotated[dict[EnvName, EnvValue], AfterValidator(no_managed_env)]


class StackTier(StrEnum):
    PRODUCTION = "production"
    DEVELOPMENT = "development"


class LoadStrategy(StrEnum):
    """vLLM's --safetensors-load-strategy: lazy mmap (its default), eager whole-file reads, or prefetch
    into the page cache in a background thread while the workers parse (REFERENCE.md section 3); `auto`
    (or unset) picks one from the host's facts (models/load_choice.py)."""

    AUTO = "auto"
    LAZY = "lazy"
    EAGER = "eager"
    PREFETCH = "prefetch"


class SwapMode(StrEnum):
    """How a swap replaces the serving model: `auto` starts the new one beside the old (blue/green) when
    the deployment's GPUs allow and stops the old first otherwise; `stop-start` always stops first."""

    AUTO = "auto"
    STOP_START = "stop-start"


class ForeignGpuProcesses(StrEnum):
    REFUSE = "refuse"
    STOP = "stop"


# How many ports above masterPort a deployment's rendezvous may use (one per launch, by a digest).
MASTER_PORT_SPREAD = 100


class DistributedBackend(StrEnum):
    # vLLM's own multi-node engine: `--nnodes/--node-rank/--master-addr/--master-port`, `--headless` workers.
    MP = "mp"
    # A Ray cluster (`ray start` on every node) and `--distributed-executor-backend ray` on the head.
    RAY = "ray"


class ServingDefaults(ConfigModel):
    """How a model is served unless a deployment overrides it (the catalog's presets set these)."""

    tensor_parallel: Annotated[Int, Field(ge=1, le=64, description="vLLM's `--tensor-parallel-size`")] = 1
    pipeline_parallel: Annotated[Int, Field(ge=1, le=64, description="vLLM's `--pipeline-parallel-size`")] = 1
    expert_parallel: bool = Field(False, description="vLLM's `--enable-expert-parallel`")
    max_model_len: Annotated[Int, Field(ge=16, le=10_000_000)] | None = Field(
        None, description="vLLM's `--max-model-len`; unset, the model's own"
    )
    gpu_memory_utilization: Annotated[
        Float, Field(gt=0.05, le=0.99, description="vLLM's `--gpu-memory-utilization`")
    ] = 0.9
    tool_call_parser: ParserName | None = Field(None, description="vLLM's `--tool-call-parser`")
    reasoning_parser: ParserName | None = Field(None, description="vLLM's `--reasoning-parser`")
    enable_auto_tool_choice: bool = Field(False, description="vLLM's `--enable-auto-tool-choice`")
    trust_remote_code: bool = Field(False, description="vLLM's `--trust-remote-code`")
    attention_backend: AttentionBackend | None = Field(
        None, description="vLLM's attention backend (a flag, or `VLLM_ATTENTION_BACKEND` before vLLM 0.12)"
    )
    safetensors_load_strategy: LoadStrategy | None = Field(
        None,
        description="Unset or `auto`: picked from the host's facts (models/load_choice.py); any other value is "
        "passed as it is.",
    )
    load_format: LoadFormat | None = Field(None, description="vLLM's `--load-format`")
    model_loader_extra_config: LoaderConfig | None = Field(
        None, description="vLLM's `--model-loader-extra-config`, a JSON object"
    )
    extra_args: ExtraArgs = Field(
        (), description="more vLLM flags; the ones the project manages are refused, naming the key that sets them"
    )
    extra_env: Environment = Field(
        default_factory=dict,
        description="more environment of the engine (`VLLM_*` and others); managed ones are refused",
    )
    lora: LoraLimits | None = None


class _ServingOverridesBase(ConfigModel):
    if TYPE_CHECKING:
        # The one field the controller reads by name (it says where an engine flag came from).
        extra_args: ExtraArgs | None = None

    def apply(self, defaults: ServingDefaults) -> ServingDefaults:
        """The defaults with what this deployment names, validated as a new model is: `model_copy` would
        validate nothing, and a rule of ServingDefaults would not see the change."""
        changes = {name: value for name, value in self if value is not None}
        return ServingDefaults.model_validate({**dict(defaults), **changes})


def _optional(field: FieldInfo) -> tuple[Any, None]:
    """A ServingDefaults field as an override: the same type and rules, or None (not overridden)."""
    annotation = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return Optional[annotation], None  # noqa: UP045 (a runtime type, not an annotation)


# The same fields as ServingDefaults, all optional: a deployment changes only what it names. Built from
# ServingDefaults so that a new serving field is declared once.
if TYPE_CHECKING:
    ServingOverrides = _ServingOverridesBase
else:
    ServingOverrides = create_model(
        "ServingOverrides",
        __base__=_ServingOverridesBase,
        __doc__="The fields of ServingDefaults, all optional: a deployment changes only what it names.",
        __module__=__name__,
        **{name: _optional(field) for name, field in ServingDefaults.model_fields.items()},
    )


class ReferenceLoad(ConfigModel):
    """A start of the model measured on a known server (the catalog's): the swap forecast's prior for it
    on a host where it has not started yet (models/forecast.py)."""

    seconds: Annotated[Float, Field(gt=0, le=86400, description="start to serving; the low end of a range")]
    up_to_seconds: Annotated[Float, Field(gt=0, le=86400)] | None = Field(
        None, description="the high end, when a range"
    )
    where: Label = Field(description="the server, storage, loader and release it was measured with")

    @model_validator(mode="after")
    def _a_range_from_low_to_high(self) -> Self:
        if self.up_to_seconds is not None and self.up_to_seconds < self.seconds:
            raise ValueError(f"referenceLoad.upToSeconds {self.up_to_seconds:g} is below its seconds {self.seconds:g}")
        return self

    @property
    def typical_seconds(self) -> float:
        """The middle of the range (the figure itself when it is one)."""
        return (self.seconds + (self.up_to_seconds or self.seconds)) / 2


class ModelSpec(ConfigModel):
    """A model that must be on disk: catalog preset merged with the stack's overrides."""

    repo: HfRepo = Field(description="the Hugging Face repository")
    revision: Revision = Field(
        "main", description="the commit to download; a production stack needs the 40-hex commit, not a branch"
    )
    dir: Name = Field(description="its folder under the storage's path")
    size_gb: Annotated[Float, Field(gt=0, description="its size on disk, for the disk and GPU memory rules")]
    shards: Annotated[Int, Field(ge=1)] | None = Field(None, description="how many safetensors files it has")
    quantization: Label | None = Field(None, description="a label for people (e.g. `int4`)")
    architecture: Label | None = Field(None, description="a label for people (e.g. `DeepseekV3ForCausalLM`)")
    notes: str | None = Field(None, description="free text for people")
    serving: ServingDefaults = ServingDefaults()
    reference_load: ReferenceLoad | None = None
    keep: bool = Field(
        False,
        description="Keep the files on disk when no deployment serves the model (swapping back downloads nothing).",
    )

    @property
    def size_gib(self) -> float:
        return self.size_gb * GIB_PER_GB


def adapter_download(name: str, adapter: AdapterSpec) -> ModelSpec:
    """An adapter's files as the model-sync path that brings models sees them."""
    return ModelSpec(
        repo=adapter.repo,
        revision=adapter.revision,
        dir=adapter_download_name(name),
        size_gb=adapter.size_gb,
        keep=adapter.keep,
    )


class Rollout(ConfigModel):
    """Deployments of one group swap a few at a time: each waits until the one before it serves again."""

    group: Name = Field(description="the group's name: deployments that serve the same thing on several hosts")
    max_unavailable: Annotated[
        Int, Field(ge=1, le=1000, description="How many of the group may be swapping (not serving) at once.")
    ] = 1


class SmokeBenchmark(ConfigModel):
    """A few completions of random prompts, streamed from the serving engine after each deploy (what
    `vllm bench serve --dataset-name random --ignore-eos` measures, host/smoke_bench.py); its output
    tokens/s, median TTFT and TPOT become the deployment's stack outputs."""

    requests: Annotated[Int, Field(ge=1, le=500, description="how many completions")] = 8
    input_len: Annotated[Int, Field(ge=1, le=32768, description="tokens of each random prompt")] = 32
    output_len: Annotated[Int, Field(ge=1, le=8192, description="tokens each completion generates")] = 16
    concurrency: Annotated[Int, Field(ge=1, le=256, description="how many at once")] = 2


def _unique_gpus(gpus: tuple[int, ...]) -> tuple[int, ...]:
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"GPU indices {list(gpus)} repeat an index; list each GPU once")
    return tuple(sorted(gpus))


class Deployment(ConfigModel):
    name: Name = Field(description="the deployment's name (its steps, its state on the host, its unit by default)")
    host: Name = Field(description="the host it serves on (the head, for a model across hosts)")
    model: Name = Field(
        description="the name of a `vllm-fleet:models` entry; changing it is a swap ([swaps.md](swaps.md))"
    )
    gpus: Annotated[tuple[Annotated[Int, Field(ge=0, le=63)], ...], AfterValidator(_unique_gpus)] = Field(
        description="The GPUs this deployment may use. It serves on tensorParallel x pipelineParallel of them; when "
        "the list has room for a second model beside the serving one, a swap starts the new model there while the "
        "old one serves (blue/green) and the front door switches over."
    )
    port: Annotated[
        Int,
        Field(
            ge=1024,
            le=65535,
            description="The front door's port: a reverse proxy (Debian's nginx) listens here, so clients keep one "
            "address across swaps; the engines listen on loopback at backendPorts behind it.",
        ),
    ] = 8000
    bind_address: BindAddress = Field(
        "0.0.0.0",
        description="Any IPv4 or IPv6 address of the host for the front door; 0.0.0.0 / :: listen on all of them.",
    )
    backend_ports: tuple[Annotated[Int, Field(ge=1024, le=65535)], Annotated[Int, Field(ge=1024, le=65535)]] | None = (
        Field(
            None,
            description="Two loopback ports for the engines, one per side of a blue/green swap; default port+10000, "
            "port+20000.",
        )
    )
    swap_mode: SwapMode = SwapMode.AUTO
    drain_seconds: Annotated[
        Int,
        Field(
            ge=0,
            le=3600,
            description="How long a blue/green swap lets requests in flight on the old engine finish before it "
            "stops it.",
        ),
    ] = 120
    prewarm_margin_gib: Annotated[Float, Field(ge=0, le=4096)] | None = Field(
        8.0,
        description="Before anything stops, read the new model into the page cache, leaving this much RAM free "
        "(GiB); null turns the pre-warm off.",
    )
    prewarm_min_resident_share: Annotated[Float, Field(ge=0, le=1)] | None = Field(
        None,
        description="Right before a stop-then-start stops the old engine: the share (0-1) of the new model's files "
        "that must be in the page cache. Less, and the pre-warm reads them again once; still less, and the swap "
        "refuses before anything stops (the load would read the rest from storage). null: measured and said only.",
    )
    served_model_name: ServedName | None = Field(
        None, description="the model id clients send; default the model's name"
    )
    also_served_as: list[ClientModelId] | None = Field(
        None,
        description="Further model ids the engine answers to (vLLM serves every name --served-model-name lists). "
        "Unset: the ids clients use today keep answering (what the deployment's engine or the units it replaces "
        "serve now, read by the preview's survey: a hand-made launch without --served-model-name serves its --model "
        "path); [] serves servedModelName alone.",
    )
    public_url: (
        Annotated[str, StringConstraints(pattern=r"^https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._/-]*)?$")] | None
    ) = Field(
        None,
        description="Where clients reach the API when it is not http://<host address>:<port>/v1 (NAT, a forwarder).",
    )
    unit_name: UnitStem | None = Field(
        None,
        description="the systemd unit's name (`vllm-...`); default from the model's name; the name of a hand-made "
        "unit to adopt it in place ([first-deployment.md](first-deployment.md))",
    )
    replaces: tuple[SystemdServiceName, ...] = Field(
        (),
        description="Hand-made units already on the host that this deployment takes over: stopped and disabled "
        "inside the swap (their files backed up, restored on rollback). Units neither managed nor named are never "
        "touched.",
    )
    foreign_gpu_processes: ForeignGpuProcesses = Field(
        ForeignGpuProcesses.REFUSE,
        description="GPU holders of no managed or adopted unit (a hand-started engine, a notebook): the GPU-release "
        "guard stops them only when this says so; otherwise `pulumi preview` and the start fail naming them.",
    )
    environment: Environment = Field(
        default_factory=dict, description="more environment of the engine (e.g. NCCL tuning)"
    )
    overrides: ServingOverrides = Field(
        ServingOverrides(), description="any field of the model's `serving`, for this deployment only"
    )
    start_timeout_seconds: Annotated[Int, Field(ge=30, le=6 * 3600)] | None = Field(
        None, description="How long a start may take before it counts as failed; derived from model size when unset."
    )
    gpu_release_timeout_seconds: Annotated[
        Int,
        Field(
            ge=5,
            le=3600,
            description="How long the GPU-release guard waits for memory to drop before it stops stray holders.",
        ),
    ] = 120
    gpu_release_threshold_mib: Annotated[
        Int, Field(ge=1, le=100_000, description="a GPU counts as free below this much used memory")
    ] = 1000
    rollout: Rollout | None = None
    nodes: tuple[Name, ...] = Field(
        (),
        description="A model served across hosts: the head (`host`, first) runs the API server and the front door, "
        "each other node a headless engine; tensorParallel x pipelineParallel GPUs in all, `gpus` on every node.",
    )
    distributed_backend: DistributedBackend = Field(
        DistributedBackend.MP,
        description="a model across hosts: vLLM's own multi-node engine (`mp`); `ray` is refused by the preview for "
        "now",
    )
    master_port: Annotated[
        Int,
        Field(
            ge=1024,
            le=65535 - MASTER_PORT_SPREAD,
            description="The head's rendezvous ports (torch.distributed), on its cluster address: masterPort plus "
            "0-99, a number derived from the model, so engines of two models never join each other.",
        ),
    ] = 29500
    smoke_benchmark: SmokeBenchmark | None = Field(
        None, description="After each deploy: a smoke benchmark (null: none); see SmokeBenchmark."
    )
    adapters: tuple[Name, ...] = Field(
        (),
        description="LoRA adapters (names of vllm-fleet:adapters) the engine serves beside the model; needs "
        "serving.lora.",
    )

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.nodes or (self.host,)

    @property
    def served_names(self) -> tuple[str, ...]:
        """Every id the engine answers to: the served name first (vLLM reports it), then alsoServedAs."""
        return tuple(dict.fromkeys([self.served_model_name or self.model, *(self.also_served_as or ())]))

    @property
    def readiness_address(self) -> str:
        """Where the host itself reaches the front door: loopback of the family for a wildcard bind."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.bind_address, self.bind_address)

    @property
    def engine_ports(self) -> tuple[int, int]:
        if self.backend_ports is not None:
            return self.backend_ports
        return (self.port + 10000, self.port + 20000)

    @model_validator(mode="after")
    def _backend_ports_fit(self) -> Self:
        ports = self.engine_ports
        if any(p > 65535 for p in ports):
            raise ValueError(
                f"backendPorts: the default engine ports port+10000 and port+20000 ({ports[0]}, {ports[1]}) pass "
                "65535; set backendPorts to two free ports, or use a port of at most 45535"
            )
        if ports[0] == ports[1] or self.port in ports:
            raise ValueError(
                f"backendPorts {list(ports)} must be two different ports, neither the front door's {self.port}"
            )
        return self


class ResolvedDeployment(ConfigModel):
    """A deployment with its host, storage, model and effective serving settings looked up."""

    deployment: Deployment
    host: Host
    storage: Storage
    model_name: Name
    model: ModelSpec
    serving: ServingDefaults
    # Every node of a multi-node deployment, the head first; just the host otherwise.
    node_hosts: tuple[Host, ...] = ()
    # Who may call it (the stack's vllm-fleet:access): TLS, API keys, /metrics.
    access: Access = Field(default_factory=Access)
    # The LoRA adapters it serves (deployment.adapters looked up in vllm-fleet:adapters).
    adapters: tuple[ResolvedAdapter, ...] = ()

    @property
    def multi_node(self) -> bool:
        return len(self.node_hosts) > 1

    @property
    def master_port(self) -> int:
        """The head's rendezvous port for this launch (model, flags, environment, nodes): nodes run the launch
        whose port the head listens on (node-watch), and one that runs another cannot join it."""
        serving = self.serving.model_dump(mode="json")
        # The loader as the stack states it, not as picked from the host's facts (controller/forecast.py's
        # with_load_choice puts the pick in `serving`): a pick follows the host's RAM, mounts and extras, which
        # change with no edit to the stack (and with an upgrade of this program), and a node's loader does not
        # change what it rendezvouses on. `auto` is what unset was before it existed: the same port.
        stated = self.deployment.overrides.apply(self.model.serving).model_dump(mode="json")
        for key in ("load_format", "safetensors_load_strategy"):
            serving[key] = None if stated[key] == "auto" else stated[key]
        launch = {
            "model": f"{self.model.repo}@{self.model.revision}",
            "path": self.load_path,
            "serving": serving,
            "environment": dict(self.deployment.environment),
            "nodes": [h.name for h in self.node_hosts],
        }
        digest = hashlib.sha256(json.dumps(launch, sort_keys=True).encode()).hexdigest()
        return self.deployment.master_port + int(digest[:8], 16) % MASTER_PORT_SPREAD

    def worker_unit_name(self, rank: int) -> str:
        # One unit per node whatever the model (a swap changes the node's launch, not its unit).
        stem = self.deployment.unit_name or f"vllm-{self.deployment.name}"
        return f"{stem}-node{rank}.service"

    @property
    def unit_stem(self) -> str:
        # The team's convention: vllm-<model>-<variant>.service, dots dropped (kimi-k2.5 -> kimi-k25).
        return self.deployment.unit_name or "vllm-" + self.model_name.replace(".", "")

    @property
    def unit_name(self) -> str:
        return f"{self.unit_stem}.service"

    @property
    def served_model_name(self) -> str:
        return self.deployment.served_model_name or self.model_name

    @property
    def served_model_names(self) -> tuple[str, ...]:
        return self.deployment.served_names

    @property
    def gpus_needed(self) -> int:
        """GPUs one engine of this deployment uses (0 on a host without GPUs)."""
        if self.host.gpus.count == 0:
            return 0
        return self.serving.tensor_parallel * self.serving.pipeline_parallel // max(1, len(self.node_hosts))

    @property
    def blue_green_possible(self) -> bool:
        """Whether the deployment's GPUs hold two engines at once, so a swap can keep the old one serving.
        A multi-node deployment always swaps stop-start: its nodes' GPUs hold one engine each."""
        return (
            self.deployment.swap_mode is SwapMode.AUTO
            and not self.multi_node
            and len(self.deployment.gpus) >= 2 * self.gpus_needed
        )

    @property
    def model_path(self) -> str:
        return f"{self.storage.path}/{self.model.dir}"

    @property
    def load_path(self) -> str:
        """Where the engine reads the weights: the host's staging copy when it has a staging path (every
        node of a multi-node deployment reads the storage's path, which is the same on each)."""
        if self.host.staging_path is None or self.multi_node:
            return self.model_path
        return f"{self.host.staging_path}/{self.model.dir}"

    @property
    def start_timeout_seconds(self) -> int:
        if self.deployment.start_timeout_seconds is not None:
            return self.deployment.start_timeout_seconds
        return start_timeout_for_size(self.model.size_gb)


def start_timeout_for_size(size_gb: float) -> int:
    """Ten minutes of fixed start cost plus loading at 10 GB/min.

    The reference Kimi-K2.5 INT4 load (547 GB) took 30-36 minutes, about 15-18 GB/min; 10 GB/min leaves
    a margin for a slower filesystem, so that load gets 64 minutes and never times out at 36.
    """
    return int(600 + size_gb * 6)


class StackConfig(ConfigModel):
    """One stack's config. Parse it with models.loader.parse_stack_config, which also applies the rules
    across keys (models/rules.py): a StackConfig built otherwise has not been checked against them."""

    tier: StackTier = StackTier.DEVELOPMENT
    hf_endpoint: (
        Annotated[str, StringConstraints(pattern=r"^https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._/-]*)?$")] | None
    ) = None
    hosts: tuple[Host, ...]
    # The hosts' SSH host keys, in OpenSSH's known_hosts format (controller/known_hosts.py reads it); a
    # host's own hostKey wins. A path beside the stack file (relative to the project) or absolute.
    known_hosts_file: KnownHostsPath | None = None
    storage: tuple[Storage, ...]
    models: dict[Name, ModelSpec]
    deployments: tuple[Deployment, ...] = ()
    access: Access = Field(default_factory=Access)
    # Thresholds of the generated Prometheus rules (render/monitoring.py).
    monitoring: Monitoring = Field(default_factory=Monitoring)
    # LoRA adapters deployments may serve (Deployment.adapters names them).
    adapters: dict[Name, AdapterSpec] = Field(default_factory=dict)

    def rollout_waits_for(self) -> dict[str, str]:
        """For each deployment of a rollout group, the one whose swap it waits for (the deployment
        maxUnavailable places before it in the group, in config order); the first ones wait for none."""
        members: dict[str, list[Deployment]] = {}
        for dep in self.deployments:
            if dep.rollout is not None:
                members.setdefault(dep.rollout.group, []).append(dep)
        waits: dict[str, str] = {}
        for group in members.values():
            for k, dep in enumerate(group):
                assert dep.rollout is not None
                if k >= dep.rollout.max_unavailable:
                    waits[dep.name] = group[k - dep.rollout.max_unavailable].name
        return waits

    # ---- lookups used by the program -------------------------------------------------------------

    # Indexes of the lookups below, built once: a fleet asks them for each of its hundreds of entries.
    INDEXES: ClassVar[tuple[str, ...]] = ("_storage_by_host", "_storage_by_name", "_models_served_on_host")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy without the indexes (a cached_property keeps its value in the instance's
        `__dict__`, which the copy takes): they were built from fields that `update` may change."""
        copied = super().model_copy(update=update, deep=deep)
        for index in self.INDEXES:
            copied.__dict__.pop(index, None)
        return copied

    @cached_property
    def _storage_by_host(self) -> dict[str, Storage]:
        return {s.host: s for s in reversed(self.storage)}

    @cached_property
    def _storage_by_name(self) -> dict[str, Storage]:
        return {s.name: s for s in reversed(self.storage)}

    @cached_property
    def _models_served_on_host(self) -> dict[str, set[str]]:
        served: dict[str, set[str]] = {}
        for dep in self.deployments:
            for node in dep.node_names:
                served.setdefault(node, set()).add(dep.model)
        return served

    def storage_for_host(self, host: str) -> Storage:
        return self._storage_by_host[host]

    def served_models_on(self, storage: str) -> list[str]:
        store = self._storage_by_name[storage]
        return sorted(self._models_served_on_host.get(store.host, set()))

    def wanted_models_on(self, storage: str) -> list[str]:
        """Models whose files must be on this storage: served here, or kept."""
        served = set(self.served_models_on(storage))
        kept = {name for name, m in self.models.items() if m.keep}
        return sorted((served | kept) & set(self.models))

    def wanted_adapters_on(self, storage: str) -> list[str]:
        """Adapters whose files must be on this storage: listed by a deployment with a node there, or kept."""
        store = self._storage_by_name[storage]
        listed = {a for dep in self.deployments if store.host in dep.node_names for a in dep.adapters}
        kept = {name for name, a in self.adapters.items() if a.keep}
        return sorted((listed | kept) & set(self.adapters))

    def downloads_on(self, storage: str) -> dict[str, ModelSpec]:
        """Every download this storage holds, by resource name: the wanted models, then the adapters."""
        downloads = {m: self.models[m] for m in self.wanted_models_on(storage)}
        downloads.update(
            {adapter_download_name(a): adapter_download(a, self.adapters[a]) for a in self.wanted_adapters_on(storage)}
        )
        return downloads

    def kept_dirs_on(self, storage: str) -> tuple[str, ...]:
        """Directories of the models and adapters kept on this storage (keep: true), which removals leave."""
        return tuple(sorted(spec.dir for spec in self.downloads_on(storage).values() if spec.keep))

    def _resolve_adapter(self, name: str, host: str) -> ResolvedAdapter:
        spec = self.adapters[name]
        bases = [self.models[b] for b in spec.bases if b in self.models]
        return ResolvedAdapter(
            name=name,
            spec=spec,
            path=f"{self.storage_for_host(host).path}/{adapter_download(name, spec).dir}",
            base_dirs=tuple(sorted({m.dir for m in bases})),
            base_repos=tuple(sorted({m.repo for m in bases})),
        )

    def resolved_deployments(self) -> list[ResolvedDeployment]:
        hosts = {h.name: h for h in self.hosts}
        out = []
        for dep in self.deployments:
            model = self.models[dep.model]
            out.append(
                ResolvedDeployment(
                    deployment=dep,
                    host=hosts[dep.host],
                    storage=self.storage_for_host(dep.host),
                    model_name=dep.model,
                    model=model,
                    serving=dep.overrides.apply(model.serving),
                    node_hosts=tuple(hosts[n] for n in dep.node_names),
                    access=self.access,
                    adapters=tuple(self._resolve_adapter(a, dep.host) for a in dep.adapters if a in self.adapters),
                )
            )
        return out
