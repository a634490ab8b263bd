"""A unit rewritten in place: its new file and environment file installed and systemd reloaded while its
engine keeps running, when nothing of its launch changes (host/unit_file.launch_change: a comment, a
description, a timeout, a tool its ExecStartPre runs). The engine's process is never touched: the unit
file takes effect at its next start. Standard library only."""

from __future__ import annotations

from pathlib import Path

from host.contract import ActiveRecord, Result
from host.swap_files import file_text, write_file
from host.systemd import now
from host.transaction_base import TransactionBase
from host.unit_file import KEEPS_RUNNING, LaunchChange, launch_change, read_by_vllm


class Rewrite(TransactionBase):
    def launch_change(self, old: ActiveRecord, staged_unit: Path, staged_env: Path) -> LaunchChange:
        """What installing the staged unit over the one that serves (`old`) does to its engine, its command
        line and environment read by this host's vLLM (with the placement's port, as systemd expands it)."""
        plan = self.plan
        installed = file_text(self.unit_dir / plan.unit_name) or ""
        env_path = str(self.env_dir / f"{plan.unit_stem}.env")
        # The unit names its environment file by its path on the host: the staged copy stands in for it.
        before = {env_path: file_text(Path(env_path))}
        after = {env_path: file_text(staged_env)}
        port = {"VLLM_FLEET_BACKEND_PORT": str(old.backend_port)} if old.backend_port is not None else {}
        compare = read_by_vllm(plan.python, port, str(self.state_root / "parsed-launches"))
        return launch_change(
            installed, staged_unit.read_text(encoding="utf-8"), before, after, None, compare, plan.unit_name
        )

    def rewrite_in_place(
        self, old: ActiveRecord, staged_unit: Path, staged_env: Path, change: LaunchChange, started: float
    ) -> Result:
        """Install the staged unit and its environment file over those of `old` (the unit that serves, whose
        launch `change` finds unchanged) and reload systemd; the engine keeps its process. If systemd does not
        keep it serving under the new file, the files of before go back."""
        plan = self.plan
        assert old.placement is not None and not change.restart
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
        self.timings["total"] = now() - started
        what = (
            f"{KEEPS_RUNNING}: PID {pid} of {plan.unit_name} serves on; {', '.join(change.other) or 'nothing'} changed"
        )
        self.log(what)
        return Result("succeeded", what, plan.digest, self.timings)
