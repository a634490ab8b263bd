"""The new engine first (host/port_move.py): the engine that serves holds the public port itself, the
managed one starts beside it on a free GPU and the port moves to the front door once it answers. On
test_swap's recording stand-in for systemctl and a front door that answers as nginx would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from host import contract
from host.judgement import leaving_units
from host.port_move import PortMove
from host.systemd import now
from tests.host.test_bridge import StartsInTurn
from tests.host.test_swap import World, assert_ran_in_order, systemctl_order

NEW, LEGACY = "vllm-new.service", "vllm-legacy.service"
BRIDGE = "vllm-new-bridge.service"
SPARE = contract.Placement((1,), 18000)
FREED = contract.Placement((0,), 28000)


@dataclass
class FrontDoorThatFails(StartsInTurn):
    """nginx that will not start (a port it cannot bind, say)."""

    def attempt(self, *args: str) -> tuple[int, str]:
        self.run(*args)
        if args[:2] == ("systemctl", "start") and args[-1] == contract.FRONT_DOOR_UNIT:
            self.units[contract.FRONT_DOOR_UNIT].state = "failed"
            return 1, "bind() to 0.0.0.0:8000 failed (98: Address already in use)"
        return 0, ""


@dataclass
class LetsThePortGoFirst(StartsInTurn):
    """A hand-made engine as vLLM stops: it holds the port for the first looks after its stop (`held_for`),
    then lets it go while its unit is still deactivating (`stopping_in`: its SubState, "stop-sigterm"
    while the engine's process runs, "stop-post" while its ExecStopPost does); `systemctl kill` ends it."""

    held_for: int = 2
    stopping_in: str = "stop-sigterm"

    def run(self, *args: str, check: bool = True) -> str:
        out = super().run(*args, check=check)
        fake = self.units.get(args[-1])
        if args[:3] == ("systemctl", "stop", "--no-block") and fake is not None:
            fake.state, fake.sub_state = "deactivating", self.stopping_in
        elif args[:2] == ("systemctl", "kill") and fake is not None:
            fake.state, fake.sub_state = "failed", "failed"
        elif args[:2] == ("systemctl", "reset-failed") and fake is not None and fake.state == "failed":
            fake.state, fake.sub_state = "inactive", "dead"
        return out

    def listens(self, address: str, port: int) -> bool:
        self.calls.append(("listens", address, str(port)))
        self.held_for -= 1
        return self.held_for >= 0


def by_hand_on_the_port(
    tmp_path: Path, unit: str, outcomes: dict[str, list[str]] | None = None, host: type[StartsInTurn] = StartsInTurn
) -> tuple[World, PortMove, contract.Plan]:
    """A hand-made `unit` serving on the deployment's public port on GPU 0, enabled; the stack's unit
    vllm-new (which replaces vllm-legacy) staged with its bridge."""
    world = World(tmp_path)
    world.systemd = host(world.unit_dir, world.env_dir, world.front_door_dir, outcomes=dict(outcomes or {}))
    world.hand_made(unit)
    plan = world.plan(unit=NEW, replaces=(LEGACY,), gpus=(0, 1))
    staged = Path(plan.state_dir) / "staged"
    (staged / BRIDGE).write_text(f"{contract.MANAGED_MARK}: {BRIDGE}\n[Service]\n")
    return world, world.part(PortMove, plan), plan


def take_over(move: PortMove, plan: contract.Plan, freed: contract.Placement | None = None) -> contract.Result:
    staged = Path(plan.state_dir) / "staged"
    leaving = leaving_units(plan, None)
    result = move.new_engine_first(
        leaving, SPARE, freed, staged / NEW, staged / "vllm-new.env", staged / BRIDGE, None, now()
    )
    move.after_result()
    return result


def test_the_managed_engine_answers_before_the_hand_made_one_stops_and_the_port_moves(tmp_path: Path) -> None:
    world, move, plan = by_hand_on_the_port(tmp_path, LEGACY)
    result = take_over(move, plan)
    assert result.status == "succeeded", result.message
    order = systemctl_order(world)
    assert (
        order.index(("start", NEW)) < order.index(("stop", LEGACY)) < order.index(("start", contract.FRONT_DOOR_UNIT))
    )
    assert "port_move" in result.timings and any("moved to the front door" in line for line in world.lines)
    assert "proxy_pass http://127.0.0.1:18000;" in world.site.read_text()
    assert "CUDA_VISIBLE_DEVICES=1\n" in (world.env_dir / "vllm-new.placement.env").read_text()
    # Taken over as in any take-over: its file put away with how it was, disabled; the new unit enabled.
    adopted = Path(plan.state_dir) / "adopted"
    assert json.loads((adopted / f"{LEGACY}.was").read_text()) == {
        "path": str(world.unit_dir / LEGACY),
        "enabled": True,
        "running": True,
    }
    assert not (world.unit_dir / LEGACY).exists() and not world.systemd.units[LEGACY].enabled
    assert world.systemd.units[NEW].enabled
    assert move.active_record() == contract.ActiveRecord(NEW, "chat", 8000, (1,), 18000)


def test_a_hand_made_engine_of_the_managed_name_hands_over_through_the_bridge(tmp_path: Path) -> None:
    world, move, plan = by_hand_on_the_port(tmp_path, NEW)
    result = take_over(move, plan, FREED)
    assert result.status == "succeeded", result.message
    steps = [
        ("start", BRIDGE),
        ("stop", NEW),
        ("start", contract.FRONT_DOOR_UNIT),
        ("start", NEW),
        ("reload", contract.FRONT_DOOR_UNIT),
        ("stop", BRIDGE),
    ]
    assert_ran_in_order(world, steps)
    # The managed unit runs on the GPU the hand-made engine freed, behind the front door; no bridge is left.
    assert (world.unit_dir / NEW).read_text().startswith(contract.MANAGED_MARK)
    assert "proxy_pass http://127.0.0.1:28000;" in world.site.read_text()
    assert not (world.unit_dir / BRIDGE).exists() and not world.systemd.units[BRIDGE].enabled
    assert world.systemd.units[NEW].enabled and world.systemd.units[NEW].state == "active"
    assert (Path(plan.state_dir) / "adopted" / f"{NEW}.was").is_file()
    assert move.active_record() == contract.ActiveRecord(NEW, "chat", 8000, (0,), 28000)


def test_a_new_engine_that_never_answers_leaves_the_hand_made_one_serving(tmp_path: Path) -> None:
    world, move, plan = by_hand_on_the_port(tmp_path, LEGACY, {NEW: ["failed"]})
    result = take_over(move, plan)
    assert result.status == "rolled-back" and f"{LEGACY} kept serving throughout" in result.message
    assert "stop" not in world.systemd.verbs(LEGACY) and world.systemd.units[LEGACY].enabled
    assert (world.unit_dir / LEGACY).is_file() and not (world.unit_dir / NEW).exists()
    assert not world.site.exists() and move.active_record() is None


def test_a_front_door_that_cannot_take_the_port_gives_it_back_to_the_hand_made_engine(tmp_path: Path) -> None:
    world, move, plan = by_hand_on_the_port(tmp_path, LEGACY, host=FrontDoorThatFails)
    result = take_over(move, plan)
    assert result.status == "rolled-back", result.message
    assert "Address already in use" in result.message and f"{LEGACY} serves again" in result.message
    assert world.systemd.units[LEGACY].state == "active" and world.systemd.units[LEGACY].enabled
    assert (world.unit_dir / LEGACY).is_file() and not (world.unit_dir / NEW).exists()
    assert not world.site.exists()


def test_the_first_swap_after_an_adoption_in_place_starts_the_new_model_first(tmp_path: Path) -> None:
    from tests.host.test_swap import managed_unit, serving_by_hand

    world = World(tmp_path)
    world.systemd = StartsInTurn(world.unit_dir, world.env_dir, world.front_door_dir)
    serving_by_hand(world)  # vllm-new by hand on port 8000, GPU 0: the stack's launch, adopted in place
    plan = world.plan(gpus=(0, 1))
    (Path(plan.state_dir) / "staged" / NEW).write_text(managed_unit(NEW))
    assert world.run(plan).status == "succeeded"
    assert contract.adopted_drop_in(NEW, world.unit_dir).is_file()
    world.systemd.calls.clear()
    other = world.plan(unit="vllm-b.service", gpus=(0, 1))
    move = world.part(PortMove, other)
    old = move.active_record()
    assert old is not None and old.adopted == NEW and old.placement is None
    staged = Path(other.state_dir) / "staged"
    result = move.new_engine_first(
        leaving_units(other, old),
        SPARE,
        None,
        staged / "vllm-b.service",
        staged / "vllm-b.env",
        staged / BRIDGE,
        old,
        now(),
    )
    assert result.status == "succeeded", result.message
    order = systemctl_order(world)
    assert order.index(("start", "vllm-b.service")) < order.index(("stop", NEW))
    assert order.index(("stop", NEW)) < order.index(("start", contract.FRONT_DOOR_UNIT))
    # The adopted engine's unit (vllm-fleet's own now) goes with its drop-in; the new model serves.
    assert not (world.unit_dir / NEW).exists() and not contract.adopted_drop_in(NEW, world.unit_dir).exists()
    assert move.active_record() == contract.ActiveRecord("vllm-b.service", "chat", 8000, (1,), 18000)


def stopped_as_vllm_stops(tmp_path: Path, host: type[LetsThePortGoFirst]) -> World:
    """A take-over of the hand-made LEGACY on `host`, no grace for its last answers; it succeeded."""
    world, move, plan = by_hand_on_the_port(tmp_path, LEGACY, host=host)
    move.last_answers_seconds = 0.0
    result = take_over(move, plan)
    assert result.status == "succeeded", result.message
    return world


def test_the_front_door_binds_once_the_stopping_engine_lets_the_port_go_and_what_still_runs_is_killed(
    tmp_path: Path,
) -> None:
    # vLLM closes its port after its engine has stopped, its unit deactivating until the process exits: a
    # client whose request the API server still holds then waits for an answer that cannot come.
    world = stopped_as_vllm_stops(tmp_path, LetsThePortGoFirst)
    calls = world.systemd.calls
    stop = calls.index(("systemctl", "stop", "--no-block", LEGACY))
    front_door = calls.index(("systemctl", "start", contract.FRONT_DOOR_UNIT))
    # Both looks at the port that found it held come between the stop and the front door's start.
    assert [i for i, c in enumerate(calls) if c[0] == "listens"][:3] == [stop + 1, stop + 2, stop + 3] < [front_door]
    assert_ran_in_order(
        world, [("start", contract.FRONT_DOOR_UNIT), ("kill", LEGACY), ("reset-failed", LEGACY), ("disable", LEGACY)]
    )
    assert ("systemctl", "kill", "--signal=SIGKILL", LEGACY) in calls
    assert world.systemd.units[LEGACY].state == "inactive"
    assert any(f"{LEGACY} still ran 0 s after it let port 8000 go" in line for line in world.lines), world.lines


@dataclass
class ExecStopPostRuns(LetsThePortGoFirst):
    """The engine's process is gone once the port is, its unit's ExecStopPost runs for `post_looks` looks."""

    stopping_in: str = "stop-post"
    post_looks: int = 3

    def show(self, unit: str, *props: str) -> dict[str, str]:
        fake = self.units.get(unit)
        if fake is not None and fake.sub_state == "stop-post":
            self.post_looks -= 1
            if self.post_looks < 0:
                fake.state, fake.sub_state = "inactive", "dead"
        return super().show(unit, *props)


def test_an_engine_stopping_through_its_exec_stop_post_is_left_to_finish(tmp_path: Path) -> None:
    world = stopped_as_vllm_stops(tmp_path, ExecStopPostRuns)
    assert "kill" not in world.systemd.verbs(LEGACY) and world.systemd.units[LEGACY].state == "inactive"
