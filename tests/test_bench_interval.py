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
