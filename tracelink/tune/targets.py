"""Which dispatches of a profile `tune` searches: each export ranked by its share of the timed run,
loaded with its benchmark dump or skipped with the reason, and the record of what tuning one found."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tracelink.compile.benchmarks import ensure_benchmark_dumps
from tracelink.errors import TracelinkError
from tracelink.tune.dispatch import Dispatch, load_dispatch, spec_reaches


@dataclass
class Target:
    """A dispatch function of the profile and whether it can be tuned."""

    export: str
    share: float
    dispatch: Dispatch | None = None
    reason: str = ""


@dataclass
class Outcome:
    """What tuning one dispatch found."""

    export: str
    share: float
    space_size: int = 0
    trials: int = 0
    failed: int = 0
    default_ms: float = math.nan
    best_ms: float = math.nan
    speedup: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    configuration: str = ""
    selected: bool = False
    # the dispatch's speedup inside the whole program (per-config check; NaN: not checked)
    program_speedup: float = math.nan
    program_ci_low: float = math.nan
    program_ci_high: float = math.nan
    shared_with: str = ""  # other dispatches (same root op, own executable) given this config, ';'-separated
    note: str = ""
    fields: dict = field(default_factory=dict, repr=False)
    dispatch: Dispatch | None = field(default=None, repr=False)

    def row(self) -> dict:
        return {k: v for k, v in vars(self).items() if k not in ("fields", "dispatch")}


def one_line(error: Exception) -> str:
    """An error as one line: tracelink's own message, or the exception's type and first line."""
    lines = str(error).strip().splitlines() or [""]
    return lines[0] if isinstance(error, TracelinkError) else f"{type(error).__name__}: {lines[0]}".rstrip(": ")


def examine(row, artifacts: Path) -> Target:
    """A dispatch of the exports table, loaded, or with the reason it cannot be tuned."""
    target = Target(str(row.export), float(row.share))
    try:
        if not target.share > 0:
            raise TracelinkError("no time in the timed run (an initializer-only dispatch); nothing to gain")
        if not isinstance(row.benchmark_file, str) or not row.benchmark_file:
            raise TracelinkError("no benchmark dump recorded")
        if not (artifacts / row.benchmark_file).is_file():
            raise TracelinkError("IREE wrote no benchmark dump of it")
        target.dispatch = load_dispatch(artifacts / row.benchmark_file)
        source = getattr(row, "source_file", None)
        if isinstance(source, str) and source and not spec_reaches(target.dispatch, artifacts / source):
            target.dispatch.delivery = "configuration"
    except Exception as error:  # any failure to read one dispatch skips it with one line, never a traceback
        target.dispatch, target.reason = None, one_line(error)
    return target


def run_shares(exports: pd.DataFrame, call_sites: pd.DataFrame) -> pd.Series:
    """Per export, its share of the dispatch time of the timed run's call sites.

    One executable serves all of its call sites, so their times add up. Call sites of the initializer
    phase run once at load: whatever a collector recorded of them is not run time, and an export only
    they use gets 0. A profile without call-site phases keeps the exports table's share."""
    if not {"export", "phase", "total_ns"} <= set(call_sites.columns):
        return exports.set_index("export")["share"]
    times = call_sites[call_sites["phase"] == "run"].groupby("export")["total_ns"].sum()
    total = float(times.sum())
    return pd.Series([float(times.get(export, 0.0)) / total if total else 0.0 for export in exports["export"]],
                     index=exports["export"])


def select_targets(exports: pd.DataFrame, call_sites: pd.DataFrame, artifacts: Path, top: int,
                   name: str | None) -> tuple[list[Target], list[Target], list[Target], float]:
    """(targets to tune, every tunable dispatch, dispatches skipped with the reason, share of timed
    dispatch time that is tunable).

    Dispatches are ranked by their share of the timed run (``run_shares``); every one is examined,
    hottest first, so the tunable share covers those beyond ``top`` too."""
    needed = {"export", "benchmark_file", "share"}
    if not needed <= set(exports.columns):
        raise TracelinkError(f"{artifacts.parent}/exports.csv: missing column(s) {', '.join(sorted(needed - set(exports.columns)))}")
    exports = exports.assign(share=run_shares(exports, call_sites).to_numpy())
    ranked = exports.sort_values("share", ascending=False, kind="stable")
    if name is not None:
        ranked = ranked[ranked["export"] == name]
        if ranked.empty:
            raise TracelinkError(f"{artifacts.parent}/exports.csv: no dispatch named '{name}' "
                                 f"(dispatches: {', '.join(exports['export'].astype(str))})")
    ensure_benchmark_dumps(artifacts, ranked["benchmark_file"])
    examined = [examine(row, artifacts) for row in ranked.itertuples()]
    tunable = [t for t in examined if t.dispatch is not None]
    skipped = [t for t in examined if t.dispatch is None]
    if not tunable:
        reasons = "; ".join(f"{t.export}: {t.reason}" for t in skipped[:3]) or "the profile has no dispatches"
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise TracelinkError(f"{artifacts.parent}: no tunable dispatch ({reasons}{more})")
    return tunable[:top], tunable, skipped, float(sum(t.share for t in tunable))
