"""A unit rewritten in place: its new file and environment file installed and systemd reloaded while its
engine keeps running, when the engine that serves already runs the new unit's launch (the survey read its
process against the staged unit: host/engine_launch.py; a comment, a description, a timeout, a tool its
ExecStartPre runs changed, or the unit was edited by hand and its engine never restarted with the edit).
The engine's process is never touched: the unit file takes effect at its next start. Standard library
only."""

from __future__ import annotations

from pathlib import Path

from host.contract import ActiveRecord, EngineReading, Result
from host.front_door import front_door_site
from host.front_door_switch import FrontDoorSwitch
from host.swap_files import file_text, write_file
from host.systemd import now
from host.unit_file import KEEPS_RUNNING


class Rewrite(FrontDoorSwitch):
    def rewrite_in_place(
        self, old: ActiveRecord, staged_unit: Path, staged_env: Path, reading: EngineReading, started: float
    ) -> Result:
        """Install the staged unit and its environment file over those of `old` (the unit that serves, whose
        engine `reading` found running the staged launch) and reload systemd; the engine keeps its process.
        If systemd does not keep it serving under the new file, the files of before go back. A unit disabled
        by hand is enabled again, a front door site written another way is rewritten (a reload)."""
        plan = self.plan
        assert old.placement is not None and reading.same_launch
        unit_path = self.unit_dir / plan.unit_name
        env_path = self.env_dir / f"{plan.unit_stem}.env"
        before = {path: file_text(path) for path in (unit_path, env_path)}
        pid = self.host.main_pid(plan.unit_name)
        self.install_staged(staged_unit, staged_env, old.placement)
        problem = self.engine_kept(plan.unit_name, pid)
        if problem is not None:
            for path, text in before.items():
                if text is not None:
                    write_file(path, text, 0o600 if path == env_path else 0o644)
            self.host.run("systemctl", "daemon-reload")
            message = (
                f"rewriting {plan.unit_name} in place failed: after the reload {problem}; its files of before are back"
            )
            return Result("rolled-back", message, plan.digest, self.timings)
        if not self.host.enabled(plan.unit_name):
            self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
        if file_text(self.site_path) != front_door_site(plan, old.placement):
            switched = self.switch_front_door(old.placement)
            if switched is not None:
                self.log(f"the front door's site for {plan.unit_name} was not rewritten: {switched}")
        self.timings["total"] = now() - started
        changed = ", ".join(reading.unit_changes) or "its environment file"
        what = f"{KEEPS_RUNNING}: PID {pid} of {plan.unit_name} serves on; {changed} changed"
        self.log(what)
        return Result("succeeded", what, plan.digest, self.timings)
