#!/usr/bin/env python3
"""vllm-fleet swap: make a deployment serve its staged unit, as a transaction that the host finishes.

    swap start --plan PLAN.json   what the Pulumi step runs: start the transaction as a transient systemd
                                  unit (or attach to the one already running for this deployment), print
                                  its journal as it goes, and exit with its result
    swap run --plan PLAN.json     the transaction itself, inside that unit

Everything that can fail is checked while the old model still serves (claims on GPUs, port and unit
name, the model files against their manifest, the staged unit; the unit step already had the host's
vLLM parse the launch). Then, in order: back up the units it replaces (the previous managed unit, a
hand-made unit of the same name, and the hand-made units the stack names in `replaces`), install the new
unit, stop and disable the old ones, start the new one and wait until it serves (its ExecStartPre guard
frees the GPUs, its ExecStartPost waits for readiness). If it does not serve in time, the new unit is
stopped, every backed-up unit file is put back, the units that ran before are started again and waited
for with their own start timeout, and the transaction reports the new unit's journal tail.

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
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_ROOT = Path("/var/lib/vllm-fleet")
UNIT_DIR = Path("/etc/systemd/system")
ENV_DIR = Path("/etc/vllm-fleet")
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
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["gpus"] = tuple(data.get("gpus", ()))
        data["replaces"] = tuple(data.get("replaces", ()))
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


# ---- the host, as the transaction uses it -------------------------------------------------------------


class SystemdHost:
    """systemctl, journalctl and files; one place, so the transaction reads as its steps."""

    def run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

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
    ) -> None:
        self.plan = plan
        self.host = host or SystemdHost()
        self._log = log
        self.state_root = state_root
        self.unit_dir = unit_dir
        self.env_dir = env_dir
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

    def claim(self) -> None:
        wanted = Claims(frozenset(self.plan.gpus), frozenset({self.plan.port}), frozenset({self.plan.unit_name}))
        problems = claim_conflicts(self.plan.owner, wanted, self.live_claims())
        if problems:
            raise SwapRefused(" ".join(problems))
        directory = self.state_root / "claims"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.plan.owner}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(wanted.to_json(), encoding="utf-8")
        temporary.replace(path)

    def check_model(self) -> None:
        self.log(f"checking {self.plan.model_dir} against its verified manifest")
        result = subprocess.run(
            [self.plan.python, f"{self.plan.tools_dir}/model-sync", "check", "--dir", self.plan.model_dir],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in (result.stdout + result.stderr).splitlines():
            self.log(line)
        if result.returncode != 0:
            raise SwapRefused(f"the model files in {self.plan.model_dir} do not match their verified manifest")

    def survey(self) -> dict[str, Any]:
        result = subprocess.run(
            [self.plan.python, f"{self.plan.tools_dir}/survey"], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SwapRefused(f"the survey of this host failed: {result.stderr.strip()[-300:]}")
        found: dict[str, Any] = json.loads(result.stdout)
        return found

    def check_holders(self, leaving: Sequence[str]) -> None:
        """Refuse, before anything stops, when the port or the GPUs are held by what the swap will not stop."""
        found = self.survey()
        owners = {u["name"]: u.get("owner") for u in found.get("units", [])}

        def ours(unit: str | None) -> bool:
            return unit is not None and (unit in leaving or owners.get(unit) == self.plan.owner)

        problems = []
        for listener in found.get("listeners", []):
            if listener["port"] == self.plan.port and not ours(listener.get("unit")):
                problems.append(
                    f"port {self.plan.port} is held by PID {listener['pid']} ({listener.get('cmd', '')}) of "
                    f"{listener.get('unit') or 'no systemd unit'}; add its unit to deployments[].replaces or stop it"
                )
        for holder in found.get("gpuHolders", []):
            shared = set(holder.get("gpus", [])) & set(self.plan.gpus)
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

    def active_record(self) -> dict[str, str]:
        path = self.state_dir / "active"
        if not path.is_file():
            return {}
        return dict(line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if "=" in line)

    def backup(self, unit: str, backups: Path) -> Backup:
        file = self.host.unit_file(unit)
        saved = None
        if file is not None and file.is_file():
            saved = backups / unit
            shutil.copy2(file, saved)
        return Backup(unit, file, saved, self.host.running(unit), self.host.enabled(unit))

    def run(self) -> Result:
        plan = self.plan
        started = now()
        staged_unit = self.state_dir / "staged" / plan.unit_name
        staged_env = self.state_dir / "staged" / f"{plan.unit_stem}.env"
        unit_path = self.unit_dir / plan.unit_name
        env_path = self.env_dir / f"{plan.unit_stem}.env"
        try:
            self.claim()
            if not staged_unit.is_file():
                raise SwapRefused(f"nothing staged at {staged_unit}; run pulumi up again")
            self.check_model()
            old_unit = self.active_record().get("UNIT", "")
            # Every unit that may hold this deployment's GPUs or port now, and must stop for the new one.
            leaving = [u for u in dict.fromkeys([old_unit, plan.unit_name, *plan.replaces]) if u]
            self.check_holders(leaving)
        except SwapRefused as refusal:
            return Result("refused", f"refused: {refusal}", plan.digest)

        if (
            old_unit == plan.unit_name
            and _same(staged_unit, unit_path)
            and _same(staged_env, env_path)
            and self.host.running(plan.unit_name)
            and not [u for u in plan.replaces if self.host.running(u)]
        ):
            state = self.host.state(plan.unit_name)
            return Result(
                "unchanged",
                f"{plan.unit_name} already serves {plan.served_name} with this configuration ({state})",
                plan.digest,
            )

        backups_dir = self.state_dir / "previous"
        shutil.rmtree(backups_dir, ignore_errors=True)
        backups_dir.mkdir(parents=True, mode=0o700)
        backups = [self.backup(unit, backups_dir) for unit in leaving]
        env_backup = backups_dir / env_path.name
        if env_path.is_file():
            shutil.copy2(env_path, env_backup)
        if unit_path.is_file() and not is_managed(unit_path.read_text(encoding="utf-8", errors="replace")):
            self.log(f"{plan.unit_name} is a hand-made unit of the same name: it is replaced (backup in {backups_dir})")

        self.env_dir.mkdir(parents=True, exist_ok=True)
        _install(staged_unit, unit_path, 0o644)
        _install(staged_env, env_path, 0o600)
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
        self.log(
            f"starting {plan.unit_name} (serving {plan.served_name} on port {plan.port}; up to {plan.ready_timeout} s)"
        )
        cursor = self.host.journal_cursor()
        start = now()
        self.host.run("systemctl", "start", "--no-block", plan.unit_name)
        if self.wait_active(plan.unit_name, plan.ready_timeout):
            self.timings["start_to_ready"] = now() - start
            self.timings["total"] = now() - started
            record = f"UNIT={plan.unit_name}\nSERVED={plan.served_name}\nPORT={plan.port}\n"
            temporary = self.state_dir / "active.tmp"
            temporary.write_text(record, encoding="utf-8")
            temporary.replace(self.state_dir / "active")
            if old_unit and old_unit != plan.unit_name and old_unit not in plan.replaces:
                # The previous managed unit of this deployment: its files go, a backup stays until the next swap.
                (self.unit_dir / old_unit).unlink(missing_ok=True)
                (self.env_dir / f"{old_unit.removesuffix('.service')}.env").unlink(missing_ok=True)
                self.host.run("systemctl", "daemon-reload")
                self.host.run("systemctl", "reset-failed", old_unit, check=False)
            adopted = [u for u in plan.replaces if any(b.unit == u and b.file for b in backups)]
            if adopted:
                self.log(f"adopted: {', '.join(adopted)} stopped and disabled (unit files backed up in {backups_dir})")
            self.log(f"serving {plan.served_name} from {plan.unit_name} on port {plan.port}")
            self.log(
                f"timing: stop={self.timings['stop']:.2f}s start_to_ready={self.timings['start_to_ready']:.2f}s "
                f"total={self.timings['total']:.2f}s"
            )
            return Result("succeeded", f"serving {plan.served_name} from {plan.unit_name}", plan.digest, self.timings)
        return self.roll_back(backups, env_backup, unit_path, env_path, cursor)

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
            self.sleep(1)

    def roll_back(
        self, backups: Sequence[Backup], env_backup: Path, unit_path: Path, env_path: Path, cursor: str
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
        else:
            self.host.run("systemctl", "disable", "--quiet", plan.unit_name, check=False)
            unit_path.unlink(missing_ok=True)
            env_path.unlink(missing_ok=True)
        for backup in backups:
            if backup.unit != plan.unit_name and backup.saved is not None and backup.file is not None:
                _install(backup.saved, backup.file, 0o644)
        self.host.run("systemctl", "daemon-reload")
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
