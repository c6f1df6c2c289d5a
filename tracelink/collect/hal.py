"""HAL profiling collector: run the program under IREE's HAL profiler and read the bundle.

``iree-benchmark-module`` runs the function for warm-up + N repetitions with
``--device_profiling_mode=host-execution,...`` and writes a ``.ireeprof`` bundle;
``iree-profile export --format=ireeperf-jsonl`` turns it into JSON lines, whose
``host_execution_event`` / ``op=dispatch`` records are the dispatches. Each record is matched to its
call site through its command buffer and command index (the command buffer's dispatches, listed by
its ``command_operation`` records, are a contiguous run of the host program's call sites); records
that cannot be placed that way fall back to order (:func:`match_call_sites`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tracelink.errors import TracelinkError
from tracelink.collect.events import make_events, match_call_sites
from tracelink.collect.hal_losses import submission_iterations
from tracelink.iree_tools import benchmark_command, benchmark_times_ns, profile_export_command
from tracelink.tools import ToolRun
from tracelink.profile_dir import files

SCHEMA_VERSION = 15
MEMORY_MODE = "memory-events"  # queue allocations and their pools: a few records per call, in a stream of their own
# Dispatches (host-execution), their submissions (queue-events), exports (executable-metadata) and the
# first call's memory (tracelink.collect.memory.first_call). Not command-region-events: the task
# executor's regions, nothing tracelink reads, are a large share of a run's records and of its export's bytes.
PROFILING_MODES = f"host-execution,queue-events,executable-metadata,{MEMORY_MODE}"
RUN_BUNDLE = "run.ireeprof"  # the timed run's bundle, in the artifacts
BENCHMARK_REPORT = "benchmark.json"  # the benchmark tool's own timing of the profiled calls (Google Benchmark's JSON)


def wall_ns_per_call(output_dir: Path) -> float | None:
    """The profiled run's wall time per call of the function (ns), as the benchmark tool timed it: the
    mean over every call, warm-up included, with the profiler on; None without a report."""
    path = output_dir / BENCHMARK_REPORT
    times = benchmark_times_ns(path.read_text(errors="replace")) if path.is_file() else []
    return times[0] if times else None


def start_hal_profile(
    vmfb: Path, function: str, inputs: Sequence[str], parameters: Sequence[str], iterations: int, output_dir: Path,
    device: str = "local-task", modes: str = PROFILING_MODES, profiling_flags: Sequence[str] = (),
) -> ToolRun:
    """Start the program under the HAL profiler on ``device``, writing ``run.ireeprof`` in ``output_dir``."""
    command = benchmark_command(vmfb, function, inputs, parameters, iterations, device) + [
        f"--device_profiling_mode={modes}", f"--device_profiling_output={output_dir / RUN_BUNDLE}", *profiling_flags,
        f"--benchmark_out={output_dir / BENCHMARK_REPORT}", "--benchmark_out_format=json",
    ]
    archives = f" with parameters {', '.join(parameters)}" if parameters else ""  # the runtime's errors name no archive
    return ToolRun(command, output_dir / files.RUN_LOG, f"iree-benchmark-module on {vmfb.name}{archives}")


def export_hal_profile(run: ToolRun, output_dir: Path, timeout_s: float) -> Path:
    """Wait for the profiled run, export its bundle as JSON lines and return their path."""
    run.wait(timeout_s)
    return export_bundle(output_dir, timeout_s)


def export_bundle(output_dir: Path, timeout_s: float) -> Path:
    """``iree-profile export`` of ``output_dir/run.ireeprof`` to ``run.jsonl`` (ireeperf-jsonl)."""
    bundle, exported = output_dir / RUN_BUNDLE, output_dir / "run.jsonl"
    if not bundle.is_file():  # the profiler writes its bundle once the device ran something
        raise TracelinkError(f"{bundle}: the run wrote no HAL profile: the function ran no dispatch, so there is nothing to profile "
                             "(a function that only returns or reshapes its inputs)")
    ToolRun(profile_export_command(bundle, exported), output_dir / "export.log", f"iree-profile export of {bundle}").wait(timeout_s)
    return exported


def read_records(jsonl: Path) -> list[dict]:
    """The records of an ireeperf-jsonl export, checking its schema version."""
    lines = jsonl.read_text().splitlines()
    try:  # the lines as one JSON array, parsed in one call rather than one call per line
        records = json.loads(f"[{','.join(lines)}]")
    except json.JSONDecodeError:
        records = []
    if len(records) != len(lines) or not all(isinstance(record, dict) for record in records):  # say which line is not one record
        records = [one_record(jsonl, number, line) for number, line in enumerate(lines, 1)]
    for number, record in enumerate(records, 1):
        version = record.get("schema_version")
        if version != SCHEMA_VERSION:
            raise TracelinkError(f"{jsonl}:{number}: ireeperf-jsonl schema_version {version}, tracelink reads {SCHEMA_VERSION}")
    return records


def one_record(jsonl: Path, number: int, line: str) -> dict:
    """Line ``number`` of an ireeperf-jsonl export, which must hold one JSON object."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise TracelinkError(f"{jsonl}:{number}: not JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise TracelinkError(f"{jsonl}:{number}: not one ireeperf-jsonl record")
    return record


@dataclass
class HalRecords:
    """The records of a HAL profile that tracelink reads, from one pass over its export."""

    dispatches: list[dict]  # host_execution_event dispatches, in start order: the events' row order (:func:`dispatch_events`)
    commands: dict[int, list[tuple[int, str]]]  # command buffer -> its dispatch commands (index, export)
    executes: dict[int, list[int]]  # command buffer -> the submissions that executed it
    memory_events: list[dict]


def read_hal_records(jsonl: Path) -> HalRecords:
    """The dispatch, command, execution and memory records of an exported HAL profile."""
    records = HalRecords([], {}, {}, [])
    for record in read_records(jsonl):
        kind, op = record.get("record_type"), record.get("op")
        if kind == "host_execution_event" and op == "dispatch":
            records.dispatches.append(record)
        elif kind == "command_operation" and op == "dispatch":
            records.commands.setdefault(record["command_buffer_id"], []).append((record["command_index"], record["key"]))
        elif kind == "queue_event" and op == "execute":
            records.executes.setdefault(record["command_buffer_id"], []).append(record["submission_id"])
        elif kind == "memory_event":
            records.memory_events.append(record)
    records.dispatches.sort(key=lambda r: r["start_host_time_ns"])
    return records


def hal_events(jsonl: Path, call_site_exports: Sequence[str], calls: int | None = None) -> pd.DataFrame:
    """Dispatch events of a HAL profile, matched to call sites; with ``calls``, the number of calls of the function run."""
    return dispatch_events(read_hal_records(jsonl), call_site_exports, calls)


def dispatch_events(records: HalRecords, call_site_exports: Sequence[str], calls: int | None = None) -> pd.DataFrame:
    """The dispatch events of ``records``, one row per dispatch record in order, matched to call sites (see :func:`hal_events`)."""
    dispatches = records.dispatches
    if not dispatches:
        return make_events([])
    origin = dispatches[0]["start_host_time_ns"]
    events = make_events({  # by column: a frame of 4,664 rows built from dicts took twice as long
        "collector": ["hal"] * len(dispatches), "export": [r["key"] for r in dispatches],
        "start_ns": [r["start_host_time_ns"] - origin for r in dispatches], "duration_ns": [r["duration_ns"] for r in dispatches],
        "workgroup_count": [math.prod(r["workgroup_count"]) for r in dispatches],
        "tile_count": [r.get("tile_count") for r in dispatches], "tile_duration_sum_ns": [r.get("tile_duration_sum_ns") for r in dispatches],
        "queue": [f"device {r['physical_device_ordinal']} queue {r['queue_ordinal']}" for r in dispatches],
    })
    placed = place_by_command_index(dispatches, records.commands, call_site_exports)
    if placed is None:
        events = match_call_sites(events, call_site_exports)
    else:
        events["call_site"] = pd.array(placed, dtype="Int64")
        iterations = submission_iterations(dispatches, records.executes, calls) if calls else None
        events["iteration"] = pd.array(iterations, dtype="Int64") if iterations is not None else events.groupby("call_site").cumcount().astype("Int64")
    return events


def place_by_command_index(dispatches: list[dict], commands: dict[int, list[tuple[int, str]]], call_site_exports: Sequence[str]) -> list[int] | None:
    """Call site of each dispatch record from its command buffer and command index, or None if any cannot be placed."""
    offsets: dict[int, tuple[int, dict[int, int]]] = {}
    next_start = 0
    for record in dispatches:
        buffer = record["command_buffer_id"]
        if buffer in offsets or buffer not in commands:
            continue
        listed = sorted(commands[buffer])
        exports = [export for _, export in listed]
        start = find_run(call_site_exports, exports, next_start)
        if start is None:
            return None
        offsets[buffer] = (start, {index: k for k, (index, _) in enumerate(listed)})
        next_start = (start + len(exports)) % max(len(call_site_exports), 1)
    placed = []
    for record in dispatches:
        entry = offsets.get(record["command_buffer_id"])
        if entry is None or record["command_index"] not in entry[1]:
            return None
        placed.append(entry[0] + entry[1][record["command_index"]])
    return placed


def find_run(sequence: Sequence[str], run: list[str], start: int) -> int | None:
    """Where ``run`` occurs as a contiguous slice of ``sequence``, searching from ``start`` then from 0."""
    for begin in (*range(start, len(sequence)), *range(0, start)):
        if list(sequence[begin : begin + len(run)]) == run:
            return begin
    return None
