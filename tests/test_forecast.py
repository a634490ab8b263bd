"""The forecast of a swap's start (models/forecast.py) on the reference server's recorded survey
(tests/fixtures/reference-server/) and on start records made from the journals in tests/fixtures/journals/:
the incoming model's own last start, else the catalog's figure for it, else the rates; never the outgoing
model's, and never a fact the host did not report."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from controller.forecast import host_facts
from host.contract import Loaded, Mount, StartRecord, Survey, filesystem_of
from host.start_phases import parse_journal, phases_of
from models import downtime
from models.config import ResolvedDeployment
from models.forecast import Target, expected_share, forecast_start, target_of
from models.loader import load_stack_file
from tests.support.paths import ROOT
from tests.support.reference import SURVEY_FILE

JOURNALS = ROOT / "tests" / "fixtures" / "journals"
GB = 10**9


def prod_deployment(model: str) -> ResolvedDeployment:
    """Pulumi.prod.yaml's deployment, switched to `model` (one the stack keeps on disk)."""
    config = load_stack_file(ROOT / "Pulumi.prod.yaml")
    config = config.model_copy(update={"deployments": (config.deployments[0].model_copy(update={"model": model}),)})
    (rd,) = config.resolved_deployments()
    return rd


def reference_survey(**extra: Any) -> Survey:
    """The reference server's survey as the preview reads it (while Kimi serves), with `extra` besides."""
    return Survey.from_dict({**json.loads(SURVEY_FILE.read_text())["gpu-01"], **extra})


def record_of(
    journal: str, model: str, repo: str, size_gb: float, resident: float | None, **loaded: Any
) -> dict[str, Any]:
    with open(JOURNALS / journal, encoding="utf-8", newline="") as handle:
        phases = phases_of(parse_journal(handle.read()))
    assert phases is not None
    what = Loaded(
        model=model,
        directory=f"/shared/{model}",
        repo=repo,
        revision="0000000000000000000000000000000000000001",
        size_bytes=int(size_gb * GB),
        files=64,
        load_strategy="prefetch",
        prewarm="page cache",
        resident_share=resident,
        tensor_parallel=8,
        **loaded,
    )
    record = StartRecord(
        phases.started_at, "prod.primary", "vllm-kimi-k25-int4.service", "stop-start", phases.seconds, what, phases
    )
    carried: dict[str, Any] = json.loads(json.dumps(record.to_dict()))  # as the survey's JSON carries it
    return carried


def kimi_target(rd: ResolvedDeployment, strategy: str | None = "prefetch") -> Target:
    return target_of(rd, None, strategy)


def test_minimax_to_kimi_on_the_reference_server_is_kimis_own_figure_not_minimaxs_last_start() -> None:
    """The deployment serves MiniMax (its last start took 75 s: a MiniMax record) and
    swaps back to Kimi: the forecast is Kimi's, from the catalog, with the unknown facts named."""
    minimax = record_of("sandbox-cpu-0.32-two-starts.txt", "minimax-m2.5", "MiniMaxAI/MiniMax-M2.5", 215, None)
    minimax["seconds"] = 75.0
    found = reference_survey(starts=[minimax], active={"prod.primary": {"unit": "vllm-minimax-m25.service"}})
    rd = prod_deployment("kimi-k2.5-int4")
    forecast = forecast_start(kimi_target(rd), host_facts("gpu-01", found, rd.load_path), rd.load_path)
    assert forecast.source == "catalog"
    assert forecast.seconds == 1980  # 30-36 min: the middle
    assert forecast.basis == (
        "from the catalog's reference load of kimi-k2.5-int4: 30.0 min to 36.0 min on the reference server, 8 x RTX "
        "PRO 6000 (PCIe), TP8, lazy reads from /shared, vLLM 0.11 (no start of kimi-k2.5-int4 on gpu-01 yet); "
        "unknown: the RAM of gpu-01 (MemAvailable), the filesystem of /shared/kimi-k2.5-int4"
    )


def test_kimi_to_minimax_is_about_its_75_seconds_not_fourteen_minutes() -> None:
    rd = prod_deployment("minimax-m2.5")
    facts = host_facts("gpu-01", reference_survey(), rd.load_path)
    forecast = forecast_start(target_of(rd, None, None), facts, rd.load_path)
    assert forecast.seconds == 75
    assert "reference load of minimax-m2.5: 75 s on the reference server" in forecast.basis
    # What the one rate for every model said before (README's table: "about 14.0 min").
    lazy = downtime.stop_start_estimate(215, prefetch=False, prewarmed=False).seconds
    assert downtime.describe(lazy) == "14.0 min"


def test_a_start_of_kimi_on_the_host_is_the_basis_once_there_is_one() -> None:
    kimi = record_of("kimi-0.32-cuda-tp8-prefetch.txt", "kimi-k2.5-int4", "moonshotai/Kimi-K2.5", 547, None)
    rd = prod_deployment("kimi-k2.5-int4")
    found = reference_survey(starts=[kimi])
    forecast = forecast_start(kimi_target(rd), host_facts("gpu-01", found, rd.load_path), rd.load_path)
    assert forecast.source == "own start"
    assert forecast.seconds == pytest.approx(597.75, abs=0.01)  # the record's own start, nothing scaled
    assert forecast.basis == (
        "from the start of kimi-k2.5-int4 on gpu-01 at 2026-12-04 09:12 (prod.primary): weights 419 s at 1.30 "
        "GB/s, compile 48 s, graphs 61 s, 598 s in all; the page cache's share at this start is unknown "
        "(MemAvailable not reported)"
    )


def test_the_own_start_is_scaled_by_what_differs() -> None:
    """A record read from storage (nothing resident) forecast for a start the pre-warm fills: its storage
    rate is measured, the page cache's is downtime.py's; another size scales the weights; another loader
    is said."""
    kimi = record_of("reference-kimi-0.11-cuda-tp8.txt", "kimi-k2.5-int4", "moonshotai/Kimi-K2.5", 547, 0.0)
    rd = prod_deployment("kimi-k2.5-int4")
    found = reference_survey(starts=[kimi], memory={"totalMib": 2_000_000, "availableMib": 1_900_000})
    facts = host_facts("gpu-01", found, rd.load_path)
    assert expected_share(kimi_target(rd), facts) == 1.0  # 1855 GiB free holds 509 GiB and the margin
    forecast = forecast_start(kimi_target(rd, strategy=None), facts, rd.load_path)
    weights = 2034.21 - 51.902
    rest = 2149.51 - weights
    assert forecast.seconds == pytest.approx(rest + 547 / downtime.WARM_GB_PER_SECOND, abs=0.1)
    assert forecast.basis.endswith(
        "; 100% of it in the page cache instead of 0%; it loaded with --load-format auto, "
        "--safetensors-load-strategy prefetch, this start with --load-format auto, --safetensors-load-strategy lazy: "
        "not scaled for it"
    )

    # Another revision, half the size, the same page cache share (none: no pre-warm): the weights take half
    # as long. The same revision is the size the host measured, whatever the stack says.
    smaller = dataclasses.replace(kimi_target(rd), revision="e" * 40, size_gb=273.5, prewarm_margin_gib=None)
    forecast = forecast_start(smaller, facts, rd.load_path)
    assert forecast.seconds == pytest.approx(rest + weights / 2, abs=0.1)
    assert "weights scaled to 273.5 GB from 547 GB" in forecast.basis


def test_an_earlier_revision_is_used_and_named_when_none_of_this_one_is_there() -> None:
    kimi = record_of("kimi-0.32-cuda-tp8-prefetch.txt", "kimi-k2.5-int4", "moonshotai/Kimi-K2.5", 547, None)
    kimi["loaded"]["revision"] = "f" * 40
    rd = prod_deployment("kimi-k2.5-int4")
    forecast = forecast_start(
        kimi_target(rd), host_facts("gpu-01", reference_survey(starts=[kimi]), rd.load_path), rd.load_path
    )
    assert forecast.basis.startswith("from the start of kimi-k2.5-int4@ffffffffffff on gpu-01")
    # A stack that names a branch takes whatever revision the host resolved it to as its own.
    branch = dataclasses.replace(kimi_target(rd), revision="main", size_gb=600.0)
    forecast = forecast_start(branch, host_facts("gpu-01", reference_survey(starts=[kimi]), rd.load_path), rd.load_path)
    assert forecast.basis.startswith("from the start of kimi-k2.5-int4 on gpu-01") and "scaled" not in forecast.basis


def test_without_record_or_catalog_figure_the_rates_say_it_with_the_unknowns() -> None:
    rd = prod_deployment("kimi-k2.5-int4")
    target = dataclasses.replace(kimi_target(rd, strategy=None), reference=None)
    forecast = forecast_start(target, host_facts("gpu-01", reference_survey(), rd.load_path), rd.load_path)
    assert forecast.source == "rates"
    assert forecast.seconds == pytest.approx(downtime.stop_start_estimate(547, False, False).seconds)
    assert "(lazy reads)" in forecast.basis and "unknown: the RAM of gpu-01 (MemAvailable)" in forecast.basis
    # Reported RAM that holds it all: the pre-warmed rate, and nothing unknown but the filesystem.
    mounts = [{"path": "/", "type": "ext4"}, {"path": "/shared", "type": "nfs4"}]
    found = reference_survey(memory={"totalMib": 2_000_000, "availableMib": 1_900_000}, mounts=mounts)
    forecast = forecast_start(target, host_facts("gpu-01", found, rd.load_path), rd.load_path)
    assert "(pre-warmed page cache)" in forecast.basis and "unknown" not in forecast.basis


def test_the_filesystem_is_the_longest_mount_point_that_holds_the_path() -> None:
    mounts = (Mount("/", "ext4"), Mount("/shared", "nfs4"), Mount("/sha", "xfs"))
    assert filesystem_of("/shared/kimi", mounts) == "nfs4"
    assert filesystem_of("/shared", mounts) == "nfs4"
    assert filesystem_of("/sharedx/m", mounts) == "ext4"
    assert filesystem_of("/shared/kimi", ()) is None


def test_the_activation_carries_a_forecast_made_only_when_a_start_comes(dev_raw: dict[str, Any]) -> None:
    """Made afresh when the update starts the engine; else the one the host reports its last activation
    carried, so that an unchanged stack renders an unchanged step (every survey has another `at`)."""
    from controller.drift import applied
    from controller.forecast import plan_forecast
    from host.contract import StartForecastRecord
    from models.loader import parse_stack_config

    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    carried = {"seconds": 19.0, "basis": "from the start of tiny-chat-a", "source": "own start", "madeAt": 5.0}

    def survey(unit_sha: str) -> Survey:
        return Survey.from_dict(
            {
                "units": [{"name": rd.unit_name, "activeState": "active", "managed": True, "sha256": unit_sha}],
                "active": {"dev.chat": {"unit": rd.unit_name, "gpus": [0], "backendPort": 18000, "forecast": carried}},
                "at": 100.0,
            }
        )

    same = survey(applied(rd, "dev").unit_sha256)
    assert plan_forecast("dev", rd, same) == StartForecastRecord(
        19.0, "from the start of tiny-chat-a", "own start", 5.0
    )
    changed = plan_forecast("dev", rd, survey("0" * 64))  # the unit changes: the swap restarts the engine
    assert changed is not None and changed.made_at == 100.0 and changed.source == "rates"
    assert changed.basis.startswith("from the rates of models/downtime.py")


def test_the_median_of_the_models_recent_starts_keeps_one_slow_start_from_being_the_forecast() -> None:
    """Three starts of MiniMax on the host, one of them slowed by something else on the machine: the
    forecast is the median, said from the last start, with the range."""
    rd = prod_deployment("minimax-m2.5")
    starts = []
    for at, seconds in ((1000.0, 80.0), (2000.0, 240.0), (3000.0, 76.0)):
        record = record_of("sandbox-cpu-0.32-two-starts.txt", "minimax-m2.5", "MiniMaxAI/MiniMax-M2.5", 215, None)
        record.update(at=at, seconds=seconds)
        record["loaded"]["revision"] = rd.model.revision
        starts.append(record)
    facts = host_facts("gpu-01", reference_survey(starts=starts), rd.load_path)
    forecast = forecast_start(target_of(rd, None, None), facts, rd.load_path)
    assert forecast.source == "own start" and forecast.seconds == pytest.approx(80.0)
    assert forecast.basis.startswith("from the start of minimax-m2.5 on gpu-01 at 1970-01-01 00:50 (prod.primary)")
    assert forecast.basis.endswith("the median of its last 3 starts here, each scaled the same way: 80 s (76-240 s)")
