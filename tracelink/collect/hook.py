"""The perf hook collector: per-workgroup timing and perf counters from an LD_PRELOAD library.

How it works. ``libtracelink_hook.so`` (built from ``native/`` by ``pip install``) is preloaded
into the command. It interposes ``dlsym`` and, when the IREE runtime looks up
``iree_hal_executable_library_query`` in a system-library executable, wraps the library so
that every workgroup call goes through a trampoline that times it and reads the requested
perf counters around it (about 50 ns per call for timing alone, ~1 us per software counter
read pair: see tests/bench/bench_hook.py). Only executables compiled with
``--iree-llvmcpu-link-embedded=false`` are loaded through ``dlsym``; the default embedded-ELF
format is invisible to the hook. Only the executable-library ABI v0.6 (IREE 3.13) is hooked.

Environment (same names and meaning as IREE's hal_executable_library_call hook):

- ``IREE_HOOK_FILTER_NAME``: fnmatch glob of export names to hook (default: all).
- ``IREE_HOOK_SKIP_START_MS``: dispatches starting earlier than this after the hook loaded
  are left out (whole dispatches: the warm-up).
- ``IREE_HOOK_PERF_EVENT_TYPES``: comma-separated perf events, e.g. ``task-clock,page-faults``
  (``IREE_HOOK_LIST_EVENT_TYPES=1`` lists them). Unknown names are an error; events the
  machine cannot count (hardware events on most VMs) are dropped with a warning. Counter
  values are deltas over the call (task-clock/cpu-clock in ns); each clock event is read
  alone and all others as one group, so one read() per group per sample.
- ``IREE_HOOK_OUTPUT_CSV``: directory where :func:`run_hooked` writes
  ``tracelink_hook_workgroups.csv``, the per-workgroup table with columns
  ``WORKGROUP_COLUMNS`` then one column per counter (named after the event).
- ``IREE_HOOK_BUCKET_COUNT``, ``IREE_HOOK_NO_PROBABILITY_TABLE``, ``IREE_HOOK_GAMMA``: shape of
  the statistics, see :mod:`tracelink.collect.hook_stats`.
- ``TRACELINK_HOOK_OUTPUT`` (set by :func:`run_hooked`): directory of the record files.

The C library only records; statistics are computed here from the records and printed by
``tracelink hook -- CMD`` after the command ends.

Record files: one ``hook-<pid>.tlhk`` per hooked process (format in ``native/hook_output.h``):
a preamble, then chunks (header, exports, threads, records, notices, end) appended during the
run, so a crashed or killed run keeps every chunk written so far (records are buffered per
thread, 8192 at a time, and flushed at thread exit, normal exit and fatal signals such as
SIGTERM/SIGSEGV/SIGABRT when the program left them at their default action; SIGKILL and
``_exit`` lose the unflushed part, and calls still running on other threads when the
process exits are not recorded). A child forked without exec runs unhooked; exec'd children
are hooked and write their own file.

Times: the hook records TSC ticks (or CLOCK_MONOTONIC ns where the TSC is not the kernel's
clocksource) with calibration pairs; both tables are in ns, ``start_ns`` relative to the
earliest hook load among the files read.

Dispatches: each record carries the address of its dispatch's binding table, shared by all
workgroups of the dispatch (IREE's dispatch-state pointer is not: local-task gives each worker
its own copy). The address is reused by later dispatches only once the earlier one completed,
so the calls of one (process, address, export), in start order, are split into dispatches of
``workgroup_count`` calls each; dispatches are numbered by their first start.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.errors import TracelinkError
from tracelink.atomic import make_directory, write_atomic
from tracelink.collect.events import make_events
from tracelink.tools import kill_group, reap, reap_within, signal_name, start_process

HOOK_LIBRARY_NAME = "libtracelink_hook.so"
RECORD_FILE_GLOB = "hook-*.tlhk"
CSV_FILE_NAME = "tracelink_hook_workgroups.csv"
SUPPORTED_ABI_VERSION = 6
STOP_GRACE_S = 5.0

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

_MAGIC = b"TLHOOK\0\0"
_FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sII")
_CHUNK = struct.Struct("<II")
_HEADER = struct.Struct("<IIIIIIQQQ")
_CALIBRATION = struct.Struct("<QQ")
_EXPORT = struct.Struct("<IIII")
_THREAD = struct.Struct("<Ii")
_NOTICE = struct.Struct("<II")
_NOT_HOOKED = 0xFFFFFFFF
_MAX_EVENTS = 16  # TL_MAX_EVENTS in native/hook_events.h
_COUNTER_MISSING = np.uint64(0xFFFFFFFFFFFFFFFF)


class _Chunk(IntEnum):
    """Chunk tags (tl_chunk_tag_t)."""

    HEADER = 1
    EXPORT = 2
    THREAD = 3
    RECORDS = 4
    NOTICE = 5
    END = 6


class _Notice(IntEnum):
    """Notice kinds (tl_notice_kind_t)."""

    UNSUPPORTED_ABI = 1
    EXPORT_LIMIT = 2
    QUERY_LIMIT = 3
    EVENT_DROPPED = 4
    SIGNAL = 5
    CONFIG_ERROR = 6
    COUNTER_FAILED = 7


_RECORD_FIELDS: list[tuple[str, str]] = [
    ("dispatch_key", "<u8"),
    ("start_ticks", "<u8"),
    ("duration_ticks", "<u8"),
    ("export_id", "<u4"),
    ("thread", "<u4"),
    ("workgroup_x", "<u4"),
    ("workgroup_y", "<u4"),
    ("workgroup_count_x", "<u4"),
    ("workgroup_count_y", "<u4"),
    ("workgroup_z", "<u2"),
    ("workgroup_count_z", "<u2"),
    ("cpu", "<i4"),
]


@dataclass(frozen=True)
class HookExport:
    """One export of a queried executable library, hooked or not."""

    export_id: int | None  # None when not hooked (filtered out or over the limit)
    ordinal: int
    abi_version: int
    library: str
    name: str


@dataclass(frozen=True)
class HookNotice:
    """Something the hook reported in the record file (see ``tl_notice_kind_t``)."""

    kind: int
    value: int
    text: str


@dataclass
class HookFile:
    """The parsed content of one record file (one process)."""

    path: Path
    pid: int = 0
    tsc_clock: bool = False  # ticks are TSC ticks (else CLOCK_MONOTONIC ns)
    origin_ticks: int = 0
    origin_ns: int = 0  # CLOCK_MONOTONIC when the hook loaded
    skip_ns: int = 0
    calibration: list[tuple[int, int]] = field(default_factory=list)  # (ticks, ns) pairs
    event_names: list[str] = field(default_factory=list)
    filter: str = ""
    exports: list[HookExport] = field(default_factory=list)
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)  # index -> (tid, name)
    notices: list[HookNotice] = field(default_factory=list)
    records: np.ndarray | None = None
    complete: bool = False  # an END chunk was written (clean exit)


@dataclass(frozen=True)
class HookRun:
    """A command run under the hook and what it recorded."""

    command: list[str]
    output_dir: Path
    record_files: list[Path]
    returncode: int
    elapsed_s: float
    event_names: list[str]  # counters actually recorded (after dropping unavailable ones)
    workgroups: pd.DataFrame  # WORKGROUP_COLUMNS + one column per counter
    events: pd.DataFrame  # per-dispatch events in the shared EVENT_SCHEMA
    warnings: list[str]  # hook notices worth showing (dropped events, limits, ...)


def hook_library_path() -> Path:
    """Return the hook library installed in the tracelink package."""
    path = Path(__file__).resolve().parent.parent / HOOK_LIBRARY_NAME
    if not path.is_file():
        raise TracelinkError(
            f"the hook library {path} is missing: reinstall tracelink (`pip install -e .` builds it "
            "from native/ with the system C compiler)"
        )
    return path


def list_event_types() -> str:
    """Return the hook's list of accepted perf event names (IREE_HOOK_LIST_EVENT_TYPES)."""
    env = dict(os.environ, LD_PRELOAD=str(hook_library_path()), IREE_HOOK_LIST_EVENT_TYPES="1")
    probe = shutil.which("true")
    command = [probe] if probe else [sys.executable, "-c", ""]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return result.stdout


# --------------------------------------------------------------------------------------------
# Reading record files
# --------------------------------------------------------------------------------------------


def _split_strings(payload: bytes, count: int | None = None) -> list[str]:
    """Split NUL-terminated strings (all of them, or the first ``count``)."""
    parts = payload.split(b"\0")
    parts = parts[:-1] if count is None else parts[:count]
    return [part.decode("utf-8", "replace") for part in parts]


def _record_dtype(event_count: int) -> np.dtype:
    """The numpy layout of one record with ``event_count`` counters."""
    return np.dtype(_RECORD_FIELDS + [(f"counter_{i}", "<u8") for i in range(event_count)])


def _parse_header(hook_file: HookFile, payload: bytes) -> np.dtype:
    fields = _HEADER.unpack_from(payload)
    pid, event_count, record_size, _max_exports, clock, _, origin_ticks, origin_ns, skip_ns = fields
    if event_count > _MAX_EVENTS:
        raise TracelinkError(f"{hook_file.path}: corrupt header ({event_count} counters)")
    strings = _split_strings(payload[_HEADER.size :], event_count + 1)
    hook_file.pid, hook_file.tsc_clock, hook_file.skip_ns = pid, bool(clock), skip_ns
    hook_file.origin_ticks, hook_file.origin_ns = origin_ticks, origin_ns
    hook_file.event_names, hook_file.filter = strings[:event_count], strings[event_count]
    dtype = _record_dtype(event_count)
    if dtype.itemsize != record_size:
        raise TracelinkError(f"{hook_file.path}: record size {record_size} does not match this tracelink")
    return dtype


def _parse_export(payload: bytes) -> HookExport:
    export_id, ordinal, flags, abi_version = _EXPORT.unpack_from(payload)
    library, name = _split_strings(payload[_EXPORT.size :], 2)
    hooked = bool(flags & 1) and export_id != _NOT_HOOKED
    return HookExport(export_id if hooked else None, ordinal, abi_version, library, name)


def read_hook_file(path: Path) -> HookFile:
    """Parse one record file; a truncated last chunk (killed process) is ignored, a damaged one refused."""
    data = Path(path).read_bytes()
    try:
        return _check_times(_parse_hook_file(Path(path), data))
    except (struct.error, ValueError, IndexError, KeyError, OverflowError, MemoryError) as error:
        raise TracelinkError(f"{path}: corrupt hook record file ({type(error).__name__}: {error})") from None


def _parse_hook_file(path: Path, data: bytes) -> HookFile:
    """The chunks of a record file's bytes; malformed chunks raise what struct/numpy raise."""
    hook_file = HookFile(path=path)
    if len(data) < _PREAMBLE.size:
        return hook_file
    magic, version, _ = _PREAMBLE.unpack_from(data)
    if magic != _MAGIC or version != _FORMAT_VERSION:
        raise TracelinkError(f"{path} is not a tracelink hook record file of format {_FORMAT_VERSION}")
    dtype: np.dtype | None = None
    record_chunks: list[bytes] = []
    offset = _PREAMBLE.size
    while offset + _CHUNK.size <= len(data):
        tag, length = _CHUNK.unpack_from(data, offset)
        start, offset = offset + _CHUNK.size, offset + _CHUNK.size + length
        if offset > len(data):
            break
        payload = data[start:offset]
        if tag == _Chunk.HEADER:
            dtype = _parse_header(hook_file, payload)
        elif tag == _Chunk.EXPORT:
            hook_file.exports.append(_parse_export(payload))
        elif tag == _Chunk.THREAD:
            index, tid = _THREAD.unpack_from(payload)
            hook_file.threads[index] = (tid, _split_strings(payload[_THREAD.size :], 1)[0])
        elif tag == _Chunk.RECORDS and dtype is not None:
            hook_file.calibration.append(_CALIBRATION.unpack_from(payload))
            records = payload[_CALIBRATION.size :]
            record_chunks.append(records[: len(records) - len(records) % dtype.itemsize])
        elif tag == _Chunk.NOTICE:
            kind, value = _NOTICE.unpack_from(payload)
            hook_file.notices.append(HookNotice(kind, value, _split_strings(payload[_NOTICE.size :], 1)[0]))
        elif tag == _Chunk.END:
            hook_file.calibration.append(_CALIBRATION.unpack_from(payload))
            hook_file.complete = True
    if dtype is not None:
        hook_file.records = np.frombuffer(b"".join(record_chunks), dtype=dtype)
    return hook_file


def _record_paths(path: Path) -> list[Path]:
    """A record file, or every record file in a directory."""
    path = Path(path)
    return sorted(path.glob(RECORD_FILE_GLOB)) if path.is_dir() else [path]


_MAX_NS = 2.0**61  # 73 years: any time or duration beyond is a damaged field


def _ns_per_tick(hook_file: HookFile) -> float:
    """The tick length, from the load-time clock pair and the latest later pair."""
    if not hook_file.tsc_clock:
        return 1.0
    ticks, ns = max(hook_file.calibration, default=(hook_file.origin_ticks, hook_file.origin_ns))
    if ticks <= hook_file.origin_ticks or ns <= hook_file.origin_ns:
        raise TracelinkError(f"{hook_file.path}: no clock calibration after the hook loaded")
    return (ns - hook_file.origin_ns) / (ticks - hook_file.origin_ticks)


def _times_ns(hook_file: HookFile) -> tuple[np.ndarray, np.ndarray]:
    """Each record's start since the hook loaded and its duration, in ns (floats)."""
    records = hook_file.records
    assert records is not None
    ns_per_tick = _ns_per_tick(hook_file)
    since_load = (records["start_ticks"].astype(np.int64) - hook_file.origin_ticks) * ns_per_tick
    return since_load, records["duration_ticks"] * ns_per_tick


def _check_times(hook_file: HookFile) -> HookFile:
    """Refuse clock fields that give times no run has (a damaged file): cast to int64 later, they would be garbage."""
    if hook_file.records is not None and len(hook_file.records):
        since_load, durations = _times_ns(hook_file)
        if not (np.all(np.abs(since_load) < _MAX_NS) and np.all(np.abs(durations) < _MAX_NS)):
            raise TracelinkError(f"{hook_file.path}: corrupt hook record file (clock values out of range)")
    return hook_file


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


def _file_workgroups(hook_file: HookFile, origin_ns: int) -> pd.DataFrame:
    """The per-workgroup table of one file (counter columns named by event), warm-up dropped."""
    records = hook_file.records
    assert records is not None
    since_load, durations = _times_ns(hook_file)
    if abs(hook_file.origin_ns - origin_ns) >= _MAX_NS:
        raise TracelinkError(f"{hook_file.path}: corrupt hook record file (load time {hook_file.origin_ns} ns is decades from the other files')")
    start = np.rint(since_load).astype(np.int64) + (hook_file.origin_ns - origin_ns)
    dispatch = _dispatch_numbers(records, start)
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
            "duration_ns": np.rint(durations).astype(np.int64),
        }
    )
    for i, event in enumerate(hook_file.event_names):
        values = records[f"counter_{i}"]
        missing = values == _COUNTER_MISSING
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


def _workgroups_of(files: Sequence[HookFile]) -> pd.DataFrame:
    """Concatenate the per-workgroup tables of several files, sorted by start."""
    with_records = [f for f in files if f.records is not None and len(f.records)]
    event_names = next((f.event_names for f in files if f.records is not None), [])
    if not with_records:
        return _empty_workgroups(event_names)
    origin_ns = min(f.origin_ns for f in files if f.records is not None)
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


def read_hook_records(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a record file or a directory of them: (per-workgroup table, per-dispatch events).

    The per-workgroup table has ``WORKGROUP_COLUMNS`` plus one nullable integer column per
    counter; the events follow ``EVENT_SCHEMA`` with ``collector="hook"``, ordered by start
    (assign call sites with ``match_call_sites``).
    """
    paths = _record_paths(path)
    if not paths:
        raise TracelinkError(f"no hook record files ({RECORD_FILE_GLOB}) in {path}")
    workgroups = _workgroups_of([read_hook_file(p) for p in paths])
    return workgroups, dispatch_events(workgroups)


def write_workgroups_csv(workgroups: pd.DataFrame, directory: Path) -> Path:
    """Write the per-workgroup table as CSV into an existing directory (IREE_HOOK_OUTPUT_CSV)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TracelinkError(f"IREE_HOOK_OUTPUT_CSV={directory} is not an existing directory")
    path = directory / CSV_FILE_NAME
    return write_atomic(path, lambda temporary: workgroups.to_csv(temporary, index=False))


# --------------------------------------------------------------------------------------------
# Running a command under the hook
# --------------------------------------------------------------------------------------------


def _prepare_output_dir(output_dir: Path) -> Path:
    """Create the output directory, check it is writable and remove stale record files."""
    output_dir = Path(output_dir).absolute()
    try:
        make_directory(output_dir)
        with tempfile.TemporaryFile(dir=output_dir):
            pass
    except OSError as error:
        raise TracelinkError(f"cannot write hook records to {output_dir}: {error.strerror}") from error
    for stale in output_dir.glob(RECORD_FILE_GLOB):
        stale.unlink()
    return output_dir


def _hooked_environment(
    base: Mapping[str, str], output_dir: Path, events: Sequence[str] | None, filter: str | None
) -> dict[str, str]:
    """The command's environment: the hook preloaded, and its settings."""
    env = dict(base)
    preload = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{hook_library_path()} {preload}".strip()
    env["TRACELINK_HOOK_OUTPUT"] = str(output_dir)
    env.pop("IREE_HOOK_LIST_EVENT_TYPES", None)  # it would make the command exit at once
    if events is not None:
        env["IREE_HOOK_PERF_EVENT_TYPES"] = ",".join(events)
    if filter is not None:
        env["IREE_HOOK_FILTER_NAME"] = filter
    return env


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the command's process group (the hook flushes on it), SIGKILL if it lingers."""
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        kill_group(process, signal_number)
        try:
            reap_within(process, STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _execute(command: list[str], env: dict[str, str], timeout_s: float | None) -> tuple[int, bool]:
    """Run the command in its own process group; return (returncode, timed_out)."""
    try:
        process = start_process(command, env=env)
    except OSError as error:
        raise TracelinkError(f"cannot run {command[0]}: {error.strerror}") from error
    try:
        return reap_within(process, timeout_s), False
    except subprocess.TimeoutExpired:
        _stop(process)
        return process.returncode, True
    except BaseException:
        kill_group(process)  # an interrupt: no grace period, it must stop within the 2 s promised
        reap(process)
        raise


def _notice_lines(files: Sequence[HookFile]) -> list[str]:
    """Human-readable lines for the notices worth showing."""
    lines: list[str] = []
    for hook_file in files:
        for notice in hook_file.notices:
            if notice.kind == _Notice.EVENT_DROPPED:
                lines.append(f"perf event dropped: {notice.text}")
            elif notice.kind == _Notice.UNSUPPORTED_ABI:
                lines.append(
                    f"library {notice.text!r} has executable-library ABI version {notice.value}; "
                    f"only {SUPPORTED_ABI_VERSION} is hooked, it ran unhooked"
                )
            elif notice.kind == _Notice.EXPORT_LIMIT:
                lines.append(f"more than {notice.value} exports: {notice.text!r} and later ones ran unhooked")
            elif notice.kind == _Notice.QUERY_LIMIT:
                lines.append(f"more than {notice.value} executable libraries: later ones ran unhooked")
            elif notice.kind == _Notice.COUNTER_FAILED:
                lines.append(f"some counters could not be opened in thread {notice.text!r}; missing there")
            elif notice.kind == _Notice.SIGNAL:
                lines.append(f"process {hook_file.pid} ended by signal {notice.value}; records flushed")
    return list(dict.fromkeys(lines))


def _describe_exit(command: Sequence[str], returncode: int) -> str:
    if returncode < 0:
        return f"{command[0]} crashed ({signal_name(-returncode)})"
    return f"{command[0]} exited with status {returncode}"


def _no_records_message(files: Sequence[HookFile], filter: str | None) -> str:
    """Why nothing was recorded, as one actionable line."""
    exports = [export for f in files for export in f.exports]
    unsupported = {n.value for f in files for n in f.notices if n.kind == _Notice.UNSUPPORTED_ABI}
    if not exports and unsupported:
        versions = ", ".join(str(v) for v in sorted(unsupported))
        return (
            f"no dispatch recorded: the executables use executable-library ABI version {versions}, "
            f"the hook supports only version {SUPPORTED_ABI_VERSION} (IREE 3.13 runtime and compiler)"
        )
    if not exports:
        return (
            "no dispatch recorded: the hook saw no executable library loaded through dlsym. Modules "
            "compiled with the default embedded ELF are invisible to it: recompile with "
            "--iree-llvmcpu-link-embedded=false (llvm-cpu target, local-task or local-sync device)"
        )
    if not any(export.export_id is not None for export in exports):
        names = ", ".join(dict.fromkeys(export.name for export in exports))
        return f"no dispatch recorded: filter {filter!r} matched none of the exports ({names})"
    return "no dispatch recorded: the hooked exports were never called (or only before IREE_HOOK_SKIP_START_MS)"


def run_hooked(
    command: list[str],
    output_dir: Path,
    events: list[str] | None = None,
    filter: str | None = None,
    timeout_s: float | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> HookRun:
    """Run ``command`` under the hook and read what it recorded.

    ``events``/``filter`` override IREE_HOOK_PERF_EVENT_TYPES/IREE_HOOK_FILTER_NAME from ``env``
    (default: this process's environment). The command's output is not captured. Record files
    go to ``output_dir`` (stale ones are removed first) and stay there even when this raises
    TracelinkError: hook configuration error, nothing recorded, non-zero exit, crash, timeout.
    """
    if not command:
        raise TracelinkError("no command to run under the hook")
    base = os.environ if env is None else env
    output_dir = _prepare_output_dir(output_dir)
    started = time.monotonic()
    returncode, timed_out = _execute(list(command), _hooked_environment(base, output_dir, events, filter), timeout_s)
    elapsed_s = time.monotonic() - started

    paths = sorted(output_dir.glob(RECORD_FILE_GLOB))
    files = [read_hook_file(path) for path in paths]
    for hook_file in files:
        for notice in hook_file.notices:
            if notice.kind == _Notice.CONFIG_ERROR:
                raise TracelinkError(f"hook configuration: {notice.text}")
    workgroups = _workgroups_of(files)
    kept = f"{len(workgroups)} workgroup records kept in {output_dir}"
    if timed_out:
        raise TracelinkError(f"{command[0]} timed out after {timeout_s:g} s and was stopped; {kept}")
    if returncode != 0:
        raise TracelinkError(f"{_describe_exit(command, returncode)}; {kept}")
    if workgroups.empty:
        raise TracelinkError(_no_records_message(files, filter if filter is not None else base.get("IREE_HOOK_FILTER_NAME")))
    csv_dir = base.get("IREE_HOOK_OUTPUT_CSV")
    if csv_dir:
        write_workgroups_csv(workgroups, Path(csv_dir))
    event_names = next(f.event_names for f in files if f.records is not None and len(f.records))
    return HookRun(
        command=list(command),
        output_dir=output_dir,
        record_files=paths,
        returncode=returncode,
        elapsed_s=elapsed_s,
        event_names=list(event_names),
        workgroups=workgroups,
        events=dispatch_events(workgroups),
        warnings=_notice_lines(files),
    )
