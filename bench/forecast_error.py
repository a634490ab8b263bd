"""`make bench ARGS=forecast`: how far the swap forecast (models/forecast.py) is from the start that came.

A series of stop-then-start swaps of the dev stack between its two tiny models. Before each, the host's
survey is read (its start records above all) and the forecast made for the model that comes, as the
preview makes it; after it, the start the swap measured (start to ready, the transaction's own clock).
The first swap to each model has no start of its own to go on (the rates of models/downtime.py, which
describe GPU servers); from the second on, its own last start is the basis: the target is within 25% then.
The table and its summary are pure functions (tests/test_bench_forecast.py)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# The target for a model that has started on the host before.
TARGET = 0.25


def error(forecast: float, measured: float) -> float:
    """The forecast's error as a share of what came: +0.2 is 20% too long, -0.2 20% too short."""
    return (forecast - measured) / measured


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per basis, the swaps and their errors; `met`: every swap forecast from its model's own last start
    is within TARGET (None when none was)."""
    by_source: dict[str, list[float]] = {}
    for row in rows:
        by_source.setdefault(str(row["source"]), []).append(error(row["forecast"], row["measured"]))
    out: dict[str, Any] = {
        source: {
            "swaps": len(errors),
            "median_abs_error": statistics.median(abs(e) for e in errors),
            "max_abs_error": max(abs(e) for e in errors),
        }
        for source, errors in by_source.items()
    }
    own = by_source.get("own start")
    out["met"] = None if not own else all(abs(e) <= TARGET for e in own)
    return out


def table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The forecast-error table of RESULTS.md: a row per swap, its basis sentence last."""
    lines = [
        "| swap | to | basis | forecast | measured | error | basis said |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, row in enumerate(rows, start=1):
        lines.append(
            f"| {number} | {row['model']} | {row['source']} | {row['forecast']:.1f} s | {row['measured']:.1f} s | "
            f"{error(row['forecast'], row['measured']):+.0%} | {row['basis']} |"
        )
    return lines


def summary_row(result: Mapping[str, Any]) -> str:
    """The line of the benchmarks' table: the error of the forecasts made from a model's own last start."""
    own = result["summary"].get("own start")
    if own is None:
        return "| swap forecast error, once the model has started on the host | no swap had a start of its own | - | within 25% | no |"
    met = "yes" if result["summary"]["met"] else "no"
    return (
        f"| swap forecast error, once the model has started on the host (stop-then-start; basis: its own last start) "
        f"| median {own['median_abs_error']:.0%}, at most {own['max_abs_error']:.0%} | {own['swaps']} | within 25% | {met} |"
    )


def run_series(
    models: Sequence[str],
    forecast: Callable[[str], tuple[float, str, str]],
    swap: Callable[[str], float],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Swap to each of `models` in turn: `forecast(model)` before ((seconds, source, basis) from the host's
    survey), `swap(model)` the measured start to ready."""
    rows = []
    for model in models:
        seconds, source, basis = forecast(model)
        measured = swap(model)
        rows.append({"model": model, "forecast": seconds, "source": source, "basis": basis, "measured": measured})
        log(f"bench: forecast {rows[-1]}")
    return {"rows": rows, "summary": summary(rows)}
