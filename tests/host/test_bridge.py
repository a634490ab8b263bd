"""Blue/green through a bridge (host/bridge.py), on test_swap's recording stand-in for systemctl and a
front door that answers as nginx would from the site and the placement files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from host import contract
from host.bridge import Bridge
from host.systemd import now
from tests.host.test_swap import FakeUnit, RecordingSystemd, World, assert_ran_in_order, deployed, systemctl_order

UNIT, BRIDGE = "vllm-a.service", "vllm-a-bridge.service"
OWN = contract.Placement((0,), 18000)
SPARE = contract.Placement((1,), 28000)


@dataclass
class StartsInTurn(RecordingSystemd):
    """systemctl whose `start` of a unit leads, in turn, to each of that unit's `outcomes` (then "active")."""

    outcomes: dict[str, list[str]] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True) -> str:
        if args[:2] == ("systemctl", "start") and self.outcomes.get(args[-1]):
            self.units.setdefault(args[-1], FakeUnit()).outcome = self.outcomes[args[-1]].pop(0)
        elif args[:2] == ("systemctl", "start"):
            self.units.setdefault(args[-1], FakeUnit()).outcome = "active"
        return super().run(*args, check=check)


def serving_a(
    tmp_path: Path, outcomes: dict[str, list[str]] | None = None
) -> tuple[World, Bridge, contract.ActiveRecord]:
    """vllm-a serving on GPU 0 behind the front door; its staged unit changed (a new launch) and staged
    beside it, its bridge; a transaction of that plan on a host whose starts go as `outcomes` say."""
    world = World(tmp_path)
    world.systemd = StartsInTurn(world.unit_dir, world.env_dir, world.front_door_dir)
    deployed(world, UNIT, gpus=(0, 1))
    plan = world.plan(unit=UNIT, gpus=(0, 1))
    staged = Path(plan.state_dir) / "staged"
    (staged / UNIT).write_text(f"{contract.MANAGED_MARK}: {UNIT}\n[Service]\nExecStart=/py --max-model-len 256\n")
    (staged / BRIDGE).write_text(f"{contract.MANAGED_MARK}: {BRIDGE}\n[Service]\nExecStart=/py --max-model-len 256\n")
    (staged / "vllm-a.env").write_text("HF_TOKEN=new\n")
    world.systemd.outcomes = dict(outcomes or {})
    old = world.transaction(plan).active_record()
    assert old is not None and old.placement == OWN
    world.systemd.calls.clear()
    bridge = world.part(Bridge, plan)
    return world, bridge, old


def restart(world: World, bridge: Bridge, old: contract.ActiveRecord) -> contract.Result:
    staged = Path(bridge.plan.state_dir) / "staged"
    result = bridge.bridge_restart(old, SPARE, staged / UNIT, staged / "vllm-a.env", staged / BRIDGE, now())
    bridge.after_result()
    return result


def active(world: World, bridge: Bridge) -> contract.ActiveRecord | None:
    return bridge.active_record()


def test_the_new_launch_serves_through_the_bridge_while_the_unit_restarts(tmp_path: Path) -> None:
    world, bridge, old = serving_a(tmp_path)
    result = restart(world, bridge, old)
    assert result.status == "succeeded", result.message
    # The bridge answers, the front door switches to it, only then the unit stops and restarts; once it
    # answers, the front door switches back and only then the bridge stops.
    steps = [
        ("start", BRIDGE),
        ("reload", contract.FRONT_DOOR_UNIT),
        ("stop", UNIT),
        ("start", UNIT),
        ("reload", contract.FRONT_DOOR_UNIT),
        ("stop", BRIDGE),
    ]
    assert_ran_in_order(world, steps)
    assert "proxy_pass http://127.0.0.1:18000;" in world.site.read_text()
    assert f"{contract.BACKEND_HEADER} {UNIT} always" in world.site.read_text()
    # The unit runs the new launch on its own GPU and port; nothing of the bridge is left.
    assert "--max-model-len 256" in (world.unit_dir / UNIT).read_text()
    assert (world.env_dir / "vllm-a.env").read_text() == "HF_TOKEN=new\n"
    assert "CUDA_VISIBLE_DEVICES=0\n" in (world.env_dir / "vllm-a.placement.env").read_text()
    assert not any(p.name.startswith("vllm-a-bridge") for p in [*world.unit_dir.iterdir(), *world.env_dir.iterdir()])
    assert world.systemd.units[UNIT].enabled and not world.systemd.units[BRIDGE].enabled
    assert active(world, bridge) == contract.ActiveRecord(UNIT, "chat", 8000, (0,), 18000)
    assert contract.Claims.from_json((world.state_root / "claims" / "dev.chat.json").read_text()).gpus == {0}
    for timing in ("bridge_start_to_ready", "switch_to_bridge", "start_to_ready", "switch_back", "drain", "total"):
        assert timing in result.timings, result.timings
    # The manager forgets the bridge once the result is written.
    assert world.systemd.calls[-2:] == [("systemctl", "daemon-reload"), ("systemctl", "reset-failed", BRIDGE)]


def test_while_the_bridge_serves_it_is_the_deployments_engine_for_a_boot(tmp_path: Path) -> None:
    world, bridge, old = serving_a(tmp_path)
    seen: list[tuple[contract.ActiveRecord | None, bool, bool]] = []
    stop = bridge.host.run

    def look_when_the_unit_stops(*args: str, check: bool = True) -> str:
        if args[:3] == ("systemctl", "stop", UNIT):
            seen.append((active(world, bridge), world.systemd.units[BRIDGE].enabled, world.systemd.units[UNIT].enabled))
        return stop(*args, check=check)

    bridge.host.run = look_when_the_unit_stops  # type: ignore[method-assign]
    assert restart(world, bridge, old).status == "succeeded"
    assert seen[0] == (contract.ActiveRecord(BRIDGE, "chat", 8000, (1,), 28000), True, False)


def test_a_bridge_that_never_answers_leaves_the_unit_serving_untouched(tmp_path: Path) -> None:
    world, bridge, old = serving_a(tmp_path, {BRIDGE: ["failed"]})
    site = world.site.read_text()
    unit_text = (world.unit_dir / UNIT).read_text()
    result = restart(world, bridge, old)
    assert result.status == "rolled-back" and f"{UNIT} kept serving throughout" in result.message
    assert f"last lines of the {BRIDGE} journal" in result.message
    assert "stop" not in world.systemd.verbs(UNIT) and world.systemd.units[UNIT].state == "active"
    assert world.site.read_text() == site and (world.unit_dir / UNIT).read_text() == unit_text
    assert not (world.unit_dir / BRIDGE).exists() and not (world.env_dir / "vllm-a-bridge.placement.env").exists()
    assert active(world, bridge) == old


def test_a_unit_that_does_not_serve_its_new_launch_gets_its_old_one_back(tmp_path: Path) -> None:
    world, bridge, old = serving_a(tmp_path, {UNIT: ["failed", "active"]})
    unit_text = (world.unit_dir / UNIT).read_text()
    env_text = (world.env_dir / "vllm-a.env").read_text()
    result = restart(world, bridge, old)
    assert result.status == "rolled-back", result.message
    assert "its old launch serves again on GPU 0, port 18000" in result.message
    assert (world.unit_dir / UNIT).read_text() == unit_text and (world.env_dir / "vllm-a.env").read_text() == env_text
    assert "proxy_pass http://127.0.0.1:18000;" in world.site.read_text()
    assert world.systemd.units[BRIDGE].state == "inactive" and not (world.unit_dir / BRIDGE).exists()
    assert world.systemd.units[UNIT].enabled and active(world, bridge) == old
    # Clients were served by the bridge until the old launch answered: it stopped only after the switch back.
    order = systemctl_order(world)
    assert order.index(("stop", BRIDGE)) > len(order) - 1 - order[::-1].index(("reload", contract.FRONT_DOOR_UNIT))


def test_when_neither_launch_serves_the_unit_the_bridge_keeps_serving(tmp_path: Path) -> None:
    world, bridge, old = serving_a(tmp_path, {UNIT: ["failed", "failed"]})
    result = restart(world, bridge, old)
    assert result.status == "rollback-failed", result.message
    assert f"{BRIDGE} keeps serving the new launch on GPU 1, port 28000" in result.message
    assert "proxy_pass http://127.0.0.1:28000;" in world.site.read_text()
    assert world.systemd.units[BRIDGE].state == "active" and world.systemd.units[BRIDGE].enabled
    assert active(world, bridge) == contract.ActiveRecord(BRIDGE, "chat", 8000, (1,), 28000)
    # The next swap starts from the bridge: the unit's files are those it served with before.
    assert "--max-model-len 256" not in (world.unit_dir / UNIT).read_text()
