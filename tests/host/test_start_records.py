"""What a swap keeps of its new engine's start (host/start_records.py) and how it measures the page cache
before the stop (host/transaction.py's check_resident): on the swap's recording stand-in for systemd
(tests/host/test_swap.py), the sandbox's recorded journal, and real files whose pages the kernel drops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from host import contract, page_cache, start_records, survey
from host.contract import Loaded, StartForecastRecord, StartRecord
from host.start_records import forecast_of_this_start, loaded_from, read_records, record_file, write_record
from tests.host.test_prewarm import evict, make_model
from tests.host.test_swap import RecordingSystemd, SlowStartSystemd, World
from tests.support.paths import ROOT

JOURNAL = ROOT / "tests" / "fixtures" / "journals" / "sandbox-cpu-0.32-two-starts.txt"
LAUNCH = (
    "ExecStart=/opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server --model {model} "
    "--served-model-name chat --tensor-parallel-size 2 --safetensors-load-strategy prefetch "
    "--model-loader-extra-config '{{\"enable_multithread_load\": false}}' --port ${{VLLM_FLEET_BACKEND_PORT}}\n"
)
PAGE = page_cache.PAGE


class JournalingSystemd(RecordingSystemd):
    """The recording stand-in, whose journalctl prints the sandbox's recorded journal of a start."""

    def run(self, *args: str, check: bool = True) -> str:
        if args[0] == "journalctl":
            self.calls.append(args)
            with open(JOURNAL, encoding="utf-8", newline="") as handle:
                return handle.read()
        return super().run(*args, check=check)


def swap_world(tmp_path: Path, **plan_fields: object) -> tuple[World, contract.Plan, Path]:
    """A world whose host runs the hand-made vllm-old.service (one GPU: the swap stops it first), a
    model with a manifest, a staged unit whose launch loads it, and a pre-warm that reads the files."""
    world = World(tmp_path)
    world.systemd = JournalingSystemd(world.unit_dir, world.env_dir, world.front_door_dir)
    world.hand_made("vllm-old.service")
    model = make_model(tmp_path / "shared" / "m", {"a.safetensors": 64 * PAGE, "config.json": 50})
    # What `prewarm cache --dir D` does, for these tests: read every file of D.
    (world.tools / "prewarm").write_text(
        "import sys, pathlib\n"
        "d = pathlib.Path(sys.argv[sys.argv.index('--dir') + 1])\n"
        "[p.read_bytes() for p in d.rglob('*') if p.is_file()]\n"
        "print('prewarm: read', d)\n"
    )
    base = world.plan(replaces=("vllm-old.service",))
    plan = contract.Plan.from_dict(
        {**json.loads(base.to_json()), "model_dir": str(model), "load_dir": str(model), "model": "tiny", **plan_fields}
    )
    staged = Path(plan.state_dir) / "staged" / plan.unit_name
    staged.write_text(staged.read_text() + LAUNCH.format(model=model))
    return world, plan, model


def evicted(model: Path) -> None:
    for path in model.rglob("*"):
        if path.is_file():
            evict(path)
    if page_cache.residency(model).resident:
        pytest.skip(f"the filesystem of {model} keeps its pages (tmpfs): nothing to evict here")


def test_a_swap_records_what_its_engine_loaded_and_where_its_start_went(tmp_path: Path) -> None:
    world, plan, model = swap_world(tmp_path)
    result = world.run(plan)
    assert result.status == "succeeded", result.message
    assert any(
        line.endswith(
            f"before the start: 100% of {model} is in the page cache (0.00 GiB of 0.00 GiB; 2 of 2 files whole)"
        )
        for line in world.lines
    )
    # The journal was read from the cursor taken before the start.
    assert (
        "journalctl",
        "-u",
        "vllm-new.service",
        "-o",
        "short-iso-precise",
        "-a",
        "--no-pager",
        "--after-cursor",
        "c0",
    ) in world.systemd.calls
    [record] = read_records(world.state_root)
    assert (record.owner, record.unit, record.mode) == ("dev.chat", "vllm-new.service", "stop-start")
    assert record.seconds == result.timings["start_to_ready"]
    assert record.loaded == Loaded(
        model="tiny",
        directory=str(model),
        repo="org/model",
        revision="a" * 40,
        size_bytes=64 * PAGE + 50,
        files=2,
        load_format=None,
        load_strategy="prefetch",
        loader_extra_config={"enable_multithread_load": False},
        tensor_parallel=2,
        prewarm="page cache",
        resident_share=1.0,
    )
    assert record.phases is not None and record.phases.seconds == pytest.approx(13.764, abs=0.001)
    assert record.at == record.phases.started_at
    said = next(line for line in world.lines if "where the start went:" in line)
    assert "weights 0.1 s" in said and "ready-check 0.5 s" in said


def test_the_last_starts_of_each_model_whichever_deployment_started_it(tmp_path: Path) -> None:
    def start(owner: str, directory: str, repo: str | None, at: float) -> StartRecord:
        loaded = Loaded(model="m", directory=directory, repo=repo, revision="r1" if repo else None)
        return StartRecord(at, owner, "vllm-m.service", "stop-start", 10.0 + at, loaded)

    write_record(tmp_path, start("dev.chat", "/shared/m", "org/m", 1.0))
    write_record(tmp_path, start("prod.other", "/staging/m", "org/m", 2.0))  # the same model, another deployment
    write_record(tmp_path, start("dev.chat", "/shared/x", None, 3.0))  # no manifest: known by its directory
    records = read_records(tmp_path)
    assert [(r.owner, r.loaded.directory) for r in records] == [
        ("dev.chat", "/shared/m"),
        ("prod.other", "/staging/m"),
        ("dev.chat", "/shared/x"),
    ]
    assert len(list((tmp_path / start_records.STARTS).glob("*.json"))) == 2  # one file per model
    assert record_file(tmp_path, "org/m@r1").name.startswith("org_m_r1-")
    (tmp_path / start_records.STARTS / "broken.json").write_text("{")
    assert len(read_records(tmp_path)) == 3
    # A model's file keeps its last few starts, oldest out first.
    for at in range(10, 20):
        write_record(tmp_path, start("dev.chat", "/shared/m", "org/m", float(at)))
    kept = [r.at for r in read_records(tmp_path) if r.loaded.repo == "org/m"]
    assert kept == [float(at) for at in range(20 - contract.STARTS_KEPT, 20)]


def test_a_start_keeps_the_forecast_made_for_it_and_no_older_one(tmp_path: Path) -> None:
    """The controller renders the forecast of a deployment's last swap again while no start comes: a start
    the plan did not foresee (a unit stopped by hand, started again) gets none."""
    world, plan, _ = swap_world(tmp_path)
    forecast = StartForecastRecord(12.0, "from the rates", "rates", made_at=1.0)
    planned = contract.Plan.from_dict({**json.loads(plan.to_json()), **forecast.plan_fields()})
    assert forecast_of_this_start(planned, []) == forecast
    earlier = StartRecord(5.0, plan.owner, plan.unit_name, "stop-start", 3.0, Loaded(model="m", directory="/d"))
    assert forecast_of_this_start(planned, [earlier]) is None  # made before this deployment's last start
    other = StartRecord(5.0, "prod.x", plan.unit_name, "stop-start", 3.0, Loaded(model="m", directory="/d"))
    assert forecast_of_this_start(planned, [other]) == forecast  # another deployment's start says nothing
    assert forecast_of_this_start(plan, []) is None  # no forecast came with the plan
    # Through a swap: the record has it beside the start that came and the downtime it made.
    result = world.run(planned)
    assert result.status == "succeeded", result.message
    [record] = read_records(world.state_root)
    assert record.forecast == forecast
    assert record.downtime_seconds == pytest.approx(result.timings["stop"] + result.timings["start_to_ready"])


def test_the_survey_reports_the_hosts_start_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_record(
        tmp_path, StartRecord(5.0, "dev.chat", "u.service", "blue-green", 7.5, Loaded(model="m", directory="/d"))
    )
    monkeypatch.setattr(survey, "read_records", lambda: read_records(tmp_path))
    monkeypatch.setattr(survey, "stdout_of", lambda *args: "")
    found = survey.survey()
    assert [r.seconds for r in found.starts] == [7.5]
    assert contract.Survey.from_dict(json.loads(json.dumps(found.to_dict()))).starts == found.starts


def test_a_model_evicted_since_the_pre_warm_is_read_again_before_the_stop(tmp_path: Path) -> None:
    world, plan, model = swap_world(tmp_path, prewarm_min_resident_share=0.9, prewarm_margin_gib=None)
    evicted(model)
    # The pre-warm is off: nothing reads the files again, and the swap refuses before anything stops.
    result = world.run(plan)
    assert result.status == "refused"
    assert "only 0% of the new model's files is in the page cache and the pre-warm is off" in result.message
    assert "vllm-fleet:deployments[chat].prewarmMinResidentShare asks for 90%" in result.message
    assert "stop" not in world.systemd.verbs("vllm-old.service")
    assert world.systemd.units["vllm-old.service"].state == "active"

    # With the pre-warm on, the swap reads them again, finds them there, and goes on.
    world, plan, model = swap_world(tmp_path / "again", prewarm_min_resident_share=0.9)
    evicted_by_the_old_engine = {"done": False}
    original = world.transaction

    def evict_after_the_first_read(plan: contract.Plan, host: RecordingSystemd | None = None):  # type: ignore[no-untyped-def]
        transaction = original(plan, host)
        prewarm = transaction.prewarm

        def prewarm_then_lose_it() -> None:
            prewarm()
            if not evicted_by_the_old_engine["done"]:
                evicted(model)  # the old engine's memory pushed it out before the stop
                evicted_by_the_old_engine["done"] = True

        transaction.prewarm = prewarm_then_lose_it  # type: ignore[method-assign]
        return transaction

    world.transaction = evict_after_the_first_read  # type: ignore[method-assign]
    result = world.run(plan)
    assert result.status == "succeeded", result.message
    lines = "\n".join(world.lines)
    assert f"before the start: 0% of {model} is in the page cache" in lines
    assert "0% is less than vllm-fleet:deployments[chat].prewarmMinResidentShare (90%): reading the files" in lines
    assert f"before the start: 100% of {model} is in the page cache" in lines
    [record] = read_records(world.state_root)
    assert record.loaded.resident_share == 1.0


def test_a_swap_that_stops_nothing_first_measures_but_never_refuses(tmp_path: Path) -> None:
    """A first start (nothing serves), then a blue/green swap (the old engine serves until the new one
    answers): clients wait for neither load, so neither refuses for want of the page cache."""
    world, plan, model = swap_world(tmp_path, prewarm_min_resident_share=1.0, prewarm_margin_gib=None, gpus=(0, 1))
    world.systemd.units["vllm-old.service"].state = "inactive"
    evicted(model)
    result = world.run(plan)
    assert result.status == "succeeded", result.message
    assert any("before the start: 0% of" in line for line in world.lines)
    staged = Path(plan.state_dir) / "staged"
    (staged / "vllm-b.service").write_text((staged / plan.unit_name).read_text())
    (staged / "vllm-b.env").write_text("HF_TOKEN=x\n")
    second = contract.Plan.from_dict(
        {**json.loads(plan.to_json()), "unit_name": "vllm-b.service", "unit_stem": "vllm-b"}
    )
    evicted(model)
    world.lines.clear()
    result = world.run(second)
    assert result.status == "succeeded", result.message
    assert any("swap mode: blue-green" in line for line in world.lines)
    assert any("before the start: 0% of" in line for line in world.lines)


def test_loaded_from_a_directory_without_manifest_knows_it_by_its_directory(tmp_path: Path) -> None:
    loaded = loaded_from(
        "m",
        tmp_path,
        ["python3", "-m", "vllm.entrypoints.openai.api_server", "--load-format=runai_streamer"],
        "none",
        None,
    )
    assert (loaded.repo, loaded.size_bytes, loaded.load_format, loaded.load_strategy) == (
        None,
        None,
        "runai_streamer",
        None,
    )
    assert loaded.identity == str(tmp_path)
    assert os.path.basename(record_file(tmp_path, loaded.identity)).endswith(".json")


def test_a_long_start_reports_its_progress_from_the_journal_and_the_forecast(tmp_path: Path) -> None:
    """While the unit starts, each report says the phase vLLM is in, the weights' share (its shard loader's
    progress bar, of the manifest's size) and the time the plan's forecast leaves."""
    text = (ROOT / "tests" / "fixtures" / "journals" / "reference-kimi-0.11-cuda-tp8.txt").read_text()
    halfway = text[: text.index("\n", text.index(" 32/64 ")) + 1]

    class LoadingSystemd(SlowStartSystemd):
        def run(self, *args: str, check: bool = True) -> str:
            if args[0] == "journalctl" and "short-iso-precise" in args:
                return halfway
            return super().run(*args, check=check)

    world = World(tmp_path)
    model = make_model(tmp_path / "shared" / "m", {"a.safetensors": 64 * PAGE, "config.json": 50})
    forecast = StartForecastRecord(1980.0, "from the catalog", "catalog", 1.0).plan_fields()
    plan = contract.Plan.from_dict(
        {
            **json.loads(world.plan().to_json()),
            "model_dir": str(model),
            "model": "kimi-k2.5-int4",
            "report_every": 0,
            **forecast,
        }
    )
    slow = LoadingSystemd(world.unit_dir, world.env_dir, world.front_door_dir)
    ready, _ = world.transaction(plan, slow).start_new("test")
    assert ready
    said = [line for line in world.lines if "starting vllm-new.service: kimi-k2.5-int4: weights" in line]
    assert said and " left (forecast 33 min) (up to " in said[0], world.lines
    assert "weights 0.1 of 0.3 MB, " in said[0]  # half the shards of the manifest's 0.26 MB


def test_the_report_and_make_status_say_the_last_start_its_phases_and_its_forecast() -> None:
    from host.start_phases import parse_journal, phases_of
    from render import report
    from scripts import status

    phases = phases_of(parse_journal(JOURNAL.read_text()))
    assert phases is not None
    record = StartRecord(
        phases.started_at,
        "dev.chat",
        "vllm-tiny-chat-a.service",
        "stop-start",
        13.9,
        Loaded("tiny-chat-a", "/shared/tiny-chat-a"),
        phases,
        forecast=StartForecastRecord(15.2, "from the start of tiny-chat-a on sandbox", "own start", 1.0),
        downtime_seconds=14.5,
    )
    facts = contract.DeploymentStatus(unit="vllm-tiny-chat-a.service", last_start=record).to_dict()
    numbers = report.numbers("http://127.0.0.1:8000/v1", facts)["lastStart"]
    assert numbers["seconds"] == 13.9 and numbers["forecastSeconds"] == 15.2 and numbers["downtimeSeconds"] == 14.5
    assert sum(numbers["phases"].values()) == pytest.approx(phases.seconds, abs=0.01)
    shown = status.show("chat", {"host": "sandbox", "unit": record.unit, "facts": facts, "gpus": [], "drift": []})
    assert "\n  start     13.9 s (forecast 15 s, from its own starts here): checks " in shown, shown
    assert ", weights 0.1 s, " in shown
