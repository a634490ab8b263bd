"""The downtime the preview expects for a stop-then-start swap, and the table of docs/swaps.md made from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from models import downtime
from tests.support.paths import ROOT

H200_RECORD = ROOT / "bench" / "device" / "h200-load-2026-12-01.json"
# A record of bench/device/tp8_load.py's shape with invented timings (its "fixture" key says so): 19.815 GB/s.
FIXTURES = ROOT / "tests" / "fixtures" / "device-records"
TP8_FIXTURE = FIXTURES / "h100x8-tp8-load-fixture.json"


@pytest.fixture
def no_tp8_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The forecast as it is with no TP8 record from a machine with 8 GPUs: the H200 box's stand-in."""
    monkeypatch.setattr(downtime, "DEVICE_RECORDS", tmp_path)


def test_lazy_estimate_matches_the_reference_kimi_load() -> None:
    kimi = downtime.stop_start_estimate(547, prefetch=False, prewarmed=False)
    assert 30 * 60 <= kimi.seconds <= 36 * 60  # the reference load took 30-36 minutes
    assert "547 GB at 0.28 GB/s (lazy reads)" in kimi.basis


def test_prewarmed_rate_without_a_tp8_record_is_the_h200_records_tp8_figure(no_tp8_record: None) -> None:
    record = json.loads(H200_RECORD.read_text())
    assert record["warm_tp8"]["processes"] == 8 and record["warm_tp8"]["mode"] == "tp"
    assert downtime.WARM_GB_PER_SECOND == record["warm_tp8"]["checkpoint_gbps"] == 8.41
    warm = downtime.warm_rate(downtime.DEVICE_RECORDS)
    assert warm == downtime.WarmRate(8.41, downtime.WARM_SOURCE)
    assert "bench/device/h200-load-2026-12-01.json" in warm.source


def test_a_tp8_record_sets_the_prewarmed_forecast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(downtime, "DEVICE_RECORDS", FIXTURES)
    record = json.loads(TP8_FIXTURE.read_text())
    rate = record["warm_tp"]["checkpoint_gbps"]
    assert rate == 19.815 and rate != downtime.WARM_GB_PER_SECOND
    warm = downtime.stop_start_estimate(547, prefetch=False, prewarmed=True)
    assert warm.seconds == pytest.approx(60 + 547 / rate)
    assert warm.basis == "60 s start + 547 GB at 19.82 GB/s (pre-warmed page cache)"
    # Pre-warmed wins over prefetch, with the record's rate too; lazy and prefetch do not change.
    assert downtime.stop_start_estimate(215, prefetch=True, prewarmed=True).seconds == pytest.approx(60 + 215 / rate)
    assert downtime.stop_start_estimate(215, prefetch=True, prewarmed=False).seconds == pytest.approx(
        60 + 215 / (690 / 435)
    )
    table = downtime.reference_table()
    assert "| Kimi-K2.5 INT4 (TP8) | 547 GB | 34.0 min | 6.7 min | 88 s |" in table
    assert (
        "Pre-warmed: 19.82 GB/s, tests/fixtures/device-records/h100x8-tp8-load-fixture.json, `warm_tp.checkpoint_gbps`"
        in table
    )


def test_every_tp8_record_in_tests_device_gives_the_rate_the_forecast_uses() -> None:
    """Today there is none and the forecast is the H200 box's; once a run on 8 GPUs is committed, its record
    must parse, and the newest one sets the forecast (and docs/swaps.md's table, below)."""
    records = sorted(downtime.DEVICE_RECORDS.glob(downtime.TP8_RECORD_GLOB))
    rates = [downtime.read_tp8_record(path) for path in records]
    newest = max(
        zip(records, rates, strict=True),
        key=lambda pr: (json.loads(pr[0].read_text())["date_utc"], pr[0].name),
        default=None,
    )
    expected = newest[1] if newest else downtime.WarmRate(downtime.WARM_GB_PER_SECOND, downtime.WARM_SOURCE)
    assert downtime.warm_rate(downtime.DEVICE_RECORDS) == expected


def variant(tmp_path: Path, name: str, change: dict[str, Any], warm: dict[str, Any] | None = None) -> Path:
    record = json.loads(TP8_FIXTURE.read_text()) | change
    record["warm_tp"] |= warm or {}
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize(
    ("change", "warm", "why"),
    [
        ({"tp": 1}, {}, "TP 1, not 8"),
        ({"kind": "load-rate"}, {}, "not a tp8_load.py record"),
        ({}, {"per_gpu": [{"gpu": "GPU-one"}] * 8}, "its warm load ran on GPUs"),
        ({}, {"errors": ["worker 3: CUDA out of memory"]}, "failed or was skipped"),
        ({}, {"resident_before": 0.6}, "the page cache held 0.6 of the checkpoint"),
        ({}, {"checkpoint_gb": 100.0}, "a 100.0 GB checkpoint"),
        ({}, {"slices_as_planned": False}, "did not copy the slices planned"),
        ({}, {"checkpoint_gbps": None}, "rate None"),
    ],
)
def test_a_record_that_does_not_show_a_tp8_load_from_ram_gives_no_rate(
    tmp_path: Path, change: dict[str, Any], warm: dict[str, Any], why: str
) -> None:
    path = variant(tmp_path, "h100x8-tp8-load-2026-12-08.json", change, warm)
    with pytest.raises(ValueError, match=why):
        downtime.read_tp8_record(path)
    assert downtime.warm_rate(tmp_path).gb_per_second == downtime.WARM_GB_PER_SECOND  # left out


def test_the_newest_tp8_record_wins(tmp_path: Path) -> None:
    variant(
        tmp_path, "h100x8-tp8-load-2027-01-01.json", {"date_utc": "2027-01-01T00:00:00Z"}, {"checkpoint_gbps": 21.0}
    )
    variant(
        tmp_path, "h200x8-tp8-load-2026-12-20.json", {"date_utc": "2026-12-20T00:00:00Z"}, {"checkpoint_gbps": 30.0}
    )
    variant(tmp_path, "h200x8-tp8-load-2027-02-01.json", {"date_utc": "2027-02-01T00:00:00Z", "tp": 4}, {})
    assert downtime.warm_rate(tmp_path).gb_per_second == 21.0  # the newest that gives a rate


def test_each_estimate_is_the_fixed_start_plus_the_size_over_its_rate(no_tp8_record: None) -> None:
    warm = downtime.stop_start_estimate(547, prefetch=False, prewarmed=True)
    assert warm.seconds == pytest.approx(60 + 547 / 8.41)  # 125 s
    assert warm.basis == "60 s start + 547 GB at 8.41 GB/s (pre-warmed page cache)"
    prefetch = downtime.stop_start_estimate(215, prefetch=True, prewarmed=False)
    assert prefetch.seconds == pytest.approx(60 + 215 / (690 / 435))  # 196 s
    assert prefetch.basis == "60 s start + 215 GB at 1.59 GB/s (prefetch)"
    # Pre-warmed wins over prefetch: the weights are already in RAM.
    assert downtime.stop_start_estimate(215, prefetch=True, prewarmed=True).seconds == pytest.approx(60 + 215 / 8.41)


def test_prefetch_and_prewarm_order_the_estimates(no_tp8_record: None) -> None:
    lazy, prefetch, warm = (
        downtime.stop_start_estimate(547, p, w).seconds for p, w in ((False, False), (True, False), (False, True))
    )
    assert warm < 5 * 60 < prefetch < lazy


def test_the_swaps_page_table_is_the_formulas_output() -> None:
    assert downtime.reference_table() in (ROOT / "docs" / "swaps.md").read_text()
