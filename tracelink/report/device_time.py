"""The parts of a GPU iteration's wall time, as the summary and the report show them: the dispatches'
device time apart from the queue, submission and host time around them (on a GPU that gap is what users
chase). Only profiles with device timestamps have them (:mod:`tracelink.collect.device_events`)."""

from __future__ import annotations

DEVICE_TIME_PARTS = (
    ("dispatch_ns_per_iteration", "device dispatch time", "the dispatches' own time, by the device's timestamps"),
    ("queue_ns_per_iteration", "device queue overhead", "device time of the submissions outside the dispatches: barriers, fills, copies, gaps"),
    ("submit_ns_per_iteration", "submission latency", "from the host submitting the work to the device starting it"),
    ("host_ns_per_iteration", "host time", "the rest of the iteration's wall time: host work, allocations, waits"),
)


def device_time_parts(summary: dict) -> list[tuple[float, str, str]]:
    """(median ns per iteration, label, what it counts) of each part; empty for a profile without device timestamps."""
    times = summary.get("device_time") or {}
    return [(float(times[key]), label, hint) for key, label, hint in DEVICE_TIME_PARTS if key in times]
