"""The hook's tables: per-workgroup calls, dispatches and their push constants, from record files.

Dispatches: each record carries the address of its dispatch's binding table, shared by all
workgroups of the dispatch (IREE's dispatch-state pointer is not: local-task gives each worker
its own copy). The address is reused by later dispatches only once the earlier one completed,
so the calls of one (process, address, export), in start order, are split into dispatches of
``workgroup_count`` calls each; dispatches are numbered by their first start. Times are in ns,
``start_ns`` relative to the earliest hook load among the files read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.atomic import write_atomic
from tracelink.collect.events import make_events
from tracelink.collect.hook_records import COUNTER_MISSING, MAX_NS, RECORD_FILE_GLOB, HookFile, read_hook_file, record_paths, times_ns
from tracelink.errors import TracelinkError

CSV_FILE_NAME = "tracelink_hook_workgroups.csv"

# Columns of the per-workgroup table before the counter columns.
WORKGROUP_COLUMNS: list[str] = [
    "pid",  # process that ran the workgroup
    "export",  # dispatch function name
    "dispatch",  # dispatch number within the process, by first workgroup start
    "workgroup_x",
    "workgroup_y",
    "workgroup_z",
    "workgroup_count_x",  # grid of the dispatch
    "workgroup_count_y",
    "workgroup_count_z",
    "thread",  # thread name, e.g. iree-worker-0
    "tid",  # kernel thread id
    "cpu",  # CPU at the start of the call (sched_getcpu)
    "start_ns",  # relative to the earliest hook load
    "duration_ns",  # wall time of the workgroup call
]


def _split_runs(run_start: np.ndarray, run_id: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Dispatch index within each run of one key's calls (sorted by start): grid-sized chunks."""
    position = np.arange(len(run_id)) - run_start[run_id]
    chunk = position // np.maximum(grid, 1)
    # A key reused by a dispatch with another grid: split that run call by call.
    for run in np.unique(run_id[grid != grid[run_start[run_id]]]):
        first = run_start[run]
        last = run_start[run + 1] if run + 1 < len(run_start) else len(run_id)
        index, dispatch = first, 0
        while index < last:
            size = max(int(grid[index]), 1)
            chunk[index : min(index + size, last)] = dispatch
            index, dispatch = index + size, dispatch + 1
    return chunk


def _dispatch_numbers(records: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Number each record's dispatch (0, 1, ... by first start) from its key and grid."""
    keys, exports = records["dispatch_key"], records["export_id"]
    order = np.lexsort((start, exports, keys))
    sorted_keys, sorted_exports = keys[order], exports[order]
    new_run = np.r_[True, (sorted_keys[1:] != sorted_keys[:-1]) | (sorted_exports[1:] != sorted_exports[:-1])]
    run_id = np.cumsum(new_run) - 1
    grid = (
        records["workgroup_count_x"].astype(np.int64)
        * records["workgroup_count_y"].astype(np.int64)
        * records["workgroup_count_z"].astype(np.int64)
    )[order]
    chunk = _split_runs(np.flatnonzero(new_run), run_id, grid)
    # In this order each dispatch's calls are contiguous and its first call starts first.
    new_dispatch = new_run | np.r_[True, chunk[1:] != chunk[:-1]]
    first_call = np.flatnonzero(new_dispatch)
    rank = np.empty(len(first_call), dtype=np.int64)
    rank[np.lexsort((first_call, start[order][first_call]))] = np.arange(len(first_call))
    numbers = np.empty(len(order), dtype=np.int64)
    numbers[order] = rank[np.cumsum(new_dispatch) - 1]
    return numbers


def _file_dispatches(hook_file: HookFile, origin_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each record's start (ns since ``origin_ns``), duration (ns) and dispatch number.

    The clock's ticks are fractions of a ns: both ends are rounded and the duration is their difference,
    so a workgroup run that ends less than a ns before the next one on its thread starts still ends before
    it (rounded apart, a start and a duration could put its end 1 ns past the next start: slices of one
    thread overlapping in the trace)."""
    assert hook_file.records is not None
    since_load, durations = times_ns(hook_file)
    if abs(hook_file.origin_ns - origin_ns) >= MAX_NS:
        raise TracelinkError(f"{hook_file.path}: corrupt hook record file (load time {hook_file.origin_ns} ns is decades from the other files')")
    started = np.rint(since_load).astype(np.int64)
    start = started + (hook_file.origin_ns - origin_ns)
    return start, np.rint(since_load + durations).astype(np.int64) - started, _dispatch_numbers(hook_file.records, start)


def _file_workgroups(hook_file: HookFile, origin_ns: int) -> pd.DataFrame:
    """The per-workgroup table of one file (counter columns named by event), warm-up dropped."""
    records = hook_file.records
    assert records is not None
    start, durations, dispatch = _file_dispatches(hook_file, origin_ns)
    names = {export.export_id: export.name for export in hook_file.exports if export.export_id is not None}
    thread_tid = {index: tid for index, (tid, _) in hook_file.threads.items()}
    thread_name = {index: name for index, (_, name) in hook_file.threads.items()}
    thread_index = pd.Series(records["thread"])
    frame = pd.DataFrame(
        {
            "pid": np.full(len(records), hook_file.pid, dtype=np.int64),
            "export": pd.array(pd.Series(records["export_id"]).map(names), dtype="string"),
            "dispatch": dispatch,
            **{name: records[name].astype(np.int64) for name in ("workgroup_x", "workgroup_y", "workgroup_z")},
            **{
                name: records[name].astype(np.int64)
                for name in ("workgroup_count_x", "workgroup_count_y", "workgroup_count_z")
            },
            "thread": pd.array(thread_index.map(thread_name), dtype="string"),
            "tid": pd.array(thread_index.map(thread_tid), dtype="Int64"),
            "cpu": records["cpu"].astype(np.int64),
            "start_ns": start,
            "duration_ns": durations,
        }
    )
    for i, event in enumerate(hook_file.event_names):
        values = records[f"counter_{i}"]
        missing = values == COUNTER_MISSING
        frame[event] = pd.arrays.IntegerArray(values.astype(np.int64), missing)
    if hook_file.skip_ns:
        first_start = frame.groupby("dispatch")["start_ns"].transform("min") - (hook_file.origin_ns - origin_ns)
        frame = frame[first_start >= hook_file.skip_ns]
    return frame


def _empty_workgroups(event_names: Sequence[str]) -> pd.DataFrame:
    frame = pd.DataFrame({column: pd.Series(dtype="int64") for column in WORKGROUP_COLUMNS})
    for column in ("export", "thread"):
        frame[column] = frame[column].astype("string")
    frame["tid"] = frame["tid"].astype("Int64")
    for event in event_names:
        frame[event] = pd.Series(dtype="Int64")
    return frame


def _origin_ns(files: Sequence[HookFile]) -> int:
    """The earliest hook load among the files with records: the tables' time origin."""
    return min(f.origin_ns for f in files if f.records is not None)


def workgroups_of(files: Sequence[HookFile]) -> pd.DataFrame:
    """Concatenate the per-workgroup tables of several files, sorted by start."""
    with_records = [f for f in files if f.records is not None and len(f.records)]
    event_names = next((f.event_names for f in files if f.records is not None), [])
    if not with_records:
        return _empty_workgroups(event_names)
    origin_ns = _origin_ns(files)
    frames = [_file_workgroups(f, origin_ns) for f in with_records]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return frame.sort_values(["start_ns", "pid", "dispatch"], kind="stable").reset_index(drop=True)


def dispatch_table(workgroups: pd.DataFrame) -> pd.DataFrame:
    """One row per dispatch (indexed by pid and dispatch key), in start order."""
    frame = workgroups.assign(end_ns=workgroups["start_ns"] + workgroups["duration_ns"])
    keys = ["pid", "dispatch"]
    grouped = frame.groupby(keys, sort=False)
    dispatches = grouped.agg(
        export=("export", "first"),
        start_ns=("start_ns", "min"),
        end_ns=("end_ns", "max"),
        tile_count=("duration_ns", "size"),
        tile_duration_sum_ns=("duration_ns", "sum"),
        count_x=("workgroup_count_x", "first"),
        count_y=("workgroup_count_y", "first"),
        count_z=("workgroup_count_z", "first"),
    )
    threads = (
        frame[keys + ["thread"]]
        .drop_duplicates()
        .sort_values("thread")
        .groupby(keys, sort=False)["thread"]
        .agg(lambda names: ",".join(names.fillna("?").astype(str)))  # "?": a thread no chunk named
    )
    return dispatches.join(threads).sort_values("start_ns", kind="stable")


def dispatch_events(workgroups: pd.DataFrame) -> pd.DataFrame:
    """Aggregate workgroups into per-dispatch events (shared schema), in start order."""
    if workgroups.empty:
        return make_events([])
    dispatches = dispatch_table(workgroups)
    return make_events(
        {
            "collector": "hook",
            "export": dispatches["export"].to_numpy(),
            "start_ns": dispatches["start_ns"].to_numpy(),
            "duration_ns": (dispatches["end_ns"] - dispatches["start_ns"]).to_numpy(),
            "workgroup_count": (dispatches["count_x"] * dispatches["count_y"] * dispatches["count_z"]).to_numpy(),
            "tile_count": dispatches["tile_count"].to_numpy(),
            "tile_duration_sum_ns": dispatches["tile_duration_sum_ns"].to_numpy(),
            "thread": dispatches["thread"].to_numpy(),
        }
    )


def label_workgroups(workgroups: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Copy each dispatch event's ``call_site`` and ``iteration`` onto its workgroups.

    ``events`` are :func:`dispatch_events` of the same workgroups (one row per dispatch, same order),
    after call-site matching.
    """
    order = dispatch_table(workgroups).index.to_frame(index=False)
    order["call_site"] = events["call_site"].to_numpy()
    order["iteration"] = events["iteration"].to_numpy()
    return workgroups.merge(order, on=["pid", "dispatch"], how="left")


def _file_constants(hook_file: HookFile, origin_ns: int) -> pd.DataFrame:
    """(pid, dispatch, constants) of each dispatch of one file whose push constants were recorded:
    an entry belongs to the dispatch of the record with its key, start and export."""
    records = hook_file.records
    assert records is not None
    _, _, dispatch = _file_dispatches(hook_file, origin_ns)
    keys = ["dispatch_key", "start_ticks", "export_id"]
    calls = pd.DataFrame({key: records[key].astype(np.uint64) for key in keys}).assign(dispatch=dispatch)
    entries = pd.DataFrame(
        [(entry.dispatch_key, entry.start_ticks, entry.export_id, entry.values) for entry in hook_file.constants],
        columns=[*keys, "constants"],
    ).astype({key: np.uint64 for key in keys})
    found = entries.merge(calls.drop_duplicates(keys), on=keys)
    return found.assign(pid=hook_file.pid)[["pid", "dispatch", "constants"]]


def dispatch_constants(files: Sequence[HookFile], workgroups: pd.DataFrame) -> pd.Series:
    """Each dispatch's push constants (a tuple of u32 values; None where none were recorded), one per
    row of :func:`dispatch_events` of ``workgroups`` (the files' table), in the same order."""
    order = dispatch_table(workgroups).index.to_frame(index=False) if not workgroups.empty else pd.DataFrame(columns=["pid", "dispatch"])
    with_constants = [f for f in files if f.records is not None and len(f.records) and f.constants]
    if not with_constants:
        return pd.Series([None] * len(order), dtype=object)
    origin_ns = _origin_ns(files)
    found = pd.concat([_file_constants(f, origin_ns) for f in with_constants], ignore_index=True)
    joined = order.merge(found.drop_duplicates(["pid", "dispatch"]), on=["pid", "dispatch"], how="left")
    return pd.Series([value if isinstance(value, tuple) else None for value in joined["constants"]], dtype=object)


def read_hook_records(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a record file or a directory of them: (per-workgroup table, per-dispatch events).

    The per-workgroup table has ``WORKGROUP_COLUMNS`` plus one nullable integer column per
    counter; the events follow ``EVENT_SCHEMA`` with ``collector="hook"``, ordered by start
    (assign call sites with ``match_call_sites``).
    """
    paths = record_paths(path)
    if not paths:
        raise TracelinkError(f"no hook record files ({RECORD_FILE_GLOB}) in {path}")
    workgroups = workgroups_of([read_hook_file(p) for p in paths])
    return workgroups, dispatch_events(workgroups)


def write_workgroups_csv(workgroups: pd.DataFrame, directory: Path) -> Path:
    """Write the per-workgroup table as CSV into an existing directory (IREE_HOOK_OUTPUT_CSV)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TracelinkError(f"IREE_HOOK_OUTPUT_CSV={directory} is not an existing directory")
    path = directory / CSV_FILE_NAME
    return write_atomic(path, lambda temporary: workgroups.to_csv(temporary, index=False))

