"""The benchmarks' percentile helper (tests.bench.common.pct): a fraction, never a percent."""

from __future__ import annotations

import pytest

from tests.bench.common import pct

HUNDRED = [float(v) for v in range(100, 0, -1)]  # 1..100, unsorted


def test_pct_takes_a_fraction_and_returns_the_value_at_that_rank() -> None:
    assert pct(HUNDRED, 0.0) == 1
    assert pct(HUNDRED, 0.5) == 51  # rank int(0.5 * 100) of the sorted values
    assert pct(HUNDRED, 0.99) == 100
    assert pct(HUNDRED, 1.0) == 100
    assert pct([3.0, 1.0, 2.0], 0.5) == 2


def test_p50_of_a_few_samples_is_not_their_maximum() -> None:
    # The archive bench's 10 query times: p50 must be a middle one (it once read max).
    times = [0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]
    assert pct(times, 0.5) == 0.6
    assert pct(times, 0.99) == 1.0


@pytest.mark.parametrize("q", [50, 99, -0.1, 1.01])
def test_a_percent_or_a_fraction_out_of_range_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        pct(HUNDRED, q)
