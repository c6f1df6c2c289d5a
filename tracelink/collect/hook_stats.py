"""Seed-style statistics of hook records, per export and thread.

Follows IREE's hal_executable_library_call hook: for each thread, the matching calls and the
calls per CPU, then for each series (the workgroup duration and each counter) its mean and
its N-ile means, the pairwise correlations, and for each pair the conditional probability
table of one series' N-ile given the other's, drawn with gamma-corrected block characters.
Unlike the seed, durations are labelled in the unit they are shown in (µs), and time
counters (task-clock, cpu-clock) are shown in µs too.

Shape, from the environment (seed names):
- ``IREE_HOOK_BUCKET_COUNT``: number of N-iles (default 16, 2 to 36).
- ``IREE_HOOK_NO_PROBABILITY_TABLE``: if set, no probability tables.
- ``IREE_HOOK_GAMMA``: gamma of the block rendering (default 0.5; > 0).

N-iles are taken by rank, so tied values (a counter that is mostly 0) are split across
adjacent N-iles in call order; no table is drawn for a constant series.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelink.errors import TracelinkError

MAX_BUCKETS = 36
BUCKET_LABELS = "0123456789abcdefghijklmnopqrstuvwxyz"
BLOCKS = "_▁▂▃▄▅▆▇█"  # index 0: non-zero but below the first eighth
TIME_COUNTERS = frozenset({"task-clock", "cpu-clock"})  # counted in ns


@dataclass(frozen=True)
class StatsOptions:
    """How the statistics are shaped (IREE_HOOK_BUCKET_COUNT, ..._NO_PROBABILITY_TABLE, ..._GAMMA)."""

    bucket_count: int = 16
    probability_table: bool = True
    gamma: float = 0.5

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StatsOptions:
        """Read and validate the options from the environment."""
        try:
            buckets = int(env.get("IREE_HOOK_BUCKET_COUNT", "16"))
            gamma = float(env.get("IREE_HOOK_GAMMA", "0.5"))
        except ValueError as error:
            raise TracelinkError(f"IREE_HOOK_BUCKET_COUNT / IREE_HOOK_GAMMA: {error}") from error
        if not 2 <= buckets <= MAX_BUCKETS:
            raise TracelinkError(f"IREE_HOOK_BUCKET_COUNT must be between 2 and {MAX_BUCKETS}, not {buckets}")
        if not gamma > 0:
            raise TracelinkError(f"IREE_HOOK_GAMMA must be positive, not {gamma}")
        return cls(buckets, "IREE_HOOK_NO_PROBABILITY_TABLE" not in env, gamma)


@dataclass(frozen=True)
class Series:
    """One measured quantity over the calls, in display units."""

    label: str  # e.g. "duration (µs)"
    short: str  # e.g. "duration", for table captions
    values: np.ndarray  # float64, NaN where unknown


def series_of(calls: pd.DataFrame, event_names: Sequence[str]) -> list[Series]:
    """The duration and each counter of these calls, in display units."""
    series = [Series("duration (µs)", "duration", calls["duration_ns"].to_numpy(dtype=float) / 1e3)]
    for event in event_names:
        values = calls[event].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
        if event in TIME_COUNTERS:
            series.append(Series(f"{event} (µs)", event, values / 1e3))
        else:
            series.append(Series(f"{event} (count)", event, values))
    return series


def nile_means(values: np.ndarray, bucket_count: int) -> list[float]:
    """Means of the sorted values split into ``bucket_count`` near-equal parts (NaN if empty)."""
    ordered = np.sort(values[~np.isnan(values)])
    return [float(part.mean()) if len(part) else float("nan") for part in np.array_split(ordered, bucket_count)]


def rank_buckets(values: np.ndarray, bucket_count: int) -> np.ndarray:
    """The N-ile of each value, by rank (stable, so ties keep call order)."""
    order = np.argsort(values, kind="stable")
    buckets = np.empty(len(values), dtype=np.int64)
    buckets[order] = np.arange(len(values)) * bucket_count // max(len(values), 1)
    return buckets


def conditional_probabilities(rows: np.ndarray, columns: np.ndarray, bucket_count: int) -> np.ndarray:
    """P(row N-ile = i | column N-ile = j) as a bucket_count x bucket_count matrix."""
    counts = np.zeros((bucket_count, bucket_count))
    np.add.at(counts, (rows, columns), 1)
    totals = counts.sum(axis=0, keepdims=True)
    return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)


def render_cell(probability: float, gamma: float) -> str:
    """Two characters: the gamma-corrected probability in 16 half-block steps, blank for 0."""
    if probability <= 0:
        return "  "
    level = round(probability**gamma * 16)
    return BLOCKS[(level + 1) // 2] + BLOCKS[level // 2]


def _number(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.3g}"


def _is_constant(values: np.ndarray) -> bool:
    """True when the known values are all equal (N-iles by rank would be arbitrary)."""
    known = values[~np.isnan(values)]
    return len(known) == 0 or bool(np.all(known == known[0]))


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation over the calls where both are known (NaN when undefined)."""
    known = ~(np.isnan(a) | np.isnan(b))
    if known.sum() < 2 or np.std(a[known]) == 0 or np.std(b[known]) == 0:
        return float("nan")
    return float(np.corrcoef(a[known], b[known])[0, 1])


def format_table(rows: Series, columns: Series, options: StatsOptions) -> list[str]:
    """The conditional probability table of ``rows`` N-iles given ``columns`` N-iles."""
    known = ~(np.isnan(rows.values) | np.isnan(columns.values))
    count = options.bucket_count
    matrix = conditional_probabilities(
        rank_buckets(rows.values[known], count), rank_buckets(columns.values[known], count), count
    )
    lines = [
        f"conditional probability of {rows.short} {count}-ile (↓) given {columns.short} {count}-ile (→):",
        "    " + " ".join(f"{BUCKET_LABELS[j]:<2}" for j in range(count)),
    ]
    for i in range(count):
        cells = " ".join(render_cell(p, options.gamma) for p in matrix[i])
        lines.append(f"  {BUCKET_LABELS[i]} {cells}")
    return lines


def format_thread_statistics(
    title: str, calls: pd.DataFrame, event_names: Sequence[str], options: StatsOptions
) -> list[str]:
    """The seed's block for one thread (or any set of calls)."""
    lines = [f"Statistics for {title}: {len(calls)} matching calls, of which:"]
    for cpu, calls_on_cpu in calls.groupby("cpu").size().sort_index().items():
        lines.append(f"  {calls_on_cpu} calls on cpu {cpu}")
    series = series_of(calls, event_names)
    for one in series:
        known = one.values[~np.isnan(one.values)]
        mean = float(known.mean()) if len(known) else float("nan")
        means = " ".join(_number(v) for v in nile_means(one.values, options.bucket_count))
        lines.append(f"{one.label}: mean: {_number(mean)}  {options.bucket_count}-ile means: {means}")
    for a, b in itertools.combinations(series, 2):
        lines.append(f"correlation of {a.label} vs. {b.label}: {_number(_correlation(a.values, b.values))}")
    if options.probability_table:
        for a, b in itertools.combinations(series, 2):
            constant = [one.short for one in (a, b) if _is_constant(one.values)]
            if constant:
                lines.append(f"no probability table of {a.short} given {b.short}: {constant[0]} is constant")
            else:
                lines.extend(format_table(a, b, options))
    return lines


def format_statistics(workgroups: pd.DataFrame, event_names: Sequence[str], options: StatsOptions) -> str:
    """Statistics for every export, per thread, as printed by ``tracelink hook``."""
    lines: list[str] = []
    for export, calls in workgroups.groupby("export", sort=True):
        lines.append(f"=== {export}")
        for (pid, tid, thread), thread_calls in calls.groupby(["pid", "tid", "thread"], sort=True, dropna=False):
            title = f"thread {thread} (tid {tid}, pid {pid})"
            lines.extend(format_thread_statistics(title, thread_calls, event_names, options))
        lines.append("")
    return "\n".join(lines)


def format_summary(events: pd.DataFrame) -> str:
    """One line per export: dispatches, workgroups per dispatch, dispatch and tile times in µs."""
    header = f"{'export':<60} {'dispatches':>10} {'workgroups':>10} {'mean µs':>10} {'total µs':>11} {'tile-sum µs':>12}"
    lines = [header]
    for export, group in events.groupby("export", sort=True):
        workgroups = "/".join(str(v) for v in sorted(group["workgroup_count"].dropna().unique()))
        lines.append(
            f"{export:<60} {len(group):>10} {workgroups:>10} "
            f"{group['duration_ns'].mean() / 1e3:>10.1f} {group['duration_ns'].sum() / 1e3:>11.1f} "
            f"{group['tile_duration_sum_ns'].sum() / 1e3:>12.1f}"
        )
    return "\n".join(lines)
