"""Blue/green through a bridge: the deployment's own unit restarts with a new launch (a flag, a variable,
LoRA turned on; the model stays) and no client notices.

systemd cannot rename a running unit, and the front door, the placement file and the answers' header each
name an engine by its unit, so the new launch serves under a second name first:

  1. the bridge, `<unit-stem>-bridge.service` (render/units.render_bridge_unit: the same launch, its own
     placement and environment file), starts on the deployment's spare GPUs and other backend port while
     the unit serves;
  2. once it answers, the front door switches to it, checked through the public port, and what the unit
     carries drains;
  3. the unit stops and starts with the new launch on its own GPUs and port;
  4. once it answers, the front door switches back, what the bridge carries drains, the bridge stops and
     its files go.

Two loads, no gap. While the bridge serves it is the deployment's active engine: its record, and enabled
where the unit is not, so a host that goes down half-way boots into what served. A failure puts back what
served: before the first switch the bridge goes and the unit never stopped; after it, the unit's files of
before go back and its old launch starts again on its GPUs, the front door switches to it and the bridge
stops; if even that does not serve, the bridge keeps serving and the next `pulumi up` moves from it to the
unit as a model swap does. The transaction runs in a transient unit (host/tools/swap.py): it finishes whatever
becomes of the controller. Standard library only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from host.blue_green import BlueGreen
from host.contract import ActiveRecord, Placement, Result
from host.swap_files import install_file, write_file
from host.systemd import now
from host.unit_file import bridge_stem


def bridge_unit_name(unit_stem: str) -> str:
    return f"{bridge_stem(unit_stem)}.service"


class Bridge(BlueGreen):
    @property
    def bridge(self) -> str:
        return bridge_unit_name(self.plan.unit_stem)

    def install_unit(self, unit: str, unit_text: Path, env_text: Path, placement: Placement) -> None:
        """A unit other than the plan's (the bridge): its file, environment file and placement, and the
        manager's reload when it holds an older copy."""
        stem = unit.removesuffix(".service")
        self.env_dir.mkdir(parents=True, exist_ok=True)
        install_file(unit_text, self.unit_dir / unit, 0o644)
        install_file(env_text, self.env_dir / f"{stem}.env", 0o600)
        write_file(self.placement_path(unit), placement.env_text(), 0o644)
        if self.host.reload_needed(unit):
            self.host.run("systemctl", "daemon-reload")

    def record_of(self, unit: str, placement: Placement) -> ActiveRecord:
        return ActiveRecord(
            unit, self.plan.served_name, self.plan.port, placement.gpus, placement.port, self.plan.staged_copy
        )

    def serving(self, unit: str, placement: Placement, instead_of: str | None = None) -> None:
        """`unit` is the deployment's engine now: its record, and the one the boot starts (not `instead_of`)."""
        # Only the next boot reads the symlinks: the manager reloads once after the result (after_result).
        self.host.run("systemctl", "enable", "--quiet", "--no-reload", unit)
        if instead_of is not None:
            self.host.run("systemctl", "disable", "--quiet", "--no-reload", instead_of, check=False)
        self.write_active(self.record_of(unit, placement))

    def retire(self, unit: str, placement: Placement) -> None:
        """Drain what the front door still carries to `unit`'s engine, stop it and remove its files."""
        self.drain(ActiveRecord(unit, gpus=placement.gpus, backend_port=placement.port))
        stopped = now()
        self.host.run("systemctl", "stop", unit, check=False)
        self.timings["stop"] = self.timings.get("stop", 0.0) + now() - stopped
        self.remove_unit_files(unit)

    def bridge_restart(
        self,
        old: ActiveRecord,
        spare: Placement,
        staged_unit: Path,
        staged_env: Path,
        staged_bridge: Path,
        started: float,
    ) -> Result:
        """Restart the deployment's unit (`old`, serving behind the front door) with the staged launch
        through the bridge on `spare` (GPUs neither it nor anything else holds, the other backend port)."""
        plan, bridge = self.plan, self.bridge
        own = old.placement
        assert old.unit == plan.unit_name and own is not None, (
            "a bridge restarts the unit that serves behind the front door"
        )
        backups = self.fresh_backups_dir()
        # The unit's files as they served, for a way back to its old launch (host/rollback.py's, for a bridge).
        saved = [
            (path, backups / path.name, mode)
            for path, mode in (
                (self.unit_dir / plan.unit_name, 0o644),
                (self.env_dir / f"{plan.unit_stem}.env", 0o600),
                (self.placement_path(plan.unit_name), 0o644),
            )
            if path.is_file()
        ]
        for path, copy, _mode in saved:
            shutil.copy2(path, copy)

        self.install_unit(bridge, staged_bridge, staged_env, spare)
        self.host.run("systemctl", "reset-failed", bridge, check=False)
        what = f"the new launch of {plan.unit_name} on {spare.describe()}, beside it, which keeps serving"
        ready, cursor = self.start_new(what, unit=bridge, timing="bridge_start_to_ready")
        problem = "it did not become ready" if not ready else self.timed_switch(spare, bridge, "switch_to_bridge")
        if problem is not None:
            tail, _ = self.host.journal(bridge, cursor, lines=plan.journal_lines)
            self.host.run("systemctl", "stop", bridge, check=False)
            self.remove_unit_files(bridge)
            return Result(
                "rolled-back",
                f"the restart of {plan.unit_name} through {bridge} failed: {problem}; {plan.unit_name} kept serving "
                f"throughout and still serves.\nlast lines of the {bridge} journal:\n{journal(tail)}",
                plan.digest,
                self.timings,
            )
        self.serving(bridge, spare, instead_of=plan.unit_name)
        self.log(f"{bridge} serves the new launch; {plan.unit_name} restarts with it on {own.describe()}")
        self.drain(old)
        stopped = now()
        self.host.run("systemctl", "stop", plan.unit_name, check=False)
        self.timings["stop"] = now() - stopped
        self.install_staged(staged_unit, staged_env, own)
        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        ready, cursor = self.start_new(f"its new launch on {own.describe()}; {bridge} serves meanwhile")
        problem = "it did not become ready" if not ready else self.timed_switch(own, plan.unit_name, "switch_back")
        if problem is not None:
            tail, _ = self.host.journal(plan.unit_name, cursor, lines=plan.journal_lines)
            return self.back_to_the_old_launch(
                old, spare, saved, f"{problem}\nlast lines of its journal:\n{journal(tail)}"
            )
        self.serving(plan.unit_name, own, instead_of=bridge)
        self.retire(bridge, spare)
        self.timings["total"] = now() - started
        self.timings["bridge"] = 1.0
        return self.succeeded(own, old)

    def timed_switch(self, placement: Placement, unit: str, timing: str) -> str | None:
        switched = now()
        problem = self.switch_front_door(placement, unit)
        self.timings[timing] = now() - switched
        return problem

    def back_to_the_old_launch(
        self, old: ActiveRecord, spare: Placement, saved: list[tuple[Path, Path, int]], problem: str
    ) -> Result:
        """The unit did not serve its new launch while the bridge served: its files of before go back and its
        old launch starts again on its GPUs; once it answers the front door switches to it and the bridge
        stops. If it does not, the bridge (the new launch) keeps serving."""
        plan, bridge = self.plan, self.bridge
        own = old.placement
        assert own is not None
        self.host.run("systemctl", "stop", plan.unit_name, check=False)
        self.host.run("systemctl", "reset-failed", plan.unit_name, check=False)
        for path, copy, mode in saved:
            install_file(copy, path, mode)
        self.host.run("systemctl", "daemon-reload")
        saying = f"{plan.unit_name} did not serve its new launch; starting its old launch again"
        ready = self.start_again(plan.unit_name, saying, "rollback_start_to_ready")
        switched = self.switch_front_door(own) if ready else "it did not become ready"
        if switched is None:
            self.serving(plan.unit_name, own, instead_of=bridge)
            self.retire(bridge, spare)
            self.claim(frozenset(own.gpus))
            return Result(
                "rolled-back",
                f"{plan.unit_name} did not serve its new launch ({problem}); its old launch serves again on "
                f"{own.describe()}, and {bridge} served the new one meanwhile",
                plan.digest,
                self.timings,
            )
        self.host.run("systemctl", "stop", plan.unit_name, check=False)
        self.claim(frozenset(spare.gpus))
        return Result(
            "rollback-failed",
            f"{plan.unit_name} served neither its new launch ({problem}) nor its old one again ({switched}); "
            f"{bridge} keeps serving the new launch on {spare.describe()}: the next `pulumi up` moves it back to "
            f"{plan.unit_name}",
            plan.digest,
            self.timings,
        )


def journal(tail: list[str]) -> str:
    return "\n".join(f"  | {line}" for line in tail)
