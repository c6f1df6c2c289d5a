"""Compare two profiles of the same program (e.g. before and after tuning) line by line.

Source ops are matched by their source location (label, file, line), never by dispatch name: the
two builds may fuse and number their dispatches differently. Each op's time per iteration is the
sum over the call sites it feeds of (its attribution fraction x that call site's duration in that
iteration): the profile's own attribution (``Profile.attribution``, :func:`tracelink.aggregate.attribution`).

With ``rounds`` >= 2 both profiles' compiled programs (``artifacts/app.vmfb``, with the inputs and
parameters they were profiled with) run again under the HAL collector, alternately, and every round
gives one median per op and end to end; speedups and their 95 % intervals come from the per-round
ratios (:mod:`tracelink.aggregate.speedup`). With ``rounds`` = 0 the two recorded profiles are compared
as they are: one run each, so the speedup has no interval and nothing is called significant — the
spread of iterations inside one run is not the run-to-run variation a comparison has to beat.

Each op's per-round medians are kept (``base_rounds``, ``tuned_rounds``; in ``diff.csv`` joined by
``;``), so that a sum of ops — the report's gain of a source line computing several — gets the same
statistic from its paired per-round sums.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.errors import TracelinkError
from tracelink.atomic import make_directory, remove_path, write_atomic, write_text_atomic
from tracelink.collect.collectors import RunRequest, start_collection
from tracelink.collect.hal import RUN_BUNDLE
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.provenance.graph import run_call_sites
from tracelink.collect.rounds import alternate
from tracelink.aggregate.speedup import paired_speedup, summarize, verdict
from tracelink.profile_dir import files

# The start of the CSV and JSON files tracelink writes, by which `diff -o` recognises its own.
CSV_HEADER = "label,file,line,base_ns,tuned_ns,"
JSON_HEADER = '"end_to_end"'
COLUMNS = ["label", "file", "line", "base_ns", "tuned_ns", "speedup", "ci_low", "ci_high", "base_share", "tuned_share",
           "verdict", "base_rounds", "tuned_rounds"]
ROUND_COLUMNS = ("base_rounds", "tuned_rounds")  # an op's median in each round (empty: the op is not in that build)
END_TO_END = "(all dispatches)"
DEFAULT_ROUNDS = 5


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
    for site, op, fraction in profile.attribution[["call_site", "op", "fraction"]].itertuples(index=False):
        if site in site_column and op in op_column:
            weights[site_column[site], op_column[op]] += fraction
    return ops, per_site.to_numpy(dtype=np.float64) @ weights


def _keys(ops: pd.DataFrame) -> list[tuple]:
    return [(str(row.label), str(row.file), int(row.line) if pd.notna(row.line) else -1) for row in ops.itertuples()]


def iteration_totals(profile: Profile) -> np.ndarray:
    """Dispatch time of each iteration of a profile (ns), summed over all call sites."""
    events = profile.events.dropna(subset=["iteration"])
    return events.groupby("iteration")["duration_ns"].sum().to_numpy(dtype=np.float64)


def run_inputs(profile: Profile) -> list[str]:
    """The ``--input`` values the profile ran with; generated ``.npy`` files are found in its artifacts."""
    values = []
    for value in profile.summary.get("inputs", []):
        if value.startswith("@") and not Path(value[1:]).is_file():
            moved = profile.artifacts / files.INPUTS / Path(value[1:]).name
            if not moved.is_file():
                raise TracelinkError(f"{profile.directory}: input {value[1:]} of the profiled run is gone")
            value = f"@{moved}"
        values.append(value)
    return values


def run_parameters(profile: Profile) -> list[str]:
    """The ``--parameters`` the profiled run used: profile.json's, or for a profile written before it
    recorded them, read from the run's command line (the first line of run.log)."""
    if "parameters" in profile.summary:
        return list(profile.summary["parameters"])
    log = profile.artifacts / files.RUN_LOG
    first = log.read_text(errors="replace").split("\n", 1)[0] if log.is_file() else ""
    return re.findall(r"--parameters=(\S+)", first)


def run_exports(profile: Profile) -> list[str]:
    """Exports of the run-phase call sites, in call-site order (what HAL events are matched against)."""
    return [export for _, export in run_call_sites(profile.graph)]


def rerun(profile: Profile, directory: Path, iterations: int, timeout_s: float, vmfb: Path | None = None,
          inside: Path | None = None) -> Profile:
    """Run the profile's compiled program (or ``vmfb``, another build of it) again under the HAL collector;
    the profile with the new events. ``directory`` (its logs and export) is made afresh, following no
    link below ``inside`` (default its parent)."""
    vmfb = vmfb or profile.artifacts / files.VMFB
    if not vmfb.is_file():
        raise TracelinkError(f"{profile.directory}: no compiled program to run again ({vmfb} is missing); "
                             "use --rounds 0 to compare the recorded profiles")
    inside = inside or directory.parent
    remove_path(directory, inside)
    make_directory(directory, inside)
    warmup = int(profile.summary.get("warmup", 1))
    device = profile.summary.get("target", {}).get("device", "local-task")  # a GPU profile runs on its GPU again
    request = RunRequest(vmfb, profile.summary["function"], run_inputs(profile), run_parameters(profile), warmup + iterations,
                         directory, timeout_s, device=device)
    events = start_collection("hal", request).finish(run_exports(profile), warmup).events
    (directory / RUN_BUNDLE).unlink(missing_ok=True)  # the exported JSON lines hold what is needed
    return dataclasses.replace(profile, events=events)


def _medians(profile: Profile) -> tuple[list[tuple], np.ndarray, float, int]:
    """(op keys, median ns per iteration of each op, median dispatch ns per iteration, iterations) of one run."""
    ops, matrix = per_iteration(profile)
    if matrix.size == 0:
        raise TracelinkError(f"{profile.directory}: the run has no per-iteration dispatch events")
    totals = iteration_totals(profile)
    return _keys(ops), np.median(matrix, axis=0), float(np.median(totals)), len(totals)


def _aligned(runs: list[tuple[list[tuple], np.ndarray, float, int]], keys: list[tuple]) -> np.ndarray:
    """Rounds x keys matrix of per-op medians (NaN for ops a build does not have)."""
    column = {key: i for i, key in enumerate(keys)}
    out = np.full((len(runs), len(keys)), np.nan)
    for r, (op_keys, medians, _, _) in enumerate(runs):
        for key, value in zip(op_keys, medians):
            j = column[key]
            out[r, j] = (0 if np.isnan(out[r, j]) else out[r, j]) + value
    return out


@dataclasses.dataclass
class PairedRounds:
    """Two builds' per-round medians by source op (``rounds`` x ``keys``; NaN: the op is not in that
    build), and end to end per round, from one comparison (:func:`paired_rounds`)."""

    keys: list[tuple]  # (label, file, line; -1 without a line) of each column
    base: np.ndarray
    tuned: np.ndarray
    base_total: list[float]
    tuned_total: list[float]
    base_iterations: int
    tuned_iterations: int


def load_pair(base_dir: Path, tuned_dir: Path) -> tuple[Profile, Profile]:
    """Both profiles; an error when they share no source op (profiles of two different programs)."""
    base, tuned = load_profile(Path(base_dir)), load_profile(Path(tuned_dir))
    if not set(_keys(base.source_ops)) & set(_keys(tuned.source_ops)):  # variants of one program share locations
        raise TracelinkError(
            f"{tuned_dir}: no source op in common with {base_dir}: profiles of two different programs "
            f"({Path(tuned.summary['program']).name}, {Path(base.summary['program']).name})"
        )
    return base, tuned


def paired_rounds(base: Profile, tuned: Profile, rounds: int, iterations: int | None = None,
                  timeout_s: float = 600.0) -> PairedRounds:
    """``rounds`` >= 2: both programs run again alternately (``iterations`` calls each, default the base
    profile's repetitions; the runs go to ``diff_rounds`` in the tuned profile); 0 or 1: the recorded
    profiles, one round."""
    if rounds >= 2:
        count = iterations or int(base.summary.get("repetitions", 10))
        scratch = tuned.directory / files.DIFF_ROUNDS
        remove_path(scratch, tuned.directory)  # an earlier diff's rounds are not this one's
        runs = [lambda r, p=profile, n=name: _medians(rerun(p, scratch / f"{n}_{r}", count, timeout_s, inside=tuned.directory))
                for profile, name in ((base, "base"), (tuned, "tuned"))]
        base_runs, tuned_runs = alternate(runs, rounds)
    else:
        base_runs, tuned_runs = [_medians(base)], [_medians(tuned)]
    keys = list(dict.fromkeys([k for run in base_runs + tuned_runs for k in run[0]]))
    return PairedRounds(keys, _aligned(base_runs, keys), _aligned(tuned_runs, keys), [run[2] for run in base_runs],
                        [run[2] for run in tuned_runs], sum(run[3] for run in base_runs), sum(run[3] for run in tuned_runs))


def diff_profiles(base_dir: Path, tuned_dir: Path, rounds: int = DEFAULT_ROUNDS, iterations: int | None = None,
                  timeout_s: float = 600.0) -> pd.DataFrame:
    """Per source op: base and tuned median ns per iteration, speedup, 95 % interval, verdict and the
    per-round medians (:func:`diff_table`).

    ``rounds`` >= 2 runs both programs again alternately (``iterations`` calls each, default the base
    profile's repetitions); 0 or 1 compares the recorded profiles (no interval).
    """
    base, tuned = load_pair(base_dir, tuned_dir)
    frame = diff_table(paired_rounds(base, tuned, rounds, iterations, timeout_s))
    frame.attrs["base"] = str(Path(base_dir).resolve())  # where the report finds the base's tune results
    frame.attrs["tuned"] = str(Path(tuned_dir).resolve())
    frame.attrs["peak_bytes"] = {"base": peak_bytes(base), "tuned": peak_bytes(tuned)}
    return frame


def diff_table(paired: PairedRounds) -> pd.DataFrame:
    """One row per source op of a comparison, the most base time first. Ops that take no time in either
    build are left out; an op found in only one has NaN (and no per-round medians) on the other side.
    ``result.attrs["end_to_end"]`` holds the same numbers for all dispatches together, with the
    verdict and a warning when the rounds show the machine was busy."""
    keys, b, t = paired.keys, paired.base, paired.tuned
    speedup, low, high = paired_speedup(b, t)
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
            "base_share": np.median(b, axis=0) / np.median(paired.base_total),
            "tuned_share": np.median(t, axis=0) / np.median(paired.tuned_total),
            "verdict": [verdict(*values) for values in zip(speedup, low, high)],
            "base_rounds": per_round_lists(b),
            "tuned_rounds": per_round_lists(t),
        }
    )
    busy = (frame["base_ns"].fillna(0) > 0) | (frame["tuned_ns"].fillna(0) > 0)
    frame = frame[busy].sort_values("base_ns", ascending=False, na_position="last").reset_index(drop=True)
    frame.attrs["end_to_end"] = {"label": END_TO_END, **summarize(paired.base_total, paired.tuned_total),
                                 "base_iterations": paired.base_iterations, "tuned_iterations": paired.tuned_iterations}
    return frame[COLUMNS]


def per_round_lists(matrix: np.ndarray) -> list[list[float]]:
    """Each column of a rounds x ops matrix as a list; empty for an op absent from the build (NaN)."""
    return [[] if np.isnan(column).all() else [float(value) for value in column] for column in matrix.T]


def peak_bytes(profile: Profile) -> int | None:
    """The memory peak of one call recorded in a profile (None in profiles written before memory was recorded)."""
    return profile.summary.get("memory", {}).get("peak_bytes")


def gate_verdicts(frame: pd.DataFrame, slower_pct: float | None, larger_pct: float | None) -> dict:
    """The CI gates of a diff: ``slower`` fails when the tuned build's end-to-end slowdown is significant and
    its interval's smallest value (1 / the speedup interval's upper bound) is above ``slower_pct``;
    ``larger`` fails when its peak memory is more than ``larger_pct`` above the base's (the peak is the
    compiler's plan, the same on every run of a build, so it has no interval). A gate not asked for is None."""
    verdicts: dict = {"slower": None, "larger": None}
    if slower_pct is not None:
        total = frame.attrs["end_to_end"]
        high = total["ci_high"]
        bound = math.nan if math.isnan(high) else (1 / high - 1) * 100  # the least slowdown the interval allows, %
        verdicts["slower"] = {
            "threshold_pct": slower_pct, "slowdown_pct": (1 / total["speedup"] - 1) * 100, "slowdown_bound_pct": bound,
            "failed": bool(not math.isnan(bound) and high < 1 and bound > slower_pct),
            "why": "no interval: --rounds 0 compares one run of each build, nothing is significant" if math.isnan(bound) else
                   f"slowdown at least {bound:.1f}% (95% interval)" if bound > 0 else "no significant slowdown",
        }
    if larger_pct is not None:
        peaks = frame.attrs.get("peak_bytes", {})
        base, tuned = peaks.get("base"), peaks.get("tuned")
        if not base or tuned is None:
            missing = frame.attrs["base"] if not base else frame.attrs["tuned"]
            raise TracelinkError(f"{Path(missing) / files.SUMMARY}: no memory peak recorded (profiled before tracelink "
                                 "recorded memory); profile it again to use --fail-if-larger")
        growth = (tuned / base - 1) * 100
        verdicts["larger"] = {"threshold_pct": larger_pct, "base_peak_bytes": base, "tuned_peak_bytes": tuned,
                              "growth_pct": growth, "failed": bool(growth > larger_pct)}
    return verdicts


def write_diff(frame: pd.DataFrame, path: Path) -> Path:
    """Write the per-op rows as CSV (the per-round medians joined by ``;``, each float as Python writes it
    back exactly) and, beside them (``diff.json``), the end-to-end figure, the base profile's directory,
    both memory peaks and the gates' verdicts, atomically."""
    make_directory(path.parent)
    table = frame.assign(**{column: [";".join(map(repr, values)) for values in frame[column]] for column in ROUND_COLUMNS})
    write_atomic(path, lambda p: table.to_csv(p, index=False))
    summary = {"end_to_end": frame.attrs.get("end_to_end"), "base": frame.attrs.get("base"),
               "peak_bytes": frame.attrs.get("peak_bytes"), "gates": frame.attrs.get("gates", {"slower": None, "larger": None})}
    write_text_atomic(path.with_suffix(".json"), json.dumps(summary, indent=2))
    return path
