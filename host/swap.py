#!/usr/bin/env python3
"""vllm-fleet swap: make a deployment serve its staged unit, as a transaction that the host finishes.

    swap start --plan PLAN.json   what the Pulumi step runs: start the transaction as a transient systemd
                                  unit (or attach to the one already running for this deployment), print
                                  its journal as it goes, and exit with its result
    swap run --plan PLAN.json     the transaction itself, inside that unit

Everything that can fail is checked while the old model still serves (claims on GPUs, port and unit
name, the model files against their manifest, the staged unit; the unit step already had the host's
vLLM parse the launch). Then it decides where the new engine runs (its placement: GPUs and a loopback
port behind the front door) and how:

  blue/green   the deployment's GPUs hold the new engine beside the old one (deployments[].gpus lists
               enough GPUs that nothing else holds): the new unit starts there on the other backend
               port while the old one serves; once it answers (health, models, a real completion) the
               front door switches with a graceful reload, requests in flight on the old engine drain,
               then the old unit stops. If the new one never answers, it is removed and the old one
               never stopped.
  stop-start   otherwise: back up the units it replaces (the previous managed unit, a hand-made unit
               of the same name, and the hand-made units the stack names in `replaces`), install the
               new unit, stop and disable the old ones, start the new one and wait until it serves
               (its ExecStartPre guard frees the GPUs, its ExecStartPost waits for readiness), then
               point the front door at it. If it does not serve in time, the new unit is stopped, every
               backed-up unit file and the front door's site are put back, the units that ran before
               are started again and waited for with their own start timeout, and the transaction
               reports the new unit's journal tail.

It runs in its own systemd unit (`systemd-run`), so a dropped SSH session or a killed controller neither
interrupts it nor leaves the host serving nothing; the result is written to the deployment's state
directory, where the next `swap start` finds it. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_ROOT = Path("/var/lib/vllm-fleet")
UNIT_DIR = Path("/etc/systemd/system")
ENV_DIR = Path("/etc/vllm-fleet")
FRONT_DOOR_UNIT = "vllm-fleet-frontdoor.service"
FRONT_DOOR_DIR = ENV_DIR / "frontdoor"
NGINX = "/usr/sbin/nginx"
# The response header through which the front door says which engine answered.
BACKEND_HEADER = "X-Vllm-Fleet-Backend"
MANAGED_MARK = "# Managed by vllm-fleet"
# A unit in these states holds (or is about to hold) its GPUs: a 36-minute load is `activating`.
RUNNING_STATES = frozenset({"active", "activating", "reloading"})
DEFAULT_START_TIMEOUT = 90.0  # systemd's DefaultTimeoutStartSec


@dataclass(frozen=True)
class Plan:
    stack: str
    deployment: str
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
    def owner(self) -> str:
        return f"{self.stack}.{self.deployment}"

    @property
    def transaction_unit(self) -> str:
        return f"vllm-fleet-swap-{self.owner}.service"

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        data = dict(data)
        data["gpus"] = tuple(data.get("gpus", ()))
        data["replaces"] = tuple(data.get("replaces", ()))
        data["backend_ports"] = tuple(data.get("backend_ports", ()))
        return cls(**data)


@dataclass
class Result:
    status: str  # succeeded | unchanged | refused | rolled-back | rollback-failed
    message: str
    plan_digest: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "unchanged")


class SwapRefused(Exception):
    """A check failed before anything was stopped."""


# ---- pure helpers -------------------------------------------------------------------------------------

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?")
_SPAN_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_timespan(text: str) -> float | None:
    """Seconds of a systemd time span as `systemctl show` prints it ("1h 4min 42s", "90s", "infinity")."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total = 0.0
    position = 0
    for match in _SPAN.finditer(text):
        if text[position : match.start()].strip():
            raise ValueError(f"not a systemd time span: {text!r}")
        total += float(match.group(1)) * _SPAN_SECONDS[match.group(2)]
        position = match.end()
    if text[position:].strip():
        raise ValueError(f"not a systemd time span: {text!r}")
    return total


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
        data = json.loads(text)
        return cls(frozenset(data.get("gpus", ())), frozenset(data.get("ports", ())), frozenset(data.get("units", ())))


def claim_conflicts(owner: str, wanted: Claims, others: Mapping[str, Claims]) -> list[str]:
    """Sentences for every GPU, port or unit name another live deployment holds."""
    problems = []
    for other, held in sorted(others.items()):
        if other == owner:
            continue
        for gpu in sorted(wanted.gpus & held.gpus):
            problems.append(
                f"GPU {gpu} is claimed by deployment {other} on this host; the two stacks overlap. Give this "
                f"deployment other GPUs (deployments[].gpus) or destroy {other} first."
            )
        for port in sorted(wanted.ports & held.ports):
            problems.append(
                f"port {port} is claimed by deployment {other} on this host; choose another deployments[].port"
            )
        for unit in sorted(wanted.units & held.units):
            problems.append(
                f"unit {unit} belongs to deployment {other} on this host; set deployments[].unitName or use another model name"
            )
    return problems


def is_managed(unit_text: str) -> bool:
    return unit_text.startswith(MANAGED_MARK)


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
        )

    def text(self) -> str:
        lines = [f"UNIT={self.unit}", f"SERVED={self.served}", f"PORT={self.port}"]
        lines.append(f"GPUS={','.join(map(str, self.gpus))}")
        if self.backend_port is not None:
            lines.append(f"BACKEND_PORT={self.backend_port}")
        if self.staged_copy is not None:
            lines.append(f"STAGED_COPY={self.staged_copy}")
        return "\n".join(lines) + "\n"

    @property
    def placement(self) -> Placement | None:
        return Placement(self.gpus, self.backend_port) if self.backend_port is not None else None


@dataclass(frozen=True)
class Decision:
    mode: str  # blue-green | stop-start
    placement: Placement
    reason: str


def decide(
    plan: Plan, old: ActiveRecord | None, old_running: bool, busy: frozenset[int], replaces_running: bool
) -> Decision:
    """How the swap runs and where the new engine goes, from what runs now.

    `busy` are GPUs held by processes the swap will not stop (another deployment, a foreign process).
    Blue/green needs a running old engine behind the front door, another unit name for the new one, and
    enough of the deployment's GPUs that neither the old engine nor anything else holds."""
    needed = plan.gpus_needed
    free = [g for g in plan.gpus if g not in busy]
    first_port = plan.backend_ports[0]
    if old is None or not old_running:
        gpus = tuple(free[:needed]) if len(free) >= needed else tuple(plan.gpus[:needed])
        why = "hand-made units it replaces stop first" if replaces_running else "nothing of this deployment serves"
        return Decision("stop-start", Placement(gpus, first_port), why)
    previous = old.placement
    # Stop-start keeps the old engine's GPUs and port when they still fit.
    keep = [g for g in old.gpus if g in plan.gpus] + [g for g in free if g not in old.gpus]
    keep_port = previous.port if previous is not None and previous.port in plan.backend_ports else first_port
    stop_first = Placement(tuple(keep[:needed]), keep_port)
    if old.unit == plan.unit_name:
        return Decision("stop-start", stop_first, f"{plan.unit_name} itself changes, so it restarts in place")
    if plan.swap_mode != "auto":
        return Decision("stop-start", stop_first, f"deployments[].swapMode is {plan.swap_mode}")
    if previous is None:
        return Decision("stop-start", stop_first, f"{old.unit} listens on the public port {plan.port} itself")
    if replaces_running:
        return Decision("stop-start", stop_first, "hand-made units it replaces still run")
    spare = [g for g in free if g not in old.gpus]
    if len(spare) < needed:
        held = sorted(set(plan.gpus) & busy)
        return Decision(
            "stop-start",
            stop_first,
            f"the new engine needs {needed} GPU(s) beside {old.unit} on GPU {','.join(map(str, old.gpus))}, and "
            f"{len(spare)} of deployments[].gpus {list(plan.gpus)} are free"
            + (f" (GPU {','.join(map(str, held))} held by other processes)" if held else ""),
        )
    other_port = next(p for p in plan.backend_ports if p != previous.port)
    placement = Placement(tuple(spare[:needed]), other_port)
    return Decision(
        "blue-green",
        placement,
        f"GPU {','.join(map(str, placement.gpus)) or '-'} free beside {old.unit}; it serves until the new engine answers",
    )


def nginx_listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


# What the front door passes to the engine: the OpenAI API, its health and (to listed addresses) its
# metrics. Nothing else: vLLM's development endpoints (sleep, wake_up, collective_rpc, ...) stay on the host.
PROXIED_LOCATIONS = (("/v1/", "api.conf"), ("= /health", None), ("= /metrics", "metrics.conf"))


def front_door_site(plan: Plan, placement: Placement) -> str:
    """The deployment's server block: its public address and port, passed to the engine that serves now.

    With access control (plan.access_dir) the address, TLS, key check and /metrics allow list are files
    the site includes, which the access step rewrites without the site (or the engine) changing."""
    if plan.access_dir:
        proxy = (
            f"        proxy_pass http://127.0.0.1:{placement.port};\n"
            "        proxy_set_header Host $host;\n"
            '        proxy_set_header Connection "";\n'
            f"        add_header {BACKEND_HEADER} {plan.unit_name} always;\n"
        )
        text = (
            f"# Managed by vllm-fleet: front door of deployment {plan.owner}, written by its swap.\n"
            f"# Who may call it (address, TLS, API keys, /metrics): {plan.access_dir}, written by its access step.\n"
            "server {\n"
            f"    include {plan.access_dir}/server.conf;\n"
        )
        for location, include in PROXIED_LOCATIONS:
            text += f"    location {location} {{\n"
            if include is not None:
                text += f"        include {plan.access_dir}/{include};\n"
            text += proxy + "    }\n"
        return (
            text
            + "    # Every other path, vLLM's development endpoints among them, stays on the host.\n    location / {\n        return 404;\n    }\n}\n"
        )
    return (
        f"# Managed by vllm-fleet: front door of deployment {plan.owner}, written by its swap.\n"
        "server {\n"
        f"    listen {nginx_listen(plan.bind_address, plan.port)};\n"
        "    location / {\n"
        f"        proxy_pass http://127.0.0.1:{placement.port};\n"
        "        proxy_set_header Host $host;\n"
        '        proxy_set_header Connection "";\n'
        f"        add_header {BACKEND_HEADER} {plan.unit_name} always;\n"
        "    }\n"
        "}\n"
    )


_MAP_KEY = re.compile(r'^\s*"~\^Bearer ([A-Za-z0-9_\[\].-]+)\$"\s+1;', re.M)


def first_key(keys_map: str) -> str | None:
    """One accepted API key from a deployment's keys' map (components/render_access.py), for the check
    through the front door; None when the map lists none (an open deployment)."""
    match = _MAP_KEY.search(keys_map)
    return match.group(1).replace("[.]", ".") if match else None


_SS_PEER_PORT = re.compile(r":(\d+)\s*$")


def established_to(ss_output: str, port: int) -> int:
    """Connections in `ss -Htn state established` output whose peer is `port`: requests the front door
    still carries to an engine (it opens one upstream connection per request, no keepalive)."""
    count = 0
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            match = _SS_PEER_PORT.search(fields[3])
            if match and int(match.group(1)) == port:
                count += 1
    return count


# ---- the host, as the transaction uses it -------------------------------------------------------------


class SystemdHost:
    """systemctl, journalctl and files; one place, so the transaction reads as its steps."""

    def run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def attempt(self, *args: str) -> tuple[int, str]:
        """Exit status and output (stderr after stdout) of a command that may fail."""
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        return result.returncode, (result.stdout + result.stderr).strip()

    def backend_behind(self, url: str, headers: Mapping[str, str] | None = None, cafile: str | None = None) -> str:
        """The engine unit the front door says answered a GET of `url` (its header); "" when none did.

        Over TLS the front door's own certificate (`cafile`) is the trust anchor: the check reaches it on
        a loopback address its certificate need not name."""
        context = None
        if cafile is not None:
            context = ssl.create_default_context(cafile=cafile)
            context.check_hostname = False
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        request = urllib.request.Request(url, headers=dict(headers or {}))
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return str(response.headers.get(BACKEND_HEADER, ""))

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, *(f"--property={p}" for p in props), check=False)
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def state(self, unit: str) -> str:
        return self.show(unit, "ActiveState").get("ActiveState", "inactive")

    def running(self, unit: str) -> bool:
        return self.state(unit) in RUNNING_STATES

    def enabled(self, unit: str) -> bool:
        return self.run("systemctl", "is-enabled", unit, check=False).strip() == "enabled"

    def unit_file(self, unit: str) -> Path | None:
        path = self.show(unit, "FragmentPath").get("FragmentPath", "")
        return Path(path) if path else None

    def start_timeout(self, unit: str) -> float:
        value = self.show(unit, "TimeoutStartUSec").get("TimeoutStartUSec", "")
        try:
            parsed = parse_timespan(value) if value else DEFAULT_START_TIMEOUT
        except ValueError:
            return DEFAULT_START_TIMEOUT
        # "infinity" (or 0): systemd waits without limit; the rollback waits a day.
        return parsed or 24 * 3600.0

    def journal_cursor(self) -> str:
        out = self.run("journalctl", "-n", "0", "--show-cursor", "-o", "cat", check=False)
        return next(
            (line.removeprefix("-- cursor: ") for line in out.splitlines() if line.startswith("-- cursor: ")), ""
        )

    def journal(self, unit: str, cursor: str, lines: int | None = None) -> tuple[list[str], str]:
        """Lines of `unit` after `cursor`, and the cursor after them."""
        args = ["journalctl", "-u", unit, "-o", "cat", "--no-pager", "--show-cursor"]
        if cursor:
            args += ["--after-cursor", cursor]
        out = self.run(*args, check=False).splitlines()
        new_cursor = cursor
        if out and out[-1].startswith("-- cursor: "):
            new_cursor = out.pop().removeprefix("-- cursor: ")
        return (out[-lines:] if lines else out), new_cursor


def now() -> float:
    return time.monotonic()


# ---- the transaction ----------------------------------------------------------------------------------


@dataclass
class Backup:
    unit: str
    file: Path | None  # where its unit file lived (None: it had none)
    saved: Path | None  # the copy in the state directory
    was_running: bool
    was_enabled: bool


class Transaction:
    def __init__(
        self,
        plan: Plan,
        host: SystemdHost | None = None,
        log: Callable[[str], None] = print,
        state_root: Path = STATE_ROOT,
        unit_dir: Path = UNIT_DIR,
        env_dir: Path = ENV_DIR,
        sleep: Callable[[float], None] = time.sleep,
        front_door_dir: Path = FRONT_DOOR_DIR,
    ) -> None:
        self.plan = plan
        self.host = host or SystemdHost()
        self._log = log
        self.state_root = state_root
        self.unit_dir = unit_dir
        self.env_dir = env_dir
        self.front_door_dir = front_door_dir
        self.sleep = sleep
        self.state_dir = Path(plan.state_dir)
        self.timings: dict[str, float] = {}

    def log(self, message: str) -> None:
        self._log(f"[{self.plan.deployment}] {message}")

    # -- checks while the old model serves ------------------------------------------------------------

    def live_claims(self) -> dict[str, Claims]:
        claims: dict[str, Claims] = {}
        directory = self.state_root / "claims"
        if directory.is_dir():
            for path in directory.glob("*.json"):
                owner = path.name.removesuffix(".json")
                # A claim counts while its owner's deployment exists on this host.
                if (self.state_root / "deployments" / owner).is_dir():
                    claims[owner] = Claims.from_json(path.read_text(encoding="utf-8"))
        return claims

    def others_gpus(self) -> frozenset[int]:
        """GPUs other live deployments on this host claim: not for this deployment's engines."""
        return frozenset(
            gpu for owner, held in self.live_claims().items() if owner != self.plan.owner for gpu in held.gpus
        )

    def claim(self, gpus: frozenset[int] = frozenset(), write: bool = True) -> None:
        """Claim the ports and unit name (and `gpus`, the GPUs the engines use now) for this deployment.

        GPUs are claimed as placed, not as listed: deployments[].gpus is where the deployment may run,
        and a GPU only it lists but does not use stays free for another stack's deployment."""
        ports = frozenset({self.plan.port, *self.plan.backend_ports})
        wanted = Claims(gpus, ports, frozenset({self.plan.unit_name}))
        problems = claim_conflicts(self.plan.owner, wanted, self.live_claims())
        if problems:
            raise SwapRefused(" ".join(problems))
        if not write:
            return
        directory = self.state_root / "claims"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.plan.owner}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(wanted.to_json(), encoding="utf-8")
        temporary.replace(path)

    def run_tool(self, tool: str, *args: str) -> int:
        """Run one of the host tools with the deployment's python, its output logged line by line."""
        result = subprocess.run(
            [self.plan.python, f"{self.plan.tools_dir}/{tool}", *args], capture_output=True, text=True, check=False
        )
        for line in (result.stdout + result.stderr).splitlines():
            self.log(line)
        return result.returncode

    def check_model(self) -> None:
        self.log(f"checking {self.plan.model_dir} against its verified manifest")
        if self.run_tool("model-sync", "check", "--dir", self.plan.model_dir) != 0:
            raise SwapRefused(f"the model files in {self.plan.model_dir} do not match their verified manifest")

    def stage_copy(self) -> None:
        """Copy the model to the host's staging disk, which the new unit loads from, while the old one
        serves; files already there and unchanged are kept. The unit needs it: a failed copy refuses."""
        copy = self.plan.staged_copy
        assert copy is not None
        started = now()
        self.log(f"copying {self.plan.model_dir} to the staging path {copy}")
        margin = f"{self.plan.prewarm_margin_gib or 0:g}"
        if self.run_tool("prewarm", "copy", "--dir", self.plan.model_dir, "--to", copy, "--margin-gib", margin) != 0:
            raise SwapRefused(f"the copy of {self.plan.model_dir} to {copy} (hosts[].stagingPath) failed")
        self.timings["stage_copy"] = now() - started

    def drop_staged_copy(self, record: ActiveRecord | None) -> None:
        """Remove the staging copy the previous engine loaded from, unless another deployment uses it."""
        if record is None or record.staged_copy is None or record.staged_copy == self.plan.staged_copy:
            return
        directory = self.state_root / "deployments"
        for active in directory.glob("*/active") if directory.is_dir() else ():
            other = ActiveRecord.parse(active.read_text(encoding="utf-8"))
            if active.parent.name != self.plan.owner and other is not None and other.staged_copy == record.staged_copy:
                return
        shutil.rmtree(record.staged_copy, ignore_errors=True)
        self.log(f"removed the staging copy {record.staged_copy}")

    def prewarm(self) -> None:
        """Read the new model into the page cache while the old one serves: its load then reads RAM, not
        a slow or shared disk. An optimisation only: a failure is said and the swap goes on. A staging
        copy takes its place (copying reads the files, and the copy's pages stay cached)."""
        if self.plan.staged_copy is not None:
            self.stage_copy()
            return
        if self.plan.prewarm_margin_gib is None:
            return
        started = now()
        margin = f"{self.plan.prewarm_margin_gib:g}"
        every = str(self.plan.report_every)
        status = self.run_tool(
            "prewarm", "cache", "--dir", self.plan.model_dir, "--margin-gib", margin, "--report-every", every
        )
        if status != 0:
            self.log(f"pre-warm failed (exit {status}); the load reads the files from disk")
        self.timings["prewarm"] = now() - started

    def survey(self) -> dict[str, Any]:
        result = subprocess.run(
            [self.plan.python, f"{self.plan.tools_dir}/survey"], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SwapRefused(f"the survey of this host failed: {result.stderr.strip()[-300:]}")
        found: dict[str, Any] = json.loads(result.stdout)
        return found

    def busy_gpus(self, found: dict[str, Any], leaving: Sequence[str]) -> frozenset[int]:
        """GPUs of the pool held by processes the swap does not stop: they cannot take the new engine."""
        busy: set[int] = set()
        for holder in found.get("gpuHolders", []):
            if holder.get("unit") in leaving:
                continue
            busy.update(set(holder.get("gpus", [])) & set(self.plan.gpus))
        return frozenset(busy)

    def check_holders(self, found: dict[str, Any], leaving: Sequence[str], decision: Decision) -> None:
        """Refuse, before anything stops, when a port or the chosen GPUs are held by what the swap will not stop."""
        owners = {u["name"]: u.get("owner") for u in found.get("units", [])}

        def ours(unit: str | None) -> bool:
            return unit is not None and (unit in leaving or owners.get(unit) == self.plan.owner)

        problems = []
        for listener in found.get("listeners", []):
            port, unit = listener["port"], listener.get("unit")
            public = port == self.plan.port and not ours(unit) and unit != FRONT_DOOR_UNIT
            engine = port == decision.placement.port and not ours(unit)
            if public or engine:
                what = "the front door's port" if public else "the new engine's port (deployments[].backendPorts)"
                problems.append(
                    f"port {port}, {what}, is held by PID {listener['pid']} ({listener.get('cmd', '')}) of "
                    f"{unit or 'no systemd unit'}; add its unit to deployments[].replaces or stop it"
                )
        for holder in found.get("gpuHolders", []):
            shared = set(holder.get("gpus", [])) & set(decision.placement.gpus)
            unit = holder.get("unit")
            if not shared or ours(unit):
                continue
            if unit is None and self.plan.foreign_gpu_processes == "stop":
                continue  # the GPU-release guard stops it after the old units stopped
            problems.append(
                f"GPU {','.join(map(str, sorted(shared)))} is held by PID {holder['pid']} ({holder.get('cmd', '')}) of "
                f"{unit or 'no systemd unit'}; stop it, adopt its unit (deployments[].replaces) or set "
                "deployments[].foreignGpuProcesses: stop"
            )
        if problems:
            raise SwapRefused("; ".join(problems))

    # -- the swap -------------------------------------------------------------------------------------

    def active_record(self) -> ActiveRecord | None:
        path = self.state_dir / "active"
        return ActiveRecord.parse(path.read_text(encoding="utf-8")) if path.is_file() else None

    def write_active(self, record: ActiveRecord) -> None:
        temporary = self.state_dir / "active.tmp"
        temporary.write_text(record.text(), encoding="utf-8")
        temporary.replace(self.state_dir / "active")

    def backup(self, unit: str, backups: Path) -> Backup:
        file = self.host.unit_file(unit)
        saved = None
        if file is not None and file.is_file():
            saved = backups / unit
            shutil.copy2(file, saved)
        return Backup(unit, file, saved, self.host.running(unit), self.host.enabled(unit))

    @property
    def site_path(self) -> Path:
        return self.front_door_dir / "sites" / f"{self.plan.owner}.conf"

    def placement_path(self, unit: str) -> Path:
        return self.env_dir / f"{unit.removesuffix('.service')}.placement.env"

    def run(self) -> Result:
        plan = self.plan
        started = now()
        staged_unit = self.state_dir / "staged" / plan.unit_name
        staged_env = self.state_dir / "staged" / f"{plan.unit_stem}.env"
        unit_path = self.unit_dir / plan.unit_name
        env_path = self.env_dir / f"{plan.unit_stem}.env"
        try:
            self.claim(write=False)  # ports and unit name first, before anything is read
            if not staged_unit.is_file():
                raise SwapRefused(f"nothing staged at {staged_unit}; run pulumi up again")
            self.check_model()
            old = self.active_record()
            old_unit = old.unit if old else ""
            # Every unit that may hold this deployment's GPUs or port now, and must stop for the new one.
            leaving = [u for u in dict.fromkeys([old_unit, plan.unit_name, *plan.replaces]) if u]
            found = self.survey()
            replaces_running = any(self.host.running(u) for u in plan.replaces)
            old_running = bool(old_unit) and self.host.running(old_unit)
            busy = self.busy_gpus(found, leaving) | (self.others_gpus() & frozenset(plan.gpus))
            decision = decide(plan, old, old_running, busy, replaces_running)
            self.check_holders(
                found, [u for u in leaving if decision.mode == "stop-start" or u != plan.unit_name], decision
            )
            # While a blue/green swap runs, both engines hold their GPUs.
            both = decision.placement.gpus + (old.gpus if old is not None and decision.mode == "blue-green" else ())
            self.claim(frozenset(both))
            self.prewarm()
        except SwapRefused as refusal:
            return Result("refused", f"refused: {refusal}", plan.digest)

        if (
            old is not None
            and old_unit == plan.unit_name
            and old.placement is not None
            and _same(staged_unit, unit_path)
            and _same(staged_env, env_path)
            and self.host.running(plan.unit_name)
            and not replaces_running
        ):
            if _text(self.site_path) == front_door_site(plan, old.placement):
                state = self.host.state(plan.unit_name)
                return Result(
                    "unchanged",
                    f"{plan.unit_name} already serves {plan.served_name} with this configuration ({state})",
                    plan.digest,
                )
            # Only the site changes (the way it is written, e.g. when access control came): rewrite it with
            # a graceful reload; the engine keeps running.
            problem = self.switch_front_door(old.placement)
            if problem is not None:
                return Result(
                    "rolled-back", f"the front door's new site failed, the old one is back: {problem}", plan.digest
                )
            return Result(
                "unchanged",
                f"{plan.unit_name} already serves {plan.served_name}; its front door site was rewritten",
                plan.digest,
            )
        self.log(f"swap mode: {decision.mode}: {decision.reason}; new engine on {decision.placement.describe()}")
        self.timings["blue_green"] = 1.0 if decision.mode == "blue-green" else 0.0
        if decision.mode == "blue-green":
            assert old is not None
            return self.blue_green(old, decision.placement, staged_unit, staged_env, started)

        backups_dir = self.state_dir / "previous"
        shutil.rmtree(backups_dir, ignore_errors=True)
        backups_dir.mkdir(parents=True, mode=0o700)
        backups = [self.backup(unit, backups_dir) for unit in leaving]
        env_backup = backups_dir / env_path.name
        if env_path.is_file():
            shutil.copy2(env_path, env_backup)
        placement_backup = backups_dir / "placement.env"
        if self.placement_path(plan.unit_name).is_file():
            shutil.copy2(self.placement_path(plan.unit_name), placement_backup)
        site_before = _text(self.site_path)
        if unit_path.is_file() and not is_managed(unit_path.read_text(encoding="utf-8", errors="replace")):
            self.log(f"{plan.unit_name} is a hand-made unit of the same name: it is replaced (backup in {backups_dir})")

        self.env_dir.mkdir(parents=True, exist_ok=True)
        _install(staged_unit, unit_path, 0o644)
        _install(staged_env, env_path, 0o600)
        _write(self.placement_path(plan.unit_name), decision.placement.env_text(), 0o644)
        self.host.run("systemctl", "daemon-reload")

        stop_started = now()
        for backup in backups:
            if backup.was_running:
                self.log(f"stopping {backup.unit}")
                self.host.run("systemctl", "stop", backup.unit, check=False)
            if backup.unit != plan.unit_name and backup.was_enabled:
                self.host.run("systemctl", "disable", "--quiet", backup.unit, check=False)
        self.timings["stop"] = now() - stop_started
        if any(b.was_running for b in backups):
            self.log(f"stopped {', '.join(b.unit for b in backups if b.was_running)} in {self.timings['stop']:.1f} s")

        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
        ready, cursor = self.start_new(f"serving {plan.served_name} on {decision.placement.describe()}")
        if ready:
            switched = self.switch_front_door(decision.placement)
            if switched is not None:
                self.log(f"the front door did not switch to {plan.unit_name}: {switched}")
        if not ready or switched is not None:
            return self.roll_back(backups, env_backup, placement_backup, unit_path, env_path, cursor, site_before, old)
        self.timings["total"] = now() - started
        self.write_active(self.record(decision.placement))
        if old_unit and old_unit != plan.unit_name and old_unit not in plan.replaces:
            # The previous managed unit of this deployment: its files go, a backup stays until the next swap.
            self.remove_unit_files(old_unit)
        adopted = [u for u in plan.replaces if any(b.unit == u and b.file for b in backups)]
        if adopted:
            self.log(f"adopted: {', '.join(adopted)} stopped and disabled (unit files backed up in {backups_dir})")
        return self.succeeded(decision.placement, old)

    def record(self, placement: Placement) -> ActiveRecord:
        plan = self.plan
        return ActiveRecord(
            plan.unit_name, plan.served_name, plan.port, placement.gpus, placement.port, plan.staged_copy
        )

    def succeeded(self, placement: Placement, old: ActiveRecord | None) -> Result:
        plan = self.plan
        self.claim(frozenset(placement.gpus))
        self.drop_staged_copy(old)
        self.log(f"serving {plan.served_name} from {plan.unit_name} behind the front door on port {plan.port}")
        self.log("timing: " + " ".join(f"{k}={v:.2f}s" for k, v in self.timings.items() if k != "blue_green"))
        return Result("succeeded", f"serving {plan.served_name} from {plan.unit_name}", plan.digest, self.timings)

    def remove_unit_files(self, unit: str) -> None:
        (self.unit_dir / unit).unlink(missing_ok=True)
        stem = unit.removesuffix(".service")
        (self.env_dir / f"{stem}.env").unlink(missing_ok=True)
        self.placement_path(unit).unlink(missing_ok=True)
        self.host.run("systemctl", "daemon-reload")
        self.host.run("systemctl", "reset-failed", unit, check=False)

    def blue_green(
        self, old: ActiveRecord, placement: Placement, staged_unit: Path, staged_env: Path, started: float
    ) -> Result:
        """Start the new engine beside the old one, switch the front door once it answers, drain, stop the old."""
        plan = self.plan
        unit_path = self.unit_dir / plan.unit_name
        if unit_path.is_file() and not is_managed(unit_path.read_text(encoding="utf-8", errors="replace")):
            return Result(
                "refused", f"refused: {unit_path} is a hand-made unit; add it to deployments[].replaces", plan.digest
            )
        self.env_dir.mkdir(parents=True, exist_ok=True)
        _install(staged_unit, unit_path, 0o644)
        _install(staged_env, self.env_dir / f"{plan.unit_stem}.env", 0o600)
        _write(self.placement_path(plan.unit_name), placement.env_text(), 0o644)
        self.host.run("systemctl", "daemon-reload")
        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        ready, cursor = self.start_new(f"on {placement.describe()} beside {old.unit}, which keeps serving")
        problem = None
        if not ready:
            problem = "it did not become ready"
        else:
            switched_at = now()
            problem = self.switch_front_door(placement)
            self.timings["switch"] = now() - switched_at
        if problem is not None:
            tail, _ = self.host.journal(plan.unit_name, cursor, lines=plan.journal_lines)
            self.host.run("systemctl", "stop", plan.unit_name, check=False)
            self.remove_unit_files(plan.unit_name)
            journal = "\n".join(f"  | {line}" for line in tail)
            return Result(
                "rolled-back",
                f"swap of deployment {plan.deployment} to {plan.unit_name} failed: {problem}; {old.unit} kept "
                f"serving throughout (blue/green) and still serves.\nlast lines of the {plan.unit_name} journal:\n{journal}",
                plan.digest,
                self.timings,
            )
        self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
        self.write_active(self.record(placement))
        self.drain(old)
        stop_started = now()
        self.host.run("systemctl", "stop", old.unit, check=False)
        self.host.run("systemctl", "disable", "--quiet", old.unit, check=False)
        self.timings["stop"] = now() - stop_started
        self.log(f"stopped {old.unit} in {self.timings['stop']:.1f} s")
        self.remove_unit_files(old.unit)
        self.timings["total"] = now() - started
        return self.succeeded(placement, old)

    def start_new(self, what: str) -> tuple[bool, str]:
        """Start the new unit and wait until it serves: (ready, the journal cursor from before its start)."""
        plan = self.plan
        self.log(f"starting {plan.unit_name} ({what}; up to {plan.ready_timeout} s)")
        cursor = self.host.journal_cursor()
        start = now()
        self.host.run("systemctl", "start", "--no-block", plan.unit_name)
        ready = self.wait_active(plan.unit_name, plan.ready_timeout)
        if ready:
            self.timings["start_to_ready"] = now() - start
        return ready, cursor

    def drain(self, old: ActiveRecord) -> None:
        """Until the front door carries no request to the old engine, or drain_seconds pass."""
        if old.backend_port is None:
            return
        started = now()
        last_report = 0.0
        while True:
            carried = established_to(self.host.run("ss", "-Htn", "state", "established", check=False), old.backend_port)
            elapsed = now() - started
            if carried == 0:
                self.timings["drain"] = elapsed
                self.log(f"drained {old.unit} in {elapsed:.1f} s")
                return
            if elapsed >= self.plan.drain_seconds:
                self.timings["drain"] = elapsed
                self.log(
                    f"{old.unit} still carries {carried} request(s) after {self.plan.drain_seconds} s "
                    "(deployments[].drainSeconds); stopping it"
                )
                return
            if elapsed - last_report >= self.plan.report_every:
                self.log(f"draining {old.unit}: {carried} request(s) in flight")
                last_report = elapsed
            self.sleep(0.2)

    def switch_front_door(self, placement: Placement | None) -> str | None:
        """Point the deployment's site at `placement` (None: remove it) with a graceful reload and check
        through the public port that the new engine answers. None when done; else what failed, the site
        put back as it was."""
        plan = self.plan
        before = _text(self.site_path)
        wanted = front_door_site(plan, placement) if placement is not None else None
        if wanted == before and (wanted is None or self.host.running(FRONT_DOOR_UNIT)):
            return self.verify_front_door(placement)
        self.site_path.parent.mkdir(parents=True, exist_ok=True)
        if wanted is None:
            self.site_path.unlink(missing_ok=True)
        else:
            _write(self.site_path, wanted, 0o644)
        problem = self.reload_front_door()
        if problem is None:
            problem = self.verify_front_door(placement)
        if problem is not None:
            _restore(self.site_path, before)
            self.reload_front_door()
        return problem

    def reload_front_door(self) -> str | None:
        status, output = self.host.attempt(NGINX, "-t", "-q", "-c", str(self.front_door_dir / "nginx.conf"))
        if status != 0:
            return f"nginx -t refused the configuration: {output[-400:]}"
        action = "reload" if self.host.running(FRONT_DOOR_UNIT) else "start"
        status, output = self.host.attempt("systemctl", action, FRONT_DOOR_UNIT)
        if status != 0:
            return f"systemctl {action} {FRONT_DOOR_UNIT} failed: {output[-400:]}"
        return None

    def verify_front_door(self, placement: Placement | None, timeout: float = 15.0) -> str | None:
        """The public port answers /v1/models from the new engine (its header), within `timeout`."""
        if placement is None:
            return None
        host = self.plan.readiness_address
        cafile, headers = self.front_door_credentials()
        scheme = "https" if cafile is not None else "http"
        url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{self.plan.port}/v1/models"
        deadline = now() + timeout
        seen = "no answer"
        while True:
            try:
                backend = self.host.backend_behind(url, headers, cafile)
                if backend == self.plan.unit_name:
                    return None
                seen = f"answered by {backend or 'no engine of ours'}"
            except (urllib.error.URLError, OSError) as error:
                seen = str(getattr(error, "reason", error))
            if now() >= deadline:
                return f"{url} did not answer from {self.plan.unit_name} within {timeout:g} s ({seen})"
            self.sleep(0.2)

    def front_door_credentials(self) -> tuple[str | None, dict[str, str]]:
        """The certificate to trust (None: plain HTTP) and the headers (an API key) of the check through
        the front door, read from the deployment's access files: no key on a command line or in a unit."""
        plan = self.plan
        if not plan.access_dir:
            return None, {}
        certificate = Path(plan.access_dir) / "tls.crt"
        keys = _text(Path(plan.keys_file)) if plan.keys_file else None
        key = first_key(keys) if keys is not None else None
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return (str(certificate) if certificate.is_file() else None), headers

    def wait_active(self, unit: str, timeout: float) -> bool:
        """Until `unit` is active (its ExecStartPost saw it serve), failed, restarting, or out of time."""
        started = now()
        last_report = 0.0
        while True:
            props = self.host.show(unit, "ActiveState", "NRestarts")
            state = props.get("ActiveState", "inactive")
            elapsed = now() - started
            if state == "active":
                return True
            if state == "failed":
                self.log(f"{unit} failed after {elapsed:.0f} s")
                return False
            if int(props.get("NRestarts", "0") or 0) > 0:
                self.log(f"{unit} failed after {elapsed:.0f} s and systemd is restarting it")
                return False
            if elapsed >= timeout:
                self.log(f"{unit} is not ready after {timeout:g} s (state: {state})")
                return False
            if elapsed - last_report >= self.plan.report_every:
                lines, _ = self.host.journal(unit, "", lines=1)
                self.log(
                    f"starting {unit}: {elapsed:.0f}/{timeout:g} s, state {state}; last log: {(lines or ['none'])[-1][:200]}"
                )
                last_report = elapsed
            self.sleep(0.5)

    def roll_back(
        self,
        backups: Sequence[Backup],
        env_backup: Path,
        placement_backup: Path,
        unit_path: Path,
        env_path: Path,
        cursor: str,
        site_before: str | None,
        old: ActiveRecord | None,
    ) -> Result:
        plan = self.plan
        tail, _ = self.host.journal(plan.unit_name, cursor, lines=plan.journal_lines)
        self.host.run("systemctl", "stop", plan.unit_name, check=False)
        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        own = next((b for b in backups if b.unit == plan.unit_name), None)
        if own is not None and own.saved is not None:
            _install(own.saved, unit_path, 0o644)
            if env_backup.is_file():
                _install(env_backup, env_path, 0o600)
            if placement_backup.is_file():
                _install(placement_backup, self.placement_path(plan.unit_name), 0o644)
        else:
            self.host.run("systemctl", "disable", "--quiet", plan.unit_name, check=False)
            unit_path.unlink(missing_ok=True)
            env_path.unlink(missing_ok=True)
            self.placement_path(plan.unit_name).unlink(missing_ok=True)
        for backup in backups:
            if backup.unit != plan.unit_name and backup.saved is not None and backup.file is not None:
                _install(backup.saved, backup.file, 0o644)
        self.host.run("systemctl", "daemon-reload")
        # The front door as it was: pointing at the old engine, or (an engine on the public port itself
        # before) without this deployment's site, so that engine can bind its port again.
        if _text(self.site_path) != site_before:
            _restore(self.site_path, site_before)
            problem = self.reload_front_door()
            if problem is not None:
                self.log(f"rolling back: the front door did not reload: {problem}")
        restarted: list[str] = []
        failed: list[str] = []
        for backup in backups:
            if backup.was_enabled:
                self.host.run("systemctl", "enable", "--quiet", backup.unit, check=False)
            if not backup.was_running:
                continue
            # Wait with the old unit's own start timeout, not the new model's.
            timeout = self.host.start_timeout(backup.unit)
            self.log(f"rolling back: starting {backup.unit} again (up to {timeout:g} s)")
            self.host.run("systemctl", "start", "--no-block", backup.unit, check=False)
            (restarted if self.wait_active(backup.unit, timeout) else failed).append(backup.unit)
        if not any(b.was_running for b in backups):
            (self.state_root / "claims" / f"{plan.owner}.json").unlink(missing_ok=True)
        if failed:
            status = "rollback-failed"
            outcome = f"ROLLBACK FAILED: {', '.join(failed)} did not become ready either; the host serves nothing on port {plan.port}"
        elif restarted:
            status = "rolled-back"
            outcome = f"rolled back: {', '.join(restarted)} {'serves' if len(restarted) == 1 else 'serve'} again"
        else:
            status = "rolled-back"
            outcome = "nothing was serving before, so nothing was restarted"
        journal = "\n".join(f"  | {line}" for line in tail)
        message = f"swap of deployment {plan.deployment} to {plan.unit_name} failed; {outcome}.\nlast lines of the {plan.unit_name} journal:\n{journal}"
        return Result(status, message, plan.digest, self.timings)


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".vllm-fleet-tmp")
    temporary.write_text(text, encoding="utf-8")
    os.chmod(temporary, mode)
    temporary.replace(path)


def _restore(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        _write(path, text, 0o644)


def _same(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()


def _install(source: Path, target: Path, mode: int) -> None:
    temporary = target.with_name(target.name + ".vllm-fleet-tmp")
    shutil.copyfile(source, temporary)
    os.chmod(temporary, mode)
    temporary.replace(target)


@contextlib.contextmanager
def host_lock(state_root: Path, timeout: float = 3600) -> Iterator[None]:
    """One swap at a time per host: two deployments must not stop and start units underneath each other."""
    state_root.mkdir(parents=True, exist_ok=True)
    with open(state_root / "host.lock", "w") as handle:
        deadline = now() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if now() > deadline:
                    raise TimeoutError(f"another swap held {state_root / 'host.lock'} for {timeout:g} s") from None
                time.sleep(1)
        yield


def result_path(plan: Plan) -> Path:
    return Path(plan.state_dir) / "swap-result.json"


def run_transaction(plan_file: str) -> int:
    plan = Plan.load(plan_file)
    with host_lock(STATE_ROOT):
        try:
            result = Transaction(plan, log=lambda m: print(m, flush=True)).run()
        except Exception as error:  # the result must be written whatever happens
            result = Result(
                "rollback-failed", f"swap transaction crashed: {type(error).__name__}: {error}", plan.digest
            )
    path = result_path(plan)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(result)), encoding="utf-8")
    temporary.replace(path)
    print(("" if result.ok else "FAILED: ") + result.message.splitlines()[0], flush=True)
    return 0 if result.ok else 1


# ---- the Pulumi step's side: start or attach, follow, report ------------------------------------------


def follow(plan: Plan, host: SystemdHost, out: Callable[[str], None], cursor: str, poll: float = 1.0) -> None:
    """Print the transaction unit's journal after `cursor` until the unit is gone (collected when it ends)."""
    while True:
        lines, cursor = host.journal(plan.transaction_unit, cursor)
        for line in lines:
            out(line)
        if host.show(plan.transaction_unit, "ActiveState").get("ActiveState", "inactive") not in RUNNING_STATES:
            time.sleep(poll / 2)  # journald may still be writing the last lines
            lines, cursor = host.journal(plan.transaction_unit, cursor)
            for line in lines:
                out(line)
            return
        time.sleep(poll)


def read_result(plan: Plan) -> Result | None:
    path = result_path(plan)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Result(**data)


def start(plan_file: str, host: SystemdHost | None = None, poll: float = 1.0) -> int:
    plan = Plan.load(plan_file)
    host = host or SystemdHost()

    def out(line: str) -> None:
        print(line, flush=True)

    if host.running(plan.transaction_unit):
        out(
            f"[{plan.deployment}] a swap transaction is already running on this host ({plan.transaction_unit}): attaching"
        )
        follow(plan, host, out, host.journal_cursor(), poll)
        previous = read_result(plan)
        if previous is not None and previous.plan_digest == plan.digest:
            return report(previous)
        out(f"[{plan.deployment}] that transaction was for another plan; starting this one")
    result_path(plan).unlink(missing_ok=True)
    cursor = host.journal_cursor()
    host.run(
        "systemd-run",
        f"--unit={plan.transaction_unit}",
        "--collect",
        "--quiet",
        f"--description=vllm-fleet swap of deployment {plan.owner}",
        plan.python,
        f"{plan.tools_dir}/swap",
        "run",
        "--plan",
        plan_file,
    )
    follow(plan, host, out, cursor, poll)
    result = read_result(plan)
    if result is None:
        print(
            f"swap transaction {plan.transaction_unit} ended without a result; see journalctl -u {plan.transaction_unit}",
            file=sys.stderr,
        )
        return 1
    return report(result)


def report(result: Result) -> int:
    """Say the result from its file: the journal's last lines may reach journald after the unit is gone."""
    if result.ok:
        print(f"swap result: {result.status}: {result.message.splitlines()[0]}", flush=True)
        return 0
    print(result.message, file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "run"])
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_transaction(args.plan)
    return start(args.plan)


if __name__ == "__main__":
    sys.exit(main())
