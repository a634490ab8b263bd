"""The contract between the controller and the host tools: every shape that crosses the wire and every
path on the host, written once.

The controller imports this module to render what the host reads (the swap's Plan, the paths it writes
units and state to) and to read what the host reports (the survey's active records and claims); the
host tools import it to do the same from the other side. Standard library only: it runs on the host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

# ---- where things live on a host ----------------------------------------------------------------------

# The host package (one zip archive) and a launcher per tool (units and steps call /usr/local/lib/vllm-fleet/<tool>).
TOOLS_DIR = "/usr/local/lib/vllm-fleet"
BUNDLE_NAME = "vllm-fleet-host.pyz"
# Per deployment: state (active record, claims, backups, swap results) and the rendered units' files.
STATE_DIR = "/var/lib/vllm-fleet"
ETC_DIR = "/etc/vllm-fleet"
UNIT_DIR = "/etc/systemd/system"
FRONT_DOOR_UNIT = "vllm-fleet-frontdoor.service"
FRONT_DOOR_DIR = f"{ETC_DIR}/frontdoor"
NGINX = "/usr/sbin/nginx"
# The verified manifest of a model directory (model-sync writes it, prewarm copies it last, status reads it).
MANIFEST_DIR = ".vllm-fleet"
MANIFEST = "manifest.json"
MANIFEST_REL = f"{MANIFEST_DIR}/{MANIFEST}"

# A hand-made engine adopted in place keeps its own launch under the managed unit until the next swap:
# this drop-in of the managed unit runs it (and checks its readiness by the ids it serves).
ADOPTED_DROP_IN = "50-vllm-fleet-adopted.conf"


def adopted_drop_in(unit: str, unit_dir: str | Path = UNIT_DIR) -> Path:
    return Path(unit_dir) / f"{unit}.d" / ADOPTED_DROP_IN


# Per stack, the SHA256 fingerprint of the SSH host key its steps pinned at its last preflight ("none": any
# key): the survey reports them, so a preview says when a stack's steps now pin another key (a rotation).
HOST_KEYS_DIR = f"{STATE_DIR}/host-keys"


def pinned_host_keys(directory: str = HOST_KEYS_DIR) -> dict[str, str]:
    """What each stack's steps pinned here, by stack ({} when none recorded)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}
    pinned: dict[str, str] = {}
    for name in names:
        if name.startswith("."):
            continue  # a record being written
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                pinned[name] = handle.read().strip()
        except OSError:
            continue
    return pinned


# The first line of every unit vllm-fleet writes; what follows names its stack and deployment.
MANAGED_MARK = "# Managed by vllm-fleet"
# A unit in these states holds (or is about to hold) its GPUs: a 36-minute load is `activating`.
RUNNING_STATES = frozenset({"active", "activating", "reloading"})
# The response header through which the front door says which engine answered.
BACKEND_HEADER = "X-Vllm-Fleet-Backend"


def owner_key(stack: str, deployment: str) -> str:
    """The name a deployment goes by on a host: its state directory, claims file and front door site."""
    return f"{stack}.{deployment}"


def deployment_state_dir(stack: str, deployment: str) -> str:
    return f"{STATE_DIR}/deployments/{owner_key(stack, deployment)}"


def is_managed(unit_text: str) -> bool:
    return unit_text.startswith(MANAGED_MARK)


_MANAGED_BY = re.compile(r"^# Managed by vllm-fleet: stack (\S+?), deployment (\S+?)\. ")


def managed_owner(unit_text: str) -> str | None:
    """stack.deployment of a unit vllm-fleet wrote, from its first line; None for any other unit."""
    found = _MANAGED_BY.match(unit_text)
    return f"{found.group(1)}.{found.group(2)}" if found else None


# ---- the swap's plan, what it leaves behind, and what it claims --------------------------------------


# The host's Python may predate typing.Self (3.11).
_File = TypeVar("_File", bound="JsonFile")


class JsonFile:
    """A dataclass written to a host as JSON (a plan the controller renders) and read back there."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[_File], data: dict[str, Any]) -> _File:
        raise NotImplementedError

    @classmethod
    def load(cls: type[_File], path: str | Path) -> _File:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


_Plan = TypeVar("_Plan", bound="DeploymentPlan")


@dataclass(frozen=True)
class DeploymentPlan(JsonFile):
    """What the controller renders for one deployment's steps on one host (the head's or single host's
    Plan, a node's NodePlan), written there as JSON."""

    stack: str
    deployment: str

    @property
    def deployment_owner(self) -> str:
        """The deployment's name on its hosts (owner_key), which its units' first line names."""
        return owner_key(self.stack, self.deployment)

    @property
    def owner(self) -> str:
        """The plan's name on its host (state directory, claims): the deployment's on the head or its one host."""
        return self.deployment_owner

    @property
    def config_key(self) -> str:
        """The deployment's key in the stack config, which messages name with the fix."""
        return f"vllm-fleet:deployments[{self.deployment}]"

    @classmethod
    def from_dict(cls: type[_Plan], data: dict[str, Any]) -> _Plan:
        """The plan from its JSON, whose arrays (absent: empty) are the plan's tuples."""
        arrays = [f.name for f in fields(cls) if str(f.type).startswith("tuple[")]
        return cls(**{**data, **{name: tuple(data.get(name, ())) for name in arrays}})


@dataclass(frozen=True)
class Plan(DeploymentPlan):
    """Everything the swap transaction needs to know about one deployment, rendered by the controller
    (render.plan.swap_plan) and written to the host as JSON."""

    state_dir: str
    unit_name: str
    unit_stem: str
    served_name: str
    port: int
    gpus: tuple[int, ...]
    model_dir: str
    python: str
    tools_dir: str
    ready_timeout: int
    unit_sha256: str
    replaces: tuple[str, ...] = ()
    foreign_gpu_processes: str = "refuse"
    report_every: int = 15
    journal_lines: int = 40
    # GPUs one engine uses (`gpus` is the pool it may use) and the two loopback ports behind the front door.
    gpus_needed: int = 0
    backend_ports: tuple[int, ...] = ()
    bind_address: str = "127.0.0.1"
    readiness_address: str = "127.0.0.1"
    swap_mode: str = "auto"
    drain_seconds: int = 120
    # Read the model into the page cache before anything stops (RAM minus this margin at most); None: off.
    prewarm_margin_gib: float | None = 8.0
    # Before a stop-then-start stops anything: the share of the model's files that must be in the page cache
    # (read again once by the pre-warm when less is); None: measured and said, never refused.
    prewarm_min_resident_share: float | None = None
    # The stack's name of the model the unit serves (what the host's start records name it by).
    model: str = ""
    # The controller's forecast of the new engine's start (controller/forecast.py), which the swap keeps
    # beside what came (StartRecord.forecast); 0 s: none.
    forecast_seconds: float = 0.0
    forecast_basis: str = ""
    forecast_source: str = ""
    forecast_made_at: float = 0.0
    # Where the engine loads from: model_dir, or a copy on the host's staging disk made before the stop.
    load_dir: str = ""
    # Who may call it: the directory of its access files (listen, TLS, key check, /metrics) that the site
    # includes, and the 0600 map of its API keys (the check through the front door uses one). Empty: a
    # plan from before access control, whose site listens and proxies everything itself.
    access_dir: str = ""
    keys_file: str = ""

    @property
    def staged_copy(self) -> str | None:
        return self.load_dir if self.load_dir and self.load_dir != self.model_dir else None

    @property
    def transaction_unit(self) -> str:
        return f"vllm-fleet-swap-{self.owner}.service"

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Result:
    status: str  # succeeded | unchanged | refused | rolled-back | rollback-failed
    message: str
    plan_digest: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "unchanged")


@dataclass(frozen=True)
class Claims:
    """What one deployment holds on a host: a set per kind, rewritten whole on every swap."""

    gpus: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()
    units: frozenset[str] = frozenset()

    def to_json(self) -> str:
        return json.dumps({"gpus": sorted(self.gpus), "ports": sorted(self.ports), "units": sorted(self.units)})

    @classmethod
    def from_json(cls, text: str) -> Claims:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Claims:
        return cls(frozenset(data.get("gpus", ())), frozenset(data.get("ports", ())), frozenset(data.get("units", ())))


def read_claims(state_root: Path) -> dict[str, Claims]:
    """Every live deployment's claims on this host: a claim counts while its deployment's state exists."""
    claims: dict[str, Claims] = {}
    directory = state_root / "claims"
    if directory.is_dir():
        for path in directory.glob("*.json"):
            owner = path.name.removesuffix(".json")
            if (state_root / "deployments" / owner).is_dir():
                try:
                    claims[owner] = Claims.from_json(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
    return claims


@dataclass(frozen=True)
class Placement:
    """Where an engine runs: its GPUs and its loopback port behind the front door."""

    gpus: tuple[int, ...]
    port: int

    def env_text(self) -> str:
        """The unit's placement EnvironmentFile (the unit expands these in ExecStartPre/ExecStart/Post)."""
        gpus = ",".join(map(str, self.gpus)) or "none"
        lines = [
            "# Written by the vllm-fleet swap: where this engine runs.",
            f"VLLM_FLEET_GPUS={gpus}",
            f"VLLM_FLEET_BACKEND_PORT={self.port}",
        ]
        if self.gpus:
            lines.append(f"CUDA_VISIBLE_DEVICES={gpus}")
        return "\n".join(lines) + "\n"

    def describe(self) -> str:
        gpus = ",".join(map(str, self.gpus))
        return f"{'GPU ' + gpus if self.gpus else 'no GPU'}, port {self.port}"


@dataclass(frozen=True)
class ActiveRecord:
    """What the deployment served after its last swap (its state directory's `active` file)."""

    unit: str
    served: str = ""
    port: int = 0
    gpus: tuple[int, ...] = ()
    backend_port: int | None = None  # None: an engine from before the front door, on the public port itself
    staged_copy: str | None = None  # the staging copy it loaded from, removed when nothing uses it
    # The hand-made unit whose engine the first take-over adopted in place: it runs that launch, on the
    # public port itself, until the next swap.
    adopted: str | None = None

    @classmethod
    def parse(cls, text: str) -> ActiveRecord | None:
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        if not fields.get("UNIT"):
            return None
        gpus = tuple(int(g) for g in fields.get("GPUS", "").split(",") if g.strip().isdigit())
        backend = fields.get("BACKEND_PORT", "")
        return cls(
            unit=fields["UNIT"],
            served=fields.get("SERVED", ""),
            port=int(fields.get("PORT", "0") or 0),
            gpus=gpus,
            backend_port=int(backend) if backend.isdigit() else None,
            staged_copy=fields.get("STAGED_COPY") or None,
            adopted=fields.get("ADOPTED") or None,
        )

    def text(self) -> str:
        lines = [f"UNIT={self.unit}", f"SERVED={self.served}", f"PORT={self.port}"]
        lines.append(f"GPUS={','.join(map(str, self.gpus))}")
        if self.backend_port is not None:
            lines.append(f"BACKEND_PORT={self.backend_port}")
        if self.staged_copy is not None:
            lines.append(f"STAGED_COPY={self.staged_copy}")
        if self.adopted is not None:
            lines.append(f"ADOPTED={self.adopted}")
        return "\n".join(lines) + "\n"

    @property
    def placement(self) -> Placement | None:
        return Placement(self.gpus, self.backend_port) if self.backend_port is not None else None


# ---- a node of a model served across hosts (host/tools/node.py stages and activates it, node-watch runs it) --

# In a node's state directory: the launches its engine may run, one per model the head may serve
# (`<master port>.json`), and `current`, the master port of the one node-watch runs now.
NODE_LAUNCHES = "launches"
NODE_CURRENT = "current"


@dataclass(frozen=True)
class NodeLaunch(JsonFile):
    """A headless engine's launch on one node for one model. The head's rendezvous port is per model
    (models.config's master_port), so which launch the head runs is which of these ports it listens on:
    node-watch runs that one, whatever model the last `pulumi up` named (a rollback on the head takes
    its nodes back with it)."""

    model: str
    master_port: int
    argv: tuple[str, ...]
    environment: dict[str, str]
    model_dir: str

    @property
    def file_name(self) -> str:
        return f"{self.master_port}.json"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeLaunch:
        return cls(
            model=str(data["model"]),
            master_port=int(data["master_port"]),
            argv=tuple(str(a) for a in data["argv"]),
            environment={str(k): str(v) for k, v in (data.get("environment") or {}).items()},
            model_dir=str(data.get("model_dir", "")),
        )


@dataclass(frozen=True)
class NodePlan(DeploymentPlan):
    """What a node's steps check and install for node `rank` > 0 of a deployment across hosts, rendered by
    the controller (render.plan.node_plan)."""

    rank: int
    host: str  # this node's host name, which every message names
    head: str  # the head's host name
    head_address: str  # the head's cluster address, where the engine meets it
    unit_name: str
    state_dir: str
    gpus: tuple[int, ...]
    python: str
    tools_dir: str
    foreign_gpu_processes: str = "refuse"

    @property
    def owner(self) -> str:
        """The node's name on its host (state directory, claims): the deployment's with its rank."""
        return owner_key(self.stack, f"{self.deployment}.node{self.rank}")

    @property
    def where(self) -> str:
        return f"node {self.rank} of deployment {self.deployment!r} on host {self.host!r}"


# In a deployment's state directory while its swap runs: the unit whose engine answers now, before the front
# door switches to it (host/tools/swap.py starts the report's smoke benchmark on it).
ENGINE_READY_FILE = "engine-ready"


# ---- a deployment's LoRA adapters (host/adapters.py applies them; render/steps.py renders them) ---------

# In the deployment's state directory: the adapters its engines load whenever they start.
ADAPTERS_FILE = "adapters.json"


@dataclass(frozen=True)
class Adapter:
    """One adapter as the deployment wants it: the name clients send, where its files are, and the
    directories of the models it fits (their basenames, so a staging copy of the model counts) with those
    models' repos, which its adapter_config.json must name; `config_key` is what errors tell to fix."""

    name: str
    path: str
    repo: str
    revision: str
    bases: tuple[str, ...]
    base_repos: tuple[str, ...] = ()
    config_key: str = ""

    def fits(self, model_path: str) -> bool:
        return Path(model_path.rstrip("/")).name in self.bases

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Adapter:
        return cls(
            name=data["name"],
            path=data["path"],
            repo=data.get("repo", ""),
            revision=data.get("revision", ""),
            bases=tuple(data.get("bases", ())),
            base_repos=tuple(data.get("base_repos", ())),
            config_key=data.get("config_key", ""),
        )


def adapters_json(adapters: list[Adapter]) -> str:
    """The adapters as the adapters step sends them and the state file keeps them."""
    return json.dumps({"adapters": [asdict(a) for a in adapters]}, indent=1, sort_keys=True)


# ---- the survey: what runs on a host (host/survey.py reads it, the preview and the swap judge it) ------
#
# Parsed once where it crosses the wire (`Survey.from_dict`: the controller from the survey's stdout, the
# swap from the survey tool it runs), written once (`Survey.to_dict`, on the host). The JSON keys are the
# survey's camelCase; absent keys read as their defaults, so a recorded survey (make preview-prod's) need
# not say what it does not know.


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in values or ())


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


def wire(value: Any) -> Any:
    """A contract type as the JSON that crosses the wire: its fields by their camelCase names, tuples and
    sets as lists, nested types the same way."""
    if is_dataclass(value) and not isinstance(value, type):
        return {_camel(f.name): wire(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list, frozenset)):
        return [wire(item) for item in value]
    if isinstance(value, dict):
        return {key: wire(item) for key, item in value.items()}
    return value


def _parse(kind: Any, value: Any) -> Any:
    """`value` from JSON as the field type `kind` says: tuples, dicts, optional and nested contract types."""
    if value is None:
        return None
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, UnionType):
        return _parse(next(a for a in args if a is not type(None)), value)
    if origin is tuple:
        return tuple(_parse(args[0], item) for item in value)
    if origin is dict:
        return {str(key): _parse(args[1], item) for key, item in value.items()}
    if isinstance(kind, type) and issubclass(kind, Wire):
        return kind.from_dict(value)
    if kind in (int, float, str, bool):
        return kind(value)
    return value


_Wire = TypeVar("_Wire", bound="Wire")


class Wire:
    """A type whose JSON is its fields by their camelCase names (`wire`), read back by `from_dict`: a key
    that is absent or null takes the field's default, so a recorded survey need not say what it does not
    know (make preview-prod's)."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = wire(self)
        return data

    @classmethod
    def from_dict(cls: type[_Wire], data: dict[str, Any]) -> _Wire:
        hints = _hints(cls)
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            value = data.get(_camel(f.name))
            if value is not None or f.default is None:
                values[f.name] = _parse(hints[f.name], value)
        return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """A contract type's field types, resolved once (this module's annotations are text)."""
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _strings(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in values or ())


@dataclass(frozen=True)
class Launch(Wire):
    """What a vLLM command line serves, as vLLM's own arguments say it (host/facts.vllm_launch reads it):
    the model files, the ids clients send (its --served-model-name values, or the model path where it sets
    none), its port and bind address, its GPUs (CUDA_VISIBLE_DEVICES; None: every GPU of the host), its
    tensor-parallel size, the whole command line and the environment it starts with."""

    argv: tuple[str, ...] = ()
    model: str | None = None
    served_names: tuple[str, ...] = ()
    port: int | None = None
    bind_address: str | None = None
    gpus: tuple[int, ...] | None = None
    tensor_parallel: int = 1
    environment: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessUnit:
    """The systemd service a process runs in (the last *.service of its cgroup), as the GPU-holder rule
    (host/judgement.holder_verdict) judges it: its state, and whether vllm-fleet wrote it and for whom."""

    name: str
    active_state: str = "unknown"
    managed: bool = False
    owner: str | None = None  # stack.deployment of a vllm-fleet unit

    @property
    def running(self) -> bool:
        return self.active_state in RUNNING_STATES


@dataclass(frozen=True)
class Unit(Wire):
    """A vllm-*.service on the host: its state, its file and what it launches."""

    name: str
    active_state: str = "inactive"
    sub_state: str = ""
    enabled: bool = False
    managed: bool = False  # vllm-fleet wrote it (its first line says so)
    owner: str | None = None  # stack.deployment of a vllm-fleet unit, from its first line
    fragment: str = ""
    sha256: str | None = None  # of its file: a hand edit shows against the rendered unit
    launch: Launch | None = None  # what it serves when it starts (hand-made units too), drop-ins included
    restarts: int = 0
    main_pid: int = 0
    adopted_in_place: bool = False  # it runs a hand-made launch adopted in place (ADOPTED_DROP_IN)
    # A managed unit as its deployment last staged it (None: nothing staged, or not a managed unit): a file
    # that differs was edited by hand. And whether its secret environment file equals the staged one,
    # compared on the host, so no secret crosses the wire.
    staged_sha256: str | None = None
    env_matches_staged: bool | None = None

    @property
    def running(self) -> bool:
        return self.active_state in RUNNING_STATES

    @property
    def stopped(self) -> bool:
        """It serves nothing: stopped by hand, failed for good, or failed and waiting to restart (an engine
        whose start its own checks refuse loops there until systemd's start limit fails it)."""
        return self.active_state in ("inactive", "failed") or self.sub_state == "auto-restart"

    @property
    def process_unit(self) -> ProcessUnit:
        return ProcessUnit(self.name, self.active_state, self.managed, self.owner)


@dataclass(frozen=True)
class Listener(Wire):
    """A listening TCP socket (`ss -ltnpH`) with the process and the unit that hold it."""

    port: int
    pid: int = 0
    address: str = ""
    unit: str | None = None
    cmd: str = ""


@dataclass(frozen=True)
class GpuHolder:
    """A process that holds GPU memory (nvidia-smi's compute apps, by GPU index), with its unit."""

    pid: int
    gpus: tuple[int, ...] = ()
    used_mib: int = 0
    name: str = ""
    cmd: str = ""
    unit: ProcessUnit | None = None  # None: it runs in no systemd service (a login session, cron, nohup)

    @property
    def unit_name(self) -> str | None:
        return None if self.unit is None else self.unit.name

    def describe(self) -> str:
        return f"PID {self.pid} ({self.cmd or self.name or '?'}) of {self.unit_name or 'no systemd unit'}"

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "pid": self.pid,
            "gpus": list(self.gpus),
            "usedMib": self.used_mib,
            "name": self.name,
            "cmd": self.cmd,
            "unit": self.unit_name,
        }
        if self.unit is not None:
            entry.update(unitState=self.unit.active_state, unitManaged=self.unit.managed, unitOwner=self.unit.owner)
        return entry

    @classmethod
    def from_dict(cls, data: dict[str, Any], units: dict[str, Unit] | None = None) -> GpuHolder:
        """`units`: the survey's vllm units, which say the state of a holder's unit when the entry does not."""
        name = data.get("unit")
        unit: ProcessUnit | None = None
        if name and "unitState" in data:
            unit = ProcessUnit(name, str(data["unitState"]), bool(data.get("unitManaged")), data.get("unitOwner"))
        elif name:
            known = (units or {}).get(name)
            unit = known.process_unit if known is not None else ProcessUnit(name)
        return cls(
            pid=int(data["pid"]),
            gpus=_ints(data.get("gpus")),
            used_mib=int(data.get("usedMib") or 0),
            name=str(data.get("name") or ""),
            cmd=str(data.get("cmd") or ""),
            unit=unit,
        )


@dataclass(frozen=True)
class AdapterState(Wire):
    """A deployment's LoRA adapters on the host (host/adapters.py): the wanted ones (name -> revision),
    what its serving engine has loaded (None: it did not answer), the drift repairs its adapters step made
    and the drift itself."""

    wanted: dict[str, str] = field(default_factory=dict)
    loaded: tuple[str, ...] | None = None
    repairs: int = 0
    drift: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeploymentState:
    """One deployment's state directory as the survey reports it: what its last swap left serving (None:
    nothing yet), the hand-made units its take-over put away, its adapters, how many drift repairs its
    activations made (the `repairs` file). How long a start took is in the start records (Survey.starts),
    per model."""

    record: ActiveRecord | None = None
    put_away: tuple[str, ...] = ()
    adapters: AdapterState | None = None
    repairs: int = 0
    # The forecast its last activation carried (its swap plan's): rendered again while no start comes, so
    # an unchanged stack renders an unchanged step.
    forecast: StartForecastRecord | None = None

    @property
    def unit(self) -> str | None:
        return None if self.record is None else self.record.unit

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        entry: dict[str, Any] = {
            "unit": record.unit if record else "",
            "gpus": list(record.gpus) if record else [],
            "backendPort": record.backend_port if record else None,
            "adopted": list(self.put_away),
            "repairs": self.repairs,
        }
        if record is not None and record.adopted is not None:
            entry["adoptedInPlace"] = record.adopted
        if self.adapters is not None:
            entry["adapters"] = self.adapters.to_dict()
        if self.forecast is not None:
            entry["forecast"] = self.forecast.to_dict()
        return entry

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeploymentState:
        record = None
        if data.get("unit"):
            record = ActiveRecord(
                unit=str(data["unit"]),
                gpus=_ints(data.get("gpus")),
                backend_port=data.get("backendPort"),
                adopted=data.get("adoptedInPlace"),
            )
        adapters = data.get("adapters")
        forecast = data.get("forecast")
        return cls(
            record=record,
            put_away=_strings(data.get("adopted")),
            adapters=AdapterState.from_dict(adapters) if adapters is not None else None,
            repairs=int(data.get("repairs") or 0),
            forecast=StartForecastRecord.from_dict(forecast) if forecast else None,
        )


# A model directory's state against its verified manifest (host/model_files.model_state).
MODEL_VERIFIED = "verified"
MODEL_CHANGED = "changed"
MODEL_INCOMPLETE = "incomplete download"
MODEL_NO_MANIFEST = "no manifest"


@dataclass(frozen=True)
class ModelFiles(Wire):
    """A model directory against the manifest model-sync wrote when it verified it: sizes and mtimes only,
    no byte read. `repairs`: per stack, the drift repairs that stack's download step made here."""

    dir: str
    state: str = MODEL_NO_MANIFEST
    repo: str | None = None
    revision: str | None = None
    changed: tuple[str, ...] = ()  # files missing, or of another size or mtime than when verified
    repairs: dict[str, int] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.state == MODEL_VERIFIED

    def describe(self, most: int = 5) -> str:
        if self.state != MODEL_CHANGED:
            return self.state
        more = f" and {len(self.changed) - most} more" if len(self.changed) > most else ""
        return f"changed: {', '.join(sorted(self.changed)[:most])}{more}"


@dataclass(frozen=True)
class LaunchQuestion(Wire):
    """What the survey is asked of one deployment (`--question`): how the engine that serves it now was
    launched against the stack's launch, `unit_text` (the rendered unit in a preview, the staged one in the
    swap), whose secret environment is the file `env_file` on the host (the staged one: no secret crosses
    the wire). `python` is the vLLM venv's, whose parser reads both launches when their words differ."""

    owner: str
    unit: str
    python: str
    unit_text: str
    env_file: str = ""
    replaces: tuple[str, ...] = ()
    port: int = 0  # an engine port of the deployment, for the stack's ExecStart (the placement's variable)

    @classmethod
    def of(cls, plan: Plan, unit_text: str) -> LaunchQuestion:
        return cls(
            plan.owner,
            plan.unit_name,
            plan.python,
            unit_text,
            f"{plan.state_dir}/staged/{plan.unit_stem}.env",
            plan.replaces,
            plan.backend_ports[0] if plan.backend_ports else plan.port,
        )


# How an EngineReading compares: the deployment's own unit with the unit that replaces it (every launch
# setting), or a hand-made engine with the stack's launch at a first take-over (the managed layout left out).
SAME_UNIT = "same-unit"
TAKE_OVER = "take-over"


@dataclass(frozen=True)
class EngineReading(Wire):
    """How the engine that serves a deployment now (`unit`, its main process `pid`) was launched, against
    the stack's launch (host/engine_launch.py reads it from /proc and compares as the host's vLLM reads
    both): `differences`, one line each (empty: the same launch); `unit_changes`, the unit's settings outside
    the launch that change (SAME_UNIT: a rewrite and a reload); `how` the launches were compared; `note`,
    what a preview says when it waited for vLLM's parser. `readable` False: they could not be compared
    (`differences` says why), which counts as a launch that differs."""

    unit: str
    kind: str = SAME_UNIT
    pid: int = 0
    differences: tuple[str, ...] = ()
    unit_changes: tuple[str, ...] = ()
    how: str = ""
    note: str | None = None
    readable: bool = True

    @property
    def same_launch(self) -> bool:
        return self.readable and not self.differences


@dataclass(frozen=True)
class Memory:
    """/proc/meminfo's MemTotal and MemAvailable, in MiB (0: not known)."""

    total_mib: int = 0
    available_mib: int = 0


@dataclass(frozen=True)
class Mount(Wire):
    """A filesystem of the host's mount table (/proc/self/mounts): where it is mounted, its type and its
    source. The filesystem of a model's directory decides how vLLM reads it (models/load_choice.py)."""

    path: str
    type: str = ""
    source: str = ""


def filesystem_of(path: str, mounts: tuple[Mount, ...]) -> str | None:
    """The type of the filesystem `path` is on: that of its longest mount point (None: no mount holds it,
    or the survey reported no mount table)."""
    holding = [m for m in mounts if path == m.path or path.startswith(m.path.rstrip("/") + "/")]
    best = max(holding, key=lambda m: len(m.path), default=None)
    return (best.type or None) if best is not None else None


# ---- a start of a managed engine: what it loaded and where its time went (host/start_records.py) ------

# How many of a model's last starts a host keeps (host/start_records.py); the forecast takes their median.
STARTS_KEPT = 5


@dataclass(frozen=True)
class Phase(Wire):
    name: str
    seconds: float


@dataclass(frozen=True)
class StartPhases(Wire):
    """One start of an engine, from its journal (host/start_phases.py): where its time went (the phases add
    up to `seconds`), what vLLM reported of it, and whether it served."""

    started_at: float  # seconds since the epoch (the unit's start)
    seconds: float  # from the unit's start to its last line read (to "Started" once it serves)
    ready: bool
    phases: tuple[Phase, ...]
    reported: dict[str, Any] = field(default_factory=dict)
    # The shard loader's last progress: (shards done, shards in all), while the weights load.
    shards: tuple[int, ...] | None = None

    def phase(self, name: str) -> float | None:
        return next((p.seconds for p in self.phases if p.name == name), None)

    def describe(self) -> str:
        """The phases in the order they ran: "weights 12.3 s, compile 4.0 s, ..."."""
        return ", ".join(f"{p.name} {p.seconds:.1f} s" for p in self.phases)


@dataclass(frozen=True)
class Loaded(Wire):
    """What an engine loaded, and how."""

    model: str  # the stack's name for it ("" from a plan before the name was in it)
    directory: str  # where the engine read it (a staging copy, or the storage's directory)
    repo: str | None = None  # from model-sync's manifest; None without one
    revision: str | None = None
    size_bytes: int | None = None
    files: int | None = None
    load_format: str | None = None  # the launch's flags; None: vLLM's default
    load_strategy: str | None = None
    loader_extra_config: dict[str, Any] | None = None
    tensor_parallel: int = 1
    prewarm: str = "none"  # "page cache", "staging copy" or "none"
    resident_share: float | None = None  # of its files in the page cache before the start; None: not measured

    @property
    def identity(self) -> str:
        """The model as the host knows it: its repository at its revision, else its directory."""
        return f"{self.repo}@{self.revision}" if self.repo and self.revision else self.directory


@dataclass(frozen=True)
class StartForecastRecord(Wire):
    """The forecast the controller made of an engine's start (the preview's figure and what it rests on),
    from the survey read at `made_at`; the swap keeps it beside what came (StartRecord.forecast)."""

    seconds: float = 0.0
    basis: str = ""
    source: str = ""  # "own start" | "catalog" | "rates"
    made_at: float = 0.0

    @property
    def source_words(self) -> str:
        return {"own start": "its own starts here", "catalog": "the catalog", "rates": "the rates"}.get(
            self.source, self.source or "?"
        )

    @classmethod
    def of_plan(cls, plan: Plan) -> StartForecastRecord | None:
        if plan.forecast_seconds <= 0:
            return None
        return cls(plan.forecast_seconds, plan.forecast_basis, plan.forecast_source, plan.forecast_made_at)

    def plan_fields(self) -> dict[str, Any]:
        """The Plan's fields that carry it."""
        return {
            "forecast_seconds": self.seconds,
            "forecast_basis": self.basis,
            "forecast_source": self.source,
            "forecast_made_at": self.made_at,
        }


@dataclass(frozen=True)
class StartRecord(Wire):
    """A start of a managed engine as the host keeps it (one per model, host/start_records.py) and the
    survey reports it (`starts`): when, which deployment, how long (by the swap's clock), what it loaded,
    its phases (None: the journal had no vLLM line of it) and the forecast the swap came with, with the
    swap's downtime (None: a blue/green swap's clients waited for nothing)."""

    at: float  # seconds since the epoch, when the unit started
    owner: str  # the deployment that started it (stack.deployment)
    unit: str
    mode: str  # stop-start | blue-green
    seconds: float  # start to ready, by the swap's clock
    loaded: Loaded
    phases: StartPhases | None = None
    forecast: StartForecastRecord | None = None
    downtime_seconds: float | None = None
    version: int = 1

    def describe(self) -> str:
        """ "18.8 s (forecast 19 s, from its own start): imports 9.4 s, weights 0.1 s, ..." """
        forecast = self.forecast
        said = f"{self.seconds:.1f} s"
        if forecast is not None:
            said += f" (forecast {forecast.seconds:.0f} s, from {forecast.source_words})"
        if self.phases is None:
            return f"{said}; no vLLM line of it in its journal"
        return f"{said}: {self.phases.describe()}"


@dataclass(frozen=True)
class Survey:
    """What runs on a host (host/survey.py): the vllm-* units, the listening sockets, the GPUs' holders,
    each deployment's state and claims, the memory, the model directories asked about, the vLLM release of
    the host's runtime (None when not asked), and per stack the fingerprint of the host key its steps pinned
    at their last preflight (HOST_KEYS_DIR; "none": any key). `at` is when the host read it (Unix seconds)."""

    units: tuple[Unit, ...] = ()
    listeners: tuple[Listener, ...] = ()
    gpu_holders: tuple[GpuHolder, ...] = ()
    gpu_count: int = 0
    deployments: dict[str, DeploymentState] = field(default_factory=dict)
    claims: dict[str, Claims] = field(default_factory=dict)
    memory: Memory = Memory()
    models: dict[str, ModelFiles] = field(default_factory=dict)
    vllm_version: str | None = None
    # The loaders' extras beside vLLM (distribution -> version, None: not installed); None: not asked.
    vllm_extras: dict[str, str | None] | None = None
    host_keys: dict[str, str] = field(default_factory=dict)
    # Each model's last start on this host (host/start_records.py) and the mount table.
    starts: tuple[StartRecord, ...] = ()
    mounts: tuple[Mount, ...] = ()
    at: float = 0.0
    # Per deployment asked about (LaunchQuestion.owner), how its serving engine was launched against the stack's.
    readings: dict[str, EngineReading] = field(default_factory=dict)

    def unit(self, name: str | None) -> Unit | None:
        return next((u for u in self.units if u.name == name), None) if name else None

    def running(self, name: str) -> bool:
        """Whether a unit runs (or loads), as the survey saw it."""
        unit = self.unit(name)
        return unit is not None and unit.running

    def deployment(self, owner: str) -> DeploymentState:
        """A deployment's state here (an empty one when it has none on this host)."""
        return self.deployments.get(owner) or DeploymentState()

    def to_dict(self) -> dict[str, Any]:
        return {
            "units": [u.to_dict() for u in self.units],
            "listeners": [entry.to_dict() for entry in self.listeners],
            "gpuHolders": [h.to_dict() for h in self.gpu_holders],
            "gpuCount": self.gpu_count,
            "active": {owner: state.to_dict() for owner, state in sorted(self.deployments.items())},
            "claims": {owner: json.loads(held.to_json()) for owner, held in sorted(self.claims.items())},
            "memory": {"totalMib": self.memory.total_mib, "availableMib": self.memory.available_mib},
            "models": {path: files.to_dict() for path, files in sorted(self.models.items())},
            "vllm": {"version": self.vllm_version, "extras": self.vllm_extras},
            "hostKeys": dict(sorted(self.host_keys.items())),
            "starts": [record.to_dict() for record in self.starts],
            "mounts": [mount.to_dict() for mount in self.mounts],
            "at": self.at,
            "readings": {owner: reading.to_dict() for owner, reading in sorted(self.readings.items())},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Survey:
        units = tuple(Unit.from_dict(u) for u in data.get("units") or ())
        by_name = {u.name: u for u in units}
        memory = data.get("memory") or {}
        vllm = data.get("vllm") or {}
        return cls(
            units=units,
            listeners=tuple(Listener.from_dict(entry) for entry in data.get("listeners") or ()),
            gpu_holders=tuple(GpuHolder.from_dict(h, by_name) for h in data.get("gpuHolders") or ()),
            gpu_count=int(data.get("gpuCount") or 0),
            deployments={
                str(owner): DeploymentState.from_dict(state) for owner, state in (data.get("active") or {}).items()
            },
            claims={str(owner): Claims.from_dict(held) for owner, held in (data.get("claims") or {}).items()},
            memory=Memory(int(memory.get("totalMib") or 0), int(memory.get("availableMib") or 0)),
            models={str(path): ModelFiles.from_dict(files) for path, files in (data.get("models") or {}).items()},
            vllm_version=vllm.get("version"),
            vllm_extras=_parse(dict[str, str | None], vllm.get("extras")),
            host_keys={str(stack): str(pinned) for stack, pinned in (data.get("hostKeys") or {}).items()},
            starts=tuple(StartRecord.from_dict(record) for record in data.get("starts") or ()),
            mounts=tuple(Mount.from_dict(mount) for mount in data.get("mounts") or ()),
            at=float(data.get("at") or 0.0),
            readings={
                str(owner): EngineReading.from_dict(reading) for owner, reading in (data.get("readings") or {}).items()
            },
        )

    @classmethod
    def from_json(cls, text: str) -> Survey:
        return cls.from_dict(json.loads(text))


# ---- status: what host/status.py is asked about a deployment, and what it answers ------------------------


@dataclass(frozen=True)
class StatusRequest(Wire):
    """One deployment's entry of host/status.py's argument (render/report.spec renders it; it is a stack
    output too, so `make status` needs only the outputs): its unit and where its files are, the front door
    it answers on, its smoke benchmark (None: none), and the host the controller asks over SSH."""

    owner: str
    unit: str
    state_dir: str
    model_dir: str
    python: str
    front_door: str = ""
    deployment: str = ""
    unit_sha256: str = ""  # of the unit the stack applied
    gpus: tuple[int, ...] = ()
    served_name: str = ""
    bench: dict[str, int] | None = None
    host: dict[str, Any] = field(default_factory=dict)  # name, address, port, user, hostKey


@dataclass(frozen=True)
class DeploymentStatus(Wire):
    """What host/status.py reports of one deployment: its unit's state and since when, its model files
    against their manifest, its engine's load (/metrics: running and waiting requests; None when it does not
    answer), the vLLM release of its python, its adapters, its last load's seconds (from the journal), the
    smoke benchmark's numbers when one ran, and its last start as the swap recorded it."""

    unit: str
    active_state: str = "unknown"
    sub_state: str = ""
    since: str = ""
    enabled: str = ""
    model: ModelFiles | None = None
    metrics: dict[str, float] | None = None
    vllm_version: str | None = None
    adapters: AdapterState | None = None
    last_load_seconds: float | None = None
    bench: dict[str, Any] | None = None
    # Its unit's last start as the swap recorded it (host/start_records.py): its phases, its forecast and
    # the downtime it made (None: no record of it).
    last_start: StartRecord | None = None


@dataclass(frozen=True)
class GpuUse:
    """One GPU's memory as nvidia-smi lists it."""

    index: int
    used_mib: int
    total_mib: int


@dataclass(frozen=True)
class StatusReport:
    """host/status.py's answer: each deployment's status by owner, the host's GPUs, and (asked by `make
    status`) the host's survey, which its drift is judged from by the preview's own rules."""

    deployments: dict[str, DeploymentStatus] = field(default_factory=dict)
    gpus: tuple[GpuUse, ...] = ()
    survey: Survey | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "deployments": {owner: d.to_dict() for owner, d in sorted(self.deployments.items())},
            "gpus": [{"index": g.index, "usedMib": g.used_mib, "totalMib": g.total_mib} for g in self.gpus],
            "survey": None if self.survey is None else self.survey.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatusReport:
        found = data.get("survey")
        return cls(
            deployments={
                str(owner): DeploymentStatus.from_dict(d) for owner, d in (data.get("deployments") or {}).items()
            },
            gpus=tuple(
                GpuUse(int(g["index"]), int(g.get("usedMib") or 0), int(g.get("totalMib") or 0))
                for g in data.get("gpus") or ()
            ),
            survey=Survey.from_dict(found) if found else None,
        )

    @classmethod
    def from_json(cls, text: str) -> StatusReport:
        return cls.from_dict(json.loads(text))
