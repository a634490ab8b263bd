"""`make bench ARGS=forecast`: how far the swap forecast (models/forecast.py) is from the start that came.

A series of stop-then-start swaps of the dev stack between its two tiny models, each a plain `pulumi up`:
its program forecasts the start of the model that comes (controller/forecast.py, as the preview says it),
the activation carries the forecast to the host, and the host keeps it beside the start that came (the
start record's `forecast`, `seconds`: start to ready by the transaction's own clock, and phases). The bench
reads the records back from the host's survey. The first swap to each model has no start of its own to go
on (the rates of models/downtime.py, which describe GPU servers); from the second on, its own starts are
the basis: the target is within 25% then. The machine's load average before each swap is kept beside it
(the sandbox shares its CPUs with whatever else runs: a start's imports and compilation are CPU-bound).
The table and its summary are pure functions (tests/test_bench_forecast.py)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from host.contract import StartRecord

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
        "| swap | to | basis | forecast | measured | error | load average | basis said |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, row in enumerate(rows, start=1):
        load = f"{row['load']:.1f}" if row.get("load") is not None else "-"
        lines.append(
            f"| {number} | {row['model']} | {row['source']} | {row['forecast']:.1f} s | {row['measured']:.1f} s | "
            f"{error(row['forecast'], row['measured']):+.0%} | {load} | {row['basis']} |"
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


def row_of(model: str, record: StartRecord, load: float | None) -> dict[str, Any]:
    """A swap's row from the start record the host kept of it: its forecast beside what came."""
    forecast = record.forecast
    return {
        "model": model,
        "forecast": forecast.seconds if forecast is not None else 0.0,
        "source": forecast.source if forecast is not None else "none",
        "basis": forecast.basis if forecast is not None else "no forecast came with the swap",
        "measured": record.seconds,
        "phases": record.phases.describe() if record.phases is not None else "",
        "load": load,
    }


def run_series(
    models: Sequence[str],
    swap: Callable[[str], StartRecord],
    load: Callable[[], float | None] = lambda: None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Swap to each of `models` in turn (`swap(model)`: the start record the host kept of it), the machine's
    `load()` average read just before."""
    rows = []
    for model in models:
        before = load()
        rows.append(row_of(model, swap(model), before))
        log(f"bench: forecast {rows[-1]}")
    return {"rows": rows, "summary": summary(rows)}
