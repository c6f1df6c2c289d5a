"""The dispatch events of a profile as a Chrome trace (JSON), for ui.perfetto.dev and chrome://tracing.

One process (the profiled function) with these tracks, top to bottom:

- ``iterations``: one slice per call of the function;
- the **queue** tracks: every dispatch execution once, in execution order, on the device queue it was
  submitted to (``device 0 queue 0``, which the HAL collector records) or, when the collector records no
  queue, on one track named after the threads that ran dispatches. Dispatches that ran at the same time
  (the local-task runtime runs independent dispatches of a command buffer concurrently) go on extra
  lanes of their queue (``· lane 2``), so slices on one track never overlap and none hides another;
- **counter** tracks ``achieved GFLOP/s`` and ``achieved GB/s``: at every dispatch start and end, the
  sum over the dispatches running then of their FLOPs (bytes) from the cost model ÷ their duration;
- the **thread** tracks, named after the runtime's threads and their kernel ids where the collector
  records them: with the hook collector each worker's workgroup runs (call site, export, workgroup id,
  iteration, CPU and counters in ``args``), with the tracy collector each thread's dispatch zones of the
  measured executions. At most ``MAX_WORKGROUP_EVENTS`` of them, the earliest; ``otherData`` says how
  many were kept of how many.

Each dispatch slice carries its provenance in ``args``: call site, export, executable, root op,
workgroups, tiles, the source location that formed the dispatch, the source ops and lines it computes,
its queue, the threads that ran it and its achieved rates. Times are microseconds; events without a
start time are laid end to end in event order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tracelink.atomic import write_atomic
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.provenance.graph import ops_of_call_site
from tracelink.report.fmt import lower_bound_mark
from tracelink.report.workgroups import counter_names
from tracelink.profile_dir import files

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
        if lower_bound_mark(row.get("lower_bound")):  # its FLOPs and bytes, so its rates, are lower bounds
            args[index]["rates_are_lower_bounds"] = True
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
    events = timed_events(profile)
    name = f"{Path(str(summary.get('program', 'program'))).name} @{summary.get('function', '')}"
    trace: list[dict] = [
        metadata("process_name", ITERATION_TID, name=f"{name} ({summary.get('collector', '')} collector)"),
        metadata("thread_name", ITERATION_TID, name="iterations"),
        metadata("thread_sort_index", ITERATION_TID, sort_index=-1),
    ]
    tracks = queue_tracks(events)
    for tid, track in enumerate(tracks, start=1):
        trace.append(metadata("thread_name", tid, name=track))
        trace.append(metadata("thread_sort_index", tid, sort_index=tid))
    trace.extend(dispatch_slices(events, call_site_args(profile), {track: tid for tid, track in enumerate(tracks, start=1)}))
    trace.extend(iteration_slices(events, str(summary.get("function", ""))))
    trace.extend(rate_counters(events))
    other = {"program": str(summary.get("program", "")), "function": str(summary.get("function", "")), "generator": "tracelink"}
    first_thread_tid = len(tracks) + 1
    if profile.workgroups is not None and not profile.workgroups.empty:
        slices, counts = workgroup_slices(profile.workgroups, first_thread_tid)
        trace.extend(slices)
        other.update(counts)
    elif profile.zones is not None and not events.empty:
        slices, counts = zone_slices(profile.zones, events, first_thread_tid)
        trace.extend(slices)
        other.update(counts)
    return {"traceEvents": trace, "displayTimeUnit": "ns", "otherData": other}


def timed_events(profile: Profile) -> pd.DataFrame:
    """The dispatch events in start order with ``start``/``end`` (ns), their queue (``queue_label``),
    ``lane`` and ``track`` (the queue, with the lane when not the first), and their achieved ``gflops_s``/``gbytes_s`` (from the call site's FLOPs and bytes; 0 when unknown)."""
    if profile.events.empty:
        return profile.events.assign(start=pd.Series(dtype=float), end=pd.Series(dtype=float), queue_label=pd.Series(dtype=str),
                                     lane=pd.Series(dtype=int), track=pd.Series(dtype=str), gflops_s=pd.Series(dtype=float), gbytes_s=pd.Series(dtype=float))
    events = with_start_times(profile.events).sort_values("start", kind="stable").reset_index(drop=True)
    durations = events["duration_ns"].astype("Float64").fillna(0).astype(float)
    events["end"] = events["start"] + durations
    events["queue_label"] = queue_label(events)
    events["lane"] = lanes(events, events["queue_label"])
    events["track"] = [queue if lane == 0 else f"{queue} · lane {lane + 1}" for queue, lane in zip(events["queue_label"], events["lane"])]
    sites = profile.call_sites
    for amount, rate in (("flops", "gflops_s"), ("bytes", "gbytes_s")):
        per_site = sites.set_index("call_site")[amount].astype(float) if amount in sites else pd.Series(dtype=float)
        done = events["call_site"].astype("Float64").map(per_site).astype(float).fillna(0.0)
        events[rate] = (done / durations.where(durations > 0)).fillna(0.0)  # FLOP/ns is GFLOP/s
    return events


def queue_label(events: pd.DataFrame) -> pd.Series:
    """The queue each event ran on, else the threads that ran the collector's dispatches."""
    threads = sorted({name for names in events["thread"].dropna() for name in str(names).split(",")})
    fallback = f"dispatches on {', '.join(threads)}" if threads else "dispatches"
    return events["queue"].astype("string").fillna(fallback).astype(str)


def lanes(events: pd.DataFrame, queues: pd.Series) -> list[int]:
    """Each event's lane in its queue (0 first), for events in start order: the first lane free by its
    start, so events on one lane never overlap."""
    out = []
    lane_ends: dict[str, list[float]] = {}  # queue -> when each of its lanes is free again
    for queue, start, end in zip(queues, events["start"], events["end"]):
        ends = lane_ends.setdefault(queue, [])
        lane = next((k for k, free in enumerate(ends) if free <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        out.append(lane)
    return out


def queue_tracks(events: pd.DataFrame) -> list[str]:
    """The queue tracks in order: by queue, then lane."""
    return events.drop_duplicates("track").sort_values(["queue_label", "lane"])["track"].tolist()


MEASURED = ("iteration", "duration_ns", "workgroup_count", "tile_count", "tile_duration_sum_ns")


def dispatch_slices(events: pd.DataFrame, args: dict[int, dict], tids: dict[str, int]) -> list[dict]:
    """One slice per dispatch execution on its queue track, with its provenance and what was measured."""
    # columns as Python lists, then one pass: a large model has thousands of executions a profile
    sites, exports = plain(events["call_site"]), plain(events["export"])
    measured_columns = [(name, plain(events[name])) for name in MEASURED]
    queues, threads, tracks = plain(events["queue"]), plain(events["thread"]), events["track"].tolist()
    starts, ends = events["start"].tolist(), events["end"].tolist()
    flops, bytes_ = events["gflops_s"].tolist(), events["gbytes_s"].tolist()
    slices = []
    for row, (site, export) in enumerate(zip(sites, exports)):
        site = None if site is None else int(site)
        export = "" if export is None else str(export)
        provenance = args.get(site) if site is not None else None
        if provenance is None:
            provenance = {"export": export, "source": "unknown: matched no call site"}
        measured = {name: int(column[row]) for name, column in measured_columns if column[row] is not None}
        ran_on = {
            "queue": None if queues[row] is None else str(queues[row]),
            "threads": [] if threads[row] is None else str(threads[row]).split(","),
            "gflops_s": round(float(flops[row]), 3), "gbytes_s": round(float(bytes_[row]), 3),
        }
        slices.append({
            "name": f"#{site} {short_export(export)}" if site is not None else (short_export(export) or "dispatch"),
            "cat": "dispatch", "ph": "X", "pid": PID, "tid": tids[tracks[row]],
            "ts": microseconds(starts[row]), "dur": microseconds(ends[row] - starts[row]),
            "args": {**provenance, **measured, **ran_on},
        })
    return slices


def iteration_slices(events: pd.DataFrame, function: str) -> list[dict]:
    """One slice per iteration (call of the function), from its first dispatch start to its last end."""
    timed = events.dropna(subset=["iteration"])
    if timed.empty:
        return []
    spans = timed.assign(iteration=timed["iteration"].astype(int)).groupby("iteration").agg(start=("start", "min"), end=("end", "max"))
    return [
        {
            "name": f"iteration {iteration}", "cat": "iteration", "ph": "X", "pid": PID, "tid": ITERATION_TID,
            "ts": microseconds(span["start"]), "dur": microseconds(span["end"] - span["start"]),
            "args": {"iteration": int(iteration), "function": function},
        }
        for iteration, span in spans.iterrows()
    ]


def rate_counters(events: pd.DataFrame) -> list[dict]:
    """Counter samples of the achieved GFLOP/s and GB/s: at every dispatch start and end, the sum of
    the rates of the dispatches running from then on."""
    if events.empty or not (events["gflops_s"].any() or events["gbytes_s"].any()):
        return []
    steps = pd.concat([
        pd.DataFrame({"t": events["start"], "gflops_s": events["gflops_s"], "gbytes_s": events["gbytes_s"]}),
        pd.DataFrame({"t": events["end"], "gflops_s": -events["gflops_s"], "gbytes_s": -events["gbytes_s"]}),
    ]).groupby("t").sum().cumsum().clip(lower=0.0)  # the clip drops float residue (-1e-13) where all ended
    times = [microseconds(t) for t in steps.index.tolist()]
    return [
        {"name": name, "cat": "rate", "ph": "C", "pid": PID, "ts": ts, "args": {"value": round(value, 3)}}
        for column, name in (("gflops_s", "achieved GFLOP/s"), ("gbytes_s", "achieved GB/s"))
        for ts, value in zip(times, steps[column].tolist())
    ]


def thread_track_names(frame: pd.DataFrame, kind: str, note: str) -> pd.Series:
    """``kind · thread (tid N)`` for each row: the runtime's thread name and kernel thread id."""
    names = frame["thread"].astype("string").fillna("?").astype(str)
    tids = frame["tid"].astype("Int64").astype("string").fillna("?").astype(str) if "tid" in frame else pd.Series("?", index=frame.index)
    return f"{kind} · " + names + " (tid " + tids + ")" + note


def thread_tracks(track: pd.Series, first_tid: int) -> tuple[list[dict], dict[str, int]]:
    """Metadata of one track per distinct thread track name, and their tids."""
    out: list[dict] = []
    tids: dict[str, int] = {}
    for position, name in enumerate(sorted(track.unique())):
        tids[name] = first_tid + position
        out.append(metadata("thread_name", first_tid + position, name=name))
        out.append(metadata("thread_sort_index", first_tid + position, sort_index=10_000 + position))
    return out, tids


def workgroup_slices(workgroups: pd.DataFrame, first_tid: int, limit: int = MAX_WORKGROUP_EVENTS) -> tuple[list[dict], dict]:
    """One track per thread of workgroup runs (the earliest ``limit``), and how many were kept."""
    counters = counter_names(workgroups)
    total = len(workgroups)
    kept = workgroups.sort_values("start_ns", kind="stable").head(limit).reset_index(drop=True)
    note = f" (earliest {limit} of {total} workgroup runs)" if total > limit else ""
    track = thread_track_names(kept, "workgroups", note)
    out, tids = thread_tracks(track, first_tid)
    sites = plain(kept["call_site"]) if "call_site" in kept else [None] * len(kept)
    iterations = plain(kept["iteration"]) if "iteration" in kept else [None] * len(kept)
    exports, names = plain(kept["export"].astype("string").fillna("")), plain(track)
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
            "ts": microseconds(starts[row]), "dur": microseconds(durations[row]), "args": args,
        })
    return out, {"workgroup_events": len(kept), "workgroup_events_total": total, "workgroup_events_limit": limit}


def zone_slices(zones: pd.DataFrame, events: pd.DataFrame, first_tid: int, limit: int = MAX_WORKGROUP_EVENTS) -> tuple[list[dict], dict]:
    """One track per thread of the dispatch zones Tracy recorded inside the measured executions (the
    earliest ``limit``), each with the call site and iteration of its execution; and how many were kept."""
    executions = events.dropna(subset=["export"]).assign(export=lambda e: e["export"].astype(str))
    dispatch = zones[zones["name"].astype(str).isin(set(executions["export"]))]
    dispatch = dispatch.assign(export=dispatch["name"].astype(str), start=dispatch["start_ns"].astype(float)).sort_values("start", kind="stable")
    # the execution of a zone: the last one of its export that started before it, if the zone lies inside it
    placed = pd.merge_asof(dispatch, executions[["export", "start", "end", "call_site", "iteration"]].sort_values("start"),
                           on="start", by="export", direction="backward")
    inside = placed[placed["start"].le(placed["end"]) & placed["end"].notna()]
    total = len(inside)
    kept = inside.head(limit).reset_index(drop=True)
    note = f" (earliest {limit} of {total} dispatch zones)" if total > limit else ""
    track = thread_track_names(kept, "dispatch zones", note)
    out, tids = thread_tracks(track, first_tid)
    for row, name in zip(kept.itertuples(index=False), track):
        site = None if pd.isna(row.call_site) else int(row.call_site)
        out.append({
            "name": f"#{site} {short_export(row.export)}", "cat": "zone", "ph": "X", "pid": PID, "tid": tids[name],
            "ts": microseconds(row.start_ns), "dur": microseconds(0 if pd.isna(row.duration_ns) else row.duration_ns),
            "args": {"call_site": site, "export": row.export, "iteration": None if pd.isna(row.iteration) else int(row.iteration),
                     "thread": str(row.thread), "tid": int(row.tid)},
        })
    return out, {"zone_events": len(kept), "zone_events_total": total, "zone_events_limit": limit}


def microseconds(ns: float) -> float:
    """A time in ns as the trace's microseconds (ns precision kept)."""
    return round(float(ns) / 1000.0, 3)


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
    path = Path(path) if path is not None else profile.directory / files.TRACE
    text = json.dumps(trace_events(profile), separators=(",", ":"))
    return write_atomic(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
