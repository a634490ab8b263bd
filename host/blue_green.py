"""Blue/green: the new engine starts beside the old one on the deployment's spare GPUs, the front door
switches once it answers, requests in flight on the old engine drain, then the old unit stops. If the new
one never answers it is removed and the old one never stopped. Standard library only."""

from __future__ import annotations

from pathlib import Path

from host.contract import FRONT_DOOR_UNIT, ActiveRecord, Placement, Result, is_managed
from host.front_door_switch import FrontDoorSwitch
from host.systemd import established_to, now


class BlueGreen(FrontDoorSwitch):
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
        self.install_staged(staged_unit, staged_env, placement)
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
        # enable/disable only set the symlinks the next boot reads; each would also reload the whole manager
        # (~0.2 s), which the transaction does once after its result (after_result).
        self.host.run("systemctl", "enable", "--quiet", "--no-reload", plan.unit_name)
        self.write_active(self.record(placement))
        self.drain(old)
        stop_started = now()
        self.host.run("systemctl", "stop", old.unit, check=False)
        self.host.run("systemctl", "disable", "--quiet", "--no-reload", old.unit, check=False)
        self.timings["stop"] = now() - stop_started
        self.log(f"stopped {old.unit} in {self.timings['stop']:.1f} s")
        self.remove_unit_files(old.unit)
        self.timings["total"] = now() - started
        return self.succeeded(placement, old)

    def drain(self, old: ActiveRecord) -> None:
        """Until the front door carries no request to the old engine and none of its workers from before the
        reload runs (one may still hold a request it accepted just before the reload and pass it to the old
        engine only after the count of connections: a 502, or vLLM's ~10 s shutdown hang, once that stops), or
        drain_seconds pass."""
        if old.backend_port is None:
            return
        started = now()
        last_report = 0.0
        while True:
            carried = established_to(self.host.run("ss", "-Htn", "state", "established", check=False), old.backend_port)
            carried += self.host.retiring_workers(FRONT_DOOR_UNIT, self.workers_before_reload)
            elapsed = now() - started
            if carried == 0:
                self.timings["drain"] = elapsed
                self.log(f"drained {old.unit} in {elapsed:.1f} s")
                return
            if elapsed >= self.plan.drain_seconds:
                self.timings["drain"] = elapsed
                self.log(
                    f"{old.unit} still carries {carried} request(s) or front door worker(s) after "
                    f"{self.plan.drain_seconds} s (deployments[].drainSeconds); stopping it"
                )
                return
            if elapsed - last_report >= self.plan.report_every:
                self.log(f"draining {old.unit}: {carried} request(s) or front door worker(s) from before the switch")
                last_report = elapsed
            self.sleep(0.1)
