"""The framework's own run beside IREE's: the race's verdict, and its time per source line and component.

The reference's samples (:mod:`tracelink.collect.reference`: each op's self time with its Python stack
and module path, or an onnxruntime node's time at the node's place in the model) are folded into lines
by the rule IREE's dispatches follow in the user view: library frames (:mod:`tracelink.compile.frames`) count for
the innermost frame of the model's code, so a ``transformers`` model's ``modeling_*.py`` lines are the
user's. The profiler's per-op overhead inflates small ops, so the profiled times give only the split:
they are scaled so the lines sum to the reference's unprofiled call (the race's median). IREE's time per
line is its dispatches' user self time per call.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracelink.aggregate.components import component_table
from tracelink.aggregate.speedup import summarize
from tracelink.collect.reference import LABELS, ReferenceResult
from tracelink.compile.frames import LIBRARY_FRAMES, user_frame

LOSS_RATIO = 1.5  # a line where IREE takes more than this times the reference's time is marked
LINE_COLUMNS = ["file", "line", "iree_ns", "reference_ns", "ratio", "only_in", "iree_loses", "reference"]
COMPONENT_COLUMNS = ["component", "self_ns", "inclusive_ns", "reference"]


def reference_record(result: ReferenceResult) -> dict:
    """profile.json's entry for one reference: its time per call, the race (IREE's time over the
    reference's, with its 95 % interval) and the outputs' agreement."""
    race = summarize(result.rounds["iree_ns"], result.rounds["reference_ns"]) if result.rounds else None
    if race is not None:
        race["calls_per_round"] = result.rounds["calls_per_round"]
        if race["load_warning"]:  # profile has no --rounds: what helps here is a quieter machine
            race["load_warning"] = race["load_warning"].replace("rerun with more --rounds or on a quieter machine", "profile again on a quieter machine")
        race = {key: (None if isinstance(value, float) and math.isnan(value) else value) for key, value in race.items()}
    return {"name": result.name, "label": LABELS[result.name], "status": result.status, "error": result.error,
            "threads": result.threads, "ns_per_call": race["tuned_ns"] if race else None,
            "iree_ns_per_call": race["base_ns"] if race else None, "race": race, "outputs": result.outputs or None,
            "profiled_ns_per_call": result.profiled_ns_per_call, "per_line": result.per_line}


def folded_lines(samples: pd.DataFrame, rules: tuple[str, ...] = LIBRARY_FRAMES) -> pd.DataFrame:
    """Self time per (file, line) of the user's code: each sample at the innermost frame of its stack
    that is not library code (the innermost frame when all are); a sample without a stack (the call's
    own overhead) at ("", 0)."""
    places = []
    for stack in samples["stack"]:
        frames = [frame.rsplit(":", 1) for frame in str(stack).split(";") if frame]
        if not frames:
            places.append(("", 0))
            continue
        file, line = frames[user_frame([file for file, _ in frames], rules)]
        places.append((file, int(line)))
    folded = samples.assign(file=[file for file, _ in places], line=[line for _, line in places])
    return folded.groupby(["file", "line"], as_index=False)["self_ns"].sum()


def scale_to_call(times: pd.Series, ns_per_call: float | None) -> float:
    """The factor making ``times`` sum to the unprofiled call (1 when there is none)."""
    total = float(times.sum())
    return ns_per_call / total if ns_per_call and total > 0 else 1.0


def iree_lines(source_lines: pd.DataFrame, iterations: int) -> pd.DataFrame:
    """IREE's user self time per call (``iree_ns``) of each (file, line) that has any."""
    ours = source_lines[source_lines["user_self_ns"] > 0][["file", "line", "user_self_ns"]].copy()
    ours["iree_ns"] = ours.pop("user_self_ns") / max(iterations, 1)
    ours["file"] = ours["file"].fillna("").astype(str)
    ours["line"] = pd.to_numeric(ours["line"], errors="coerce").fillna(0).astype(int)
    return ours.groupby(["file", "line"], as_index=False)["iree_ns"].sum()


def reference_lines(result: ReferenceResult, record: dict, source_lines: pd.DataFrame, iterations: int,
                    rules: tuple[str, ...] = LIBRARY_FRAMES) -> pd.DataFrame:
    """One row per line either side spends time on: IREE's user self time per call, the reference's
    (scaled to its unprofiled call), IREE's over the reference's, which side alone has it, and whether
    IREE loses there by more than :data:`LOSS_RATIO`. A line only one side has is kept, its ratio empty."""
    if result.samples is None or result.samples.empty:
        return pd.DataFrame(columns=LINE_COLUMNS)
    theirs = folded_lines(result.samples, rules)
    theirs["reference_ns"] = theirs["self_ns"] * scale_to_call(theirs["self_ns"], record["ns_per_call"])
    theirs = theirs.drop(columns="self_ns")
    lines = iree_lines(source_lines, iterations).merge(theirs, on=["file", "line"], how="outer")
    both = lines["iree_ns"].notna() & lines["reference_ns"].notna() & (lines["reference_ns"] > 0)
    lines["ratio"] = np.where(both, lines["iree_ns"] / lines["reference_ns"].where(both, 1.0), np.nan)
    lines["only_in"] = np.select([lines["reference_ns"].isna(), lines["iree_ns"].isna()], ["iree", "reference"], "")
    lines["iree_loses"] = lines["ratio"] > LOSS_RATIO
    lines["reference"] = result.name
    order = lines[["iree_ns", "reference_ns"]].max(axis=1)
    return lines.assign(order=order).sort_values("order", ascending=False, kind="stable")[LINE_COLUMNS].reset_index(drop=True)


def reference_components(result: ReferenceResult, record: dict) -> pd.DataFrame | None:
    """The reference's time per component (every level of the module tree, inclusive), scaled as its lines."""
    if result.samples is None or result.samples.empty or not (result.samples["component"] != "").any():
        return None
    samples = result.samples
    ops = pd.DataFrame({"name": samples["component"].where(samples["component"] == "", samples["component"] + "/") + "op",
                        "total_ns": samples["self_ns"] * scale_to_call(samples["self_ns"], record["ns_per_call"])})
    table = component_table(ops)
    return table[COMPONENT_COLUMNS[:-1]].assign(reference=result.name)[COMPONENT_COLUMNS]
