"""The take-over of hand-made units: their files put away where nothing starts them again (with how they
were, for `pulumi destroy`), and a hand-made engine that already runs the stack's launch adopted in place,
its process untouched (host/judgement.adoption decides). Standard library only."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from host.contract import ActiveRecord, Result, adopted_drop_in, is_managed
from host.judgement import Judgement
from host.swap_files import install_file, remove_drop_in, write_file
from host.systemd import now
from host.transaction_base import Backup, TransactionBase


class TakeOver(TransactionBase):
    def adopt_in_place(self, judgement: Judgement, staged_unit: Path, staged_env: Path, started: float) -> Result:
        """Take over a hand-made engine that already runs the stack's launch without restarting it: the
        managed unit's files go in place of the hand-made one of its name (a drop-in keeps that engine's
        own launch until the next swap), the other units it replaces are disabled, and all their files
        are put away as in any take-over. The engine's process is never touched."""
        plan = self.plan
        adopted = judgement.adoption
        assert adopted is not None
        placement = judgement.decision.placement
        backups = self.back_up(judgement.leaving)
        pid_before = self.host.show(plan.unit_name, "MainPID").get("MainPID", "0")
        launch = adopted_launch_drop_in(
            adopted.unit, adopted.argv, adopted.ids, staged_unit.read_text(encoding="utf-8")
        )
        self.install_staged(staged_unit, staged_env, placement, launch)
        for backup in backups:
            if backup.unit != plan.unit_name and backup.was_enabled:
                self.host.run("systemctl", "disable", "--quiet", backup.unit, check=False)
        self.host.run("systemctl", "enable", "--quiet", plan.unit_name)
        problem = self.engine_kept(plan.unit_name, int(pid_before or 0))
        if problem is not None:
            # systemd did not keep the engine under the managed unit: put the hand-made files back.
            for backup in backups:
                if backup.saved is not None and backup.file is not None:
                    install_file(backup.saved, backup.file, 0o644)
                if backup.was_enabled:
                    self.host.run("systemctl", "enable", "--quiet", backup.unit, check=False)
            remove_drop_in(adopted_drop_in(plan.unit_name, self.unit_dir))
            self.host.run("systemctl", "daemon-reload")
            message = f"adopting {adopted.unit} in place failed: after the managed unit was installed {problem}; its files are back"
            return Result("rolled-back", message, plan.digest, self.timings)
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
        write_file(self.state_dir / "adopted" / "in-place.json", json.dumps(record, sort_keys=True) + "\n", 0o600)
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
