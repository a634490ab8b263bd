"""A unit rewritten in place (host/rewrite.py) on test_swap's recording stand-in for systemctl: the engine
keeps its process when nothing of its launch changes."""

from __future__ import annotations

from pathlib import Path

from host import contract
from host.rewrite import Rewrite
from host.systemd import now
from host.unit_file import KEEPS_RUNNING
from tests.host.test_swap import World

UNIT = "vllm-a.service"
LAUNCH = "ExecStart=/opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server --model /shared/m --port ${VLLM_FLEET_BACKEND_PORT}\n"


def unit(world: World, comment: str = "# the engine", launch: str = LAUNCH, timeout: int = 300) -> str:
    """A unit of the deployment as render/units.py shapes it, naming its environment file in `world`."""
    return (
        f"{contract.MANAGED_MARK}: stack dev, deployment chat.\n[Service]\n"
        f"EnvironmentFile=-{world.env_dir / 'vllm-a.env'}\n{comment}\n{launch}TimeoutStartSec={timeout}\n"
    )


def serving(tmp_path: Path) -> tuple[World, Rewrite, contract.ActiveRecord, Path, Path]:
    """vllm-a serving `unit()` behind the front door, its staged unit and environment file beside."""
    world = World(tmp_path)
    plan = world.plan(unit=UNIT)
    staged = Path(plan.state_dir) / "staged"
    (staged / UNIT).write_text(unit(world))
    assert world.run(plan).status == "succeeded"
    world.systemd.calls.clear()
    part = world.part(Rewrite, plan)
    old = part.active_record()
    assert old is not None
    return world, part, old, staged / UNIT, staged / "vllm-a.env"


# The survey's reading of the engine that serves against the staged unit (host/engine_launch.py, tested on
# its own): the same launch, and what changes outside it.
SAME = contract.EngineReading(UNIT, pid=4242, unit_changes=("TimeoutStartSec=", "its comments"))


def test_a_comment_and_a_timeout_are_installed_and_reloaded_while_the_engine_serves(tmp_path: Path) -> None:
    world, part, old, staged_unit, staged_env = serving(tmp_path)
    staged_unit.write_text(unit(world, "# the engine, reworded", timeout=600))
    result = part.rewrite_in_place(old, staged_unit, staged_env, SAME, now())
    assert result.status == "succeeded" and result.message.startswith(KEEPS_RUNNING), result.message
    assert "PID 4242 of vllm-a.service serves on; TimeoutStartSec=, its comments changed" in result.message
    assert (world.unit_dir / UNIT).read_text() == staged_unit.read_text()
    assert ("systemctl", "daemon-reload") in world.systemd.calls
    assert {"stop", "start", "restart"} & set(world.systemd.verbs(UNIT)) == set()


def test_the_whole_swap_rewrites_when_the_survey_reads_the_same_launch(tmp_path: Path) -> None:
    world, part, _old, staged_unit, _env = serving(tmp_path)
    staged_unit.write_text(unit(world, "# the engine, reworded"))
    world.systemd.units[UNIT].enabled = False  # disabled by hand meanwhile: enabled again, no restart
    world.found["readings"] = {"dev.chat": {"unit": UNIT, "pid": 4242, "unitChanges": ["its comments"]}}
    result = world.run(part.plan)
    assert result.status == "succeeded" and KEEPS_RUNNING in result.message, result.message
    assert {"stop", "start", "restart"} & set(world.systemd.verbs(UNIT)) == set()
    assert world.systemd.units[UNIT].enabled
    assert any(f"rewriting {UNIT}: {KEEPS_RUNNING}: its comments change" in line for line in world.lines), world.lines


def test_an_engine_that_systemd_does_not_keep_gets_its_files_of_before_back(tmp_path: Path) -> None:
    world, part, old, staged_unit, staged_env = serving(tmp_path)
    before = (world.unit_dir / UNIT).read_text()
    staged_unit.write_text(unit(world, "# reworded"))
    world.systemd.units[UNIT].main_pid = 0  # its engine is gone as the files change
    result = part.rewrite_in_place(old, staged_unit, staged_env, SAME, now())
    assert result.status == "rolled-back" and "its files of before are back" in result.message
    assert (world.unit_dir / UNIT).read_text() == before
