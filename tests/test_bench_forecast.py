"""The forecast-error table of `make bench ARGS=forecast` (bench/forecast_error.py): its rows, its summary
per basis and its verdict, on a series driven by stand-ins for the forecast and the swap."""

from __future__ import annotations

from typing import Any

import pytest

from bench import forecast_error
from host.contract import Loaded, StartForecastRecord, StartRecord


def series() -> dict[str, Any]:
    """Two models swapped three times each, as the host's start records keep them: the first swap to each
    forecast on the rates (60 s for a 20 s start), then on its own last start (the start before it)."""
    measured = iter([20.0, 18.0, 22.0, 19.0, 21.0, 24.0])
    last: dict[str, float] = {}
    loads = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def swap(model: str) -> StartRecord:
        if model in last:
            forecast = StartForecastRecord(last[model], f"from the start of {model}", "own start")
        else:
            forecast = StartForecastRecord(60.0, "from the rates", "rates")
        last[model] = next(measured)
        return StartRecord(0.0, "dev.chat", "u", "stop-start", last[model], Loaded(model, "/d"), forecast=forecast)

    return forecast_error.run_series(["b", "a"] * 3, swap, load=lambda: next(loads), log=lambda _m: None)


def test_each_swap_is_a_row_with_its_error_and_basis() -> None:
    result = series()
    rows = result["rows"]
    assert [(r["model"], r["source"], r["forecast"], r["measured"]) for r in rows] == [
        ("b", "rates", 60.0, 20.0),
        ("a", "rates", 60.0, 18.0),
        ("b", "own start", 20.0, 22.0),
        ("a", "own start", 18.0, 19.0),
        ("b", "own start", 22.0, 21.0),
        ("a", "own start", 19.0, 24.0),
    ]
    lines = forecast_error.table(rows)
    assert lines[2] == "| 1 | b | rates | 60.0 s | 20.0 s | +200% | 1.0 | from the rates |"
    assert lines[7] == "| 6 | a | own start | 19.0 s | 24.0 s | -21% | 6.0 | from the start of a |"
    # A swap the host kept no forecast of is its own row, judged with neither basis.
    bare = StartRecord(0.0, "dev.chat", "u", "stop-start", 20.0, Loaded("a", "/d"))
    assert forecast_error.row_of("a", bare, None)["source"] == "none"


def test_the_summary_judges_only_the_forecasts_from_a_start_of_the_model_itself() -> None:
    summary = series()["summary"]
    assert summary["rates"]["median_abs_error"] == pytest.approx((60 - 18) / 18 / 2 + (60 - 20) / 20 / 2)
    own = summary["own start"]
    assert own["swaps"] == 4 and own["max_abs_error"] == pytest.approx(5 / 24)
    assert summary["met"] is True
    assert forecast_error.summary_row({"summary": summary}).endswith(
        "| median 7%, at most 21% | 4 | within 25% | yes |"
    )
    rows = [{"model": "a", "source": "own start", "forecast": 10.0, "measured": 20.0, "basis": ""}]
    assert forecast_error.summary(rows)["met"] is False
    assert forecast_error.summary([])["met"] is None
