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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

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

    def survey_entry(self) -> dict[str, Any]:
        """The record as the survey reports it (JSON keys the controller reads)."""
        entry: dict[str, Any] = {"unit": self.unit, "gpus": list(self.gpus), "backendPort": self.backend_port}
        if self.adopted is not None:
            entry["adoptedInPlace"] = self.adopted
        return entry

    @classmethod
    def from_survey(cls, entry: dict[str, Any]) -> ActiveRecord | None:
        if not entry or not entry.get("unit"):
            return None
        return cls(
            unit=entry["unit"],
            gpus=tuple(entry.get("gpus", ())),
            backend_port=entry.get("backendPort"),
            adopted=entry.get("adoptedInPlace"),
        )


# ---- a node of a model served across hosts (host/node.py stages and activates it, node-watch runs it) --

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
# door switches to it (host/swap.py starts the report's smoke benchmark on it).
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
