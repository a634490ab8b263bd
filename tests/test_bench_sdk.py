"""bench/run.py: the table of what each SDK change is worth (the share switching it off costs, and the verdict),
and the history section of bench/RESULTS.md, which a new run keeps."""

from __future__ import annotations

from typing import Any

from bench import run


def preview(s: float, cpu_s: float, peak_mib: float = 1000, stopped: bool = False) -> dict[str, Any]:
    return {"s": s, "cpu_s": cpu_s, "peak_kib": peak_mib * 1024, "stopped": stopped, "others_cores": 0.1}


def test_a_change_is_kept_when_switching_it_off_costs_five_percent_more_cpu_at_one_size() -> None:
    sdk = {
        "rounds": 3,
        "cap_s": 300.0,
        "variants": [run.EVERY_CHANGE, "needed_at_scale", "marginal", "quadratic"],
        "runs": {
            "256": {
                run.EVERY_CHANGE: [preview(10, 10), preview(11, 10), preview(12, 10)],
                "needed_at_scale": [preview(11, 10.2)] * 3,  # +0% wall, +2% CPU here
                "marginal": [preview(12.4, 10.3)] * 3,  # +13% wall, +3% CPU: wall time alone keeps nothing
                "quadratic": [preview(300, 290, stopped=True)],
            },
            "1024": {
                run.EVERY_CHANGE: [preview(50, 60, 2000)] * 3,
                "needed_at_scale": [preview(51, 63.5, 2100)] * 3,  # +6% CPU at 1,024 hosts: kept
                "marginal": [preview(51, 61)] * 3,  # +2% wall, +2% CPU: not kept
                "quadratic": [preview(300, 290, stopped=True)],
            },
        },
    }
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in run.sdk_table(sdk) if line.startswith("| ")}
    assert rows[run.EVERY_CHANGE].startswith(
        "| every change made | 11.0 s, 10.0 s, 1000 MiB | 50.0 s, 60.0 s, 2000 MiB"
    )
    assert rows["needed_at_scale"].endswith("| kept |")
    assert "63.5 s (+6%), 2100 MiB (+5%)" in rows["needed_at_scale"]
    assert rows["marginal"].endswith("| saves < 5%: not kept |")
    # Stopped at the cap: its figures are lower bounds.
    assert "> 300.0 s (> +2627%)" in rows["quadratic"] and rows["quadratic"].endswith("| kept |")


def test_the_history_of_results_md_outlives_a_new_run() -> None:
    previous = "# Benchmarks\n\nold table\n\n## History\n\n### issue 45\n\nkept: three changes\n"
    assert run.with_history("# Benchmarks\n\nnew table\n", previous) == (
        "# Benchmarks\n\nnew table\n\n## History\n\n### issue 45\n\nkept: three changes\n"
    )
    assert run.with_history("# Benchmarks\n\nnew table\n", "# Benchmarks\n\nold\n") == "# Benchmarks\n\nnew table\n"
