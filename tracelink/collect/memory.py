"""Memory events of one call: the queue allocations of the timed run's first call, or of a run of its own.

With the HAL collector on the CPU, the timed run records memory events beside its dispatches
(``memory-events`` among :data:`tracelink.collect.hal.PROFILING_MODES`: a few records per call, in a
stream of their own, which left the BERT's dispatch time per call unchanged, 10 alternated pairs), and
the peak is its first call's (:func:`first_call`): ``iree-benchmark-module`` keeps every call's result
open, so over all its calls the high water grows with the calls. Other collectors, and GPUs, take the
events from a separate ``iree-run-module`` run of the function, once, after the timed run
(:func:`run_memory_capture`), which loads the program and its parameters again. Either bundle is
exported as ireeperf-jsonl like the HAL profile (:func:`tracelink.collect.hal.read_records`).

IREE's ``iree-profile memory`` reads the same events; its ``queue_inflight_allocations`` line is the
queue allocations (``queue_alloca`` opens one, ``queue_dealloca`` closes it) and their high water,
which is what :class:`MemoryCapture` computes. On local-task those are the call's transient slab(s)
and its results; inputs the tool imports, constants and parameters loaded at start-up are not queue
allocations and appear in no event.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracelink.collect.hal import MEMORY_MODE, read_records
from tracelink.iree_tools import profile_export_command, run_module_command
from tracelink.tools import ToolRun

CAPTURE = "memory.ireeprof"
EXPORT = "memory.jsonl"


@dataclass
class Allocation:
    """One queue allocation of the call: opened by ``queue_alloca``, closed by ``queue_dealloca`` (or never)."""

    allocation_id: int
    length: int
    opened_ns: int
    closed_ns: int | None  # None: still open at the end (a result handed to the caller)
    submission_id: int  # the queue_alloca's submission: it places the allocation in a call (:func:`first_call`)


@dataclass
class MemoryCapture:
    """The queue allocations of one call, in the order they were opened, and the bundle they were read from
    (its name in ``artifacts/``)."""

    allocations: list[Allocation]
    bundle: str

    def high_water(self) -> tuple[int, list[Allocation]]:
        """The most bytes open at once, and the allocations open then (the first time it is reached)."""
        changes = sorted([(a.opened_ns, 1, a) for a in self.allocations]
                         + [(a.closed_ns, 0, a) for a in self.allocations if a.closed_ns is not None],
                         key=lambda change: (change[0], change[1]))  # a close at the same instant comes first
        open_now: dict[int, Allocation] = {}  # by object: ids are reused
        best, at_best = 0, []
        for _, opens, allocation in changes:
            if opens:
                open_now[id(allocation)] = allocation
            else:
                open_now.pop(id(allocation), None)
            current = sum(a.length for a in open_now.values())
            if current > best:
                best, at_best = current, list(open_now.values())
        return best, at_best


def run_memory_capture(vmfb: Path, function: str, inputs: Sequence[str], parameters: Sequence[str], output_dir: Path,
                       timeout_s: float, device: str = "local-task") -> Path:
    """Run ``function`` once with memory events on; the path of the exported JSON lines."""
    bundle, exported = output_dir / CAPTURE, output_dir / EXPORT
    command = run_module_command(vmfb, function, inputs, parameters, device,
                                 [f"--device_profiling_mode={MEMORY_MODE}", f"--device_profiling_output={bundle}"])
    ToolRun(command, output_dir / "memory.log", f"iree-run-module (memory events) on {vmfb.name}").wait(timeout_s)
    ToolRun(profile_export_command(bundle, exported), output_dir / "memory_export.log", f"iree-profile export of {bundle}").wait(timeout_s)
    return exported


def read_memory_events(jsonl: Path) -> MemoryCapture:
    """The queue allocations of an exported memory-events bundle of one call (:func:`run_memory_capture`)."""
    return MemoryCapture(allocations_of(read_records(jsonl)), CAPTURE)


def allocations_of(records: Iterable[dict]) -> list[Allocation]:
    """The queue allocations the ``memory_event`` records among ``records`` open and close, in the order opened."""
    allocations: list[Allocation] = []
    open_now: dict[int, Allocation] = {}  # by id: an id closed may be used again by a later allocation
    for record in records:
        if record.get("record_type") != "memory_event":
            continue
        kind, key = record["event_type"], record["allocation_id"]
        if kind == "queue_alloca":
            open_now[key] = Allocation(key, int(record["length"]), int(record["host_time_ns"]), None, int(record["submission_id"]))
            allocations.append(open_now[key])
        elif kind == "queue_dealloca" and key in open_now:
            open_now.pop(key).closed_ns = int(record["host_time_ns"])
    return allocations


def first_call(memory_events: list[dict], dispatches: list[dict], calls: Sequence[int | None], bundle: str) -> MemoryCapture:
    """The queue allocations of the first call in a run of several (the timed run's bundle ``bundle``).

    ``dispatches`` are the run's dispatch records and ``calls`` the call of each (0-based, None where
    unknown). An allocation belongs to the call whose next dispatching submission follows it: the first
    call's are those submitted before its last submission carrying a dispatch. A call allocates its
    results and transient slab before the work that uses them, and the benchmark tool starts a call only
    once the one before has ended, so the next call's allocations come after that submission.
    """
    allocations = allocations_of(memory_events)
    first = [record["submission_id"] for record, call in zip(dispatches, calls) if call == 0]
    if not first or all(call == 0 for call in calls):  # one call (or none of its dispatches placed): every allocation
        return MemoryCapture(allocations, bundle)
    last = max(first)
    return MemoryCapture([allocation for allocation in allocations if allocation.submission_id < last], bundle)
