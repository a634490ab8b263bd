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
  rewrite      the deployment's own unit changes outside its launch (a comment, a timeout, a tool of its
               ExecStartPre), or was edited by hand while its engine runs the stack's launch (the survey
               reads the engine's process: host/engine_launch.py): the new files go in place and systemd
               reloads; the engine keeps its process (host/rewrite.py).
  bridge       the deployment's own unit restarts with a new launch (a flag, a variable, LoRA turned on)
               and its GPUs hold a second engine: the new launch serves first as <unit-stem>-bridge.service
               on the spare GPUs, then the unit restarts with it and takes over again (host/bridge.py).
  port-move    the engine that serves holds the public port itself (a hand-made one that cannot be
               adopted, or one adopted in place at the first take-over) and GPUs are free beside it: the
               new engine starts there behind the front door, then the port moves (host/port_move.py).
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
import dataclasses
import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from host.contract import ActiveRecord, LaunchQuestion, Placement, Result, Survey, adopted_drop_in, is_managed
from host.front_door import front_door_site
from host.judgement import Decision, engines_gpus, judge
from host.locks import take_lock
from host.page_cache import Failure, Residency, residency
from host.port_move import PortMove
from host.rewrite import Rewrite
from host.rollback import Rollback
from host.swap_files import file_text, same_file
from host.systemd import now
from host.transaction_base import STATE_ROOT, SwapRefused
from host.unit_file import bridge_stem

__all__ = ["STATE_ROOT", "SwapRefused", "Transaction", "host_lock"]


class Transaction(PortMove, Rewrite, Rollback):
    """One swap of one deployment (host/tools/swap.py runs it in a transient unit, under the host lock)."""

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
        self.prewarmed = "staging copy"

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
        else:
            self.prewarmed = "page cache"
        self.timings["prewarm"] = now() - started

    def measure_resident(self) -> Residency | None:
        """What of the new model's files (where the engine reads them) the page cache holds now, said."""
        directory = Path(self.plan.load_dir or self.plan.model_dir)
        try:
            found = residency(directory)
        except (OSError, Failure) as error:
            self.log(f"could not measure what of {directory} is in the page cache: {error}")
            return None
        self.log(f"before the start: {found.describe()}")
        return found

    def check_resident(self, stops_first: bool) -> None:
        """Once the pre-warm is done, before the front door closes and the old engine stops: measure what
        of the new model the page cache holds (a checkpoint near the host's RAM is evicted while the old
        engine serves). With
        prewarmMinResidentShare, a stop-then-start that finds less reads the files into the page cache
        again once, and refuses, before anything stops, when that still leaves less."""
        self.resident = self.measure_resident()
        wanted = self.plan.prewarm_min_resident_share
        if wanted is None or self.resident is None or not stops_first or self.resident.share >= wanted:
            return
        key = f"{self.plan.config_key}.prewarmMinResidentShare"
        margin = self.plan.prewarm_margin_gib
        if margin is None and self.plan.staged_copy is not None:
            margin = 0.0  # the staging copy's pages: read them as the copy did
        if margin is not None:
            self.log(
                f"{self.resident.share:.0%} is less than {key} ({wanted:.0%}): reading the files into the page cache again"
            )
            directory = self.plan.load_dir or self.plan.model_dir
            self.run_tool(
                "prewarm",
                "cache",
                "--dir",
                directory,
                "--margin-gib",
                f"{margin:g}",
                "--report-every",
                str(self.plan.report_every),
            )
            self.resident = self.measure_resident()
            if self.resident is None or self.resident.share >= wanted:
                return
        how = (
            "after the pre-warm read it again"
            if margin is not None
            else "and the pre-warm is off (prewarmMarginGib: null)"
        )
        share = f"{self.resident.share:.0%}" if self.resident is not None else "an unknown share"
        raise SwapRefused(
            f"only {share} of the new model's files is in the page cache {how}, and {key} asks for {wanted:.0%}: "
            "its load would read the rest from storage. Free RAM on the host (MemAvailable), lower the share, "
            "or set it to null to swap anyway; nothing was stopped"
        )

    def start_survey(self, staged_text: str) -> subprocess.Popen[str]:
        """The host's survey, started before the model check and read after it: two tools of some 0.1-0.3 s
        each that need nothing of each other, both before the judgement, while the old model serves. It is
        asked how the engine that serves was launched against the staged unit (host/engine_launch.py), as
        the preview's survey was asked with the rendered one."""
        question = json.dumps(LaunchQuestion.of(self.plan, staged_text).to_dict())
        return subprocess.Popen(
            self.tool_command("survey", "--question", question),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def survey(self, running: subprocess.Popen[str]) -> Survey:
        stdout, stderr = running.communicate()
        if running.returncode != 0:
            raise SwapRefused(f"the survey of this host failed: {stderr.strip()[-300:]}")
        return Survey.from_json(stdout)

    # -- the swap -------------------------------------------------------------------------------------

    def run(self) -> Result:
        plan = self.plan
        started = now()
        staged_unit = self.state_dir / "staged" / plan.unit_name
        staged_env = self.state_dir / "staged" / f"{plan.unit_stem}.env"
        staged_bridge = self.state_dir / "staged" / f"{bridge_stem(plan.unit_stem)}.service"
        try:
            self.claim(write=False)  # ports and unit name first, before anything is read
            if not staged_unit.is_file():
                raise SwapRefused(f"nothing staged at {staged_unit}; run pulumi up again")
            surveying = self.start_survey(staged_unit.read_text(encoding="utf-8"))
            try:
                self.check_model()
            except SwapRefused:
                surveying.kill()
                surveying.communicate()
                raise
            old = self.active_record()
            found = self.survey(surveying)
            judgement = judge(plan, found, self.live_claims(), old)
            if judgement.conflicts:
                raise SwapRefused("; ".join(judgement.conflicts))
            decision = judgement.decision
            if (decision.mode == "bridge" or decision.then is not None) and not staged_bridge.is_file():
                # Staged by a program from before bridges: it restarts in place, as it did then.
                own = decision.then or (old.placement if old is not None else None) or decision.placement
                decision = Decision("stop-start", own, f"{decision.reason}; but no bridge unit is staged")
                judgement = dataclasses.replace(judgement, decision=decision)
            replaces_running = judgement.replaces_running
            for note in judgement.notes:
                self.log(note)
            # While the new engine starts beside the one that serves, both hold their GPUs.
            self.claim(engines_gpus(decision, old, judgement.adoption))
        except SwapRefused as refusal:
            return Result("refused", f"refused: {refusal}", plan.digest)

        # Before the pre-warm: a step re-run with nothing to change (its report's smoke benchmark changed, a
        # repair found nothing to repair) must not read the whole model again.
        unchanged = self.unchanged(old, staged_unit, staged_env, replaces_running)
        if unchanged is not None:
            return unchanged
        if decision.mode == "adopt":  # an adopted engine loads nothing: no pre-warm
            self.log(f"adopting in place: {decision.reason}")
            return self.adopt_in_place(judgement, staged_unit, staged_env, started)
        self.mode = decision.mode
        if decision.mode == "rewrite":  # nothing loads either: the engine keeps its process
            assert old is not None and judgement.reading is not None
            self.log(f"rewriting {plan.unit_name}: {decision.reason}")
            return self.rewrite_in_place(old, staged_unit, staged_env, judgement.reading, started)
        try:
            self.prewarm()
            # Only a stop-then-start that stops a serving engine makes clients wait for the load.
            stops = decision.mode == "stop-start" and any(self.host.running(unit) for unit in judgement.leaving)
            self.check_resident(stops_first=stops)
        except SwapRefused as refusal:
            return Result("refused", f"refused: {refusal}", plan.digest)
        self.log(f"swap mode: {decision.mode}: {decision.reason}; new engine on {decision.placement.describe()}")
        self.timings["blue_green"] = 1.0 if decision.beside else 0.0
        if decision.mode == "blue-green":
            assert old is not None
            return self.blue_green(old, decision.placement, staged_unit, staged_env, started)
        if decision.mode == "bridge":
            assert old is not None
            return self.bridge_restart(old, decision.placement, staged_unit, staged_env, staged_bridge, started)
        if decision.mode == "port-move":
            return self.new_engine_first(
                judgement.leaving,
                decision.placement,
                decision.then,
                staged_unit,
                staged_env,
                staged_bridge,
                old,
                started,
            )
        return self.stop_start(judgement.leaving, decision.placement, old, staged_unit, staged_env, started)

    def unchanged(
        self, old: ActiveRecord | None, staged_unit: Path, staged_env: Path, replaces_running: bool
    ) -> Result | None:
        """The result when the staged unit already serves as installed (None: there is a swap to do). Only
        a front door site written another way is rewritten, with a graceful reload."""
        plan = self.plan
        unit_path = self.unit_dir / plan.unit_name
        env_path = self.env_dir / f"{plan.unit_stem}.env"
        if (
            old is None
            or old.unit != plan.unit_name
            or not same_file(staged_unit, unit_path)
            or not same_file(staged_env, env_path)
            or not self.host.running(plan.unit_name)
            # Failed and waiting to restart (its start refused, say): restarted now, not at the next try.
            or self.host.show(plan.unit_name, "SubState").get("SubState") == "auto-restart"
            or replaces_running
        ):
            return None
        # Disabled by hand: the engine serves, but a reboot would not start it. Enabled again, no restart.
        if not self.host.enabled(plan.unit_name):
            self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
            self.log(f"{plan.unit_name} was disabled: enabled again, so a reboot starts it")
        if old.adopted is not None and adopted_drop_in(plan.unit_name, self.unit_dir).is_file():
            return Result(
                "unchanged",
                f"{plan.unit_name} serves as adopted from {old.adopted} on port {plan.port}; the stack's launch and "
                "its front door take effect at the next swap",
                plan.digest,
            )
        if old.placement is None:
            return None
        if file_text(self.site_path) == front_door_site(plan, old.placement):
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

    def stop_start(
        self,
        leaving: Sequence[str],
        placement: Placement,
        old: ActiveRecord | None,
        staged_unit: Path,
        staged_env: Path,
        started: float,
    ) -> Result:
        """Back up and stop what serves (`leaving`), start the new unit on `placement`, point the front door
        at it; put everything back (host/rollback.py) if it does not serve in time."""
        plan = self.plan
        old_unit = old.unit if old else ""
        unit_path = self.unit_dir / plan.unit_name
        env_path = self.env_dir / f"{plan.unit_stem}.env"
        backups = self.back_up(leaving)
        backups_dir = self.backups_dir
        env_backup = backups_dir / env_path.name
        if env_path.is_file():
            shutil.copy2(env_path, env_backup)
        placement_backup = backups_dir / "placement.env"
        if self.placement_path(plan.unit_name).is_file():
            shutil.copy2(self.placement_path(plan.unit_name), placement_backup)
        site_before = file_text(self.site_path)
        if unit_path.is_file() and not is_managed(unit_path.read_text(encoding="utf-8", errors="replace")):
            self.log(f"{plan.unit_name} is a hand-made unit of the same name: it is replaced (backup in {backups_dir})")

        # An engine adopted in place ran its own launch under this unit; the stack's launch starts now.
        self.install_staged(staged_unit, staged_env, placement)

        if old is not None and old.placement is not None and site_before is not None and self.host.running(old.unit):
            # Clients are told 503 instead of reaching an engine as it stops (one caught by its shutdown
            # hangs ~10 s); what it already carries finishes first. A rollback puts the site back.
            problem = self.close_front_door()
            if problem is None:
                self.drain(old)
            else:
                self.log(f"the front door could not answer 503 while {old.unit} stops: {problem}")
        stop_started = now()
        for backup in backups:
            if backup.was_running:
                self.log(f"stopping {backup.unit}")
                self.host.run("systemctl", "stop", backup.unit, check=False)
            if backup.unit != plan.unit_name and backup.was_enabled:
                # Only the next boot reads the symlinks: no manager reload (~0.2 s each) while nothing serves.
                self.host.run("systemctl", "disable", "--quiet", "--no-reload", backup.unit, check=False)
        self.timings["stop"] = now() - stop_started
        if any(b.was_running for b in backups):
            self.log(f"stopped {', '.join(b.unit for b in backups if b.was_running)} in {self.timings['stop']:.1f} s")

        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        self.host.run("systemctl", "enable", "--quiet", "--no-reload", plan.unit_name)
        ready, cursor = self.start_new(f"serving {plan.served_name} on {placement.describe()}")
        if ready:
            switched = self.switch_front_door(placement)
            if switched is not None:
                self.log(f"the front door did not switch to {plan.unit_name}: {switched}")
        if not ready or switched is not None:
            return self.roll_back(backups, env_backup, placement_backup, unit_path, env_path, cursor, site_before, old)
        self.timings["total"] = now() - started
        self.write_active(self.record(placement))
        old_file = self.unit_dir / old_unit
        if old_unit and old_unit != plan.unit_name and (not old_file.is_file() or is_managed(old_file.read_text())):
            # The previous managed unit of this deployment (also when `replaces` names it, as a take-over names
            # the hand-made unit of the managed name): its files and any adoption drop-in go, a backup stays
            # until the next swap. A hand-made one is put away below.
            self.remove_unit_files(old_unit)
        self.put_away_hand_made(backups)
        return self.succeeded(placement, old)


@contextlib.contextmanager
def host_lock(state_root: Path, timeout: float = 3600) -> Iterator[None]:
    """One swap at a time per host: two deployments must not stop and start units underneath each other."""
    state_root.mkdir(parents=True, exist_ok=True)
    with open(state_root / "host.lock", "w") as handle:
        if not take_lock(handle, timeout, 0.2):
            raise TimeoutError(f"another swap held {state_root / 'host.lock'} for {timeout:g} s")
        yield
