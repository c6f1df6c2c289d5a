"""Memory events of one call: a short run of its own under ``--device_profiling_mode=memory-events``.

The capture is a separate ``iree-run-module`` run of the function, once, after the timed run (its
tools ended, while its events are read and aggregated): so the memory records never share a profiling
session with the timed dispatches, nor its run the machine with them, and one call is what the
peak is about (``iree-benchmark-module`` keeps every call's result open, so over several calls the
high water grows with the calls). The bundle is exported as ireeperf-jsonl like
the HAL profile (:func:`tracelink.collect.hal.read_records`) and read here.

IREE's ``iree-profile memory`` reads the same events; its ``queue_inflight_allocations`` line is the
queue allocations (``queue_alloca`` opens one, ``queue_dealloca`` closes it) and their high water,
which is what :class:`MemoryCapture` computes. On local-task those are the call's transient slab(s)
and its results; inputs the tool imports, constants and parameters loaded at start-up are not queue
allocations and appear in no event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracelink.collect.hal import read_records
from tracelink.iree_tools import profile_export_command, run_module_command
from tracelink.tools import ToolRun

MEMORY_MODE = "memory-events"
CAPTURE = "memory.ireeprof"
EXPORT = "memory.jsonl"


@dataclass
class Allocation:
    """One queue allocation of the call: opened by ``queue_alloca``, closed by ``queue_dealloca`` (or never)."""

    allocation_id: int
    length: int
    opened_ns: int
    closed_ns: int | None  # None: still open at the end (a result handed to the caller)


@dataclass
class MemoryCapture:
    """The queue allocations of one call, in the order they were opened."""

    allocations: list[Allocation]

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
    """The queue allocations of an exported memory-events bundle."""
    allocations: list[Allocation] = []
    open_now: dict[int, Allocation] = {}  # by id: an id closed may be used again by a later allocation
    for record in read_records(jsonl):
        if record.get("record_type") != "memory_event":
            continue
        kind, key = record["event_type"], record["allocation_id"]
        if kind == "queue_alloca":
            open_now[key] = Allocation(key, int(record["length"]), int(record["host_time_ns"]), None)
            allocations.append(open_now[key])
        elif kind == "queue_dealloca" and key in open_now:
            open_now.pop(key).closed_ns = int(record["host_time_ns"])
    return MemoryCapture(allocations)
