"""Choose and run a collector: HAL profiling, a Tracy capture, or the perf hook.

A collection starts before the provenance graph exists (the program runs while tracelink builds the
graph) and finishes once the call sites are known: then its raw records become events matched to
call sites, without the warm-up iterations. Every collector lands in the shared event schema; the
Tracy collector also keeps all the runtime's zones, the hook every workgroup call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tracelink.collect.events import drop_warmup, match_call_sites
from tracelink.collect.device_events import DEVICE_PROFILING_MODES, device_events, device_time_summary
from tracelink.iree_tools import BENCHMARK_TOOL, benchmark_command
from tracelink.collect.hal import RUN_BUNDLE, dispatch_events, export_hal_profile, place_by_command_index, read_hal_records, read_records, start_hal_profile
from tracelink.collect.hal_losses import DISPATCH_STREAM, FLUSH_FLAGS, FLUSH_INTERVAL_MS, dropped_records
from tracelink.collect.hook import run_hooked
from tracelink.collect.hook_tables import label_workgroups
from tracelink.collect.memory import MemoryCapture, first_call
from tracelink.collect.tracy import capture_tracy, read_capture, rebuild_executions, tracy_tools
from tracelink.collect.tracy.gpu import gpu_executions
from tracelink.compile.targets import device_target
from tracelink.errors import TracelinkError, first_line
from tracelink.tools import InBackground, ToolRun
from tracelink.profile_dir import files


@dataclass
class RunRequest:
    """What to run: the same for every collector."""

    vmfb: Path
    function: str
    inputs: list[str]
    parameters: list[str]
    iterations: int  # warm-up included
    artifacts: Path
    timeout_s: float
    hook_events: list[str] = field(default_factory=list)
    device: str = "local-task"


@dataclass
class Collected:
    """Events matched to call sites, and what else the collector recorded."""

    events: pd.DataFrame
    workgroups: pd.DataFrame | None = None  # hook: one row per workgroup call
    zones: pd.DataFrame | None = None  # tracy: every zone of the runtime
    summary: dict = field(default_factory=dict)  # what the collector adds to the profile's summary
    iteration_times: pd.DataFrame | None = None  # GPU: device, queue and host time per iteration
    memory: MemoryCapture | None = None  # the first call's queue allocations, where the run recorded them


class PendingCollection:
    """A collector running in the background (:class:`~tracelink.tools.InBackground`); ``records_memory``:
    whether its run records the memory events of a call (:attr:`Collected.memory`), so that none need a
    run of their own."""

    def __init__(self, run: Callable[[], object], finish: Callable[[object, Sequence[str]], Collected], records_memory: bool = False) -> None:
        self._run = InBackground(run, "tracelink-collect")
        self._finish = finish
        self.records_memory = records_memory

    def finish(self, call_site_exports: Sequence[str], warmup: int, ended: Callable[[], None] = lambda: None) -> Collected:
        """Wait for the run; match its events to the run-phase call sites and drop the warm-up. ``ended``
        is called once the run's tools have ended (the caller may start its next tool then), before the
        events are read.

        An interrupt while waiting stops the run first: waiting for the thread would wait for the program.
        """
        run = self._run.result()
        ended()
        collected = self._finish(run, call_site_exports)
        collected.events = drop_warmup(collected.events, warmup)
        if collected.workgroups is not None:
            collected.workgroups = drop_warmup(collected.workgroups, warmup)
        if collected.iteration_times is not None:
            collected.iteration_times = drop_warmup(collected.iteration_times, warmup)
            collected.summary |= device_time_summary(collected.iteration_times)
        return collected

    def cancel(self) -> None:
        """Kill the run's tools (their whole process groups) and wait for the thread, which then ends."""
        self._run.cancel()


def start_collection(collector: str, request: RunRequest) -> PendingCollection:
    """Start running the program under ``collector`` ("hal", "tracy" or "hook")."""
    if collector == "hal" and device_target(request.device).is_gpu:
        return start_device_profile(request)
    if collector == "hal":
        run = start_hal_profile(request.vmfb, request.function, request.inputs, request.parameters, request.iterations, request.artifacts, request.device)
        return PendingCollection(lambda: run_hal_whole(run, request), lambda result, exports: hal_collected(*result, exports, request.iterations),
                                 records_memory=True)
    if collector == "tracy":
        return start_tracy(request)
    if collector == "hook":
        return start_hook(request)
    raise ValueError(f"unknown collector {collector!r}")


def hal_collected(jsonl: Path, summary: dict, call_site_exports: Sequence[str], calls: int) -> Collected:
    """The dispatch events of an exported HAL profile of ``calls`` calls, and its first call's memory."""
    records = read_hal_records(jsonl)
    events = dispatch_events(records, call_site_exports, calls)
    placed = [None if pd.isna(call) else int(call) for call in events["iteration"]]
    memory = first_call(records.memory_events, records.dispatches, placed, RUN_BUNDLE)
    return Collected(events, summary=summary, memory=memory)


def run_hal_whole(first: ToolRun, request: RunRequest) -> tuple[Path, dict]:
    """The exported HAL profile and what to say about its losses; a run that lost dispatch records is run
    again with IREE's rings flushed during the calls (slower dispatches, so only when needed)."""
    jsonl = export_hal_profile(first, request.artifacts, request.timeout_s)
    dropped = dropped_records(jsonl)
    if not dropped.get(DISPATCH_STREAM):
        return jsonl, {"profiler_dropped_records": dropped}

    def flushed_run() -> ToolRun:
        return start_hal_profile(request.vmfb, request.function, request.inputs, request.parameters, request.iterations,
                                 request.artifacts, request.device, profiling_flags=FLUSH_FLAGS)

    jsonl, retaken = export_or_rerun_on_loss(flushed_run(), flushed_run, request)
    return jsonl, retaken | {
        "profiler_dropped_records": dropped_records(jsonl),
        "profiler_flushed": {"interval_ms": FLUSH_INTERVAL_MS, "first_run_dropped_records": dropped},
    }


def start_device_profile(request: RunRequest) -> PendingCollection:
    """The HAL profiler on a GPU: device-timestamped dispatches, and the queue and host time around them."""
    def device_run() -> ToolRun:
        return start_hal_profile(request.vmfb, request.function, request.inputs, request.parameters, request.iterations,
                                 request.artifacts, request.device, DEVICE_PROFILING_MODES)

    first = device_run()

    def finish(result: tuple[Path, dict], exports: Sequence[str]) -> Collected:
        events, times = device_events(list(read_records(result[0])), exports, place_by_command_index)
        return Collected(events, iteration_times=times, summary=result[1])

    return PendingCollection(lambda: export_or_rerun_on_loss(first, device_run, request), finish)


# IREE's profiler fails a run with DATA_LOSS in two ways that come from the run, not the program, so such a
# run is taken once more instead of losing the profile:
# - Vulkan (lavapipe, once in CI on clip_text_toy_f32, in none of 30 runs here): a dispatch whose end
#   timestamp reads before its start, a glitch of the driver's clock.
# - local-task with a flush interval (once in CI on tests/test_event_completeness.py's chain): the bundle
#   has a record cut by another. IREE 3.13's tooling thread writes the event rings to the file sink under
#   the recorder's flush mutex, while a command buffer's or executable's metadata is written from the
#   calling thread without it (hal/local/profile.c, record_command_buffer), and the sink has no lock of its own.
PROFILE_LOSS = "DATA_LOSS"


def export_or_rerun_on_loss(first: ToolRun, start_again: Callable[[], ToolRun], request: RunRequest) -> tuple[Path, dict]:
    """The exported HAL profile of ``first``; one the profiler failed with :data:`PROFILE_LOSS` is run once
    more by ``start_again`` (the failed run's log kept as ``run.failed.log``), and the summary says so."""
    try:
        return export_hal_profile(first, request.artifacts, request.timeout_s), {}
    except TracelinkError as error:
        if PROFILE_LOSS not in str(error):
            raise
        failure = first_line(error)
    (request.artifacts / files.RUN_LOG).replace(request.artifacts / "run.failed.log")
    return export_hal_profile(start_again(), request.artifacts, request.timeout_s), {"profiler_rerun_after": failure}


def start_tracy(request: RunRequest) -> PendingCollection:
    command = benchmark_command(request.vmfb, request.function, request.inputs, request.parameters, request.iterations, request.device)
    command[0] = str(tracy_tools().tool(BENCHMARK_TOOL))
    trace = request.artifacts / "run.tracy"

    rebuild = gpu_executions if device_target(request.device).is_gpu else rebuild_executions

    def finish(path: Path, exports: Sequence[str]) -> Collected:
        capture = read_capture(path)
        rebuilt = rebuild(capture, exports)
        return Collected(rebuilt.events, zones=capture.zones, summary=rebuilt.summary())

    return PendingCollection(lambda: capture_tracy(command, trace, request.timeout_s), finish)


def start_hook(request: RunRequest) -> PendingCollection:
    command = benchmark_command(request.vmfb, request.function, request.inputs, request.parameters, request.iterations, request.device)

    def finish(hooked, exports: Sequence[str]) -> Collected:
        events = match_call_sites(hooked.events, exports)
        return Collected(events, workgroups=label_workgroups(hooked.workgroups, events))

    return PendingCollection(
        lambda: run_hooked(command, request.artifacts / "hook", request.hook_events or None, timeout_s=request.timeout_s,
                           log=request.artifacts / files.RUN_LOG),
        finish,
    )
