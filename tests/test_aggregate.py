"""Statistics of the aggregate stage against numpy, on random groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelink.aggregate import grouped_stats, median_interval_ranks
from tracelink.aggregate.components import NO_SCOPE, component_of


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 10**7)), min_size=1, max_size=60))
def test_grouped_stats_match_numpy(rows):
    frame = pd.DataFrame(rows, columns=["key", "ns"])
    grand_total = float(frame["ns"].sum()) or 1.0
    table = grouped_stats(frame, ["key"], "ns", grand_total).set_index("key")
    assert list(table.index) == list(dict.fromkeys(frame["key"]))  # first-seen order
    for key, group in frame.groupby("key"):
        values = group["ns"].to_numpy(dtype=float)
        row = table.loc[key]
        assert row["count"] == len(values)
        assert row["total_ns"] == pytest.approx(values.sum())
        assert row["median_ns"] == pytest.approx(np.median(values))
        assert row["p10_ns"] == pytest.approx(np.percentile(values, 10))
        assert row["p90_ns"] == pytest.approx(np.percentile(values, 90))
        # the interval of the median lies between measured values: never below the smallest (never negative)
        assert values.min() <= row["ci95_low_ns"] <= row["median_ns"] <= row["ci95_high_ns"] <= values.max()
        assert row["share"] == pytest.approx(values.sum() / grand_total)
        assert row["noisy"] == (values.mean() > 1.25 * np.median(values))


def test_median_interval_covers_the_median_95_percent_of_the_time():
    """Coverage checked by simulation on a skewed distribution (where the mean's t-interval goes negative)."""
    rng = np.random.default_rng(0)
    for n in (6, 10, 30, 200):
        low, high = median_interval_ranks(np.array([n]))
        samples = np.sort(rng.lognormal(0.0, 1.5, size=(4000, n)), axis=1)
        covered = (samples[:, low[0]] <= 1.0) & (1.0 <= samples[:, high[0]])  # the true median of lognormal(0, s) is 1
        assert covered.mean() >= 0.93, (n, covered.mean())


def test_one_outlier_makes_a_group_noisy_and_keeps_its_interval_positive():
    frame = pd.DataFrame({"key": ["a"] * 5, "ns": [100, 101, 99, 100, 2000]})
    row = grouped_stats(frame, ["key"], "ns", 1.0).iloc[0]
    assert row["noisy"] and row["ci95_low_ns"] >= 99 and row["median_ns"] == 100


def test_component_of_is_the_name_scope():
    assert component_of("Dense_0/dot_general") == "Dense_0"  # JAX
    assert component_of("onnx.Conv:conv1/7x7_s2") == "conv1"  # ONNX, as tracelink's import names it
    assert component_of("encoder/layers.3/attention/matmul") == "encoder/layers.3/attention"  # torch module path
    assert component_of("onnx.Relu:n7") == component_of("fc1") == component_of(None) == component_of("") == NO_SCOPE

