"""The new engine first, when the engine that serves holds the deployment's public port itself: a hand-made
engine the take-over cannot adopt in place, or one adopted in place at the first take-over (which runs on
the public port until the next swap). With GPUs of the deployment free beside it:

  1. the managed engine starts there, on a loopback backend port, while the old one serves (its unit's
     readiness check asks it directly: the front door cannot have the public port yet);
  2. once it answers, the old engine stops and the front door binds the public port, pointing at the new
     one (checked through that port): the gap is the port's move, not a load;
  3. the hand-made units are put away as in any take-over (host/take_over.py), a managed one's files go.

Where the managed unit has the old engine's name, systemd cannot run both: the stack's launch first serves
as the bridge (`<unit-stem>-bridge.service`, host/bridge.py), and the managed unit takes over from it on
the freed GPUs as a restart through a bridge does. A failure before the move leaves the old engine
serving, untouched; one at the move starts the old engines again (their files are still in place) and
takes the site away; after it, a managed unit that does not serve leaves its bridge serving. Standard
library only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from host.bridge import Bridge, journal
from host.contract import ActiveRecord, Placement, Result, is_managed
from host.swap_files import file_text, install_file
from host.systemd import now
from host.take_over import TakeOver
from host.transaction_base import Backup

# A stopping service's sub-states while its main process (or, after ExecStopPost, what is left of it)
# still runs after SIGTERM; "stop" and "stop-post" are its own ExecStop and ExecStopPost, not the engine.
ENGINE_STILL_RUNNING = frozenset({"stop-sigterm", "final-sigterm"})


class PortMove(Bridge, TakeOver):
    # How long an engine that let the port go may still write the answers it has (see finish_stop).
    last_answers_seconds = 1.0

    def new_engine_first(
        self,
        leaving: Sequence[str],
        spare: Placement,
        freed: Placement | None,
        staged_unit: Path,
        staged_env: Path,
        staged_bridge: Path,
        old: ActiveRecord | None,
        started: float,
    ) -> Result:
        """Start the stack's engine on `spare` beside what serves on the public port (the running units of
        `leaving`, every unit that stops for it), then move the port to the front door. `freed`: where the
        managed unit runs once the old engine has stopped, when it must take over from a bridge (its name
        is the old engine's)."""
        plan = self.plan
        backups = self.back_up(leaving)
        serving = [b.unit for b in backups if b.was_running]
        through_bridge = plan.unit_name in serving
        first = self.bridge if through_bridge else plan.unit_name
        if through_bridge:
            assert freed is not None, "the managed unit takes over from its bridge on the GPUs the old engine frees"
            self.install_unit(first, staged_bridge, staged_env, spare)
        else:
            self.install_staged(staged_unit, staged_env, spare)
        self.host.run("systemctl", "reset-failed", first, check=False)
        who = " and ".join(serving)
        ready, cursor = self.start_new(
            f"on {spare.describe()} beside {who}, which keeps serving on port {plan.port}", first
        )
        if not ready:
            tail, _ = self.host.journal(first, cursor, lines=plan.journal_lines)
            self.unwind(first, backups)
            return Result(
                "rolled-back",
                f"the take-over of port {plan.port} by {first} failed: it did not become ready; {who} kept serving "
                f"throughout and still serves.\nlast lines of the {first} journal:\n{journal(tail)}",
                plan.digest,
                self.timings,
            )
        problem = self.move_port(backups, first, spare)
        if problem is not None:
            return self.move_back(backups, first, problem)
        self.serving(first, spare)
        if old is not None and old.unit != plan.unit_name:
            file = self.unit_dir / old.unit
            if not file.is_file() or is_managed(file.read_text(encoding="utf-8", errors="replace")):
                self.remove_unit_files(old.unit)  # an engine adopted in place under another managed unit
        self.put_away_hand_made(backups)
        if not through_bridge:
            self.timings["total"] = now() - started
            return self.succeeded(spare, old)
        assert freed is not None
        self.install_staged(staged_unit, staged_env, freed)  # over the hand-made file of its name, or a drop-in
        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        ready, cursor = self.start_new(f"on {freed.describe()}, taking over from {first}, which serves meanwhile")
        switched = self.timed_switch(freed, plan.unit_name, "switch_back") if ready else "it did not become ready"
        if switched is not None:
            tail, _ = self.host.journal(plan.unit_name, cursor, lines=plan.journal_lines)
            self.host.run("systemctl", "stop", plan.unit_name, check=False)
            self.host.run("systemctl", "disable", "--quiet", "--no-reload", plan.unit_name, check=False)
            self.claim(frozenset(spare.gpus))
            return Result(
                "rollback-failed",
                f"{plan.unit_name} did not take over from {first} ({switched}); {first} keeps serving the stack's "
                f"launch on {spare.describe()} behind the front door on port {plan.port}: the next `pulumi up` moves "
                f"it to {plan.unit_name}.\nlast lines of the {plan.unit_name} journal:\n{journal(tail)}",
                plan.digest,
                self.timings,
            )
        self.serving(plan.unit_name, freed, instead_of=first)
        self.retire(first, spare)
        self.timings["total"] = now() - started
        return self.succeeded(freed, old)

    def move_port(self, backups: Sequence[Backup], first: str, spare: Placement) -> str | None:
        """Stop the engines on the public port and have the front door bind it for `first` the moment they
        let it go (an engine closes its socket as its shutdown begins; the rest of its stop, its workers and
        its ExecStopPost, need not be waited for by clients): None once it answers through the port, else
        what failed (the site is taken away again)."""
        plan = self.plan
        moved = now()
        stopping = [b.unit for b in backups if b.was_running]
        for unit in stopping:
            self.host.run("systemctl", "stop", "--no-block", unit, check=False)
        # A stopping unit is "deactivating" until its processes are gone, and vLLM lets the port go before
        # that: the front door binds it once nothing listens (nginx would otherwise retry its bind for 2.5 s).
        while self.host.listens(plan.readiness_address, plan.port) and not all(map(self.stopped, stopping)):
            self.sleep(0.02)
        released = now()
        problem = self.switch_front_door(spare, first)
        self.timings["port_move"] = now() - moved
        # Their stop ends before their files are put away or they start again.
        for unit in stopping:
            self.finish_stop(unit, released)
        self.timings["stop"] = now() - moved
        if problem is None:
            self.log(f"port {plan.port} moved to the front door in {self.timings['port_move']:.2f} s, onto {first}")
            # No boot starts them again (a unit of the managed name is enabled again once it is managed).
            for backup in backups:
                if backup.was_enabled:
                    self.host.run("systemctl", "disable", "--quiet", "--no-reload", backup.unit, check=False)
        return problem

    def stopped(self, unit: str) -> bool:
        return self.host.state(unit) in ("inactive", "failed")

    def finish_stop(self, unit: str, released: float) -> None:
        """Until `unit` has stopped. vLLM stops its engine before it closes its port (its launcher's
        shutdown: the engine client first, then the HTTP server), so a connection the API server still
        holds `last_answers_seconds` after the port went waits for an answer that cannot come, and its
        client would wait out its own timeout (on the sandbox, 3 of 7 stops with a request in flight: the
        unit stopped only when its client gave up, 5 s later). What still runs of the unit's engine then is
        killed, so that client gets its error at once; an ExecStop or ExecStopPost that runs is left to end."""
        while not self.stopped(unit) and now() - released < self.last_answers_seconds:
            self.sleep(0.05)
        still = self.host.show(unit, "ActiveState", "SubState")
        if still.get("ActiveState") == "deactivating" and still.get("SubState") in ENGINE_STILL_RUNNING:
            self.log(
                f"{unit} still ran {self.last_answers_seconds:.0f} s after it let port {self.plan.port} go, its "
                "engine already stopped: killed, so a request it still held fails at once instead of waiting "
                "out its client's timeout"
            )
            self.host.run("systemctl", "kill", "--signal=SIGKILL", unit, check=False)
            self.wait_stopped(unit)
            self.host.run("systemctl", "reset-failed", unit, check=False)
        self.wait_stopped(unit)

    def wait_stopped(self, unit: str, timeout: float = 300.0) -> None:
        """Until `unit` has stopped (its stop job with its ExecStopPost done), or `timeout` (systemd's own
        TimeoutStopSec kills it first)."""
        started = now()
        while not self.stopped(unit) and now() - started < timeout:
            self.sleep(0.05)

    def unwind(self, first: str, backups: Sequence[Backup]) -> None:
        """`first` stopped and its files gone, or back as they were when a unit of its name stops too."""
        self.host.run("systemctl", "stop", first, check=False)
        self.remove_unit_files(first)
        for backup in backups:
            if backup.unit == first and backup.saved is not None and backup.file is not None:
                install_file(backup.saved, backup.file, 0o644)
        self.host.run("systemctl", "daemon-reload")

    def move_back(self, backups: Sequence[Backup], first: str, problem: str) -> Result:
        """The front door did not serve the public port: `first` goes, the old engines start again on it."""
        plan = self.plan
        self.unwind(first, backups)
        if file_text(self.site_path) is not None:
            self.switch_front_door(None)
        restarted: list[str] = []
        failed: list[str] = []
        for backup in backups:
            if not backup.was_running:
                continue
            ready = self.start_again(backup.unit, f"starting {backup.unit} again on port {plan.port}")
            (restarted if ready else failed).append(backup.unit)
        status = "rollback-failed" if failed else "rolled-back"
        again = f"{' and '.join(restarted)} serves again" if restarted else "nothing serves again"
        return Result(
            status,
            f"the front door did not take port {plan.port} over from {' and '.join(b.unit for b in backups if b.was_running)} "
            f"({problem}); {again}" + (f"; {' and '.join(failed)} did not come back" if failed else ""),
            plan.digest,
            self.timings,
        )
