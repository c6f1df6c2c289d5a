"""Views of a decoded capture: dispatch events in the shared schema, and Tracy's per-location statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from tracelink.collect.events import make_events, match_call_sites
from tracelink.collect.tracy.decoder import TracyCapture

# csvexport's summary columns
SUMMARY_COLUMNS = [
    "name", "src_file", "src_line", "total_ns", "total_perc", "counts", "mean_ns", "min_ns", "max_ns", "std_ns"
]
_U64_MASK = (1 << 64) - 1


def dispatch_zones(capture: TracyCapture, exports: Sequence[str]) -> pd.DataFrame:
    """The zones that are dispatches of ``exports``, in start order.

    IREE names a dispatch zone after its export (the zone's own name); zones without one are named
    by their source location (its name, else its function), so those can match too.
    """
    zones = capture.zones
    selected = zones[zones["name"].isin(list(exports))]
    return selected.sort_values("start_ns", kind="stable").reset_index(drop=True)


# The runtime's zone around one call of a VM function (one iteration of the benchmark loop), and
# the zone of one worker processing one region of a command buffer (dispatches between barriers).
INVOKE_ZONE = "iree_vm_invoke"
REGION_ZONE = "iree_hal_local_task_process_region"


def tracy_events(capture: TracyCapture, call_site_exports: Sequence[str]) -> pd.DataFrame:
    """Dispatch events (the shared schema) for the dispatch zones of a capture, matched to call sites.

    ``call_site_exports[i]`` is the export dispatched by call site ``i`` of the host program.

    Tracy knows a dispatch only by its export's name, and records one zone per worker per block of
    tiles it ran, so an execution is rebuilt from zones: an iteration is one ``iree_vm_invoke``
    zone's time span (each zone is its own iteration when the capture has none), and within it an
    export's zones in one region instance (overlapping ``process_region`` zones of the workers) are
    one execution. Executions of an export are given its call sites in program order; when several
    call sites of one export ran concurrently in one region, Tracy cannot tell them apart: each gets
    the region's span (the wall time each of them took), the tile time split evenly.
    """
    exports = list(call_site_exports)
    zones = dispatch_zones(capture, sorted(set(exports)))
    zones = zones[zones["duration_ns"].notna()].copy()
    if zones.empty:
        return make_events([])
    zones["end_ns"] = zones["start_ns"] + zones["duration_ns"]
    zones["iteration"] = interval_ids(capture, INVOKE_ZONE, zones)
    zones["region"] = interval_ids(capture, REGION_ZONE, zones)
    sites_of: dict[str, list[int]] = {}
    for index, export in enumerate(exports):
        sites_of.setdefault(export, []).append(index)
    rows = []
    for (iteration, export), group in zones.groupby(["iteration", "name"], sort=False):
        executions = [
            (part["start_ns"].min(), part["end_ns"].max(), int(part["duration_ns"].sum()), ",".join(sorted(set(part["thread"].astype(str)))))
            for _, part in group.groupby("region", sort=True)
        ]
        for site, (start, end, tiles, threads) in zip(sites_of[export], spread(executions, len(sites_of[export]))):
            rows.append({
                "collector": "tracy", "iteration": iteration, "export": export, "call_site": site,
                "start_ns": start, "duration_ns": end - start, "tile_duration_sum_ns": tiles, "thread": threads,
            })
    events = make_events(pd.DataFrame(rows)).sort_values(["start_ns", "call_site"], kind="stable").reset_index(drop=True)
    # iterations numbered from 0 in order, whatever interval ids the zones fell in
    events["iteration"] = pd.array(pd.factorize(events["iteration"], sort=True)[0], dtype="Int64")
    return events


def interval_ids(capture: TracyCapture, interval_zone: str, zones: pd.DataFrame) -> np.ndarray:
    """For each zone, which instance of ``interval_zone`` (merged across threads when they overlap) holds its start.

    Zones outside every instance, or captures without that zone, get ids of their own (no grouping).
    """
    spans = capture.zones[(capture.zones["name"] == interval_zone) & capture.zones["duration_ns"].notna()]
    own_ids = -1 - np.arange(len(zones))
    if spans.empty:
        return own_ids
    starts = spans["start_ns"].to_numpy(np.int64)
    ends = starts + spans["duration_ns"].to_numpy(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    first = np.flatnonzero(np.r_[True, starts[1:] > ends[:-1]])  # a new instance where no earlier span reaches
    instance_start = starts[first]
    instance_end = ends[np.r_[first[1:] - 1, len(ends) - 1]]
    zone_start = zones["start_ns"].to_numpy(np.int64)
    instance = np.searchsorted(instance_start, zone_start, side="right") - 1
    inside = (instance >= 0) & (zone_start <= instance_end[np.maximum(instance, 0)])
    return np.where(inside, instance, own_ids)


def spread(executions: list[tuple], sites: int) -> list[tuple]:
    """Give ``sites`` call sites their executions, in order.

    With fewer executions than call sites (concurrent executions merged in one region), the extra
    call sites share the last execution's span and tile time; with more, the extra ones (split
    across regions) fold into the last call site's.
    """
    if len(executions) >= sites:
        head, tail = executions[: sites - 1], executions[sites - 1 :]
        last = (min(e[0] for e in tail), max(e[1] for e in tail), sum(e[2] for e in tail), ",".join(sorted({t for e in tail for t in e[3].split(",")})))
        return [*head, last]
    merged = sites - len(executions) + 1
    start, end, tiles, threads = executions[-1]
    share = (start, end, tiles // merged, threads)
    return [*executions[:-1], *([share] * merged)]


def source_location_summary(capture: TracyCapture) -> pd.DataFrame:
    """Per source location statistics exactly as Tracy computes them (its csvexport summary).

    Like Tracy, counts only finished zones with a positive duration, accumulates the sum of squares
    in float64 in Tracy's order (threads in file order, zones depth first), takes the mean with
    integer division and the standard deviation from those sums. Indexed by source location id.
    """
    zones = capture.zones
    duration = zones["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    counted = np.isfinite(duration) & (duration > 0)
    srcloc = zones["srcloc"].to_numpy()[counted]
    span = zones["duration_ns"].to_numpy(dtype=np.int64, na_value=0)[counted]
    order = np.argsort(srcloc, kind="stable")  # keeps Tracy's accumulation order within a location
    ids, first = np.unique(srcloc[order], return_index=True)
    groups = np.split(span[order], first[1:]) if len(ids) else []
    locations = capture.source_locations
    rows = []
    for srcloc_id, spans in zip(ids.tolist(), groups):
        count = len(spans)
        total = int(spans.sum())
        mean = (total & _U64_MASK) // count  # C++: int64 / size_t is unsigned division
        sum_sq = float(np.cumsum(spans.astype(np.float64) ** 2)[-1])  # sequential, as Tracy adds
        spread = sum_sq - 2.0 * total * mean + float((mean * mean * count) & _U64_MASK)
        if count <= 1:
            std = 0.0
        else:  # rounding can make the spread slightly negative; C++ sqrt then gives NaN
            std = math.sqrt(spread / (count - 1)) if spread >= 0 else math.nan
        location = locations.loc[srcloc_id]
        rows.append(
            {
                "srcloc": srcloc_id,
                "name": location["display_name"],
                "src_file": location["file"],
                "src_line": int(location["line"]),
                "total_ns": total,
                "total_perc": 100.0 * total / capture.header.last_time if capture.header.last_time else math.nan,
                "counts": count,
                "mean_ns": mean,
                "min_ns": int(spans.min()),
                "max_ns": int(spans.max()),
                "std_ns": std,
            }
        )
    return pd.DataFrame(rows, columns=["srcloc", *SUMMARY_COLUMNS]).set_index("srcloc")
