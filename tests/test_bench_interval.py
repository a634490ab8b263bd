"""bench/run.py's interval for a median of interleaved pairs: the order statistics a binomial count allows."""

from __future__ import annotations

import math
import random

import pytest

from bench import run


def test_twenty_one_pairs_are_bounded_by_the_sixth_value_from_each_end() -> None:
    # P(Binomial(21, 1/2) <= 5) = 0.0133 per tail: 97.3% sure; the 7th would leave 2 x 0.039 outside.
    values = [float(v) for v in range(1, 22)]
    random.Random(7).shuffle(values)
    assert run.median_interval(values) == (6.0, 16.0)


@pytest.mark.parametrize("n", [6, 11, 21, 25, 41])
def test_the_interval_is_at_least_as_sure_as_asked_and_one_rank_narrower_would_not_be(n: int) -> None:
    low, high = run.median_interval([float(v) for v in range(1, n + 1)])
    k = int(low)
    assert high == n + 1 - k

    def outside(rank: int) -> float:  # both tails: fewer than `rank` of n values below the median
        return 2 * sum(math.comb(n, i) for i in range(rank)) / float(2**n)

    assert outside(k) <= 0.05 < outside(k + 1)


def test_too_few_pairs_to_bound_a_median_are_refused() -> None:
    with pytest.raises(ValueError, match="5 values cannot bound a median"):
        run.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])


def noop_result(extra: float, interval: tuple[float, float]) -> dict[str, object]:
    return {
        "median": {"up": 1.6 + extra, "floor_up": 1.6},
        "ratio_up": (1.6 + extra) / 1.6,
        "pair_ratio_up": (1.6 + extra) / 1.6,
        "pair_extra_up": extra,
        "pair_extra_up_interval": list(interval),
    }


@pytest.mark.parametrize(
    ("extra", "interval", "verdict"),
    [
        (0.95, (0.8, 1.1), "| yes (at the edge: the interval reaches past +1 s) |"),
        (0.7, (0.6, 0.8), "| yes |"),
        (1.0, (0.9, 1.0), "| yes |"),
        (1.2, (1.05, 1.3), "| no |"),
    ],
)
def test_a_median_under_the_target_whose_interval_reaches_past_it_is_said_to_be_at_the_edge(
    extra: float, interval: tuple[float, float], verdict: str
) -> None:
    assert run.noop_row(noop_result(extra, interval), "up", 21).endswith(verdict)


def test_a_noop_from_before_the_pairs_differences_is_judged_on_the_medians() -> None:
    kept = {"median": {"up": 2.1, "floor_up": 1.6}, "ratio_up": 2.1 / 1.6}
    row = run.noop_row(kept, "up", 21)
    assert "+0.50 s (difference of the medians)" in row and row.endswith("| yes |")
