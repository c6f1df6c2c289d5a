"""The one speedup statistic (tracelink/aggregate/speedup.py): Student's t quantiles and paired speedups."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracelink.aggregate.speedup import NOT_SIGNIFICANT, paired_speedup, speedup_of, summarize, t_quantile

# Student's t 0.975 quantiles for 1..30 degrees of freedom (standard table values).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def test_t_quantiles_match_the_table():
    for degrees, value in enumerate(T_975, start=1):
        assert t_quantile(0.95, degrees) == pytest.approx(value, abs=1e-3)
    assert t_quantile(0.95, 120) == pytest.approx(1.980, abs=1e-3)
    assert t_quantile(0.95, 10_000) == pytest.approx(1.960, abs=1e-3)
    assert t_quantile(0.99, 10) == pytest.approx(3.169, abs=1e-3)  # other levels: [select] confidence
    assert t_quantile(0.90, 5) == pytest.approx(2.015, abs=1e-3)


def test_paired_speedup_is_the_geometric_mean_of_round_ratios():
    base, other = [200.0, 400.0, 300.0], [100.0, 100.0, 300.0]
    speedup, low, high = speedup_of(base, other)
    assert speedup == pytest.approx((2 * 4 * 1) ** (1 / 3))
    logs = np.log([2.0, 4.0, 1.0])
    half = 4.303 * logs.std(ddof=1) / math.sqrt(3)
    assert (low, high) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)), rel=1e-3)


def test_a_slower_round_and_a_faster_one_cancel():
    # on the log scale 2x slower and 2x faster weigh the same; a mean of ratios would read 1.25x
    assert speedup_of([100.0, 200.0], [200.0, 100.0])[0] == pytest.approx(1.0)


def test_one_round_has_no_interval_and_missing_columns_are_nan():
    speedup, low, high = paired_speedup(np.array([[100.0, 50.0]]), np.array([[50.0, np.nan]]))
    assert speedup[0] == pytest.approx(2.0) and math.isnan(speedup[1])
    assert math.isnan(low[0]) and math.isnan(high[0])


def test_summary_of_equal_builds_is_not_significant():
    check = summarize([100.0, 103.0, 99.0, 101.0], [101.0, 100.0, 102.0, 99.0])
    assert check["verdict"] == NOT_SIGNIFICANT and check["ci_low"] < 1 < check["ci_high"] and check["rounds"] == 4
