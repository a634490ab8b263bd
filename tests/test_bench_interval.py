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


def noop_result(pairs: float, interval: tuple[float, float]) -> dict[str, object]:
    return {
        "median": {"up": 1.9, "floor_up": 1.6},
        "ratio_up": 1.9 / 1.6,
        "pair_ratio_up": pairs,
        "pair_ratio_up_interval": list(interval),
    }


def test_a_noop_row_reports_the_pairs_median_and_its_interval_and_judges_nothing() -> None:
    row = run.noop_row(noop_result(1.19, (1.14, 1.23)), "up", 21)
    assert "1.90 s vs 1.60 s = 1.19x; median of the pairs' ratios 1.19x (95% interval 1.14-1.23x)" in row
    assert row.endswith("| 21 each | - (reported; issue 23's 1.2x withdrawn) | - |")
