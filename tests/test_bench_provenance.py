"""bench/run.py's header says which figures a run measured and, with --keep, which it kept and from when."""

from __future__ import annotations

from bench import run


def test_a_full_run_says_every_figure_is_its_own() -> None:
    measured = {name: {"at": "2026-12-03 23:10 UTC", "commit": "4042bb8"} for name in ("noop", "swap")}
    assert run.provenance({"noop": {}, "swap": {}}, measured, ["noop", "swap"]) == (
        "Every figure comes from this run alone (noop, swap)"
    )


def test_a_kept_section_is_named_with_the_date_and_commit_it_was_measured_at() -> None:
    measured = {
        "noop": {"at": "2026-12-03 22:48 UTC", "commit": "e91f65e"},
        "swap": {"at": "2026-12-03 23:10 UTC", "commit": "4042bb8"},
    }
    text = run.provenance({"noop": {}, "swap": {}}, measured, ["swap"])
    assert text.startswith("Figures of this run: swap;")
    assert "kept from earlier runs (`--keep`): noop (2026-12-03 22:48 UTC, e91f65e)" in text


def test_the_committed_results_keep_their_history_section() -> None:
    committed = (run.OUT / "RESULTS.md").read_text()
    assert f"\n{run.HISTORY_HEADING}\n" in committed
    # What the next run writes from it: its own report, then the same History, byte for byte.
    history = committed[committed.index(f"\n{run.HISTORY_HEADING}\n") + 1 :]
    assert run.with_history("# Benchmarks\n", committed).endswith(history)
