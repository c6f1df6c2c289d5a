"""Statistics of the aggregate stage against numpy, on random groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelink.aggregate import grouped_stats, t_quantile_975


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
        half = t_quantile_975(len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
        assert row["ci95_low_ns"] == pytest.approx(values.mean() - half, abs=1e-6)
        assert row["ci95_high_ns"] == pytest.approx(values.mean() + half, abs=1e-6)
        assert row["share"] == pytest.approx(values.sum() / grand_total)


def test_t_quantiles():
    assert t_quantile_975(1) == 12.706 and t_quantile_975(30) == 2.042
    assert t_quantile_975(120) == pytest.approx(1.980, abs=1e-3)
    assert t_quantile_975(10_000) == pytest.approx(1.960, abs=1e-3)
