"""The downtime the preview expects for a stop-then-start swap, and the README table made from it."""

from __future__ import annotations

import json

import pytest

from models import downtime
from tests.support.paths import ROOT

H200_RECORD = ROOT / "tests" / "device" / "h200-load-2026-12-01.json"


def test_lazy_estimate_matches_the_reference_kimi_load() -> None:
    kimi = downtime.stop_start_estimate(547, prefetch=False, prewarmed=False)
    assert 30 * 60 <= kimi.seconds <= 36 * 60  # the reference load took 30-36 minutes
    assert "547 GB at 0.28 GB/s (lazy reads)" in kimi.basis


def test_prewarmed_rate_is_the_h200_records_tp8_figure() -> None:
    record = json.loads(H200_RECORD.read_text())
    assert record["warm_tp8"]["processes"] == 8 and record["warm_tp8"]["mode"] == "tp"
    assert downtime.WARM_GB_PER_SECOND == record["warm_tp8"]["checkpoint_gbps"] == 8.41


def test_each_estimate_is_the_fixed_start_plus_the_size_over_its_rate() -> None:
    warm = downtime.stop_start_estimate(547, prefetch=False, prewarmed=True)
    assert warm.seconds == pytest.approx(60 + 547 / 8.41)  # 125 s
    assert warm.basis == "60 s start + 547 GB at 8.41 GB/s (pre-warmed page cache)"
    prefetch = downtime.stop_start_estimate(215, prefetch=True, prewarmed=False)
    assert prefetch.seconds == pytest.approx(60 + 215 / (690 / 435))  # 196 s
    assert prefetch.basis == "60 s start + 215 GB at 1.59 GB/s (prefetch)"
    # Pre-warmed wins over prefetch: the weights are already in RAM.
    assert downtime.stop_start_estimate(215, prefetch=True, prewarmed=True).seconds == pytest.approx(60 + 215 / 8.41)


def test_prefetch_and_prewarm_order_the_estimates() -> None:
    lazy, prefetch, warm = (
        downtime.stop_start_estimate(547, p, w).seconds for p, w in ((False, False), (True, False), (False, True))
    )
    assert warm < 5 * 60 < prefetch < lazy


def test_readme_table_is_the_formulas_output() -> None:
    assert downtime.reference_table() in (ROOT / "README.md").read_text()
