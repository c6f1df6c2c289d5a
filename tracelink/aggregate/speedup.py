"""The one speedup statistic of tracelink: every speedup it prints (``diff`` and the report's gains per
line, the strategy races, the tile candidates' confirmation, the in-program and whole-program checks)
is computed here, below tune and report, which both use it.

Two builds run alternately for a few rounds; each round gives one time per build (a median over that
round's iterations), so the rounds are **paired**: a round on a busier machine slows both. The speedup
is the geometric mean of the per-round ratios base / other, and its interval is Student's t on their
logarithms with rounds - 1 degrees of freedom (docs/reference/numbers.md, "Speedups", says why: the
log makes a 2x slower round weigh as much as a 2x faster one, and the t interval keeps its coverage at
the 3-16 rounds tune and diff use, where the distribution-free interval of a median ratio is the
min..max of the ratios and excludes 1 in 25 % of A/A comparisons with 3 rounds).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from tracelink.collect.machine import machine_cores

NOT_SIGNIFICANT = "no significant difference"
BUSY_SPREAD = 0.10  # per-round medians of one build varying more than this: the machine was busy


def t_probability(t: float, degrees_of_freedom: int) -> float:
    """P(|T| < t) of Student's t with an integer number of degrees of freedom, exactly (the finite
    series in cos θ, θ = atan(t / √ν); Abramowitz & Stegun 26.7.3-4). A closed form instead of
    scipy.stats keeps scipy's import out of every tracelink command."""
    theta = math.atan(t / math.sqrt(degrees_of_freedom))
    c2 = math.cos(theta) ** 2
    if degrees_of_freedom % 2:
        term, total = 1.0, 1.0 if degrees_of_freedom > 1 else 0.0
        for k in range(3, degrees_of_freedom - 1, 2):  # 1 + 2/3 c² + (2·4)/(3·5) c⁴ + ...
            term *= c2 * (k - 1) / k
            total += term
        return (2 / math.pi) * (theta + math.sin(theta) * math.cos(theta) * total)
    term, total = 1.0, 1.0
    for k in range(2, degrees_of_freedom - 1, 2):  # 1 + 1/2 c² + (1·3)/(2·4) c⁴ + ...
        term *= c2 * (k - 1) / k
        total += term
    return math.sin(theta) * total


def t_quantile(level: float, degrees_of_freedom: int) -> float:
    """The t with P(|T| < t) = ``level`` (two-sided: 0.95 gives the 0.975 quantile), by bisection."""
    low, high = 0.0, 1.0
    while t_probability(high, degrees_of_freedom) < level:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if t_probability(middle, degrees_of_freedom) < level else (low, middle)
    return (low + high) / 2


def paired_speedup(base: np.ndarray, other: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Speedup base / other per column of round-paired times (rounds x columns), with its interval at
    ``level``: the geometric mean of the per-round ratios, Student's t on their logarithms.

    NaN where a column has no time in one build; NaN bounds with fewer than two rounds."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(np.asarray(base, dtype=np.float64)) - np.log(np.asarray(other, dtype=np.float64))
    logs[~np.isfinite(logs)] = np.nan
    rounds = logs.shape[0]
    mean = np.mean(logs, axis=0)
    if rounds < 2:
        nan = np.full_like(mean, np.nan)
        return np.exp(mean), nan, nan
    half = t_quantile(level, rounds - 1) * np.std(logs, axis=0, ddof=1) / math.sqrt(rounds)
    return np.exp(mean), np.exp(mean - half), np.exp(mean + half)


def speedup_of(base: Sequence[float], other: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """:func:`paired_speedup` of one pair of per-round series: (speedup, low, high)."""
    values = paired_speedup(np.asarray(base, dtype=np.float64)[:, None], np.asarray(other, dtype=np.float64)[:, None], level)
    speedup, low, high = (float(x[0]) for x in values)
    return speedup, low, high


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
    speedup, low, high = speedup_of(base, tuned)
    return {"base_ns": float(np.median(base)), "tuned_ns": float(np.median(tuned)), "speedup": speedup,
            "ci_low": low, "ci_high": high, "verdict": verdict(speedup, low, high), "rounds": len(base),
            "load_warning": load_warning(base, tuned) if len(base) > 1 else None}
