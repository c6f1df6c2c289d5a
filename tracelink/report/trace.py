"""The dispatch events of a profile as a Chrome trace (JSON), for ui.perfetto.dev and chrome://tracing.

One process (the profiled function); one track per thread when the collector recorded threads, else one
track per call site (named by call site and export, in execution order), plus an ``iterations`` track
with one slice per call of the function. Each dispatch slice carries its provenance in ``args``: call
site, export, executable, root op, workgroups, tiles, the source location that formed the dispatch,
and the source ops and lines it computes. Times are microseconds; events without a start time are
laid end to end in event order.

With the hook collector's per-workgroup table, each thread that ran workgroups also gets a
``workgroups`` track: one slice per workgroup run (call site, export, workgroup id, iteration, CPU and
counters in ``args``). At most ``MAX_WORKGROUP_EVENTS`` of them, the earliest; ``otherData`` says how
many were kept of how many.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tracelink.atomic import write_atomic
from tracelink.profile_dir import Profile, load_profile
from tracelink.provenance.graph import ops_of_call_site
from tracelink.report.workgroups import counter_names

PID = 1
ITERATION_TID = 0
MAX_LISTED = 12
MAX_WORKGROUP_EVENTS = 200_000


def call_site_args(profile: Profile) -> dict[int, dict]:
    """Provenance arguments of each call site."""
    graph = profile.graph
    table = {int(row["call_site"]): row for row in profile.call_sites.to_dict("records")} if not profile.call_sites.empty else {}
    args: dict[int, dict] = {}
    for node, data in graph.nodes(data=True):
        if data.get("kind") != "call_site":
            continue
        index = int(data["index"])
        export = graph.nodes.get(f"export:{data['export']}", {})
        ops = ops_of_call_site(graph, index)
        row = table.get(index, {})
        lines = [line for line in str(row.get("source_lines") or "").split(";") if line]
        args[index] = {
            "call_site": index,
            "export": str(data["export"]),
            "executable": str(export.get("executable", "")),
            "root_op": str(data.get("root_op", "")),
            "source": str(data.get("loc", "")),
            "workgroups": str(data.get("workgroups", "")),
            "source_ops": [f"{role}: {graph.nodes[op].get('label', op)}" for op, role in ops[:MAX_LISTED]],
            "source_lines": lines[:MAX_LISTED] + ([f"... {len(lines) - MAX_LISTED} more"] if len(lines) > MAX_LISTED else []),
        }
    return args


def with_start_times(events: pd.DataFrame) -> pd.DataFrame:
    """Events with a ``start`` (ns) each: the recorded one, else end to end in event order."""
    frame = events.reset_index(drop=True).copy()
    recorded = frame["start_ns"].astype("Float64")
    durations = frame["duration_ns"].astype("Float64").fillna(0).astype(float)
    back_to_back = durations.cumsum() - durations
    frame["start"] = recorded.astype(float).where(recorded.notna(), back_to_back)
    return frame


def trace_events(profile: Profile) -> dict:
    """The Chrome trace object of a profile."""
    summary = profile.summary
    events = with_start_times(profile.events) if not profile.events.empty else profile.events.assign(start=pd.Series(dtype=float))
    args = call_site_args(profile)
    threads = sorted(map(str, events["thread"].dropna().unique())) if not events.empty else []
    name = f"{Path(str(summary.get('program', 'program'))).name} @{summary.get('function', '')}"
    trace: list[dict] = [
        metadata("process_name", ITERATION_TID, name=f"{name} ({summary.get('collector', '')} collector)"),
        metadata("thread_name", ITERATION_TID, name="iterations"),
        metadata("thread_sort_index", ITERATION_TID, sort_index=-1),
    ]
    tids: dict = {}
    if threads:  # one track per thread
        for position, thread in enumerate(threads, start=1):
            tids[thread] = position
            trace.append(metadata("thread_name", position, name=f"thread {thread}"))
    else:  # one track per call site, in execution order
        for index in sorted(args):
            tids[index] = index + 1
            trace.append(metadata("thread_name", index + 1, name=f"#{index} {short_export(args[index]['export'])}"))
            trace.append(metadata("thread_sort_index", index + 1, sort_index=index))
    unmatched = max(tids.values(), default=0) + 1
    for row in events.itertuples(index=False):
        site = None if pd.isna(row.call_site) else int(row.call_site)
        key = (None if pd.isna(row.thread) else str(row.thread)) if threads else site
        tid = tids.get(key, unmatched)
        if tid == unmatched and "unmatched" not in tids:
            tids["unmatched"] = unmatched
            trace.append(metadata("thread_name", unmatched, name="dispatches without a call site or thread"))
        export = "" if pd.isna(row.export) else str(row.export)
        provenance = args.get(site) if site is not None else None
        if provenance is None:
            provenance = {"export": export, "source": "unknown: matched no call site"}
        measured = {
            field: int(getattr(row, field))
            for field in ("iteration", "duration_ns", "workgroup_count", "tile_count", "tile_duration_sum_ns")
            if not pd.isna(getattr(row, field))
        }
        trace.append({
            "name": f"#{site} {short_export(export)}" if site is not None else (short_export(export) or "dispatch"),
            "cat": "dispatch", "ph": "X", "pid": PID, "tid": tid,
            "ts": round(float(row.start) / 1000.0, 3),
            "dur": round(float(measured.get("duration_ns", 0)) / 1000.0, 3),
            "args": {**provenance, **measured},
        })
    timed = events.dropna(subset=["iteration"]) if not events.empty else events
    if not timed.empty:
        ends = timed["start"] + timed["duration_ns"].fillna(0).astype(float)
        spans = pd.DataFrame({"iteration": timed["iteration"].astype(int), "start": timed["start"], "end": ends}).groupby("iteration").agg(start=("start", "min"), end=("end", "max"))
        for iteration, span in spans.iterrows():
            trace.append({
                "name": f"iteration {iteration}", "cat": "iteration", "ph": "X", "pid": PID, "tid": ITERATION_TID,
                "ts": round(float(span["start"]) / 1000.0, 3), "dur": round(float(span["end"] - span["start"]) / 1000.0, 3),
                "args": {"iteration": int(iteration), "function": str(summary.get("function", ""))},
            })
    other = {"program": str(summary.get("program", "")), "function": str(summary.get("function", "")), "generator": "tracelink"}
    if profile.workgroups is not None and not profile.workgroups.empty:
        slices, counts = workgroup_slices(profile.workgroups, unmatched + 1)
        trace.extend(slices)
        other.update(counts)
    return {"traceEvents": trace, "displayTimeUnit": "ns", "otherData": other}


def workgroup_slices(workgroups: pd.DataFrame, first_tid: int, limit: int = MAX_WORKGROUP_EVENTS) -> tuple[list[dict], dict]:
    """One track per thread of workgroup runs (the earliest ``limit``), and how many were kept."""
    counters = counter_names(workgroups)
    total = len(workgroups)
    kept = workgroups.sort_values("start_ns", kind="stable").head(limit).reset_index(drop=True)
    threads = kept["thread"].astype("string").fillna("?")
    note = f" (earliest {limit} of {total} workgroup runs)" if total > limit else ""
    out: list[dict] = []
    tids: dict[str, int] = {}
    for position, thread in enumerate(sorted(threads.unique())):
        tids[thread] = first_tid + position
        out.append(metadata("thread_name", first_tid + position, name=f"workgroups · {thread}{note}"))
        out.append(metadata("thread_sort_index", first_tid + position, sort_index=10_000 + position))
    sites = plain(kept["call_site"]) if "call_site" in kept else [None] * len(kept)
    iterations = plain(kept["iteration"]) if "iteration" in kept else [None] * len(kept)
    exports, names = plain(kept["export"].astype("string").fillna("")), plain(threads)
    ids = kept[["workgroup_x", "workgroup_y", "workgroup_z"]].to_numpy(dtype="int64").tolist()
    cpus, starts, durations = (plain(kept[c]) for c in ("cpu", "start_ns", "duration_ns"))
    values = {name: plain(kept[name]) for name in counters}
    for row in range(len(kept)):
        site, export = sites[row], exports[row]
        args = {"call_site": site, "export": export, "workgroup": ids[row], "cpu": cpus[row]}
        if iterations[row] is not None:
            args["iteration"] = iterations[row]
        args.update({name: column[row] for name, column in values.items() if column[row] is not None})
        out.append({
            "name": f"#{site} {short_export(export)}" if site is not None else short_export(export) or "workgroup",
            "cat": "workgroup", "ph": "X", "pid": PID, "tid": tids[names[row]],
            "ts": round(starts[row] / 1000.0, 3), "dur": round(durations[row] / 1000.0, 3), "args": args,
        })
    return out, {"workgroup_events": len(kept), "workgroup_events_total": total, "workgroup_events_limit": limit}


def plain(column: pd.Series) -> list:
    """A column as Python values (ints for integer columns), None where missing."""
    if pd.api.types.is_integer_dtype(column.dtype):
        return [None if pd.isna(v) else int(v) for v in column.astype("Int64").to_numpy(dtype=object, na_value=None)]
    return [None if pd.isna(v) else v for v in column.to_numpy(dtype=object)]


def metadata(kind: str, tid: int, **values) -> dict:
    return {"ph": "M", "pid": PID, "tid": tid, "name": kind, "args": values}


def short_export(name: str) -> str:
    at = name.find("dispatch_")
    return name[at:] if at > 0 else name


def write_trace(profile: Profile | Path | str, path: Path | None = None) -> Path:
    """Write the Chrome trace JSON of a profile (default ``<dir>/trace.json``), atomically."""
    profile = profile if isinstance(profile, Profile) else load_profile(Path(profile))
    path = Path(path) if path is not None else profile.directory / "trace.json"
    text = json.dumps(trace_events(profile), separators=(",", ":"))
    return write_atomic(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
