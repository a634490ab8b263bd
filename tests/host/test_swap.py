"""The swap transaction's decisions, on a recording stand-in for systemctl/journalctl and real files in
a temporary root. The real thing runs end to end on the sandbox (tests/test_brownfield.py)."""

from __future__ import annotations

import fcntl
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any, TypeVar

import pytest

from host import contract, front_door, judgement, systemd
from host.tools import swap
from host.transaction import Transaction
from host.transaction_base import TransactionBase

# A transaction, or one of the parts it is assembled from (host/blue_green.py, host/bridge.py, ...).
Part = TypeVar("Part", bound=TransactionBase)


@dataclass
class FakeUnit:
    state: str = "inactive"
    enabled: bool = False
    # What `systemctl start` leads to: "active" (serves), "failed", or "auto-restart" (the process exited
    # and systemd waits RestartSec before the next attempt: ActiveState activating, SubState auto-restart).
    outcome: str = "active"
    start_timeout: str = "1min 30s"
    restarts: int = 0
    main_pid: int = 4242
    sub_state: str = "dead"
    # The unit file as systemd last read it (None: it holds no copy; it reads the file when next asked).
    loaded: str | None = None


@dataclass
class RecordingSystemd(systemd.SystemdHost):
    """systemctl as a table of units; every command is recorded for the assertions."""

    unit_dir: Path
    env_dir: Path = Path("/nonexistent")
    front_door_dir: Path = Path("/nonexistent")
    units: dict[str, FakeUnit] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    waited: dict[str, float] = field(default_factory=dict)
    # The closed site's 503s the public port gave, and what it answers from before then (nginx's reload
    # only signals it: its old workers pass requests on until the new ones answer).
    closed_answers: int = 0
    answers_before_the_reload: list[str] = field(default_factory=list)
    # What each look at the front door's retired workers finds (0 once the list is used up): nginx's workers
    # from before a reload, still finishing, as the drain reads them.
    retiring: list[int] = field(default_factory=list)

    def run(self, *args: str, check: bool = True) -> str:
        self.calls.append(args)
        if args[:2] == ("systemctl", "daemon-reload"):
            for name, held in self.units.items():
                held.loaded = self.on_disk(name)
            return ""
        if args[0] == "systemctl" and len(args) > 1:
            verb, unit = args[1], args[-1]
            fake = self.units.setdefault(unit, FakeUnit())
            if verb == "start":
                fake.state = "activating" if fake.outcome == "auto-restart" else fake.outcome
                fake.sub_state = "auto-restart" if fake.outcome == "auto-restart" else "running"
            elif verb == "stop":
                fake.state, fake.sub_state = "inactive", "dead"
            elif verb == "enable":
                fake.enabled = True
            elif verb == "disable":
                fake.enabled = False
        return ""

    def attempt(self, *args: str) -> tuple[int, str]:
        """nginx -t passes; systemctl start/reload of the front door makes it serve its sites."""
        self.run(*args)
        return 0, ""

    def backend_behind(self, url: str, headers: Mapping[str, str] | None = None, cafile: str | None = None) -> str:
        """Like nginx: the site's proxy_pass port, answered by the active unit placed on that port."""
        site = self.front_door_dir / "sites" / "dev.chat.conf"
        if self.units.get(contract.FRONT_DOOR_UNIT, FakeUnit()).state != "active" or not site.is_file():
            raise urllib.error.URLError("connection refused")
        text = site.read_text()
        if "return 503;" in text:
            if self.answers_before_the_reload:
                return self.answers_before_the_reload.pop(0)
            self.closed_answers += 1
            raise urllib.error.HTTPError(url, 503, "Service Unavailable", Message(), None)
        match = re.search(r"proxy_pass http://127.0.0.1:(\d+);", text)
        assert match is not None
        for placement in self.env_dir.glob("*.placement.env"):
            unit = placement.name.removesuffix(".placement.env") + ".service"
            on_port = f"VLLM_FLEET_BACKEND_PORT={match.group(1)}\n" in placement.read_text()
            if on_port and self.units.get(unit, FakeUnit()).state == "active":
                return unit
        raise urllib.error.URLError("502 Bad Gateway")

    def on_disk(self, unit: str) -> str | None:
        path = self.unit_dir / unit
        return path.read_text() if path.is_file() else None

    def show(self, unit: str, *props: str) -> dict[str, str]:
        fake = self.units.get(unit, FakeUnit())
        path = self.unit_dir / unit
        if {"LoadState", "NeedDaemonReload"} & set(props) and fake.loaded is None:
            fake = self.units.setdefault(unit, fake)
            fake.loaded = self.on_disk(unit)  # asking loads what systemd does not hold
        values = {
            "LoadState": "not-found" if fake.loaded is None else "loaded",
            "NeedDaemonReload": "no" if fake.loaded == self.on_disk(unit) else "yes",
            "ActiveState": fake.state,
            "SubState": fake.sub_state,
            "NRestarts": str(fake.restarts),
            "FragmentPath": str(path) if path.is_file() else "",
            "TimeoutStartUSec": fake.start_timeout,
            "MainPID": str(fake.main_pid if fake.state == "active" else 0),
        }
        return {p: values[p] for p in props}

    def enabled(self, unit: str) -> bool:
        return self.units.get(unit, FakeUnit()).enabled

    def listens(self, address: str, port: int) -> bool:
        """Nothing of this world listens on a host's port (its engines stop at once)."""
        self.calls.append(("listens", address, str(port)))
        return False

    def retiring_workers(self, unit: str, before_reload: frozenset[int] = frozenset()) -> int:
        self.calls.append(("retiring-workers", unit, *map(str, sorted(before_reload))))
        return self.retiring.pop(0) if self.retiring else 0

    def front_door_workers(self, unit: str) -> frozenset[int]:
        return frozenset({4101, 4102}) if self.units.get(unit, FakeUnit()).state == "active" else frozenset()

    def start_timeout(self, unit: str) -> float:
        timeout = super().start_timeout(unit)
        self.waited[unit] = timeout
        return timeout

    def journal_cursor(self) -> str:
        return "c0"

    def journal(
        self, unit: str, cursor: str, lines: int | None = None, own_output: bool = False
    ) -> tuple[list[str], str]:
        return [f"{unit}: last words"], "c1"

    def verbs(self, unit: str) -> list[str]:
        return [c[1] for c in self.calls if c[0] == "systemctl" and c[-1] == unit]


def write_result(path: Path, text: str) -> None:
    """Write a transaction's result as run_transaction does: whole, by a rename. A plain write_text from a
    timer let the step read the file created but still empty, take it for no result it can read, and
    follow the (never-ending) fake transaction for FINISH_WAIT: a make test run under load failed so."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def chat_plan(**fields: Any) -> contract.Plan:
    """A plan of deployment `chat`: vllm-new.service serving /shared/m on port 8000 through engines on
    18000 and 28000, with `fields` besides (and instead)."""
    chat: dict[str, Any] = {
        "deployment": "chat",
        "unit_name": "vllm-new.service",
        "unit_stem": "vllm-new",
        "served_name": "chat",
        "port": 8000,
        "model_dir": "/shared/m",
        "unit_sha256": "0" * 64,
        "backend_ports": (18000, 28000),
    }
    return contract.Plan(**{**chat, **fields})


class World:
    def __init__(self, tmp: Path, model_ok: bool = True) -> None:
        self.root = tmp
        self.unit_dir = tmp / "etc-systemd"
        self.env_dir = tmp / "etc-vllm-fleet"
        self.state_root = tmp / "var-lib"
        self.tools = tmp / "tools"
        self.front_door_dir = tmp / "etc-vllm-fleet" / "frontdoor"
        for directory in (self.unit_dir, self.env_dir, self.state_root, self.tools, self.front_door_dir):
            directory.mkdir(parents=True)
        (self.tools / "model-sync").write_text(
            f"import sys\nprint('model-sync: checked')\nsys.exit({0 if model_ok else 1})\n"
        )
        (self.tools / "prewarm").write_text("import sys\nprint('prewarm: read', ' '.join(sys.argv[1:]))\n")
        self.found: dict[str, object] = {"units": [], "listeners": [], "gpuHolders": []}
        self.systemd = RecordingSystemd(self.unit_dir, self.env_dir, self.front_door_dir)
        self.lines: list[str] = []

    def plan(
        self,
        unit: str = "vllm-new.service",
        replaces: tuple[str, ...] = (),
        gpus: tuple[int, ...] = (0,),
        swap_mode: str = "auto",
    ) -> contract.Plan:
        state_dir = self.state_root / "deployments" / "dev.chat"
        (state_dir / "staged").mkdir(parents=True, exist_ok=True)
        stem = unit.removesuffix(".service")
        (state_dir / "staged" / unit).write_text(f"{contract.MANAGED_MARK}: {unit}\n[Service]\n")
        (state_dir / "staged" / f"{stem}.env").write_text("HF_TOKEN=x\n")
        return chat_plan(
            stack="dev",
            state_dir=str(state_dir),
            unit_name=unit,
            unit_stem=stem,
            gpus=gpus,
            python=sys.executable,
            tools_dir=str(self.tools),
            ready_timeout=5,
            replaces=replaces,
            report_every=1000,
            gpus_needed=1,
            swap_mode=swap_mode,
            drain_seconds=5,
        )

    def hand_made(self, unit: str, running: bool = True, enabled: bool = True) -> None:
        (self.unit_dir / unit).write_text(f"[Service]\nExecStart=/usr/bin/true # {unit} by hand\n")
        self.systemd.units[unit] = FakeUnit(state="active" if running else "inactive", enabled=enabled)

    def plan_file(self, plan: contract.Plan) -> Path:
        """`plan` written to a file, as the activation step writes it for `swap start`."""
        path = self.root / "plan.json"
        path.write_text(plan.to_json())
        return path

    def planned(self) -> tuple[contract.Plan, Path]:
        """The deployment's plan and its file (plan_file)."""
        plan = self.plan()
        return plan, self.plan_file(plan)

    def fails_to_start(self, unit: str = "vllm-new.service") -> None:
        self.systemd.units[unit] = FakeUnit(outcome="failed")

    @property
    def site(self) -> Path:
        """The deployment's site in the front door."""
        return self.front_door_dir / "sites" / "dev.chat.conf"

    def transaction(self, plan: contract.Plan, host: RecordingSystemd | None = None) -> Transaction:
        """A transaction on this world's host (or `host`), whose own sleeps return at once."""
        return self.part(Transaction, plan, host)

    def part(self, kind: type[Part], plan: contract.Plan, host: RecordingSystemd | None = None) -> Part:
        """One part of a transaction (`kind`: the whole, or the class of one of its files) on this world's host."""
        return kind(
            plan,
            host or self.systemd,
            log=self.lines.append,
            state_root=self.state_root,
            unit_dir=self.unit_dir,
            env_dir=self.env_dir,
            sleep=lambda _s: None,
            front_door_dir=self.front_door_dir,
        )

    def surveyed(self) -> dict[str, object]:
        """What host/survey.py would report on this host: `found`, its vllm units as systemd holds them now."""
        units = {u["name"]: dict(u) for u in self.found.get("units", [])}  # type: ignore[attr-defined]
        for name, fake in self.systemd.units.items():
            if not name.startswith("vllm-") or name == contract.FRONT_DOOR_UNIT:
                continue
            text = self.systemd.on_disk(name) or ""
            entry = units.setdefault(name, {"name": name, "managed": contract.is_managed(text)})
            entry.update(activeState=fake.state, enabled=fake.enabled)
            if contract.is_managed(text):
                entry["owner"] = contract.managed_owner(text)
        return {**self.found, "units": list(units.values())}

    def run(self, plan: contract.Plan) -> contract.Result:
        # What host/survey.py would report on this host, as the transaction reads it.
        (self.tools / "survey").write_text(f"import json\nprint(json.dumps({self.surveyed()!r}))\n")
        transaction = self.transaction(plan)
        result = transaction.run()
        transaction.after_result()  # as run_transaction does once the result is written
        return result


def test_first_deploy_installs_starts_and_claims(tmp_path: Path) -> None:
    world = World(tmp_path)
    result = world.run(world.plan())
    assert result.status == "succeeded", result.message
    assert (world.unit_dir / "vllm-new.service").read_text().startswith(contract.MANAGED_MARK)
    assert oct((world.env_dir / "vllm-new.env").stat().st_mode & 0o777) == "0o600"
    assert world.systemd.units["vllm-new.service"].enabled
    claims = json.loads((world.state_root / "claims" / "dev.chat.json").read_text())
    assert claims == {"gpus": [0], "ports": [8000, 18000, 28000], "units": ["vllm-new.service"]}
    active = (Path(world.plan().state_dir) / "active").read_text()
    assert "UNIT=vllm-new.service" in active and "GPUS=0" in active and "BACKEND_PORT=18000" in active
    placement = (world.env_dir / "vllm-new.placement.env").read_text()
    assert "CUDA_VISIBLE_DEVICES=0\n" in placement and "VLLM_FLEET_BACKEND_PORT=18000\n" in placement
    # The front door passes the deployment's port to the new engine, and was checked through it.
    site = world.site.read_text()
    assert "listen 127.0.0.1:8000;" in site and "proxy_pass http://127.0.0.1:18000;" in site
    assert world.systemd.units[contract.FRONT_DOOR_UNIT].state == "active"


def test_adopts_named_hand_made_units_and_leaves_others(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.hand_made("vllm-kimi-k25-int4.service")
    world.hand_made("vllm-glm5.service", running=False)
    world.hand_made("vllm-other.service")  # neither managed nor named
    plan = world.plan(replaces=("vllm-kimi-k25-int4.service", "vllm-glm5.service"))
    result = world.run(plan)
    assert result.status == "succeeded", result.message
    kimi, glm = world.systemd.units["vllm-kimi-k25-int4.service"], world.systemd.units["vllm-glm5.service"]
    assert (kimi.state, kimi.enabled) == ("inactive", False)
    assert (glm.state, glm.enabled) == ("inactive", False)
    assert world.systemd.verbs("vllm-other.service") == []
    backups = Path(plan.state_dir) / "previous"
    assert (backups / "vllm-kimi-k25-int4.service").read_text().startswith("[Service]")
    # Their files are put away where nothing starts them, with how they were; the unnamed one stays.
    adopted = Path(plan.state_dir) / "adopted"
    assert not (world.unit_dir / "vllm-kimi-k25-int4.service").exists()
    assert not (world.unit_dir / "vllm-glm5.service").exists()
    assert (world.unit_dir / "vllm-other.service").exists()
    assert (adopted / "vllm-glm5.service").read_text().startswith("[Service]")
    assert json.loads((adopted / "vllm-kimi-k25-int4.service.was").read_text()) == {
        "path": str(world.unit_dir / "vllm-kimi-k25-int4.service"),
        "enabled": True,
        "running": True,
    }
    assert json.loads((adopted / "vllm-glm5.service.was").read_text())["running"] is False
    # A later swap keeps the first take-over's record: it is what destroy puts back.
    world.hand_made("vllm-glm5.service", running=False, enabled=False)
    assert world.run(world.plan(unit="vllm-next.service", replaces=plan.replaces)).status == "succeeded"
    assert json.loads((adopted / "vllm-glm5.service.was").read_text())["enabled"] is True
    # The old model stops only after the new unit is installed, and before the new one starts.
    order = systemctl_order(world)
    assert order.index(("stop", "vllm-kimi-k25-int4.service")) < order.index(("start", "vllm-new.service"))


def failed_start_replacing(world: World, old: str, **old_unit: Any) -> contract.Result:
    """A swap from the hand-made unit `old` (running, its FakeUnit's fields set from `old_unit`) to
    vllm-new, which fails to start."""
    world.hand_made(old)
    for name, value in old_unit.items():
        setattr(world.systemd.units[old], name, value)
    world.fails_to_start()
    return world.run(world.plan(replaces=(old,)))


def test_failed_start_puts_every_old_unit_back_with_its_own_timeout(tmp_path: Path) -> None:
    world = World(tmp_path)
    result = failed_start_replacing(world, "vllm-kimi-k25-int4.service", start_timeout="1h 4min 42s")
    assert result.status == "rolled-back"
    assert "rolled back: vllm-kimi-k25-int4.service serves again" in result.message
    assert "vllm-new.service: last words" in result.message
    kimi = world.systemd.units["vllm-kimi-k25-int4.service"]
    assert (kimi.state, kimi.enabled) == ("active", True)
    assert world.systemd.waited["vllm-kimi-k25-int4.service"] == 3882.0
    assert not (world.unit_dir / "vllm-new.service").exists()
    assert (world.unit_dir / "vllm-kimi-k25-int4.service").read_text().startswith("[Service]")


def test_rollback_that_fails_too_says_so(tmp_path: Path) -> None:
    world = World(tmp_path)
    result = failed_start_replacing(world, "vllm-old.service", outcome="failed")
    assert result.status == "rollback-failed" and "ROLLBACK FAILED" in result.message


def test_an_engine_that_exits_is_a_failed_start_without_waiting_for_its_restart(tmp_path: Path) -> None:
    # Its unit sits in auto-restart for RestartSec (15 s) before systemd counts a restart: the swap
    # rolls back at once instead of keeping the old model down that long (or until the ready timeout).
    world = World(tmp_path)
    world.hand_made("vllm-old.service")
    world.systemd.units["vllm-new.service"] = FakeUnit(outcome="auto-restart")
    result = world.run(world.plan(replaces=("vllm-old.service",)))
    assert result.status == "rolled-back", result.message
    assert any("vllm-new.service failed after 0 s (its process exited" in line for line in world.lines), world.lines
    assert world.systemd.units["vllm-old.service"].state == "active"


@dataclass
class SlowStartSystemd(RecordingSystemd):
    """A start that takes `load_seconds` of real time, as an engine's load does: the unit is activating
    until then, and `systemctl start` without --no-block returns only then. Each look is counted."""

    load_seconds: float = 0.3
    refuse_start: bool = False
    looks: int = 0

    def run(self, *args: str, check: bool = True) -> str:
        out = super().run(*args, check=check)
        if args[:2] == ("systemctl", "start") and not self.refuse_start:
            fake = self.units[args[-1]]
            fake.state, fake.sub_state = "activating", "start-post"
            threading.Timer(self.load_seconds, lambda: setattr(fake, "state", "active")).start()
        return out

    def attempt(self, *args: str) -> tuple[int, str]:
        if args[:2] == ("systemctl", "start"):
            self.run(*args)
            if self.refuse_start:
                self.units[args[-1]].state = "inactive"
                return 1, f"Unit {args[-1]} has a bad unit file setting."
            while self.units[args[-1]].state != "active":
                time.sleep(0.01)
            return 0, ""
        return super().attempt(*args)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        self.looks += 1
        return super().show(unit, *props)


def test_the_wait_for_a_new_engine_wakes_when_its_start_job_ends_not_by_looking_again_and_again(
    tmp_path: Path,
) -> None:
    # With the start job in a thread, the wait blocks on it between looks; a wait that only looked every
    # tick (the world's sleeps return at once) would look thousands of times during the 0.3 s load.
    world = World(tmp_path)
    slow = SlowStartSystemd(world.unit_dir, world.env_dir, world.front_door_dir)
    ready, _ = world.transaction(world.plan(), slow).start_new("test")
    assert ready
    assert slow.looks <= 4, slow.looks
    assert ("systemctl", "start", "vllm-new.service") in slow.calls


def test_a_start_that_systemd_refuses_ends_the_wait_at_once_with_its_words(tmp_path: Path) -> None:
    world = World(tmp_path)
    slow = SlowStartSystemd(world.unit_dir, world.env_dir, world.front_door_dir, refuse_start=True)
    transaction = world.transaction(world.plan(), slow)
    ready, _ = transaction.start_new("test")
    assert not ready
    assert "start_to_ready" not in transaction.timings
    assert any("bad unit file setting" in line for line in world.lines), world.lines


def test_hand_made_unit_of_the_same_name_is_replaced_not_kept(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.hand_made("vllm-new.service")  # running with its own arguments
    result = world.run(world.plan())
    assert result.status == "succeeded", result.message
    assert world.systemd.verbs("vllm-new.service")[:2] == ["stop", "reset-failed"]
    assert (world.unit_dir / "vllm-new.service").read_text().startswith(contract.MANAGED_MARK)
    assert any("hand-made unit of the same name" in line for line in world.lines)


def test_the_manager_reloads_before_a_start_only_when_it_holds_an_older_copy_of_the_unit(tmp_path: Path) -> None:
    # A reload runs every generator and re-reads every unit (0.1-0.15 s on the sandbox): a unit systemd does
    # not hold is read as it is when started, one it holds from before must be read again.
    world = World(tmp_path)
    assert world.run(world.plan()).status == "succeeded"
    assert ("systemctl", "daemon-reload") not in world.systemd.calls[
        : world.systemd.calls.index(("systemctl", "start", "vllm-new.service"))
    ]
    # The same unit name, another launch (a flag changed): systemd holds the first file, so it reloads first.
    world.systemd.calls.clear()
    plan = world.plan()
    Path(plan.state_dir, "staged", "vllm-new.service").write_text(
        f"{contract.MANAGED_MARK}: vllm-new.service\n[Service]\nX=2\n"
    )
    assert world.run(plan).status == "succeeded"
    calls = world.systemd.calls
    assert calls.index(("systemctl", "daemon-reload")) < calls.index(("systemctl", "start", "vllm-new.service"))
    assert world.systemd.units["vllm-new.service"].loaded == (world.unit_dir / "vllm-new.service").read_text()


@pytest.mark.parametrize("state", ["active", "activating"])
def test_a_unit_that_serves_or_loads_this_configuration_is_left_alone(tmp_path: Path, state: str) -> None:
    world = World(tmp_path)
    plan = world.plan()
    assert world.run(plan).status == "succeeded"
    world.systemd.units["vllm-new.service"].state = state  # e.g. still loading after a reboot
    world.systemd.calls.clear()
    world.lines.clear()
    result = world.run(plan)
    assert result.status == "unchanged" and state in result.message
    assert world.systemd.verbs("vllm-new.service") == []
    # Nothing to load, so nothing to pre-warm: on the reference server that would read 547 GB again.
    assert not any("prewarm:" in line for line in world.lines), world.lines


def test_drift_that_needs_no_restart_is_repaired_in_place_and_a_looping_engine_restarts(tmp_path: Path) -> None:
    """What the activation does when the preview counted drift: a unit disabled by hand is enabled again
    while its engine keeps serving; one waiting to restart after its start failed (its model check refused)
    is started now, not at systemd's next try; one edited by hand restarts with the staged file."""
    world = World(tmp_path)
    plan = world.plan()
    assert world.run(plan).status == "succeeded"
    unit = world.systemd.units["vllm-new.service"]
    unit.enabled = False
    world.systemd.calls.clear()
    result = world.run(plan)
    assert result.status == "unchanged" and unit.enabled and unit.state == "active"
    assert ("systemctl", "enable", "--quiet", "vllm-new.service") in world.systemd.calls
    assert "stop" not in world.systemd.verbs("vllm-new.service")
    assert any("was disabled: enabled again" in line for line in world.lines)
    unit.state, unit.sub_state = "activating", "auto-restart"
    assert world.run(plan).status == "succeeded" and unit.state == "active"
    assert "start" in world.systemd.verbs("vllm-new.service")
    (world.unit_dir / "vllm-new.service").write_text("# edited by hand\n")
    assert world.run(plan).status == "succeeded"
    assert (world.unit_dir / "vllm-new.service").read_text().startswith(contract.MANAGED_MARK)


def test_claims_of_another_live_deployment_refuse_before_anything_stops(tmp_path: Path) -> None:
    world = World(tmp_path)
    (world.state_root / "deployments" / "other.serve").mkdir(parents=True)
    (world.state_root / "claims").mkdir()
    (world.state_root / "claims" / "other.serve.json").write_text('{"gpus": [0], "ports": [9000], "units": []}')
    world.hand_made("vllm-old.service")
    result = world.run(world.plan(replaces=("vllm-old.service",)))
    assert result.status == "refused"
    assert "GPU 0 is claimed by deployment other.serve" in result.message
    assert world.systemd.units["vllm-old.service"].state == "active"
    # A deployment whose state directory is gone holds nothing.
    (world.state_root / "deployments" / "other.serve").rmdir()
    assert world.run(world.plan(replaces=("vllm-old.service",))).status == "succeeded"


def test_claims_are_rewritten_as_a_set_so_a_shrinking_deployment_frees_gpus(tmp_path: Path) -> None:
    world = World(tmp_path)
    assert world.run(world.plan(gpus=(0, 1))).status == "succeeded"
    assert world.run(world.plan(unit="vllm-b.service", gpus=(1,))).status == "succeeded"
    claims = json.loads((world.state_root / "claims" / "dev.chat.json").read_text())
    assert claims == {"gpus": [1], "ports": [8000, 18000, 28000], "units": ["vllm-b.service"]}
    assert not (world.unit_dir / "vllm-new.service").exists()  # the previous managed unit is gone


def test_model_that_fails_its_check_refuses_the_swap(tmp_path: Path) -> None:
    world = World(tmp_path, model_ok=False)
    world.hand_made("vllm-old.service")
    result = world.run(world.plan(replaces=("vllm-old.service",)))
    assert result.status == "refused" and "verified manifest" in result.message
    assert world.systemd.units["vllm-old.service"].state == "active"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1min 30s", 90.0), ("1h 4min 42s", 3882.0), ("500ms", 0.5), ("90", 90.0), ("infinity", None)],
)
def test_parse_timespan(text: str, seconds: float | None) -> None:
    assert systemd.parse_timespan(text) == seconds


def test_parse_timespan_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        systemd.parse_timespan("soon")


def test_port_or_gpus_held_by_what_the_swap_will_not_stop_refuse_before_the_stop(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.hand_made("vllm-old.service")
    world.found = {
        "units": [],
        "listeners": [{"port": 8000, "pid": 77, "unit": "vllm-legacy.service", "cmd": "python3 -m vllm"}],
        "gpuHolders": [{"pid": 78, "gpus": [0], "unit": None, "cmd": "VLLM::stray"}],
    }
    result = world.run(world.plan(replaces=("vllm-old.service",)))
    assert result.status == "refused"
    assert (
        "port 8000, its front door's port, is held by PID 77 (python3 -m vllm) of vllm-legacy.service" in result.message
    )
    assert "GPU 0 is held by PID 78 (VLLM::stray) of no systemd unit" in result.message
    assert world.systemd.units["vllm-old.service"].state == "active"
    # Adopting the unit and letting the guard stop strays clears both.
    plan = world.plan(replaces=("vllm-old.service", "vllm-legacy.service"))
    allowed = contract.Plan(**{**plan.__dict__, "foreign_gpu_processes": "stop"})
    assert world.run(allowed).status == "succeeded"


@dataclass
class TransactionStillRunning(RecordingSystemd):
    """A swap transaction unit that is running for two looks, then gone (collected when it ended). With
    `result`, it writes that result (to `result_file`) at the first look: after the step came."""

    looks: int = 0
    result: str = ""
    result_file: Path = Path("/nonexistent")

    def show(self, unit: str, *props: str) -> dict[str, str]:
        if unit.startswith("vllm-fleet-swap-"):
            self.looks += 1
            if self.looks == 1 and self.result:
                self.result_file.write_text(self.result)
            return {"ActiveState": "active" if self.looks <= 2 else "inactive"}
        return super().show(unit, *props)


def test_a_second_up_attaches_to_the_running_transaction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan_file, host = attach_to_result(World(tmp_path), "succeeded")
    assert swap.start(str(plan_file), host, poll=0) == 0
    assert not [c for c in host.calls if c[0] == "systemd-run"], "a second transaction was started"
    out = capsys.readouterr().out
    assert "already running on this host (vllm-fleet-swap-dev.chat.service): attaching" in out
    assert out.strip().splitlines()[-1] == "swap result: succeeded: done"


def test_a_transaction_that_had_ended_this_plan_before_the_step_came_is_checked_by_a_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # E.g. the transaction of an up whose controller was killed, still forgetting removed units on the
    # host when the next up comes: its result is not this step's to report; this step's transaction, run
    # after it, finds the swap done (here it writes "unchanged").
    world = World(tmp_path)
    plan, plan_file = world.planned()
    swap.result_path(plan).write_text(result_text(plan, message="done"))
    host = TransactionStillRunning(world.unit_dir)
    checked = result_text(plan, "unchanged", "already serves")

    def run(*argv: str, check: bool = True) -> str:
        if argv[0] == "systemd-run":
            swap.result_path(plan).write_text(checked)
            host.looks = 2  # its own transaction: running for one look, then gone
        return ""

    host.run = run  # type: ignore[method-assign]
    assert swap.start(str(plan_file), host, poll=0) == 0
    out = capsys.readouterr().out
    assert "that transaction had already ended this plan; starting this one to check it" in out
    assert out.strip().splitlines()[-1] == "swap result: unchanged: already serves"


REPORT_SPEC = {"deployments": [{"owner": "dev.chat", "unit": "vllm-new.service"}]}


def result_text(plan: contract.Plan, status: str = "succeeded", message: str = "ok") -> str:
    """The result file a swap transaction writes for `plan`."""
    return json.dumps({"status": status, "message": message, "plan_digest": plan.digest})


@dataclass
class Reporter:
    """The post-deploy report as the step calls it: each call recorded (its arguments and when it came),
    `during` run inside it, then `answer` returned, or `fails` raised."""

    answer: dict[str, Any] = field(default_factory=lambda: {"deployments": {}})
    fails: Exception | None = None
    during: Callable[[], object] | None = None
    calls: list[tuple[dict[str, Any], bool, dict[str, Any] | None]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def __call__(self, spec: dict[str, Any], with_bench: bool, measured: dict[str, Any] | None) -> dict[str, Any]:
        self.calls.append((spec, with_bench, measured))
        self.times.append(time.monotonic())
        if self.during is not None:
            self.during()
        if self.fails is not None:
            raise self.fails
        return self.answer


def start_with_report(tmp_path: Path, status: str, reporter: Reporter, with_bench: bool = False) -> int:
    """swap.start attached to a running transaction that ends `status`, REPORT_SPEC's report made by
    `reporter`; its exit status."""
    plan_file, host = attach_to_result(World(tmp_path), status)
    return swap.start(str(plan_file), host, poll=0, report_spec=REPORT_SPEC, with_bench=with_bench, reporter=reporter)


def attach_to_result(world: World, status: str) -> tuple[Path, TransactionStillRunning]:
    """A plan whose running transaction ends with `status` for this very plan (the attach path)."""
    plan, plan_file = world.planned()
    result = result_text(plan, status, "done")
    return plan_file, TransactionStillRunning(world.unit_dir, result=result, result_file=swap.result_path(plan))


def test_once_it_serves_the_step_prints_the_report_then_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reporter = Reporter(answer={"deployments": {"dev.chat": {"vllmVersion": "0.32.0"}}})
    assert start_with_report(tmp_path, "succeeded", reporter, with_bench=True) == 0
    assert [(spec, with_bench) for spec, with_bench, _ in reporter.calls] == [(REPORT_SPEC, True)]
    lines = capsys.readouterr().out.strip().splitlines()
    # The report's JSON line, which the stack's outputs read, then the result: the step's last line.
    assert json.loads(lines[-2]) == {"deployments": {"dev.chat": {"vllmVersion": "0.32.0"}}}
    assert lines[-1] == "swap result: succeeded: done"


@pytest.mark.parametrize("status", ["refused", "rolled-back"])
def test_a_swap_that_does_not_serve_reports_nothing(tmp_path: Path, status: str) -> None:
    reporter = Reporter()  # records, does not raise: the step would catch an exception as a failed report
    assert start_with_report(tmp_path, status, reporter) == 1
    assert reporter.calls == [], "reported a swap that did not serve"


def test_a_failed_report_fails_the_step_and_says_the_swap_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reporter = Reporter(fails=OSError("journalctl: not found"))
    assert start_with_report(tmp_path, "succeeded", reporter) == 1
    said = capsys.readouterr().err
    assert "swap result: succeeded: done; but the post-deploy report failed (OSError: journalctl: not found)" in said


@dataclass
class TransactionWritingItsResult(RecordingSystemd):
    """A swap transaction unit that writes its result file after 0.1 s and is gone 20 ms after that."""

    result_file: Path = Path("/nonexistent")
    journal_reads: int = 0
    exits: bool = True

    def show(self, unit: str, *props: str) -> dict[str, str]:
        if unit.startswith("vllm-fleet-swap-"):
            written = self.result_file.is_file() and time.time() - self.result_file.stat().st_mtime > 0.02
            written = written and self.exits
            return {"ActiveState": "inactive" if written else "active"}
        return super().show(unit, *props)

    def journal(
        self, unit: str, cursor: str, lines: int | None = None, own_output: bool = False
    ) -> tuple[list[str], str]:
        self.journal_reads += 1
        return self.lines_after(cursor)

    def lines_after(self, cursor: str) -> tuple[list[str], str]:
        """What the transaction's journal says after `cursor` (nothing, here), and the cursor after that."""
        return [], cursor


@pytest.mark.parametrize("recorded", ["vllm-new.service", "vllm-other.service"])
def test_the_report_starts_once_the_new_unit_is_recorded_active_while_the_swap_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recorded: str
) -> None:
    """The transaction records the new unit as active (it serves), then stops the old engine (here 0.5 s)
    and writes its result: the report runs in between. A record naming another unit starts nothing."""
    world = World(tmp_path)
    written: dict[str, float] = {}
    # The transaction, running when the step attaches: serving at 0.1 s, its result at 0.6 s.
    plan, host = transaction_writing_its_result(world, after=0.6, at=written)
    plan_file = world.plan_file(plan)
    active = Path(plan.state_dir) / "active"

    def record_active() -> None:
        active.write_text(contract.ActiveRecord(unit=recorded, gpus=(0,)).text())

    reporter = Reporter()
    threading.Timer(0.1, record_active).start()
    assert swap.start(str(plan_file), host, poll=0.05, report_spec=REPORT_SPEC, reporter=reporter) == 0
    assert len(reporter.times) == 1
    if recorded == plan.unit_name:
        assert reporter.times[0] < written["result"] - 0.3, (reporter.times, written)  # beside the old engine's stop
    else:
        assert reporter.times[0] >= written["result"]
    assert capsys.readouterr().out.strip().splitlines()[-2:] == ['{"deployments": {}}', "swap result: succeeded: ok"]


@pytest.mark.parametrize("ready", ["vllm-new.service", "vllm-other.service"])
def test_the_smoke_benchmark_starts_when_the_new_engine_answers_before_the_front_door_switches(
    tmp_path: Path, ready: str
) -> None:
    """The transaction marks the new engine ready at 0.1 s, records it active (switched) at 0.3 s and writes
    its result at 0.6 s: the benchmark runs from the first, the report gets what it measured."""
    plan, host = transaction_writing_its_result(World(tmp_path), after=0.6)
    state_dir = Path(plan.state_dir)
    at: dict[str, float] = {}

    def mark_ready() -> None:
        (state_dir / contract.ENGINE_READY_FILE).write_text(f"{ready}\n")

    def record_active() -> None:
        at["active"] = time.monotonic()
        (state_dir / "active").write_text(contract.ActiveRecord(unit=plan.unit_name, gpus=(0,)).text())

    def measurer(spec: dict[str, Any], with_bench: bool) -> dict[str, Any]:
        at["measured"] = time.monotonic()
        return {"loads": {}, "bench": {"dev.chat": {"requests": 8}}}

    reporter = Reporter()
    threading.Timer(0.1, mark_ready).start()
    threading.Timer(0.3, record_active).start()
    early = swap.EarlyReport(plan, REPORT_SPEC, True, reporter, measurer)
    swap.follow(plan, host, lambda _line: None, "c0", poll=0.05, tick=early.tick)
    assert early.result() == {"deployments": {}}
    handed = [measured for _, _, measured in reporter.calls]
    if ready == plan.unit_name:
        assert at["measured"] < at["active"], at
        assert handed == [{"loads": {}, "bench": {"dev.chat": {"requests": 8}}}]
    else:  # another unit's engine: nothing measured early; the report measures for itself
        assert "measured" not in at and handed == [None]


def hold_the_step_lock(plan_file: Path, seconds: float) -> None:
    """What a step does while it runs: a shared lock on the plan file, here for `seconds`."""

    def hold() -> None:
        with plan_file.open(encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            time.sleep(seconds)

    threading.Thread(target=hold, daemon=True).start()
    time.sleep(0.05)


def test_the_reload_after_the_result_waits_for_the_step_that_reads_the_units_state(tmp_path: Path) -> None:
    # systemd answers no systemctl while it reloads: the step's report (`systemctl show` of the new unit)
    # would wait behind it. The step holds the plan file's lock until it exits; the reload begins then.
    world, transaction = swapped_blue_green(tmp_path)
    plan_file = world.plan_file(transaction.plan)
    hold_the_step_lock(plan_file, 0.3)
    started = time.monotonic()
    transaction.after_result(lambda: swap.steps_done(str(plan_file), wait=10))
    assert 0.2 < time.monotonic() - started < 5
    assert world.systemd.calls[-2][1] == "daemon-reload"
    # A step that lingers holds it up for the bound at most.
    hold_the_step_lock(plan_file, 10)
    started = time.monotonic()
    assert not swap.steps_done(str(plan_file), wait=0.2)
    assert 0.15 < time.monotonic() - started < 5


def test_a_killed_step_holds_nothing_up(tmp_path: Path) -> None:
    # The controller killed, its SSH session gone, the step with it: the kernel dropped its lock, and the
    # reload does not wait for a step that will never come (a mark file it was to remove had held it 5 s).
    plan_file = tmp_path / "plan.json"
    plan_file.write_text("{}")
    holder = (
        "import fcntl, os, signal, sys\n"
        "handle = open(sys.argv[1])\n"
        "fcntl.flock(handle, fcntl.LOCK_SH)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", holder, str(plan_file)], check=False)
    assert killed.returncode == -signal.SIGKILL
    started = time.monotonic()
    assert swap.steps_done(str(plan_file), wait=10)
    assert time.monotonic() - started < 1


@dataclass
class TransactionStartedByTheStep(TransactionWritingItsResult):
    """No transaction runs until the step starts one (systemd-run); it writes `result` 0.1 s later."""

    result: str = ""
    started: bool = False

    def run(self, *args: str, check: bool = True) -> str:
        if args[0] == "systemd-run":
            self.started = True
            threading.Timer(0.1, write_result, args=(self.result_file, self.result)).start()
        return super().run(*args, check=check)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        if unit.startswith("vllm-fleet-swap-") and not self.started:
            return {"ActiveState": "inactive"}
        return super().show(unit, *props)


def test_the_step_holds_the_plan_files_lock_while_it_runs_and_not_after(tmp_path: Path) -> None:
    world = World(tmp_path)
    plan, plan_file = world.planned()
    held: list[bool] = []
    result = result_text(plan)
    host = TransactionStartedByTheStep(world.unit_dir, result_file=swap.result_path(plan), result=result)
    # The report runs inside the step.
    reporter = Reporter(during=lambda: held.append(not swap.steps_done(str(plan_file), wait=0)))
    assert swap.start(str(plan_file), host, poll=0.05, report_spec=REPORT_SPEC, reporter=reporter) == 0
    assert host.started, "the step attached instead of starting its transaction"
    assert held == [True]
    assert swap.steps_done(str(plan_file), wait=0)


def test_the_transaction_marks_its_new_engine_ready_and_clears_the_mark_after_its_result(tmp_path: Path) -> None:
    _world, transaction = swapped_blue_green(tmp_path)
    marker = Path(transaction.plan.state_dir) / contract.ENGINE_READY_FILE
    assert marker.read_text() == "vllm-b.service\n"
    transaction.after_result()
    assert not marker.exists()


def transaction_writing_its_result(
    world: World,
    exits: bool = True,
    kind: type[TransactionWritingItsResult] = TransactionWritingItsResult,
    after: float = 0.1,
    at: dict[str, float] | None = None,
) -> tuple[contract.Plan, TransactionWritingItsResult]:
    """A plan and a host (of `kind`) whose swap transaction writes its succeeded result `after` seconds from
    now (noting when in at["result"]) and exits (or not)."""
    plan = world.plan()
    host = kind(world.unit_dir, result_file=swap.result_path(plan), exits=exits)

    def write() -> None:
        write_result(swap.result_path(plan), result_text(plan))
        if at is not None:
            at["result"] = time.monotonic()

    threading.Timer(after, write).start()
    return plan, host


def test_the_step_ends_when_the_transaction_writes_its_result_not_at_its_next_read_of_the_journal(
    tmp_path: Path,
) -> None:
    plan, host = transaction_writing_its_result(World(tmp_path))
    started = time.monotonic()
    swap.follow(plan, host, lambda _line: None, "c0", poll=30.0)
    # A step that looked only every `poll` would have waited 30 s for its second look.
    assert time.monotonic() - started < 5
    assert host.journal_reads <= 6, host.journal_reads


def test_once_the_result_is_written_the_step_waits_only_for_the_transaction_to_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It exits 20 ms after its result: the step looks every FINISH_POLL until then, and once more after
    # JOURNAL_SETTLE; it no longer waits a RESULT_POLL for the exit and another before the last read.
    plan, host = transaction_writing_its_result(World(tmp_path))
    after_result: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if swap.result_path(plan).is_file():
            after_result.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)  # the time module swap.py calls
    swap.follow(plan, host, lambda _line: None, "c0")
    assert after_result and set(after_result) <= {swap.FINISH_POLL, swap.JOURNAL_SETTLE}, after_result
    assert after_result[-1] == swap.JOURNAL_SETTLE


@dataclass
class TransactionSayingItsLastLine(TransactionWritingItsResult):
    """One that says its last line once its result is written and then keeps running (its reload)."""

    def lines_after(self, cursor: str) -> tuple[list[str], str]:
        return (
            (["[chat] timing: total=1.00s", "ok"], "c2")
            if self.result_file.is_file() and cursor != "c2"
            else ([], cursor)
        )


def test_the_step_ends_on_the_transactions_last_line_not_on_its_exit(tmp_path: Path) -> None:
    # What the transaction does after its result (the manager's reload that forgets the removed units,
    # 0.1-0.3 s here, more on a server with hundreds of units) is the host's, not the step's wait.
    plan, host = transaction_writing_its_result(World(tmp_path), exits=False, kind=TransactionSayingItsLastLine)
    said: list[str] = []
    started = time.monotonic()
    swap.follow(plan, host, said.append, "c0")
    assert said == ["[chat] timing: total=1.00s", "ok"]
    assert time.monotonic() - started < swap.FINISH_WAIT


@dataclass
class TransactionEndingDuringTheRead(TransactionWritingItsResult):
    """One whose result and last line come just as the step reads its journal: that read has the last
    line, and the step learns of the result only afterwards. It never exits (its reload after the result
    waits for the step to end)."""

    result: str = ""

    def lines_after(self, cursor: str) -> tuple[list[str], str]:
        if self.journal_reads == 2:
            write_result(self.result_file, self.result)
            return ["[chat] timing: total=1.00s", "ok"], "c2"
        return [], cursor


def test_a_last_line_read_before_the_result_was_seen_still_ends_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the step went on reading for the last line it had already printed, until FINISH_WAIT (2 s
    # of every such swap; the transaction's own end waits for the step).
    monkeypatch.setattr(swap, "FINISH_WAIT", 60.0)
    world = World(tmp_path)
    plan = world.plan()
    result = result_text(plan)
    host = TransactionEndingDuringTheRead(
        world.unit_dir, result_file=swap.result_path(plan), exits=False, result=result
    )
    said: list[str] = []
    started = time.monotonic()
    swap.follow(plan, host, said.append, "c0", poll=0.05)
    assert said == ["[chat] timing: total=1.00s", "ok"]
    assert host.journal_reads == 2
    assert time.monotonic() - started < 30


def swapped_blue_green(tmp_path: Path) -> tuple[World, Transaction]:
    """A world whose deployment swapped blue/green from vllm-a to vllm-b; the transaction has written its
    result (what it does after, after_result, is left to the test). Only that swap's calls are recorded."""
    world = World(tmp_path)
    deployed(world)
    transaction = world.transaction(world.plan(unit="vllm-b.service", gpus=(0, 1)))
    (world.tools / "survey").write_text(f"import json\nprint(json.dumps({world.found!r}))\n")
    world.systemd.calls.clear()
    assert transaction.run().status == "succeeded"
    return world, transaction


def test_the_manager_forgets_the_removed_old_unit_after_the_result_not_before(tmp_path: Path) -> None:
    world, transaction = swapped_blue_green(tmp_path)
    assert not (world.unit_dir / "vllm-a.service").exists()
    stopped = world.systemd.calls.index(("systemctl", "stop", "vllm-a.service"))
    assert ("systemctl", "daemon-reload") not in world.systemd.calls[stopped:]
    transaction.after_result()
    assert world.systemd.calls[-2:] == [
        ("systemctl", "daemon-reload"),
        ("systemctl", "reset-failed", "vllm-a.service"),
    ]


def test_a_transaction_that_lingers_after_its_result_does_not_hold_the_step(tmp_path: Path) -> None:
    plan, host = transaction_writing_its_result(World(tmp_path), exits=False)
    started = time.monotonic()
    swap.follow(plan, host, lambda _line: None, "c0")
    assert swap.FINISH_WAIT < time.monotonic() - started < swap.FINISH_WAIT + 5


def test_start_runs_the_transaction_in_a_transient_unit(tmp_path: Path) -> None:
    world = World(tmp_path)
    plan_file = world.plan_file(world.plan())
    host = world.systemd  # nothing running: the unit is started, then found gone with no result
    assert swap.start(str(plan_file), host, poll=0) == 1
    (run,) = [c for c in host.calls if c[0] == "systemd-run"]
    assert run[1:3] == ("--unit=vllm-fleet-swap-dev.chat.service", "--collect")
    assert run[-5:] == (sys.executable, f"{world.tools}/swap", "run", "--plan", str(plan_file))


# ---- blue/green: the new engine beside the old one, the front door switches --------------------------


def deployed(world: World, unit: str = "vllm-a.service", gpus: tuple[int, ...] = (0, 1)) -> None:
    """A first swap that leaves `unit` serving on GPU 0 behind the front door."""
    assert world.run(world.plan(unit=unit, gpus=gpus)).status == "succeeded"
    world.systemd.calls.clear()
    world.lines.clear()


def systemctl_order(world: World) -> list[tuple[str, str]]:
    return [(c[1], c[-1]) for c in world.systemd.calls if c[0] == "systemctl"]


def assert_ran_in_order(world: World, steps: list[tuple[str, str]]) -> None:
    """systemctl ran each of `steps` (verb, unit) after the one before it, other calls between them."""
    order = systemctl_order(world)
    at = [order.index(step, order.index(steps[i - 1]) + 1 if i else 0) for i, step in enumerate(steps)]
    assert at == sorted(at), order


def failed_swap(world: World, swap_mode: str = "auto") -> contract.Result:
    """From vllm-a serving, a swap to vllm-b, which fails to start: rolled back, vllm-a serves, and the
    front door's site is as it was."""
    deployed(world)
    site_before = world.site.read_text()
    world.fails_to_start("vllm-b.service")
    result = world.run(world.plan(unit="vllm-b.service", gpus=(0, 1), swap_mode=swap_mode))
    assert result.status == "rolled-back", result.message
    assert world.site.read_text() == site_before
    assert world.systemd.units["vllm-a.service"].state == "active"
    return result


def test_blue_green_starts_the_new_engine_beside_the_old_and_switches_before_the_stop(tmp_path: Path) -> None:
    world = World(tmp_path)
    deployed(world)
    plan = world.plan(unit="vllm-b.service", gpus=(0, 1))
    result = world.run(plan)
    assert result.status == "succeeded", result.message
    assert any("swap mode: blue-green" in line for line in world.lines), world.lines
    # The new model was read into the page cache before its engine started, while the old one served.
    prewarmed = next(
        i for i, line in enumerate(world.lines) if "prewarm: read cache --dir /shared/m --margin-gib 8" in line
    )
    assert prewarmed < next(i for i, line in enumerate(world.lines) if "starting vllm-b.service" in line)
    assert "prewarm" in result.timings
    placement = (world.env_dir / "vllm-b.placement.env").read_text()
    assert "CUDA_VISIBLE_DEVICES=1\n" in placement and "VLLM_FLEET_BACKEND_PORT=28000\n" in placement
    order = systemctl_order(world)
    # New engine started and ready, front door reloaded onto it, only then the old one stopped.
    assert order.index(("start", "vllm-b.service")) < order.index(("reload", contract.FRONT_DOOR_UNIT))
    assert order.index(("reload", contract.FRONT_DOOR_UNIT)) < order.index(("stop", "vllm-a.service"))
    assert "proxy_pass http://127.0.0.1:28000;" in world.site.read_text()
    assert not (world.unit_dir / "vllm-a.service").exists() and not (world.env_dir / "vllm-a.placement.env").exists()
    assert world.systemd.units["vllm-b.service"].enabled and not world.systemd.units["vllm-a.service"].enabled
    assert result.timings["blue_green"] == 1.0 and "drain" in result.timings
    # And back: the old GPU and port are free again.
    back = world.run(world.plan(unit="vllm-a.service", gpus=(0, 1)))
    assert back.status == "succeeded" and back.timings["blue_green"] == 1.0
    assert "CUDA_VISIBLE_DEVICES=0\n" in (world.env_dir / "vllm-a.placement.env").read_text()


def test_blue_green_stops_the_old_engine_only_once_the_front_doors_retired_workers_are_gone(tmp_path: Path) -> None:
    # The bench showed it: a worker from before the reload passed a request it had accepted to the old engine
    # after the drain counted no connection to it, as the swap stopped it (a 502; once a 10 s shutdown hang).
    world = World(tmp_path)
    deployed(world)
    world.systemd.retiring = [2, 1, 0]
    result = world.run(world.plan(unit="vllm-b.service", gpus=(0, 1)))
    assert result.status == "succeeded", result.message
    looks = [i for i, call in enumerate(world.systemd.calls) if call[0] == "retiring-workers"]
    stop = world.systemd.calls.index(("systemctl", "stop", "vllm-a.service"))
    assert len(looks) == 3 and looks[-1] < stop, world.systemd.calls
    # Each look counts the workers from before the switch's reload, whatever they are titled yet.
    assert all(world.systemd.calls[i][2:] == ("4101", "4102") for i in looks), world.systemd.calls


def test_retiring_nginx_workers_are_the_masters_children_titled_shutting_down(tmp_path: Path) -> None:
    def process(pid: int, parent: int, title: bytes) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (nginx) S {parent} {pid} {pid} 0 -1\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(title + b"\0")

    process(187, 1, b"nginx: master process /usr/sbin/nginx -c /etc/vllm-fleet/frontdoor/nginx.conf")
    process(200, 187, b"nginx: worker process is shutting down")
    process(201, 187, b"nginx: worker process")
    process(300, 999, b"nginx: worker process is shutting down")  # another nginx's
    (tmp_path / "self").mkdir()
    assert systemd.retiring_nginx_workers(187, tmp_path) == 1
    assert systemd.retiring_nginx_workers(0, tmp_path) == 0  # the front door is not running
    # A worker from before the reload that has not handled the master's QUIT yet still accepts requests
    # for the old site: it counts whatever its title; a worker started by the reload does not.
    process(202, 187, b"nginx: worker process")
    assert systemd.nginx_workers(187, tmp_path) == {200, 201, 202}
    assert systemd.retiring_nginx_workers(187, tmp_path, before_reload=frozenset({200, 201})) == 2
    assert systemd.nginx_workers(0, tmp_path) == frozenset()


def test_blue_green_new_engine_that_never_answers_leaves_the_old_one_untouched(tmp_path: Path) -> None:
    world = World(tmp_path)
    result = failed_swap(world)
    assert "vllm-a.service kept serving throughout" in result.message and "vllm-b.service: last words" in result.message
    assert world.systemd.verbs("vllm-a.service") == []  # never stopped, never touched
    assert not (world.unit_dir / "vllm-b.service").exists() and not (world.env_dir / "vllm-b.placement.env").exists()
    assert "UNIT=vllm-a.service" in (Path(world.plan().state_dir) / "active").read_text()


def test_gpus_held_by_others_make_the_swap_stop_first(tmp_path: Path) -> None:
    world = World(tmp_path)
    deployed(world)
    world.found = {
        "units": [],
        "listeners": [],
        "gpuHolders": [{"pid": 91, "gpus": [1], "unit": "gpu-taker.service", "cmd": "VLLM::taker"}],
    }
    result = world.run(world.plan(unit="vllm-b.service", gpus=(0, 1)))
    assert result.status == "succeeded", result.message
    assert any("swap mode: stop-start" in line and "GPU 1 held by other processes" in line for line in world.lines)
    order = systemctl_order(world)
    assert order.index(("stop", "vllm-a.service")) < order.index(("start", "vllm-b.service"))
    # It takes the old engine's GPU and port.
    placement = (world.env_dir / "vllm-b.placement.env").read_text()
    assert "CUDA_VISIBLE_DEVICES=0\n" in placement and "VLLM_FLEET_BACKEND_PORT=18000\n" in placement


def test_stop_start_answers_503_and_drains_before_the_old_engine_stops(tmp_path: Path) -> None:
    world = World(tmp_path)
    deployed(world)
    site = world.front_door_dir / "sites" / "dev.chat.conf"
    seen_at_stop: list[tuple[str, int]] = []
    record = world.systemd.run

    def run(*args: str, check: bool = True) -> str:
        if args[:2] == ("systemctl", "stop"):
            seen_at_stop.append((site.read_text(), world.systemd.closed_answers))
        return record(*args, check=check)

    world.systemd.run = run  # type: ignore[method-assign]
    # The front door still answers from the old engine three times after the reload that closes it.
    world.systemd.answers_before_the_reload = ["vllm-a.service"] * 3
    result = world.run(world.plan(unit="vllm-b.service", gpus=(0, 1), swap_mode="stop-start"))
    assert result.status == "succeeded", result.message
    # When the old engine stops, the front door passes nothing to it: clients get 503 with Retry-After,
    # and the public port said so before the stop.
    site_at_stop, closed_answers_at_stop = seen_at_stop[0]
    assert "return 503;" in site_at_stop and "proxy_pass" not in site_at_stop
    assert "add_header Retry-After 10 always;" in site_at_stop
    assert world.systemd.answers_before_the_reload == [] and closed_answers_at_stop == 1
    assert any(c[:2] == ("ss", "-Htn") for c in world.systemd.calls), "it drained before the stop"
    assert "proxy_pass http://127.0.0.1:18000;" in site.read_text()


def test_stop_start_failure_puts_the_old_engine_and_its_site_back(tmp_path: Path) -> None:
    world = World(tmp_path)
    result = failed_swap(world, swap_mode="stop-start")
    assert "vllm-a.service serves again" in result.message
    assert "VLLM_FLEET_BACKEND_PORT=18000" in (world.env_dir / "vllm-a.placement.env").read_text()


def plan_for_decide(gpus: tuple[int, ...] = (0, 1, 2, 3), needed: int = 2, mode: str = "auto") -> contract.Plan:
    return chat_plan(
        stack="prod",
        state_dir="/x",
        gpus=gpus,
        python="python3",
        tools_dir="/t",
        ready_timeout=60,
        gpus_needed=needed,
        swap_mode=mode,
    )


@pytest.mark.parametrize(
    ("old", "running", "busy", "mode", "gpus", "port", "why"),
    [
        (None, False, frozenset(), "stop-start", (0, 1), 18000, "nothing of this deployment serves"),
        (None, False, frozenset({0}), "stop-start", (1, 2), 18000, "nothing"),
        (contract.ActiveRecord("vllm-old.service", gpus=(0, 1), backend_port=18000), True, frozenset(), "blue-green", (2, 3), 28000, "free beside"),
        (contract.ActiveRecord("vllm-old.service", gpus=(2, 3), backend_port=28000), True, frozenset(), "blue-green", (0, 1), 18000, "free beside"),
        (contract.ActiveRecord("vllm-old.service", gpus=(0, 1), backend_port=18000), True, frozenset({3}), "stop-start", (0, 1), 18000, "1 of deployments[].gpus"),
        (contract.ActiveRecord("vllm-old.service", gpus=(0, 1), backend_port=18000), False, frozenset(), "stop-start", (0, 1), 18000, "nothing"),
        (contract.ActiveRecord("vllm-old.service", gpus=(0, 1), backend_port=None), True, frozenset(), "port-move", (2, 3), 18000, "new engine first: GPU 2,3 free beside vllm-old.service"),
        (contract.ActiveRecord("vllm-old.service", gpus=(0, 1), backend_port=None), True, frozenset({3}), "stop-start", (0, 1), 18000, "listens on the public port 8000 itself"),
        (contract.ActiveRecord("vllm-new.service", gpus=(0, 1), backend_port=28000), True, frozenset(), "bridge", (2, 3), 18000, "itself changes: blue/green through vllm-new-bridge.service on GPU 2,3"),
        (contract.ActiveRecord("vllm-new.service", gpus=(0, 1), backend_port=28000), True, frozenset({2}), "stop-start", (0, 1), 28000, "itself changes, so it restarts in place: the new launch needs 2 GPU(s)"),
        (contract.ActiveRecord("vllm-new.service", gpus=(0, 1), backend_port=28000), True, frozenset(), "rewrite", (0, 1), 28000, "unit updated, the engine keeps running (its launch is unchanged): TimeoutStopSec= change"),
        (contract.ActiveRecord("vllm-new.service", gpus=(0, 1), backend_port=28000), True, frozenset(), "bridge", (2, 3), 18000, "its launch changes (--max-model-len is 512 now, 256 in the new unit): blue/green"),
    ],
)  # fmt: skip
def test_decide(
    old: contract.ActiveRecord | None,
    running: bool,
    busy: frozenset[int],
    mode: str,
    gpus: tuple[int, ...],
    port: int,
    why: str,
) -> None:
    # The survey's reading of the unit that serves: no launch change, or one (only the last two cases read).
    changes = why.startswith(("unit updated", "its launch"))
    differences = ("--max-model-len is 512 now, 256 in the new unit",) if "its launch changes" in why else ()
    reading = contract.EngineReading("vllm-new.service", differences=differences, unit_changes=("TimeoutStopSec=",))
    given = reading if changes else None
    decision = judgement.decide(plan_for_decide(), old, running, busy, replaces_running=False, reading=given)
    assert (decision.mode, decision.placement) == (mode, contract.Placement(gpus, port)), decision
    assert why in decision.reason


def test_decide_honours_swap_mode_and_running_replaced_units() -> None:
    old = contract.ActiveRecord("vllm-old.service", gpus=(0, 1), backend_port=18000)
    assert judgement.decide(plan_for_decide(mode="stop-start"), old, True, frozenset(), False).mode == "stop-start"
    assert judgement.decide(plan_for_decide(), old, True, frozenset(), replaces_running=True).mode == "stop-start"


def test_front_door_site_and_active_record_round_trip() -> None:
    plan = contract.Plan(**{**plan_for_decide().__dict__, "bind_address": "::"})
    site = front_door.front_door_site(plan, contract.Placement((1,), 28000))
    assert "listen [::]:8000;" in site and "proxy_pass http://127.0.0.1:28000;" in site
    assert f"add_header {contract.BACKEND_HEADER} vllm-new.service always;" in site
    record = contract.ActiveRecord("vllm-a.service", "chat", 8000, (2, 3), 28000)
    assert contract.ActiveRecord.parse(record.text()) == record
    # A record from before the front door: the engine listened on the public port itself.
    old = contract.ActiveRecord.parse("UNIT=vllm-a.service\nSERVED=a\nPORT=8000\n")
    assert old is not None and old.backend_port is None and old.placement is None


def test_established_to_counts_requests_the_front_door_carries_to_an_engine() -> None:
    ss = (
        "0      0      127.0.0.1:41234   127.0.0.1:18000\n"
        "0      0      127.0.0.1:18000   127.0.0.1:41234\n"
        "0      0      127.0.0.1:41240   127.0.0.1:18000\n"
        "0      0      [::1]:8000        [::1]:51000\n"
    )
    assert systemd.established_to(ss, 18000) == 2
    assert systemd.established_to(ss, 28000) == 0


def test_a_staging_path_gets_a_copy_before_the_stop_and_the_previous_copy_goes(tmp_path: Path) -> None:
    world = World(tmp_path)
    (world.tools / "prewarm").write_text(
        "import os, sys\nargs = sys.argv[1:]\nprint('prewarm:', ' '.join(args))\n"
        "os.makedirs(args[args.index('--to') + 1], exist_ok=True)\n"
    )
    staging = tmp_path / "local"
    plan_a = contract.Plan(**{**world.plan(unit="vllm-a.service").__dict__, "load_dir": str(staging / "a")})
    assert world.run(plan_a).status == "succeeded"
    assert any(f"prewarm: copy --dir /shared/m --to {staging / 'a'}" in line for line in world.lines)
    assert f"STAGED_COPY={staging / 'a'}" in (Path(plan_a.state_dir) / "active").read_text()
    plan_b = contract.Plan(**{**world.plan(unit="vllm-b.service").__dict__, "load_dir": str(staging / "b")})
    result = world.run(plan_b)
    assert result.status == "succeeded" and "stage_copy" in result.timings
    assert (staging / "b").is_dir() and not (staging / "a").exists()
    # A copy that fails refuses the swap before anything stops.
    (world.tools / "prewarm").write_text("import sys\nprint('prewarm: short of 5 GiB', file=sys.stderr)\nsys.exit(1)\n")
    plan_c = contract.Plan(**{**world.plan(unit="vllm-c.service").__dict__, "load_dir": str(staging / "c")})
    refused = world.run(plan_c)
    assert refused.status == "refused" and "(hosts[].stagingPath) failed" in refused.message
    assert world.systemd.units["vllm-b.service"].state == "active"


# ---- a first take-over that adopts the engine serving now (host/judgement.adoption) ----------------------

PYTHON = "/opt/vllm-env/bin/python3"
HAND_MADE_ARGV = [
    PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/m", "--port", "8000",
    "--max-model-len", "256", "--trust-remote-code",
]  # fmt: skip
HAND_MADE_ENV = {"CUDA_VISIBLE_DEVICES": "0", "NCCL_PROTO": "LL", "TMPDIR": "/tmp/by-hand"}


def managed_unit(unit: str, extra_args: str = "", environment: str = "NCCL_PROTO=LL") -> str:
    """A staged unit shaped as render/units.py writes one: the stack's launch behind the front door."""
    return (
        f"{contract.MANAGED_MARK}: stack dev, deployment chat. `pulumi up` overwrites this file;\n[Service]\n"
        f"Environment={environment}\nEnvironment=VLLM_NO_USAGE_STATS=1\nEnvironment=HF_HUB_OFFLINE=1\n"
        f"ExecStart={PYTHON} -m vllm.entrypoints.openai.api_server --model /shared/m --served-model-name chat "
        f"/shared/m --max-model-len 256 --trust-remote-code --host 127.0.0.1 --port ${{VLLM_FLEET_BACKEND_PORT}}"
        f"{extra_args}\n"
        f"ExecStartPost={PYTHON} /usr/local/lib/vllm-fleet/wait-ready --host 127.0.0.1 --port "
        f"${{VLLM_FLEET_BACKEND_PORT}} --served-name chat --timeout 600 --unit {unit}\n"
    )


def serving_by_hand(
    world: World,
    unit: str = "vllm-new.service",
    argv: list[str] = HAND_MADE_ARGV,
    differences: tuple[str, ...] = (),
) -> None:
    """A hand-made engine serving /shared/m under its path on the deployment's port, as the survey sees it,
    its launch read against the stack's with `differences` (host/engine_launch.py, tested on its own)."""
    from host.facts import vllm_launch

    world.hand_made(unit)
    launch = vllm_launch(argv, HAND_MADE_ENV)
    assert launch is not None
    world.found = {
        "units": [
            {"name": unit, "activeState": "active", "enabled": True, "managed": False, "owner": None,
             "launch": launch.to_dict()},
        ],
        "listeners": [{"port": 8000, "pid": 4242, "unit": unit, "cmd": "python3 -m vllm..."}],
        "gpuHolders": [{"pid": 4242, "gpus": [0], "unit": unit, "cmd": "python3"}],
        "gpuCount": 4,
        "readings": {"dev.chat": {"unit": unit, "kind": "take-over", "pid": 4242, "differences": list(differences)}},
    }  # fmt: skip


def test_a_hand_made_engine_running_the_stacks_launch_is_adopted_in_place(tmp_path: Path) -> None:
    world = World(tmp_path)
    serving_by_hand(world)
    world.hand_made("vllm-glm5.service", running=False, enabled=True)
    plan = world.plan(replaces=("vllm-glm5.service",))
    (Path(plan.state_dir) / "staged" / plan.unit_name).write_text(managed_unit(plan.unit_name))
    result = world.run(plan)
    assert result.status == "succeeded", result.message
    assert "adopted vllm-new.service in place: it keeps serving /shared/m" in result.message
    # Nothing stopped or started: the engine's process is the one that served before.
    assert {"stop", "start", "restart"} & set(world.systemd.verbs("vllm-new.service")) == set()
    assert world.systemd.units["vllm-new.service"].state == "active"
    assert not any("prewarm:" in line for line in world.lines)
    # The managed unit is in place, running the hand-made launch through its drop-in until the next swap.
    assert (world.unit_dir / "vllm-new.service").read_text().startswith(contract.MANAGED_MARK)
    drop_in = contract.adopted_drop_in("vllm-new.service", world.unit_dir).read_text()
    assert f"ExecStart=\nExecStart={' '.join(HAND_MADE_ARGV)}\n" in drop_in
    assert "ExecStartPost=\n" in drop_in and "--served-name /shared/m --timeout 600" in drop_in
    placement = (world.env_dir / "vllm-new.placement.env").read_text()
    assert "VLLM_FLEET_BACKEND_PORT=8000\n" in placement and "CUDA_VISIBLE_DEVICES=0\n" in placement
    record = contract.ActiveRecord.parse((Path(plan.state_dir) / "active").read_text())
    assert record is not None and record.adopted == "vllm-new.service" and record.placement is None
    adopted = Path(plan.state_dir) / "adopted"
    assert json.loads((adopted / "vllm-new.service.was").read_text())["running"] is True
    assert json.loads((adopted / "in-place.json").read_text())["pid"] == 4242
    # The other hand-made unit it replaces is put away and disabled, so no boot starts it.
    assert not (world.unit_dir / "vllm-glm5.service").exists()
    assert world.systemd.units["vllm-glm5.service"].enabled is False
    assert not world.site.exists()
    # The next activation with nothing changed leaves it as it is.
    again = world.run(plan)
    assert again.status == "unchanged" and "serves as adopted from vllm-new.service" in again.message
    # The next swap starts the stack's launch behind the front door: the drop-in goes, the engine restarts.
    (Path(plan.state_dir) / "staged" / plan.unit_name).write_text(managed_unit(plan.unit_name, " --seed 1"))
    world.found = {"units": [], "listeners": [], "gpuHolders": [], "gpuCount": 4}
    swapped = world.run(plan)
    assert swapped.status == "succeeded", swapped.message
    assert "restart" in swapped.message or "serving chat" in swapped.message
    assert not contract.adopted_drop_in("vllm-new.service", world.unit_dir).exists()
    assert "proxy_pass http://127.0.0.1:18000;" in world.site.read_text()


def test_a_swap_that_fails_after_adoption_puts_the_adopted_launch_back(tmp_path: Path) -> None:
    world = World(tmp_path)
    serving_by_hand(world)
    plan = world.plan()
    (Path(plan.state_dir) / "staged" / plan.unit_name).write_text(managed_unit(plan.unit_name))
    assert world.run(plan).status == "succeeded"
    drop_in = contract.adopted_drop_in("vllm-new.service", world.unit_dir).read_text()
    (Path(plan.state_dir) / "staged" / plan.unit_name).write_text(managed_unit(plan.unit_name, " --seed 1"))
    world.systemd.units["vllm-new.service"].outcome = "failed"
    result = world.run(plan)
    assert result.status == "rollback-failed" or result.status == "rolled-back"
    assert contract.adopted_drop_in("vllm-new.service", world.unit_dir).read_text() == drop_in


# What the survey's reading (host/engine_launch.py) says of a launch that differs, one line each.
DIFFERS = (
    "--gpu-memory-utilization is 0.95 there, 0.92 (vLLM's default) in the stack",
    "its environment has NCCL_PROTO=LL, the stack's NCCL_PROTO=Simple",
)


def test_a_launch_that_differs_is_taken_over_by_stop_then_start_naming_each_difference(tmp_path: Path) -> None:
    world = World(tmp_path)
    serving_by_hand(world, argv=[*HAND_MADE_ARGV, "--gpu-memory-utilization", "0.95"], differences=DIFFERS)
    plan = world.plan()
    (Path(plan.state_dir) / "staged" / plan.unit_name).write_text(
        managed_unit(plan.unit_name, environment="NCCL_PROTO=Simple")
    )
    judged = judgement.judge(plan, contract.Survey.from_dict(world.found), {}, None)
    assert judged.adoption is not None and not judged.adoption.in_place
    # Its one GPU is the deployment's only one: nothing beside it to start the new engine on first.
    assert judged.decision.mode == "stop-start"
    assert judged.adoption.differences == DIFFERS
    result = world.run(plan)
    assert result.status == "succeeded" and "stop" in world.systemd.verbs("vllm-new.service")


def test_a_launch_that_differs_under_the_managed_name_with_a_gpu_free_is_no_conflict_on_the_port(
    tmp_path: Path,
) -> None:
    # The hand-made engine of the managed unit's name holds the public port itself; GPU 1 is free beside it.
    # The new engine starts first as the bridge, and the hand-made one leaves the port at the move: its
    # listener is what the swap stops, not a port the stack does not manage (seen on the seed-replica host).
    world = World(tmp_path)
    serving_by_hand(world, argv=[*HAND_MADE_ARGV, "--gpu-memory-utilization", "0.95"], differences=DIFFERS)
    plan = world.plan(gpus=(0, 1))
    judged = judgement.judge(plan, contract.Survey.from_dict(world.found), {}, None)
    assert judged.decision.mode == "port-move" and judged.decision.then is not None, judged.decision
    assert judged.decision.placement.gpus == (1,) and judged.decision.then.gpus == (0,)
    assert judged.conflicts == [], judged.conflicts


def test_adoption_judges_unit_name_port_gpus_and_the_launch_read_on_the_host(tmp_path: Path) -> None:
    world = World(tmp_path)
    # The survey read the same launch, spelled another way (`vllm serve` with --a=b and underscores).
    spelled = [PYTHON, "-m", "vllm.entrypoints.cli.main", "serve", "/shared/m/", "--port=8000",
               "--max_model_len=256", "--trust-remote-code", "-tp", "1"]  # fmt: skip
    serving_by_hand(world, argv=spelled)
    plan = world.plan()
    judged = judgement.judge(plan, contract.Survey.from_dict(world.found), {}, None)
    assert judged.adoption is not None and judged.adoption.differences == (), judged.adoption
    assert judged.decision.mode == "adopt" and judged.conflicts == []
    # Another unit name, port and all GPUs (no CUDA_VISIBLE_DEVICES) each differ, besides its launch.
    other_files = ("it serves the model files in /shared/other, the stack those in /shared/m",)
    serving_by_hand(
        world,
        unit="vllm-legacy.service",
        argv=[*HAND_MADE_ARGV[:4], "/shared/other", "--port", "9000"],
        differences=other_files,
    )
    world.found["units"][0]["launch"]["gpus"] = None  # type: ignore[index]
    other = world.plan(replaces=("vllm-legacy.service",))
    judged = judgement.judge(other, contract.Survey.from_dict(world.found), {}, None)
    assert judged.adoption is not None
    text = " | ".join(judged.adoption.differences)
    assert "set vllm-fleet:deployments[chat].unitName: vllm-legacy" in text
    assert "it listens on port 9000, the deployment on 8000" in text
    assert "it runs on GPU 0,1,2,3, the stack on 1 of [0]" in text
    assert other_files[0] in text
    # A launch no survey read is not known to be the stack's: no adoption in place.
    del world.found["readings"]
    unread = judgement.judge(other, contract.Survey.from_dict(world.found), {}, None).adoption
    assert unread is not None and "its launch was not read on the host" in " | ".join(unread.differences)
    # Once vllm-fleet serves the deployment there is nothing to adopt.
    record = contract.ActiveRecord("vllm-new.service", "chat", 8000, (0,), 18000)
    assert judgement.adoption(plan, contract.Survey.from_dict(world.found), record) is None


def test_after_an_adoption_a_swap_away_and_back_leaves_no_adopted_launch_behind(tmp_path: Path) -> None:
    world = World(tmp_path)
    serving_by_hand(world)
    world.hand_made("vllm-b.service", running=False, enabled=False)  # as vllm-minimax-m25 on the server
    replaces = ("vllm-new.service", "vllm-b.service")
    plan = world.plan(replaces=replaces, gpus=(0, 1))
    (Path(plan.state_dir) / "staged" / plan.unit_name).write_text(managed_unit(plan.unit_name))
    assert world.run(plan).status == "succeeded"
    world.found = {"units": [], "listeners": [], "gpuHolders": [], "gpuCount": 4}
    # Away: the adopted engine stops; its unit (named in replaces, but vllm-fleet's own now) goes, drop-in too.
    away = world.run(world.plan(unit="vllm-b.service", replaces=replaces, gpus=(0, 1)))
    assert away.status == "succeeded", away.message
    assert not (world.unit_dir / "vllm-new.service").exists()
    assert not contract.adopted_drop_in("vllm-new.service", world.unit_dir).exists()
    # Back, beside the other engine: the stack's launch starts, not the adopted one.
    back_plan = world.plan(replaces=replaces, gpus=(0, 1))
    (Path(back_plan.state_dir) / "staged" / back_plan.unit_name).write_text(managed_unit(back_plan.unit_name))
    contract.adopted_drop_in("vllm-new.service", world.unit_dir).parent.mkdir(exist_ok=True)
    contract.adopted_drop_in("vllm-new.service", world.unit_dir).write_text("[Service]\nExecStart=\n")
    back = world.run(back_plan)
    assert back.status == "succeeded", back.message
    assert any("swap mode: blue-green" in line for line in world.lines)
    assert not contract.adopted_drop_in("vllm-new.service", world.unit_dir).exists()
    assert (world.unit_dir / "vllm-new.service").read_text().startswith(contract.MANAGED_MARK)
