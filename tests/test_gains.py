"""A source line's tuned gain in the report (tracelink/report/gains.py), from the per-round medians that
`tracelink diff` keeps in diff.csv: the one speedup statistic for a line of one op and of several,
checked against the statistic computed here from the per-round samples with scipy's t quantile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tracelink.report.gains import line_gain, read_diff
from tracelink.compare.diff import PairedRounds, diff_table, write_diff

# Two ops on net.py:3, one on line 5, one on line 2 that only the base build has.
KEYS = [("mm @ net.py:3:5", "net.py", 3), ("add @ net.py:3:20", "net.py", 3), ("relu @ net.py:5:5", "net.py", 5),
        ("scale @ net.py:2:5", "net.py", 2)]
# Rounds x ops (ns): the rounds of the matmul swing with the machine's load, the add got slower.
BASE = np.array([[1000.0, 100.0, 50.0, 30.0], [3000.0, 90.0, 55.0, 31.0], [1100.0, 120.0, 52.0, 29.0],
                 [900.0, 80.0, 51.0, 30.0], [2500.0, 110.0, 49.0, 32.0]])
TUNED = np.array([[400.0, 300.0, 50.0, np.nan], [2900.0, 280.0, 54.0, np.nan], [450.0, 310.0, 53.0, np.nan],
                  [380.0, 260.0, 50.0, np.nan], [2000.0, 290.0, 50.0, np.nan]])


def independent(base: np.ndarray, tuned: np.ndarray) -> tuple[float, float, float]:
    """Geometric mean of the paired per-round ratios, Student's t interval on their logarithms."""
    logs = np.log(base / tuned)
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return math.exp(logs.mean()), math.exp(logs.mean() - half), math.exp(logs.mean() + half)


@pytest.fixture
def diff(tmp_path):
    """diff.csv as `tracelink diff` writes it from these rounds, read back as the report reads it."""
    paired = PairedRounds(KEYS, BASE, TUNED, list(np.nansum(BASE, axis=1)), list(np.nansum(TUNED, axis=1)), 50, 50)
    frame = diff_table(paired)
    write_diff(frame, tmp_path / "diff.csv")
    read = read_diff(tmp_path)
    assert not isinstance(read, str), read
    return frame, read


def test_a_line_of_several_ops_gets_the_paired_statistic_of_its_per_round_sums(diff):
    _, read = diff
    rows = list(read[read["line"] == 3].itertuples(index=False))
    assert len(rows) == 2
    gain = line_gain(rows)
    base, tuned = BASE[:, 0] + BASE[:, 1], TUNED[:, 0] + TUNED[:, 1]
    speedup, low, high = independent(base, tuned)
    assert (gain.speedup, gain.ci_low, gain.ci_high) == pytest.approx((speedup, low, high), rel=1e-9)
    assert (gain.base_ns, gain.tuned_ns) == (np.median(base), np.median(tuned))
    # the ratio of the ops' summed medians, which this replaced, reads otherwise and has no interval
    summed = (np.median(BASE[:, 0]) + np.median(BASE[:, 1])) / (np.median(TUNED[:, 0]) + np.median(TUNED[:, 1]))
    assert abs(summed - speedup) > 0.05 * speedup


def test_a_line_of_one_op_is_that_ops_row(diff):
    frame, read = diff
    for row in read.itertuples(index=False):
        gain = line_gain([row])
        written = frame[frame["label"] == row.label].iloc[0]
        if row.label.startswith("scale"):  # only in the base build: no speedup
            assert gain.speedup is None and math.isnan(written["speedup"])
            continue
        assert (gain.speedup, gain.ci_low, gain.ci_high) == (written["speedup"], written["ci_low"], written["ci_high"])
        column = [key[0] for key in KEYS].index(row.label)
        assert (gain.speedup, gain.ci_low, gain.ci_high) == pytest.approx(independent(BASE[:, column], TUNED[:, column]), rel=1e-9)
        assert list(row.base_rounds) == list(BASE[:, column])  # the file keeps every round exactly


def test_one_round_is_the_ratio_of_the_line_without_an_interval(tmp_path):
    """`diff --rounds 0` (the recorded profiles, one round each): each cell holds one median."""
    paired = PairedRounds(KEYS, BASE[:1], TUNED[:1], [float(np.nansum(BASE[0]))], [float(np.nansum(TUNED[0]))], 10, 10)
    write_diff(diff_table(paired), tmp_path / "diff.csv")
    read = read_diff(tmp_path)
    gain = line_gain(list(read[read["line"] == 3].itertuples(index=False)))
    assert gain.speedup == pytest.approx((BASE[0, 0] + BASE[0, 1]) / (TUNED[0, 0] + TUNED[0, 1]), rel=1e-12)
    assert gain.ci_low is None and gain.ci_high is None


def test_damaged_per_round_medians_are_a_note(tmp_path, diff):
    header, first, *rest = (tmp_path / "diff.csv").read_text().splitlines()
    for damaged, note in ((first.replace(";", ";x", 1), "unreadable per-round medians"),
                          (first.rsplit(";", 1)[0], "different numbers of rounds (4, 5)")):  # the tuned build's last round cut
        (tmp_path / "diff.csv").write_text("\n".join([header, damaged, *rest]) + "\n")
        assert note in read_diff(tmp_path)
