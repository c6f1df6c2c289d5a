"""Comparisons with honest variance: two builds run alternately for several rounds.

Iterations inside one run share that run's machine load, so their spread says nothing about how much
a second run of the same program would differ; a comparison of one run of each build against that
spread reports confident false speedups on a shared machine. Here each build runs once per round, in
ABBA order (so a drift of the load hits both equally), and each round contributes one number per
build: the median over its iterations. The speedup is the geometric mean of the per-round ratios and
its 95 % interval is Student's t on their logarithms, with rounds - 1 degrees of freedom. A bootstrap
of 3-5 rounds cannot do this: its percentile interval is the min..max of the ratios, which excludes 1
whenever all rounds happen to fall on one side (25 % of A/A comparisons with 3 rounds).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from tracelink.errors import TracelinkError
from tracelink.iree_tools import benchmark_command, benchmark_times_ns
from tracelink.tools import run_checked
from tracelink.collect.machine import machine_cores

T = TypeVar("T")

# Student's t 0.975 quantiles for 1..30 degrees of freedom (standard table values).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_975(degrees_of_freedom: int) -> float:
    """Student's t 0.975 quantile: the table up to 30, then the Cornish-Fisher expansion (error < 1e-3).

    Rounds are few (3–10): a t interval on their log ratios, where a bootstrap would only give
    min..max. A table instead of scipy.stats keeps scipy's ~1 s import out of every tracelink command.
    """
    if degrees_of_freedom <= len(T_975):
        return T_975[degrees_of_freedom - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * degrees_of_freedom) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * degrees_of_freedom**2)


NOT_SIGNIFICANT = "no significant difference"
BUSY_SPREAD = 0.10  # per-round medians of one build varying more than this: the machine was busy


def alternate(runs: Sequence[Callable[[int], T]], rounds: int) -> list[list[T]]:
    """Call every run once per round, reversing the order every other round (ABBA); results per run."""
    results: list[list[T]] = [[] for _ in runs]
    for number in range(rounds):
        order = range(len(runs)) if number % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            results[i].append(runs[i](number))
    return results


def paired_speedup(base: np.ndarray, tuned: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Speedup base/tuned per column of round-paired medians (rounds x columns), with its 95 % interval.

    NaN where a column has no time in one build; NaN bounds with fewer than two rounds."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(base) - np.log(tuned)
    logs[~np.isfinite(logs)] = np.nan
    rounds = logs.shape[0]
    mean = np.mean(logs, axis=0)
    if rounds < 2:
        nan = np.full_like(mean, np.nan)
        return np.exp(mean), nan, nan
    half = t_quantile_975(rounds - 1) * np.std(logs, axis=0, ddof=1) / math.sqrt(rounds)
    return np.exp(mean), np.exp(mean - half), np.exp(mean + half)


def verdict(speedup: float, low: float, high: float) -> str:
    """One phrase: faster or slower when the interval excludes 1, else no significant difference."""
    if math.isnan(low) or math.isnan(high):
        return "not tested (one run of each build: significance needs --rounds 2 or more)"
    if low > 1:
        return f"faster ({speedup:.2f}x)"
    if high < 1:
        return f"slower ({speedup:.2f}x)"
    return NOT_SIGNIFICANT


def round_spread(medians: Sequence[float]) -> float:
    """(max - min) / median of one build's per-round medians."""
    values = np.asarray(medians, dtype=np.float64)
    return float((values.max() - values.min()) / np.median(values)) if values.size > 1 else 0.0


def load_warning(base: Sequence[float], tuned: Sequence[float]) -> str | None:
    """A warning when the rounds of either build varied as on a busy machine, else None."""
    spread = max(round_spread(base), round_spread(tuned))
    if spread <= BUSY_SPREAD:
        return None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"the machine was busy: one build's per-round medians varied by {spread:.0%} between rounds "
            f"(load average {load:.1f} on {machine_cores()} cores); the interval is wide, so rerun with more "
            "--rounds or on a quieter machine before trusting a small difference")


def summarize(base: Sequence[float], tuned: Sequence[float]) -> dict:
    """Speedup, interval, verdict and load warning of one pair of per-round series (end to end)."""
    speedup, low, high = (float(x[0]) for x in paired_speedup(np.asarray(base)[:, None], np.asarray(tuned)[:, None]))
    return {"base_ns": float(np.median(base)), "tuned_ns": float(np.median(tuned)), "speedup": speedup,
            "ci_low": low, "ci_high": high, "verdict": verdict(speedup, low, high), "rounds": len(base),
            "load_warning": load_warning(base, tuned) if len(base) > 1 else None}


def time_program(vmfb: Path, function: str, inputs: Sequence[str], parameters: Sequence[str], repetitions: int,
                 timeout: float) -> float:
    """Median wall time (ns) of one call of the whole program over ``repetitions`` calls on local-task."""
    command = benchmark_command(vmfb, function, inputs, parameters, 1) + [f"--benchmark_repetitions={repetitions}", "--benchmark_format=json"]
    done = run_checked(command, timeout, vmfb, "timing the program")
    times = benchmark_times_ns(done.stdout)
    if not times:
        raise TracelinkError(f"{vmfb}: timing the program: iree-benchmark-module reported no repetitions")
    return float(np.median(times))
