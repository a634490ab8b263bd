"""Rollback of a stop-then-start swap whose new engine did not serve: the new unit stops, every backed-up
unit file, drop-in and the front door's site are put back, and the units that ran before start again,
each waited for with its own start timeout. Standard library only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from host.contract import ActiveRecord, Result, adopted_drop_in
from host.front_door_switch import FrontDoorSwitch
from host.swap_files import file_text, install_file, restore_file, write_file
from host.transaction_base import Backup


class Rollback(FrontDoorSwitch):
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
            install_file(own.saved, unit_path, 0o644)
            if env_backup.is_file():
                install_file(env_backup, env_path, 0o600)
            if placement_backup.is_file():
                install_file(placement_backup, self.placement_path(plan.unit_name), 0o644)
        else:
            self.host.run("systemctl", "disable", "--quiet", plan.unit_name, check=False)
            unit_path.unlink(missing_ok=True)
            env_path.unlink(missing_ok=True)
            self.placement_path(plan.unit_name).unlink(missing_ok=True)
        for backup in backups:
            if backup.unit != plan.unit_name and backup.saved is not None and backup.file is not None:
                install_file(backup.saved, backup.file, 0o644)
            if backup.drop_in is not None:  # an engine adopted in place runs its own launch again
                write_file(
                    adopted_drop_in(backup.unit, self.unit_dir), backup.drop_in.read_text(encoding="utf-8"), 0o644
                )
        self.host.run("systemctl", "daemon-reload")
        # The front door as it was: pointing at the old engine, or (an engine on the public port itself
        # before) without this deployment's site, so that engine can bind its port again.
        if file_text(self.site_path) != site_before:
            restore_file(self.site_path, site_before)
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
            saying = f"rolling back: starting {backup.unit} again"
            ready = self.start_again(backup.unit, saying, "rollback_start_to_ready")
            (restarted if ready else failed).append(backup.unit)
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
