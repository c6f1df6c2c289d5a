"""``--json``: the one JSON document `profile`, `diff` and `tune` print on stdout.

Every document has ``schema`` (``tracelink/1``) and ``command``; the rest depends on the command. The
JSON Schema is ``tracelink/output.schema.json`` (README: "Machine-readable output"). Numbers that are
not defined (a speedup without measurement) are ``null``, never NaN, so any JSON parser reads them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tracelink.profile_dir.functions import FunctionProfiles
from tracelink.profile_dir.profile import Profile
from tracelink.report.fmt import concrete, lower_bound_mark
from tracelink.report.strategies import advised, strategies_document

SCHEMA_VERSION = "tracelink/1"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "output.schema.json"


def plain(value: Any) -> Any:
    """``value`` with NaN and NA as None and numpy scalars as Python numbers, recursively."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dump(document: dict) -> str:
    """The document as JSON text, with ``schema`` first."""
    return json.dumps(plain({"schema": SCHEMA_VERSION, **document}), indent=2, allow_nan=False)


def profile_document(profile: Profile, top: int = 10, command: str = "profile") -> dict:
    """`tracelink profile --json` (and `tracelink report --json`): the summary, the hottest lines (user self
    time) and dispatches (median × count) with their verdicts, next steps and whether their FLOPs and
    bytes are lower bounds, what `tracelink tune` measured (``strategies``, null when it did not run) and
    one call's memory (``memory``)."""
    profile = advised(profile)  # next steps name what tune measured to help
    summary = profile.summary
    cover = summary["coverage"]
    lines = profile.source_lines
    hot_lines = lines[lines["user_self_ns"] > 0].sort_values("user_self_ns", ascending=False, kind="stable").head(top)
    sites = profile.call_sites
    ranked = sites.assign(robust=sites["median_ns"] * sites["count"]).sort_values("robust", ascending=False, kind="stable").head(top)
    return {
        "command": command,
        "directory": str(profile.directory),
        "summary": {
            "program": summary["program"],
            "model": summary.get("model", summary["program"]),
            "function": summary["function"],
            "iterations": summary["iterations"],
            "total_dispatch_ns": summary.get("total_dispatch_ns"),
            "dispatch_ns_per_iteration": summary.get("dispatch_ns_per_iteration"),
            # a call's wall time and its time outside the dispatches (aggregate/host_time.py); null on a GPU
            "wall_ns_per_call": (summary.get("host_time") or {}).get("wall_ns_per_call"),
            "host_time": summary.get("host_time"),
            "dispatch_time_attributed_share": cover["dispatch_time_attributed_share"],
            "call_sites": cover["call_sites"],
            "call_sites_mapped": cover["call_sites_mapped"],
            "call_sites_missing_events": cover.get("call_sites_missing_events", 0),
            "events_missing": cover.get("events_missing", 0),
            "target": summary.get("target", {}),
            # on a GPU: the dispatches' device time apart from the queue, submission and host time per iteration
            **({"device_time": summary["device_time"]} if "device_time" in summary else {}),
        },
        "components": components_document(profile),
        "op_kinds": kinds_document(profile),
        "hottest_lines": [
            {
                "file": row.file, "line": int(row.line), "self_ns": row.user_self_ns, "self_share": row.user_self_share,
                "inclusive_share": row.inclusive_share, "library": bool(row.library),
                "ops": [op for op in str(row.ops).split(";") if op],
                "call_sites": [int(site) for site in str(row.call_site_ids).split(";") if site],
                **judgement(row, profile),
            }
            for row in hot_lines.itertuples()
        ],
        "hottest_dispatches": [
            {
                "call_site": int(row.call_site), "export": row.export, "root_op": row.root_op, "count": int(row.count),
                "median_ns": row.median_ns, "p90_ns": row.p90_ns, "share": row.share, "noisy": bool(row.noisy),
                **judgement(row, profile),
            }
            for row in ranked.itertuples()
        ],
        "strategies": strategies_document(profile),
        "memory": memory_document(profile),
        # the framework's own runs (--compare): each one's race against IREE's build, then the lines side by side
        "references": profile.summary.get("references") or [],
        "reference_lines": reference_lines_document(profile, top),
    }


def reference_lines_document(profile: Profile, top: int) -> list[dict]:
    """The lines where IREE or the reference spends most time (reference_lines.csv's first ``2 × top``
    rows: a line only one side has is among them, its ratio null)."""
    lines = profile.reference_lines
    if lines is None or lines.empty:
        return []
    shown = lines.head(2 * top)
    return [{"file": str(row.file), "line": int(row.line), "iree_ns": row.iree_ns, "reference_ns": row.reference_ns, "ratio": row.ratio,
             "only_in": row.only_in if isinstance(row.only_in, str) and row.only_in else None, "iree_loses": bool(row.iree_loses), "reference": str(row.reference)}
            for row in shown.itertuples()]


def functions_document(result: FunctionProfiles, top: int = 10) -> dict:
    """`tracelink profile --json` with several functions: each function's document (as for one), and the
    source lines with each function's self time per call (``lines``, hottest first)."""
    return {
        "command": "profile",
        "directory": str(result.directory),
        "functions": [profile_document(profile, top) for profile in result.profiles.values()],
        "lines": result.lines.head(top).to_dict(orient="records"),
    }


def memory_document(profile: Profile) -> dict | None:
    """One call's memory (profile.json's ``memory``), null in profiles written before it was recorded."""
    return profile.summary.get("memory")


def components_document(profile: Profile) -> list[dict]:
    """Time by component, every level of the scope tree (the summary's first table, whole)."""
    return profile.shown.components[["component", "depth", "self_ns", "inclusive_ns", "self_share", "inclusive_share"]].to_dict("records")


def kinds_document(profile: Profile) -> list[dict]:
    """Time by op kind across repeated layers (the summary's second table, whole)."""
    return profile.shown.kinds[["kind", "pattern", "total_ns", "share", "instances"]].rename(columns={"pattern": "in"}).to_dict("records")


def judgement(row, profile: Profile) -> dict:
    """A line's or dispatch's verdict, next step, achieved GFLOP/s and whether its costs are lower bounds."""
    return {
        "verdict": str(getattr(row, "verdict", "") or ""), "next_step": concrete(str(getattr(row, "next_step", "") or ""), profile),
        "gflops_s": getattr(row, "gflops_s", None), "lower_bound": lower_bound_mark(getattr(row, "lower_bound", None)) != "",
    }


def diff_document(frame: pd.DataFrame, base: Path, tuned: Path, output: Path) -> dict:
    """`tracelink diff --json`: the end-to-end comparison and every source op's row, each with its verdict."""
    return {
        "command": "diff",
        "base": str(base),
        "tuned": str(tuned),
        "output": str(output),
        "end_to_end": frame.attrs["end_to_end"],
        "peak_bytes": frame.attrs.get("peak_bytes"),
        "gates": frame.attrs.get("gates", {"slower": None, "larger": None}),
        "source_ops": frame.to_dict("records"),
    }


def tune_document(outcomes: list, spec: Path | None, check: dict | None, trials: Path) -> dict:
    """`tracelink tune --json`: per tuned dispatch its outcome, the whole-program check and the spec written (or null)."""
    return {
        "command": "tune",
        "dispatches": [outcome.row() for outcome in outcomes],
        "whole_program": check,
        "spec": str(spec) if spec is not None else None,
        "trials": str(trials),
    }
