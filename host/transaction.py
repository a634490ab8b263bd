"""The swap transaction: make a deployment serve its staged unit, or put back what served before.

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
  adopt        a first take-over that finds a hand-made engine of the managed unit's name already running
               the stack's launch (host/judgement.adoption): the managed unit's files go in place and the
               hand-made ones away, and the engine keeps serving, nothing restarts. A drop-in of the
               managed unit keeps that engine's own launch (on the public port, its own model ids) until
               the next swap, which starts the stack's launch behind the front door.
  stop-start   otherwise: back up the units it replaces (the previous managed unit, a hand-made unit
               of the same name, and the hand-made units the stack names in `replaces`), install the
               new unit, stop and disable the old ones, start the new one and wait until it serves
               (its ExecStartPre guard frees the GPUs, its ExecStartPost waits for readiness), then
               point the front door at it. If it does not serve in time, the new unit is stopped, every
               backed-up unit file and the front door's site are put back, the units that ran before
               are started again and waited for with their own start timeout, and the transaction
               reports the new unit's journal tail.
Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.contract import (
    ETC_DIR,
    FRONT_DOOR_DIR,
    FRONT_DOOR_UNIT,
    NGINX,
    STATE_DIR,
    UNIT_DIR,
    ActiveRecord,
    Claims,
    Placement,
    Plan,
    Result,
    adopted_drop_in,
    is_managed,
    read_claims,
)
from host.facts import unit_environment, unit_launch
from host.front_door import first_key, front_door_site
from host.judgement import Judgement, claim_conflicts, judge
from host.systemd import SystemdHost, established_to, now

STATE_ROOT = Path(STATE_DIR)
UNIT_PATH = Path(UNIT_DIR)
ENV_DIR = Path(ETC_DIR)
FRONT_DOOR_PATH = Path(FRONT_DOOR_DIR)


class SwapRefused(Exception):
    """A check failed before anything was stopped."""


# ---- the transaction ----------------------------------------------------------------------------------


@dataclass
class Backup:
    unit: str
    file: Path | None  # where its unit file lived (None: it had none)
    saved: Path | None  # the copy in the state directory
    was_running: bool
    was_enabled: bool
    drop_in: Path | None = None  # the copy of its adopted-launch drop-in, when it had one


class Transaction:
    def __init__(
        self,
        plan: Plan,
        host: SystemdHost | None = None,
        log: Callable[[str], None] = print,
        state_root: Path = STATE_ROOT,
        unit_dir: Path = UNIT_PATH,
        env_dir: Path = ENV_DIR,
        sleep: Callable[[float], None] = time.sleep,
        front_door_dir: Path = FRONT_DOOR_PATH,
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
        return read_claims(self.state_root)

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
        drop_in = None
        if adopted_drop_in(unit, self.unit_dir).is_file():
            drop_in = backups / f"{unit}.adopted.conf"
            shutil.copy2(adopted_drop_in(unit, self.unit_dir), drop_in)
        return Backup(unit, file, saved, self.host.running(unit), self.host.enabled(unit), drop_in)

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
            found = self.survey()
            staged_text = staged_unit.read_text(encoding="utf-8")
            wanted = unit_launch(staged_text, unit_environment(staged_text))
            judgement = judge(plan, found, self.live_claims(), self.host.running, old, wanted)
            if judgement.conflicts:
                raise SwapRefused("; ".join(judgement.conflicts))
            decision = judgement.decision
            replaces_running = judgement.replaces_running
            # Every unit that may hold this deployment's GPUs or port now, and must stop for the new one.
            leaving = list(judgement.leaving)
            for note in judgement.notes:
                self.log(note)
            # While a blue/green swap runs, both engines hold their GPUs.
            both = decision.placement.gpus + (old.gpus if old is not None and decision.mode == "blue-green" else ())
            self.claim(frozenset(both))
            if decision.mode != "adopt":
                self.prewarm()  # an adopted engine loads nothing
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
        if (
            old is not None
            and old.adopted is not None
            and old_unit == plan.unit_name
            and adopted_drop_in(plan.unit_name, self.unit_dir).is_file()
            and _same(staged_unit, unit_path)
            and _same(staged_env, env_path)
            and self.host.running(plan.unit_name)
            and not replaces_running
        ):
            return Result(
                "unchanged",
                f"{plan.unit_name} serves as adopted from {old.adopted} on port {plan.port}; the stack's launch and "
                "its front door take effect at the next swap",
                plan.digest,
            )
        if decision.mode == "adopt":
            self.log(f"adopting in place: {decision.reason}")
            return self.adopt_in_place(judgement, staged_unit, staged_env, started)
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
        # An engine adopted in place ran its own launch under this unit; the stack's launch starts now.
        _remove_drop_in(adopted_drop_in(plan.unit_name, self.unit_dir))
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
        self.put_away_hand_made(backups)
        return self.succeeded(decision.placement, old)

    def adopt_in_place(self, judgement: Judgement, staged_unit: Path, staged_env: Path, started: float) -> Result:
        """Take over a hand-made engine that already runs the stack's launch without restarting it: the
        managed unit's files go in place of the hand-made one of its name (a drop-in keeps that engine's
        own launch until the next swap), the other units it replaces are disabled, and all their files
        are put away as in any take-over. The engine's process is never touched."""
        plan = self.plan
        adopted = judgement.adoption
        assert adopted is not None
        placement = judgement.decision.placement
        unit_path = self.unit_dir / plan.unit_name
        backups_dir = self.state_dir / "previous"
        shutil.rmtree(backups_dir, ignore_errors=True)
        backups_dir.mkdir(parents=True, mode=0o700)
        backups = [self.backup(unit, backups_dir) for unit in judgement.leaving]
        pid_before = self.host.show(plan.unit_name, "MainPID").get("MainPID", "0")
        self.env_dir.mkdir(parents=True, exist_ok=True)
        _install(staged_unit, unit_path, 0o644)
        _install(staged_env, self.env_dir / f"{plan.unit_stem}.env", 0o600)
        _write(self.placement_path(plan.unit_name), placement.env_text(), 0o644)
        text = adopted_launch_drop_in(adopted.unit, adopted.argv, adopted.ids, staged_unit.read_text(encoding="utf-8"))
        _write(adopted_drop_in(plan.unit_name, self.unit_dir), text, 0o644)
        self.host.run("systemctl", "daemon-reload")
        for backup in backups:
            if backup.unit != plan.unit_name and backup.was_enabled:
                self.host.run("systemctl", "disable", "--quiet", backup.unit, check=False)
        self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
        props = self.host.show(plan.unit_name, "ActiveState", "MainPID")
        if props.get("ActiveState") != "active" or props.get("MainPID") != pid_before:
            # systemd did not keep the engine under the managed unit: put the hand-made files back.
            for backup in backups:
                if backup.saved is not None and backup.file is not None:
                    _install(backup.saved, backup.file, 0o644)
                if backup.was_enabled:
                    self.host.run("systemctl", "enable", "--quiet", backup.unit, check=False)
            _remove_drop_in(adopted_drop_in(plan.unit_name, self.unit_dir))
            self.host.run("systemctl", "daemon-reload")
            return Result(
                "rolled-back",
                f"adopting {adopted.unit} in place failed: after the managed unit was installed it is "
                f"{props.get('ActiveState')} with PID {props.get('MainPID')} (was {pid_before}); its files are back",
                plan.digest,
                self.timings,
            )
        self.put_away_hand_made(backups)
        self.write_active(
            ActiveRecord(
                plan.unit_name, adopted.ids[0] if adopted.ids else "", plan.port, placement.gpus, adopted=adopted.unit
            )
        )
        record = {
            "unit": adopted.unit,
            "pid": adopted.pid,
            "ids": list(adopted.ids),
            "argv": list(adopted.argv),
            "at": time.time(),
        }
        _write(self.state_dir / "adopted" / "in-place.json", json.dumps(record, sort_keys=True) + "\n", 0o600)
        self.claim(frozenset(placement.gpus))
        self.timings["total"] = now() - started
        ids = ", ".join(adopted.ids)
        self.log(
            f"adopted {adopted.unit} in place: PID {pid_before} keeps serving {ids} on port {plan.port}, nothing "
            f"restarted; the stack's launch (serving {plan.served_name}) and its front door take effect at the next swap"
        )
        return Result(
            "succeeded", f"adopted {adopted.unit} in place: it keeps serving {ids}", plan.digest, self.timings
        )

    def put_away_hand_made(self, backups: Sequence[Backup]) -> None:
        """Move the files of the hand-made units this swap took over (those it replaces, and one of the
        managed unit's name) out of systemd's reach, into the deployment's `adopted/` with how they were
        (enabled, running): nothing starts them again, at a boot or by hand, and `pulumi destroy` puts them
        back as they were. The first take-over's record wins: later swaps never overwrite it."""
        adopted_dir = self.state_dir / "adopted"
        taken: list[str] = []
        for backup in backups:
            hand_made = backup.unit in self.plan.replaces or backup.unit == self.plan.unit_name
            if not hand_made or backup.saved is None or backup.file is None:
                continue
            if is_managed(backup.saved.read_text(encoding="utf-8", errors="replace")):
                continue  # vllm-fleet's own unit of an earlier swap, not a hand-made one
            adopted_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            record = adopted_dir / f"{backup.unit}.was"
            if not record.is_file():
                shutil.copy2(backup.saved, adopted_dir / backup.unit)
                was = {"path": str(backup.file), "enabled": backup.was_enabled, "running": backup.was_running}
                record.write_text(json.dumps(was, sort_keys=True) + "\n", encoding="utf-8")
            if backup.unit != self.plan.unit_name:
                backup.file.unlink(missing_ok=True)
            taken.append(backup.unit)
        if taken:
            self.host.run("systemctl", "daemon-reload")
            self.log(
                f"took over {', '.join(taken)}: unit files kept in {adopted_dir}, none of them starts again "
                "(pulumi destroy puts them back as they were)"
            )

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
        _remove_drop_in(adopted_drop_in(unit, self.unit_dir))
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
            self.sleep(0.25)

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
            if backup.drop_in is not None:  # an engine adopted in place runs its own launch again
                _write(adopted_drop_in(backup.unit, self.unit_dir), backup.drop_in.read_text(encoding="utf-8"), 0o644)
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


def _systemd_word(word: str) -> str:
    """One word of a command line as systemd's ExecStart= reads it back ($ and % keep their meaning)."""
    if word and not any(c in word for c in " \t\"'\\;"):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def adopted_launch_drop_in(unit: str, argv: Sequence[str], ids: Sequence[str], managed_unit: str) -> str:
    """The drop-in under which the managed unit runs an adopted engine's own launch: its ExecStart, and
    the managed readiness check asking for the first id that engine serves."""
    lines = [
        f"# Written by the vllm-fleet swap: {unit} was adopted in place. Until the next swap this unit runs",
        "# that engine's own launch on the deployment's public port; the stack's launch and its front door",
        "# take effect at the next swap, which removes this file.",
        "[Service]",
        "ExecStart=",
        "ExecStart=" + " ".join(_systemd_word(word) for word in argv),
    ]
    for line in managed_unit.splitlines():
        if line.startswith("ExecStartPost=") and "--served-name" in line and ids:
            before, _, after = line.partition("--served-name ")
            rest = after.split(" ", 1)[1] if " " in after else ""
            lines += ["ExecStartPost=", f"{before}--served-name {_systemd_word(ids[0])} {rest}".rstrip()]
    return "\n".join(lines) + "\n"


def _remove_drop_in(path: Path) -> None:
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only when empty: an operator's own drop-ins stay


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
                time.sleep(0.2)
        yield
