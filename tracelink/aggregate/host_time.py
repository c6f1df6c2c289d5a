"""Wall time per call of the function beside its dispatch time: how much of a call the dispatches are.

A call's wall time is the period between the first dispatches of consecutive calls (the benchmark
loop calls the function back to back, so the period holds everything one call costs: entering it,
allocating, recording and submitting its work, the dispatches, waiting for them, returning). The
mean over the timed calls is ``wall_ns_per_call``; the warm-up call is not among them. The mean, not
the median, as ``iree-benchmark-module`` reports it: the periods are bimodal on local-task (some
calls wait for the benchmark thread to be woken after the workers finish), and what a loop of calls
costs is their mean (docs/reference/numbers.md). The split below is averaged over the same calls, so it adds up to the wall
time. Inside a call, the dispatches' *busy* time is the union of their intervals (on ``local-task`` independent
dispatches may overlap, so their summed durations can exceed it); the rest splits into the gaps
*between* the first dispatch's start and the last one's end (the runtime's scheduling, barriers and
worker wake-ups between dispatches) and the time *outside* that span (the host code before the
first dispatch and after the last one). ``benchmark_ns_per_call`` is the benchmark tool's own mean
per call (warm-up included, profiler on), kept to check the period against.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Above this share of a call's wall time outside the dispatches, the summary says host time dominates.
HOST_DOMINATES_SHARE = 0.5


def call_spans(events: pd.DataFrame) -> pd.DataFrame:
    """Per timed call (``iteration``): its first dispatch's start, last dispatch's end and busy time (ns).

    >>> events = pd.DataFrame({"iteration": [0, 0, 1], "start_ns": [0, 5, 100], "duration_ns": [10, 10, 10]})
    >>> call_spans(events)[["first_start_ns", "last_end_ns", "busy_ns"]].values.tolist()
    [[0, 15, 15], [100, 110, 10]]
    """
    timed = events.dropna(subset=["iteration", "start_ns"]).sort_values(["iteration", "start_ns"], kind="stable")
    rows = []
    for iteration, group in timed.groupby("iteration", sort=True):
        starts = group["start_ns"].to_numpy(dtype=np.int64)
        ends = starts + group["duration_ns"].to_numpy(dtype=np.int64)
        busy, reach = 0, None
        for start, end in zip(starts, ends):  # union of intervals, sorted by start
            if reach is None or start > reach:
                busy += end - start
                reach = end
            elif end > reach:
                busy += end - reach
                reach = end
        rows.append({"iteration": int(iteration), "first_start_ns": int(starts[0]), "last_end_ns": int(ends.max()), "busy_ns": int(busy)})
    return pd.DataFrame(rows, columns=["iteration", "first_start_ns", "last_end_ns", "busy_ns"])


def host_time(events: pd.DataFrame, benchmark_ns_per_call: float | None = None) -> dict | None:
    """``wall_ns_per_call`` and its split (module docstring); None with fewer than two timed calls."""
    spans = call_spans(events)
    if len(spans) < 2:
        return None
    starts = spans["first_start_ns"].to_numpy(dtype=float)
    wall = float((starts[-1] - starts[0]) / (len(starts) - 1))  # the mean period
    timed = spans.iloc[:-1]  # the calls whose period is measured
    busy = float(timed["busy_ns"].mean())
    span = float((timed["last_end_ns"] - timed["first_start_ns"]).mean())
    return {
        "wall_ns_per_call": wall,
        "dispatch_busy_ns_per_call": busy,
        "between_dispatches_ns_per_call": max(span - busy, 0.0),
        "outside_dispatches_ns_per_call": max(wall - span, 0.0),
        "host_share": max(wall - busy, 0.0) / wall if wall > 0 else 0.0,
        "benchmark_ns_per_call": benchmark_ns_per_call,
        "calls": len(spans),
    }
