"""The downtime the preview expects for a stop-then-start swap, and the README table made from it."""

from __future__ import annotations

from models import downtime
from tests.support.paths import ROOT


def test_lazy_estimate_matches_the_reference_kimi_load() -> None:
    kimi = downtime.stop_start_estimate(547, prefetch=False, prewarmed=False)
    assert 30 * 60 <= kimi.seconds <= 36 * 60  # the reference load took 30-36 minutes
    assert "547 GB at 0.28 GB/s (lazy reads)" in kimi.basis


def test_prefetch_and_prewarm_order_the_estimates() -> None:
    lazy, prefetch, warm = (
        downtime.stop_start_estimate(547, p, w).seconds for p, w in ((False, False), (True, False), (False, True))
    )
    assert warm < 5 * 60 < prefetch < lazy


def test_readme_table_is_the_formulas_output() -> None:
    assert downtime.reference_table() in (ROOT / "README.md").read_text()
