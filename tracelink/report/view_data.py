"""The data the report's optional views show, apart from the views: per-workgroup data (hook collector),
runtime zones (Tracy) and tuning gains (diff.csv). :mod:`tracelink.report.model` holds them and the
views (:mod:`~tracelink.report.workgroups`, :mod:`~tracelink.report.zones`, :mod:`~tracelink.report.gains`)
fill and draw them, so the model imports no view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


def interval_text(speedup: float | None, low: float | None, high: float | None) -> str:
    """``1.23× (1.10–1.40)``; ``–`` without a speedup, no interval without bounds."""
    if speedup is None:
        return "–"
    return f"{speedup:.2f}×" + (f" ({low:.2f}–{high:.2f})" if low is not None and high is not None else "")


@dataclass
class CounterStats:
    name: str
    mean: float | None  # per workgroup run, over runs where the counter was read
    correlation: float | None  # Pearson r of duration with the counter; None when either is constant
    samples: int  # runs with a value


@dataclass
class HeatGrid:
    """Mean duration per workgroup id, laid out in rows × columns (``values`` NaN where nothing ran)."""

    grid: tuple[int, int, int]  # workgroup_count x, y, z
    layout: str  # "grid": x across, y·z down; "linear": linear ids wrapped every ``columns``
    block: int  # workgroup ids per cell (1 unless the grid is bigger than MAX_CELLS)
    columns: int
    values: np.ndarray  # mean ns per cell, in cell order
    runs: np.ndarray  # workgroup runs behind each cell
    labels: list[str]  # what each cell is, e.g. "(3, 0, 0)" or "ids 128–255"

    @property
    def rows(self) -> int:
        return math.ceil(len(self.values) / self.columns) if self.columns else 0


@dataclass
class WorkgroupSite:
    call_site: int
    durations: np.ndarray  # ns of every workgroup run
    iterations: int
    heat: HeatGrid
    counters: list[CounterStats]
    threads: list[dict] = field(default_factory=list)  # thread, runs, busy_ns, mean_ns (per iteration)

    @property
    def imbalance(self) -> float | None:
        """Slowest workgroup id's mean ÷ mean over ids: 1 is perfectly balanced."""
        values = self.heat.values[~np.isnan(self.heat.values)]
        return float(values.max() / values.mean()) if len(values) and values.mean() > 0 else None


@dataclass
class WorkgroupData:
    counters: list[str]
    sites: dict[int, WorkgroupSite]
    iterations: int
    site_totals: pd.DataFrame  # call_site -> counter totals over all measured workgroup runs
    op_site: pd.DataFrame  # call_site, op, role, fraction, one column per counter (the site's total × fraction)
    by_op: pd.DataFrame  # op -> counter totals, call sites (list)


@dataclass
class ZoneData:
    windows: str  # how the iterations were found
    iterations: pd.DataFrame  # iteration, start_ns, wall_ns, dispatch_ns, dispatch_cpu_ns, runtime_ns, wait_ns, outside_share
    top: pd.DataFrame  # per source-location name: function, file, line, threads, count, total_ns, self_ns, mean_ns, wait
    dispatch_zones: int  # dispatch zones in the measured iterations
    runtime_zones: int
    timeline: pd.DataFrame  # zones of the median iteration: thread, lane, start (ns from its start), duration, name, kind
    timeline_left_out: int
    median_iteration: int


@dataclass
class Gain:
    """The measured gain of a line (or op): speedup = base ÷ tuned, with its 95 % CI when known."""

    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    base_ns: float
    tuned_ns: float
    labels: list[str] = field(default_factory=list)  # the diff rows (source ops) behind it
    tuned: list[TunedDispatch] = field(default_factory=list)  # tune's result for the dispatches computing the line

    @property
    def verdict(self) -> str:
        """``faster`` / ``slower`` when the CI excludes 1, ``unclear`` otherwise (or without a CI)."""
        if self.ci_low is not None and self.ci_low > 1:
            return "faster"
        if self.ci_high is not None and self.ci_high < 1:
            return "slower"
        return "unclear"

    def text(self) -> str:
        return interval_text(self.speedup, self.ci_low, self.ci_high)


@dataclass
class TunedDispatch:
    """tune's result for one dispatch of the base profile (a row of its tune/summary.csv)."""

    export: str
    speedup: float | None  # alone: the tuned config against the default config
    ci_low: float | None
    ci_high: float | None
    program_speedup: float | None  # inside the program: the dispatch's time with the config against the profiled build
    program_ci_low: float | None
    program_ci_high: float | None
    selected: bool  # the config is in the tuning tune handed over
    owner: str = ""  # the dispatch whose tuned config this one shares ("": tuned itself)
    lines: list[str] = field(default_factory=list)  # this profile's line keys its call sites compute

    def text(self) -> str:
        return (f"{interval_text(self.speedup, self.ci_low, self.ci_high)} alone, "
                f"{interval_text(self.program_speedup, self.program_ci_low, self.program_ci_high)} in the program")


@dataclass
class Gains:
    rows: pd.DataFrame  # diff.csv, plus "op": this profile's op node for the row ("" when none)
    lines: dict[str, Gain]  # report line key -> gain
    problem: str = ""  # why diff.csv could not be used
    end_to_end: Gain | None = None  # all dispatches together, from diff.json beside diff.csv
    tuned: list[TunedDispatch] = field(default_factory=list)  # tune's result per dispatch, from the base's tune/
    tune_source: str = ""  # the summary.csv read ("" when none)
    tune_problem: str = ""  # why it could not be used
