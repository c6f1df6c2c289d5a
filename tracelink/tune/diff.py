"""Compare two profiles of the same program (e.g. before and after tuning) line by line.

Source ops are matched by their source location (label, file, line), never by dispatch name: the
two builds may fuse and number their dispatches differently. Each op's time per iteration is the
sum over the call sites it feeds of (edge weight x that call site's duration in that iteration),
exactly how the profile attributes time. Speedups are ratios of median per-iteration times with a
bootstrap percentile confidence interval (iterations of each profile resampled independently).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink import TracelinkError
from tracelink.atomic import write_atomic, write_text_atomic
from tracelink.profile_dir import Profile, load_profile

COLUMNS = ["label", "file", "line", "base_ns", "tuned_ns", "speedup", "ci_low", "ci_high", "base_share", "tuned_share"]
END_TO_END = "(all dispatches)"


def per_iteration(profile: Profile) -> tuple[pd.DataFrame, np.ndarray]:
    """(ops: op id -> label/file/line, matrix iterations x ops of attributed ns); matrix empty without events."""
    ops = profile.source_ops.set_index("op")[["label", "file", "line"]]
    events = profile.events.dropna(subset=["iteration", "call_site"])
    if events.empty:
        return ops, np.empty((0, len(ops)))
    per_site = events.groupby(["iteration", "call_site"])["duration_ns"].sum().unstack(fill_value=0)
    weights = np.zeros((per_site.shape[1], len(ops)))
    site_column = {int(site): i for i, site in enumerate(per_site.columns)}
    op_column = {op: j for j, op in enumerate(ops.index)}
    for source, target, data in profile.graph.edges(data=True):
        if source in op_column and str(target).startswith("cs:"):
            site = int(str(target)[3:])
            if site in site_column:
                weights[site_column[site], op_column[source]] += float(data.get("weight", 1.0))
    return ops, per_site.to_numpy(dtype=np.float64) @ weights


def _keys(ops: pd.DataFrame) -> list[tuple]:
    return [(str(row.label), str(row.file), int(row.line) if pd.notna(row.line) else -1) for row in ops.itertuples()]


def _ratio_ci(base: np.ndarray, tuned: np.ndarray, rng: np.random.Generator, resamples: int, level: float) -> tuple:
    """Ratio of medians (columns) with bootstrap percentile bounds; NaN bounds without samples."""
    base_median, tuned_median = np.median(base, axis=0), np.median(tuned, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        speedup = base_median / tuned_median
        if len(base) < 2 or len(tuned) < 2:
            nan = np.full_like(speedup, np.nan)
            return speedup, nan, nan
        b = np.median(base[rng.integers(len(base), size=(resamples, len(base)))], axis=1)
        t = np.median(tuned[rng.integers(len(tuned), size=(resamples, len(tuned)))], axis=1)
        ratios = b / t
    alpha = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # columns of an op missing from one profile
        return speedup, np.nanquantile(ratios, alpha, axis=0), np.nanquantile(ratios, 1 - alpha, axis=0)


def diff_profiles(base_dir: Path, tuned_dir: Path, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per source op: base and tuned median ns per iteration, speedup and its confidence interval.

    Ops that take no time in either profile are left out; an op found in only one profile has NaN on
    the other side. ``result.attrs["end_to_end"]`` holds the same numbers for all dispatches together.
    """
    base, tuned = load_profile(Path(base_dir)), load_profile(Path(tuned_dir))
    base_ops, base_matrix = per_iteration(base)
    tuned_ops, tuned_matrix = per_iteration(tuned)
    if base_matrix.size == 0 or tuned_matrix.size == 0:
        empty = base_dir if base_matrix.size == 0 else tuned_dir
        raise TracelinkError(f"{empty}: the profile has no per-iteration dispatch events (events.parquet)")
    base_keys, tuned_keys = _keys(base_ops), _keys(tuned_ops)
    if not set(base_keys) & set(tuned_keys):  # variants of one program share locations; two programs none
        raise TracelinkError(
            f"{tuned_dir}: no source op in common with {base_dir}: profiles of two different programs "
            f"({Path(tuned.summary['program']).name}, {Path(base.summary['program']).name})"
        )
    keys = list(dict.fromkeys(base_keys + tuned_keys))
    column = {key: i for i, key in enumerate(keys)}

    def aligned(matrix: np.ndarray, op_keys: list[tuple]) -> np.ndarray:
        out = np.full((matrix.shape[0], len(keys)), np.nan)
        for j, key in enumerate(op_keys):
            out[:, column[key]] = np.where(np.isnan(out[:, column[key]]), 0, out[:, column[key]]) + matrix[:, j]
        return out

    b, t = aligned(base_matrix, base_keys), aligned(tuned_matrix, tuned_keys)
    rng = np.random.default_rng(seed)
    speedup, low, high = _ratio_ci(b, t, rng, resamples, level)
    base_total, tuned_total = b.sum(axis=1, where=~np.isnan(b)), t.sum(axis=1, where=~np.isnan(t))
    frame = pd.DataFrame(
        {
            "label": [k[0] for k in keys],
            "file": [k[1] for k in keys],
            "line": pd.array([k[2] if k[2] >= 0 else pd.NA for k in keys], dtype="Int64"),
            "base_ns": np.median(b, axis=0),
            "tuned_ns": np.median(t, axis=0),
            "speedup": speedup,
            "ci_low": low,
            "ci_high": high,
            "base_share": np.nansum(b, axis=0) / base_total.sum(),
            "tuned_share": np.nansum(t, axis=0) / tuned_total.sum(),
        }
    )
    busy = (frame["base_ns"].fillna(0) > 0) | (frame["tuned_ns"].fillna(0) > 0)
    frame = frame[busy].sort_values("base_ns", ascending=False, na_position="last").reset_index(drop=True)
    total_speedup, total_low, total_high = _ratio_ci(base_total[:, None], tuned_total[:, None], rng, resamples, level)
    frame.attrs["end_to_end"] = {
        "label": END_TO_END,
        "base_ns": float(np.median(base_total)),
        "tuned_ns": float(np.median(tuned_total)),
        "speedup": float(total_speedup[0]),
        "ci_low": float(total_low[0]),
        "ci_high": float(total_high[0]),
        "base_iterations": int(len(base_total)),
        "tuned_iterations": int(len(tuned_total)),
    }
    return frame[COLUMNS]


def iteration_totals(profile: Profile) -> np.ndarray:
    """Dispatch time of each iteration of a profile (ns), summed over all call sites."""
    events = profile.events.dropna(subset=["iteration"])
    return events.groupby("iteration")["duration_ns"].sum().to_numpy(dtype=np.float64)


def pooled_end_to_end(base_dirs: list[Path], tuned_dirs: list[Path], level: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> dict:
    """End-to-end speedup from several profiles of each build (e.g. taken alternately, so both builds
    see the same machine load), pooling their iterations: ratio of medians with a bootstrap interval."""
    base = np.concatenate([iteration_totals(load_profile(Path(d))) for d in base_dirs])
    tuned = np.concatenate([iteration_totals(load_profile(Path(d))) for d in tuned_dirs])
    if base.size == 0 or tuned.size == 0:
        raise TracelinkError("no per-iteration dispatch events in the profiles to compare")
    speedup, low, high = _ratio_ci(base[:, None], tuned[:, None], np.random.default_rng(seed), resamples, level)
    return {"label": END_TO_END, "base_ns": float(np.median(base)), "tuned_ns": float(np.median(tuned)),
            "speedup": float(speedup[0]), "ci_low": float(low[0]), "ci_high": float(high[0]),
            "base_iterations": int(base.size), "tuned_iterations": int(tuned.size)}


def write_diff(frame: pd.DataFrame, path: Path) -> Path:
    """Write the per-op rows as CSV and the end-to-end figure beside them (``diff.json``), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda p: frame.to_csv(p, index=False))
    write_text_atomic(path.with_suffix(".json"), json.dumps({"end_to_end": frame.attrs.get("end_to_end")}, indent=2))
    return path
