"""What IREE's HAL profiler lost, and which call of the function each dispatch record belongs to.

The local-task device keeps each event stream in a ring of 4,096 records between flushes (IREE 3.13,
``IREE_HAL_LOCAL_PROFILE_DEFAULT_EVENT_CAPACITY``, not configurable): a call with more dispatches
than that loses the rest, and the export reports them only as ``truncated_chunk`` diagnostics.
:data:`FLUSH_FLAGS` has a tooling thread flush the rings every millisecond during the calls; the HAL
collector reruns with it only when a run lost dispatch records, because flushing under pressure slows
the dispatches measured (tests/bench/bench_events.py). What is still lost is counted here, and the
coverage says which call sites lack events (:func:`tracelink.aggregate.missing_events`).
"""

from __future__ import annotations

import json
from pathlib import Path

FLUSH_INTERVAL_MS = 1  # the shortest interval the flag takes
FLUSH_FLAGS = (f"--device_profiling_flush_interval_ms={FLUSH_INTERVAL_MS}",)
DISPATCH_STREAM = "host-execution-events"  # the stream holding the dispatch records


def dropped_records(jsonl: Path) -> dict[str, int]:
    """Records the profiler dropped per event stream (``host-execution-events`` holds the dispatches), from
    the ``truncated_chunk`` diagnostics of an ireeperf-jsonl export (whose schema ``hal_events`` checks)."""
    dropped: dict[str, int] = {}
    with jsonl.open() as lines:
        for line in lines:
            if '"truncated_chunk"' not in line:  # a few diagnostics among many thousand events
                continue
            record = json.loads(line)
            if record.get("record_type") == "diagnostic" and record.get("category") == "truncated_chunk":
                stream = str(record.get("content_type", "")).rsplit(".", 1)[-1]
                dropped[stream] = dropped.get(stream, 0) + int(record.get("dropped_records") or 0)
    return dropped


def submission_iterations(dispatches: list[dict], executes: dict[int, list[int]], calls: int) -> list[int] | None:
    """The call (0-based) of each dispatch record: the rank of its submission among its command buffer's.

    ``executes`` lists the submissions of each command buffer from the queue events, a stream that
    keeps a few records per call, so a dispatch record dropped from one call shifts no other record
    into the wrong call (counting each call site's records in order would). None unless every
    command buffer was submitted once per call (``calls`` times): buffers recorded anew for each
    call say nothing about the call.
    """
    submissions: dict[int, set[int]] = {}
    for record in dispatches:
        submissions.setdefault(record["command_buffer_id"], set(executes.get(record["command_buffer_id"], []))).add(record["submission_id"])
    if any(len(listed) != calls for listed in submissions.values()):
        return None
    rank = {(buffer, submission): k for buffer, listed in submissions.items() for k, submission in enumerate(sorted(listed))}
    return [rank[(r["command_buffer_id"], r["submission_id"])] for r in dispatches]
