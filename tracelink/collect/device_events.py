"""Device-timestamped dispatches of a GPU run's HAL profile, and the queue and host time around them.

On a GPU device IREE's HAL profiler records no host execution: each dispatch is a ``dispatch_event``
timed by the device's own clock (``start_tick``/``end_tick``, with ``duration_ns`` from the device's
tick rate) and keyed, like a host event, by ``command_buffer_id`` and ``command_index``, so it is placed
at its call site the same way (:func:`tracelink.collect.hal.place_by_command_index`).
``queue_device_event`` records time each submission on the device (``execute``: the command buffer,
barriers and copies included) and ``queue_event`` records say when the host submitted it.
``clock_correlation`` samples pair the driver's CPU timestamps (the device events' derived time
domain) with IREE's host clock, which puts both on one time line.

Per iteration of the function (all the submissions of its dispatches) :func:`iteration_times` gives:

- ``dispatch_ns``: the dispatches' device time;
- ``queue_ns``: device time of its submissions outside the dispatches (barriers, fills, copies and
  the gaps between dispatches);
- ``submit_ns``: from the host's submission to the device starting it (queue wait, launch latency);
- ``host_ns``: the rest of the iteration's wall time (``wall_ns``, from its submission to the next
  iteration's, or to its device end for the last, a lower bound): host work, allocations, waits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import median

import pandas as pd

from tracelink.errors import TracelinkError
from tracelink.collect.events import make_events, match_call_sites

# Vulkan's HAL profiler supports these families (host-execution and command-region events are CPU-only).
DEVICE_PROFILING_MODES = "dispatch-events,device-queue-events,queue-events,executable-metadata"
ITERATION_COLUMNS = ["iteration", "dispatch_ns", "queue_ns", "submit_ns", "host_ns", "wall_ns"]


def host_offset_ns(records: Sequence[dict]) -> float | None:
    """IREE host time minus driver CPU time, the median over the clock correlation samples (None without any)."""
    offsets = [
        (r["host_time_begin_ns"] + r["host_time_end_ns"]) / 2 - r["host_cpu_timestamp_ns"]
        for r in records
        if r.get("record_type") == "clock_correlation" and r.get("host_cpu_timestamp_ns") is not None and r.get("host_time_begin_ns") is not None
    ]
    return median(offsets) if offsets else None


def device_events(records: Sequence[dict], call_site_exports: Sequence[str], place) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Dispatch events (matched to call sites) and :func:`iteration_times` of a GPU profile's records.

    ``place`` is the HAL collector's placement by command buffer and index (it returns None when a
    record cannot be placed that way; then events are matched in order).
    """
    dispatches = [r for r in records if r.get("record_type") == "dispatch_event" and r.get("valid", True)]
    if not dispatches:
        return make_events([]), pd.DataFrame(columns=ITERATION_COLUMNS)
    offset = host_offset_ns(records)
    timed_on_host = offset is not None and all(r.get("derived_time_available") for r in dispatches)
    dispatches.sort(key=lambda r: (r["submission_id"], r["start_tick"]))
    first = dispatches[0]
    events = make_events([
        {
            "collector": "hal", "export": r["key"],
            # device ticks count nanoseconds only where the device says so: without a clock fit, order alone
            "start_ns": r["start_driver_host_cpu_time_ns"] - first["start_driver_host_cpu_time_ns"] if timed_on_host else pd.NA,
            "duration_ns": r["duration_ns"], "workgroup_count": math.prod(r["workgroup_count"]),
            "queue": f"device {r['physical_device_ordinal']} queue {r['queue_ordinal']}",
        }
        for r in dispatches
    ])
    commands: dict[int, list[tuple[int, str]]] = {}
    for record in records:
        if record.get("record_type") == "command_operation" and record.get("op") == "dispatch":
            commands.setdefault(record["command_buffer_id"], []).append((record["command_index"], record["key"]))
    placed = place(dispatches, commands, call_site_exports)
    if placed is None:
        events = match_call_sites(events, call_site_exports)
    else:
        events["call_site"] = pd.array(placed, dtype="Int64")
        events["iteration"] = events.groupby("call_site").cumcount().astype("Int64")
    if not timed_on_host:
        return events, pd.DataFrame(columns=ITERATION_COLUMNS)
    return events, iteration_times(records, dispatches, list(events["iteration"]), offset)


def iteration_times(records: Sequence[dict], dispatches: list[dict], iterations: list, offset: float) -> pd.DataFrame:
    """Per iteration: device dispatch time, queue time around it, submission latency and host time (module docstring).

    ``iterations[i]`` is the iteration of ``dispatches[i]`` (<NA> for an unplaced one, left out).
    """
    submissions: dict[int, set[int]] = {}
    dispatch_ns: dict[int, int] = {}
    for record, iteration in zip(dispatches, iterations):
        if iteration is pd.NA:
            continue
        submissions.setdefault(int(iteration), set()).add(record["submission_id"])
        dispatch_ns[int(iteration)] = dispatch_ns.get(int(iteration), 0) + record["duration_ns"]
    executed = {r["submission_id"]: r for r in records if r.get("record_type") == "queue_device_event" and r.get("op") == "execute" and r.get("derived_time_available")}
    submitted = {r["submission_id"]: r["host_time_ns"] for r in records if r.get("record_type") == "queue_event" and r.get("op") == "execute"}
    rows = []
    ordered = sorted(submissions)
    for position, iteration in enumerate(ordered):
        ids = submissions[iteration]
        runs = [executed[i] for i in ids if i in executed]
        if len(runs) != len(ids) or not all(i in submitted for i in ids):
            raise TracelinkError(f"HAL profile: submission(s) {sorted(set(ids) - set(executed) - set(submitted))} of iteration {iteration} have no queue event")
        start = min(r["start_driver_host_cpu_time_ns"] for r in runs) + offset
        end = max(r["end_driver_host_cpu_time_ns"] for r in runs) + offset
        busy = sum(r["duration_ns"] for r in runs)
        submit = min(submitted[i] for i in ids)
        # one period of the benchmark loop: this iteration's submission to the next one's (the last: to its device end)
        following = min(submitted[i] for i in submissions[ordered[position + 1]]) if position + 1 < len(ordered) else end
        wall = following - submit
        submit_ns = max(start - submit, 0.0)
        rows.append({
            "iteration": iteration, "dispatch_ns": dispatch_ns[iteration], "queue_ns": max(busy - dispatch_ns[iteration], 0),
            "submit_ns": submit_ns, "host_ns": max(wall - busy - submit_ns, 0.0), "wall_ns": wall,
        })
    return pd.DataFrame(rows, columns=ITERATION_COLUMNS)


def device_time_summary(times: pd.DataFrame) -> dict:
    """What profile.json records of the measured iterations' device, queue and host time (medians per iteration)."""
    if times.empty:
        return {}
    # The last iteration's wall time ends at its device end, a lower bound: it is left out when others exist,
    # and of every column, so that the medians are of the same iterations (each iteration's device time is
    # within its wall time; the median of 4 iterations' against that of the first 3 was not, on lavapipe)
    whole = times.sort_values("iteration").iloc[:-1] if len(times) > 1 else times
    medians = {column.removesuffix("_ns") + "_ns_per_iteration": float(whole[column].median()) for column in ITERATION_COLUMNS[1:]}
    return {"device_time": {"clock": "device timestamps", "iterations": int(len(times)), **medians}}
