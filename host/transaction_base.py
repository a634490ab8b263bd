"""What every part of the swap transaction shares: the plan, the host's systemd, the deployment's state
(active record, claims, backups) and starting a unit until it serves. The parts (stop-then-start and the
runner in host/transaction.py, blue/green, rollback, the front door, the take-over of hand-made units)
build on it. Standard library only."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from host.contract import (
    ENGINE_READY_FILE,
    ETC_DIR,
    FRONT_DOOR_DIR,
    STATE_DIR,
    UNIT_DIR,
    ActiveRecord,
    Claims,
    Placement,
    Plan,
    Result,
    StartRecord,
    adopted_drop_in,
    read_claims,
)
from host.facts import unit_environment, unit_launch
from host.judgement import claim_conflicts
from host.page_cache import Residency
from host.processes import run_captured
from host.start_phases import journal_command, parse_journal, phases_of, progress_line
from host.start_records import (
    checkpoint_bytes,
    forecast_of_this_start,
    loaded_from,
    read_records,
    started_at,
    write_record,
)
from host.swap_files import install_file, remove_drop_in, write_file
from host.systemd import SystemdHost, now

STATE_ROOT = Path(STATE_DIR)
UNIT_PATH = Path(UNIT_DIR)
ENV_DIR = Path(ETC_DIR)
FRONT_DOOR_PATH = Path(FRONT_DOOR_DIR)


class StartJob:
    """`systemctl start UNIT` in a thread. Without --no-block it returns when systemd's start job ends:
    once the unit is active (for our engines: its ExecStartPost saw the server answer), has failed, or
    was refused. The swap's wait wakes on that instead of finding it at its next look, up to 0.25 s later
    (in a stop-then-start swap, clients wait through that too)."""

    def __init__(self, host: SystemdHost, unit: str) -> None:
        self.done = threading.Event()
        self.status: int | None = None
        self.output = ""
        threading.Thread(target=self._run, args=(host, unit), name=f"start {unit}", daemon=True).start()

    def _run(self, host: SystemdHost, unit: str) -> None:
        try:
            self.status, self.output = host.attempt("systemctl", "start", unit)
        finally:
            self.done.set()


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


class TransactionBase:
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
        # Units whose files this transaction removed: the manager forgets them once the result is written.
        self.removed_units: list[str] = []
        # What the new engine's start record says of how it was brought close (host/transaction.py sets
        # these as it pre-warms and measures): the pre-warm that ran, the page cache before the start.
        self.mode = "stop-start"
        self.prewarmed = "none"
        self.resident: Residency | None = None
        # The journal cursor from before the new engine's start, once it serves: its record is written
        # after the front door switched (clients wait for nothing of it).
        self.started_after: str | None = None
        # While it starts: the cursor its progress lines read the journal from (progress_of).
        self.starting_after: str | None = None

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
        write_file(self.state_root / "claims" / f"{self.plan.owner}.json", wanted.to_json())

    def tool_command(self, tool: str, *args: str) -> list[str]:
        """One of the host tools, run with the deployment's python."""
        return [self.plan.python, f"{self.plan.tools_dir}/{tool}", *args]

    def run_tool(self, tool: str, *args: str) -> int:
        """Run one of the host tools, its output logged line by line."""
        result = run_captured(self.tool_command(tool, *args))
        for line in (result.stdout + result.stderr).splitlines():
            self.log(line)
        return result.returncode

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

    def active_record(self) -> ActiveRecord | None:
        path = self.state_dir / "active"
        return ActiveRecord.parse(path.read_text(encoding="utf-8")) if path.is_file() else None

    def write_active(self, record: ActiveRecord) -> None:
        write_file(self.state_dir / "active", record.text(), make_parent=False)

    @property
    def backups_dir(self) -> Path:
        """Where the swap keeps what a rollback puts back (`previous/` in the deployment's state)."""
        return self.state_dir / "previous"

    def fresh_backups_dir(self) -> Path:
        """backups_dir emptied of an earlier swap's backups."""
        shutil.rmtree(self.backups_dir, ignore_errors=True)
        self.backups_dir.mkdir(parents=True, mode=0o700)
        return self.backups_dir

    def back_up(self, leaving: Sequence[str]) -> list[Backup]:
        """A fresh backups_dir holding a backup of each unit in `leaving`."""
        backups_dir = self.fresh_backups_dir()
        return [self.backup(unit, backups_dir) for unit in leaving]

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
        start = self.record_start()
        self.log("timing: " + " ".join(f"{k}={v:.2f}s" for k, v in self.timings.items() if k != "blue_green"))
        said = f"; its start: {start}" if start else ""
        return Result("succeeded", f"serving {plan.served_name} from {plan.unit_name}{said}", plan.digest, self.timings)

    def install_staged(
        self, staged_unit: Path, staged_env: Path, placement: Placement, adopted_launch: str | None = None
    ) -> None:
        """Put the staged unit, its environment file and the placement in place, then daemon-reload if systemd
        holds an older version of the unit (SystemdHost.reload_needed). The
        unit's adoption drop-in is written with `adopted_launch` (an engine adopted in place keeps its own
        launch until the next swap), or else removed: a drop-in left by an adoption of this unit name
        would start the adopted launch instead of the stack's."""
        plan = self.plan
        self.env_dir.mkdir(parents=True, exist_ok=True)
        install_file(staged_unit, self.unit_dir / plan.unit_name, 0o644)
        install_file(staged_env, self.env_dir / f"{plan.unit_stem}.env", 0o600)
        write_file(self.placement_path(plan.unit_name), placement.env_text(), 0o644)
        drop_in = adopted_drop_in(plan.unit_name, self.unit_dir)
        if adopted_launch is None:
            remove_drop_in(drop_in)
        else:
            write_file(drop_in, adopted_launch, 0o644)
        if self.host.reload_needed(plan.unit_name):
            self.host.run("systemctl", "daemon-reload")

    def engine_kept(self, unit: str, pid: int) -> str | None:
        """None while `unit` is active with the main process `pid` it had before its files changed; else
        what it is now (systemd never restarts a unit on a reload, but its engine may have gone meanwhile)."""
        props = self.host.show(unit, "ActiveState", "MainPID")
        if props.get("ActiveState") == "active" and pid != 0 and int(props.get("MainPID") or 0) == pid:
            return None
        return f"it is {props.get('ActiveState')} with PID {props.get('MainPID')} (was {pid})"

    def remove_unit_files(self, unit: str) -> None:
        (self.unit_dir / unit).unlink(missing_ok=True)
        remove_drop_in(adopted_drop_in(unit, self.unit_dir))
        stem = unit.removesuffix(".service")
        (self.env_dir / f"{stem}.env").unlink(missing_ok=True)
        self.placement_path(unit).unlink(missing_ok=True)
        self.removed_units.append(unit)

    def after_result(self, wait_for_the_step: Callable[[], object] = lambda: None) -> None:
        """What the transaction does once its result is written: the manager's reload that forgets the
        units whose files it removed. Their engines have stopped and nothing enables them, so no boot starts
        them; the reload only makes systemd stop listing them (0.1-0.3 s on the sandbox, more on a server
        with hundreds of units), and the step, which ends with the result, need not wait for it. While it
        runs, systemd answers no systemctl: it first waits for the step's post-deploy report, which reads
        the unit's state, to be done (`wait_for_the_step`: host/tools/swap.py's steps_done, bounded)."""
        (self.state_dir / ENGINE_READY_FILE).unlink(missing_ok=True)
        if not self.removed_units:
            return
        wait_for_the_step()
        self.host.run("systemctl", "daemon-reload")
        for unit in self.removed_units:
            self.host.run("systemctl", "reset-failed", unit, check=False)

    def start_new(self, what: str, unit: str | None = None, timing: str = "start_to_ready") -> tuple[bool, str]:
        """Start the new unit (or `unit`, the bridge of a restart) and wait until it serves: (ready, the
        journal cursor from before its start). Its time goes to `timing` (`<timing>_failed` when it did
        not serve)."""
        plan = self.plan
        unit = unit or plan.unit_name
        self.log(f"starting {unit} ({what}; up to {plan.ready_timeout} s)")
        cursor = self.host.journal_cursor()
        self.starting_after = cursor
        start = now()
        job = StartJob(self.host, unit)
        ready = self.wait_active(unit, plan.ready_timeout, job)
        failed = "start_failed_after" if timing == "start_to_ready" else f"{timing}_failed"
        self.timings[timing if ready else failed] = now() - start
        if ready:
            write_file(self.state_dir / ENGINE_READY_FILE, f"{unit}\n", 0o644)
            if unit == plan.unit_name:  # the deployment's own engine, not a bridge: its start is recorded
                self.started_after = cursor
        return ready, cursor

    def record_start(self) -> str | None:
        """Keep what the new engine loaded and where its start went (host/start_records.py), for the
        forecast of the next swap to this model here, and say it (None: no start, or no record of it). A
        record that cannot be made is said, not fatal."""
        plan = self.plan
        if self.started_after is None:
            return None
        cursor, seconds = self.started_after, self.timings["start_to_ready"]
        try:
            journal = self.host.run(*journal_command(plan.unit_name, cursor), check=False)
            phases = phases_of(parse_journal(journal))
            unit_text = (self.unit_dir / plan.unit_name).read_text(encoding="utf-8")
            launch = unit_launch(unit_text, unit_environment(unit_text))
            loaded = loaded_from(
                plan.model,
                Path(plan.load_dir or plan.model_dir),
                list(launch.argv) if launch is not None else [],
                self.prewarmed,
                self.resident.share if self.resident is not None else None,
            )
            record = StartRecord(
                started_at(phases, seconds),
                plan.owner,
                plan.unit_name,
                self.mode,
                seconds,
                loaded,
                phases,
                forecast=forecast_of_this_start(plan, read_records(self.state_root)),
                # Stop-then-start: clients wait from the old engine's stop to the new one's answer (the other
                # modes keep an engine serving while this one starts).
                downtime_seconds=self.timings.get("stop", 0.0) + seconds if self.mode == "stop-start" else None,
            )
            write_record(self.state_root, record)
        except (OSError, ValueError) as error:
            self.log(f"could not record the start of {plan.unit_name}: {error}")
            return None
        said = record.describe()
        self.log(f"where the start went: {said}")
        return said

    def progress_of(self, unit: str, elapsed: float) -> str | None:
        """Where the new engine's start is, from vLLM's lines in its journal so far and the plan's forecast
        (host/start_phases.progress_line); None for another unit, or when the journal cannot be read."""
        plan = self.plan
        if unit != plan.unit_name or self.starting_after is None:
            return None
        try:
            journal = self.host.run(*journal_command(unit, self.starting_after), check=False)
        except OSError:
            return None
        size = checkpoint_bytes(Path(plan.load_dir or plan.model_dir))
        forecast = plan.forecast_seconds or None
        return progress_line(plan.model or plan.served_name, phases_of(parse_journal(journal)), elapsed, size, forecast)

    def start_again(self, unit: str, saying: str, timing: str | None = None) -> bool:
        """Start a unit that served before once more and wait for it with its own start timeout (not the new
        model's); whether it became active. `saying` is logged with the timeout; with `timing`, the seconds
        from its start to active are kept in timings under that name."""
        timeout = self.host.start_timeout(unit)
        self.log(f"{saying} (up to {timeout:g} s)")
        started = now()
        self.host.run("systemctl", "start", "--no-block", unit, check=False)
        ready = self.wait_active(unit, timeout)
        if timing is not None:
            self.timings[timing] = now() - started
        return ready

    def wait_active(self, unit: str, timeout: float, job: StartJob | None = None) -> bool:
        """Until `unit` is active (its ExecStartPost saw it serve), failed, restarting, or out of time. With
        the start's `job`, each look comes the moment that job ends, not at the next 0.25 s tick."""
        started = now()
        last_report = 0.0
        while True:
            # Read before the state, so that a state read after the job ended is that job's outcome.
            job_ended = job is not None and job.done.is_set()
            props = self.host.show(unit, "ActiveState", "SubState", "NRestarts")
            state = props.get("ActiveState", "inactive")
            elapsed = now() - started
            if state == "active":
                return True
            if state == "failed":
                self.log(f"{unit} failed after {elapsed:.0f} s")
                return False
            # Its process exited and systemd waits RestartSec (15 s for our units) before the next attempt:
            # the start has failed now, and every second waited for the restart is downtime in a
            # stop-then-start swap.
            if props.get("SubState") == "auto-restart":
                self.log(f"{unit} failed after {elapsed:.0f} s (its process exited; systemd would restart it)")
                return False
            if int(props.get("NRestarts", "0") or 0) > 0:
                self.log(f"{unit} failed after {elapsed:.0f} s and systemd is restarting it")
                return False
            if job is not None and job_ended and state not in ("activating", "reloading"):
                # The start job has ended and left the unit neither serving nor on its way: systemd
                # refused the start itself (a unit file it cannot load, a start limit hit).
                self.log(f"{unit} did not start: systemctl start ended with {job.status}: {job.output[-300:]}")
                return False
            if elapsed >= timeout:
                self.log(f"{unit} is not ready after {timeout:g} s (state: {state})")
                return False
            if elapsed - last_report >= self.plan.report_every:
                said = self.progress_of(unit, elapsed)
                if said is not None:
                    self.log(f"starting {unit}: {said} (up to {timeout:g} s)")
                else:
                    lines, _ = self.host.journal(unit, "", lines=1)
                    self.log(
                        f"starting {unit}: {elapsed:.0f}/{timeout:g} s, state {state}; last log: {(lines or ['none'])[-1][:200]}"
                    )
                last_report = elapsed
            if job is not None and not job_ended:
                job.done.wait(0.25)  # at once when the job ends: the next look reads its outcome
            else:
                self.sleep(0.25)
