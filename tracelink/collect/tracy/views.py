"""Views of a decoded capture: dispatch events in the shared schema, and Tracy's per-location statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

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


@dataclass
class Rebuilt:
    """Dispatch executions rebuilt from a capture's zones."""

    events: pd.DataFrame  # the shared event schema, in start order
    outside_iterations: int  # finished dispatch zones in no iree_vm_invoke (load time): left out

    def summary(self) -> dict:
        """What a profile's summary says about the rebuild."""
        return {"tracy": {"dispatch_zones_outside_iterations": self.outside_iterations}}


@dataclass
class _Executions:
    """One entry per execution: parallel arrays."""

    iteration: np.ndarray  # int64 window of the iteration
    export: np.ndarray  # int64 position in the list of distinct exports
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    tiles: np.ndarray  # int64 ns of tile time
    threads: np.ndarray  # (n, words) unsigned bit set of the threads that ran it

    def take(self, index: np.ndarray) -> _Executions:
        """The entries at ``index`` (an integer array)."""
        return _Executions(*(getattr(self, field.name)[index] for field in fields(self)))

    def reduce(self, first: np.ndarray) -> _Executions:
        """Merge each run of entries beginning at ``first`` (sorted starts of contiguous groups)."""
        return _Executions(
            iteration=self.iteration[first], export=self.export[first],
            start=np.minimum.reduceat(self.start, first), end=np.maximum.reduceat(self.end, first),
            tiles=np.add.reduceat(self.tiles, first), threads=np.bitwise_or.reduceat(self.threads, first, axis=0),
        )


@dataclass
class _Zones:
    """The dispatch zones of the exports, in start order: small arrays, one entry per zone."""

    row: np.ndarray  # int32 row in the capture's zones table
    start: np.ndarray  # int64 ns
    export: np.ndarray  # int16 position in the list of distinct exports
    iteration: np.ndarray  # int64 window of the iteration, -1 outside every one

    def inside(self) -> _Zones:
        """The zones in an iteration."""
        keep = self.iteration >= 0
        return _Zones(self.row[keep], self.start[keep], self.export[keep], self.iteration[keep])


def rebuild_executions(capture: TracyCapture, call_site_exports: Sequence[str]) -> Rebuilt:
    """Dispatch events (the shared schema) for the dispatch zones of a capture, matched to call sites.

    ``call_site_exports[i]`` is the export dispatched by run-phase call site ``i`` of the host program.

    Tracy knows a dispatch only by its export's name, and records one zone per worker per block of
    tiles it ran, so an execution is rebuilt from zones: an iteration is one ``iree_vm_invoke``
    zone's time span, and within it an export's zones in one region instance (overlapping
    ``process_region`` zones of the workers) are one execution. Zones in no ``iree_vm_invoke`` ran
    outside the function's calls (initializers at module load share exports with run call sites):
    they belong to no iteration and are only counted. Executions of an export are given its call
    sites in time order; when several call sites of one export ran concurrently in one region, Tracy
    cannot tell them apart: each gets the region's span (the wall time each of them took), the tile
    time split evenly. Everything is computed with sorts and segment reductions over arrays.
    """
    exports = list(call_site_exports)
    zones, names = _dispatch_zones(capture, sorted(set(exports)))
    if not len(zones.start):
        return Rebuilt(make_events([]), 0)
    windows = _windows(capture, INVOKE_ZONE)
    if windows is None:  # no iteration marks at all: count executions per export instead
        events = _frame(_merge_regions(capture, zones), names, capture).sort_values("start_ns", kind="stable", ignore_index=True)
        return Rebuilt(match_call_sites(events, exports), 0)
    zones.iteration = _window_of(windows, zones.start)
    outside = int((zones.iteration < 0).sum())
    if outside == len(zones.start):
        return Rebuilt(make_events([]), outside)
    zones = zones.inside()
    events = _assign_call_sites(_merge_regions(capture, zones), names, exports, capture)
    # iterations numbered from 0 in time order, whatever windows the zones fell in
    events["iteration"] = pd.array(pd.factorize(events["iteration"], sort=True)[0], dtype="Int64")
    return Rebuilt(events, outside)


def _dispatch_zones(capture: TracyCapture, exports: list[str]) -> tuple[_Zones, list[str]]:
    """The finished zones named after one of ``exports``, in start order (iteration 0 until the
    iterations are known); and the name of each export position."""
    zones = capture.zones
    name = zones["name"].cat
    wanted = np.append(np.isin(name.categories.to_numpy(dtype=object), exports), False)  # code -1: no name
    codes = name.codes.to_numpy()
    row = np.flatnonzero(wanted[codes] & zones["duration_ns"].notna().to_numpy()).astype(np.int32)
    start = zones["start_ns"].to_numpy()[row]
    order = np.argsort(start, kind="stable")
    row, start = row[order], start[order]
    used = np.unique(codes[row])
    export = np.searchsorted(used, codes[row]).astype(np.int16)
    return _Zones(row, start, export, np.zeros(len(row), np.int64)), name.categories[used].tolist()


def _windows(capture: TracyCapture, zone_name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(starts, ends) of the instances of ``zone_name``, overlapping ones (across threads) merged;
    None when the capture has no finished zone of that name."""
    zones = capture.zones
    spans = zones[(zones["name"] == zone_name) & zones["duration_ns"].notna()]
    if spans.empty:
        return None
    starts = spans["start_ns"].to_numpy(np.int64)
    ends = starts + spans["duration_ns"].to_numpy(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    first = np.flatnonzero(np.r_[True, starts[1:] > ends[:-1]])  # a new instance where no earlier span reaches
    return starts[first], ends[np.r_[first[1:] - 1, len(ends) - 1]]


def _window_of(windows: tuple[np.ndarray, np.ndarray], start: np.ndarray) -> np.ndarray:
    """For each start, the index of the window holding it, -1 for none."""
    window_start, window_end = windows
    index = np.searchsorted(window_start, start, side="right") - 1
    inside = (index >= 0) & (start <= window_end[np.maximum(index, 0)])
    return np.where(inside, index, -1)


def _merge_regions(capture: TracyCapture, zones: _Zones) -> _Executions:
    """One execution per iteration, export and region instance, sorted by iteration, export and start.
    A zone outside every region (e.g. local-sync runs inline) is an execution of its own."""
    windows = _windows(capture, REGION_ZONE)
    region = _window_of(windows, zones.start) if windows is not None else np.full(len(zones.start), -1)
    # Zones are in start order and windows do not overlap, so the zones of one region instance are
    # contiguous: number the runs (a zone outside regions, or a new iteration, starts a run of its own).
    key = np.cumsum(_changes(region, zones.iteration) | (region < 0))
    del region  # every per-zone array is freed as soon as it is used: millions of zones
    key *= int(zones.export.max()) + 1
    key += zones.export
    order = np.argsort(key, kind="stable")
    first = _segment_starts(key[order])
    del key
    row = zones.row[order]
    iteration, export = zones.iteration[order[first]], zones.export[order[first]].astype(np.int64)
    start = zones.start[order]
    del order
    table = capture.zones
    duration = table["duration_ns"].array[row].to_numpy(dtype=np.int64)
    tiles = np.add.reduceat(duration, first)
    duration += start  # now the zones' ends
    executions = _Executions(
        iteration=iteration, export=export, start=np.minimum.reduceat(start, first),
        end=np.maximum.reduceat(duration, first), tiles=tiles,
        threads=np.bitwise_or.reduceat(_thread_bits(table["thread"].array, row), first, axis=0),
    )
    return executions.take(np.lexsort((executions.start, executions.export, executions.iteration)))


def _changes(*keys: np.ndarray) -> np.ndarray:
    """True where any of ``keys`` differs from the entry before (and at the first entry)."""
    changed = np.zeros(len(keys[0]), dtype=bool)
    changed[:1] = True
    for key in keys:
        changed[1:] |= key[1:] != key[:-1]
    return changed


def _segment_starts(*keys: np.ndarray) -> np.ndarray:
    """Where each run of equal ``keys`` begins in arrays sorted by them."""
    return np.flatnonzero(_changes(*keys))


def _thread_bits(threads: pd.Categorical, row: np.ndarray) -> np.ndarray:
    """The thread of each zone at ``row`` as a one-bit set, bit i for category i: (n, words) of the
    smallest unsigned type holding every thread (a few threads: one byte per zone)."""
    count = len(threads.categories)
    dtype = next((np.dtype(t) for t in (np.uint8, np.uint16, np.uint32) if count <= 8 * np.dtype(t).itemsize), np.dtype(np.uint64))
    width = 8 * dtype.itemsize
    code = threads.codes[row]
    bits = np.zeros((len(row), max(1, -(-count // width))), dtype=dtype)
    bits[np.arange(len(row)), code // width] = np.left_shift(dtype.type(1), (code % width).astype(dtype))
    return bits


def _assign_call_sites(executions: _Executions, names: list[str], exports: list[str], capture: TracyCapture) -> pd.DataFrame:
    """Give the executions of each export in each iteration (sorted, in time order) its call sites.

    With more executions than call sites (one dispatch split across regions), the extra ones fold into
    the last call site's; with fewer (concurrent call sites merged in one region), the last execution
    is shared by the remaining call sites, its tile time split evenly between them.
    """
    sites_of = [[i for i, export in enumerate(exports) if export == name] for name in names]
    site_count = np.array([len(sites) for sites in sites_of], dtype=np.int64)
    site_table = np.full((len(names), int(site_count.max())), -1, dtype=np.int64)
    for row, sites in enumerate(sites_of):
        site_table[row, : len(sites)] = sites
    rank, size = _rank_in_group(executions)
    slot = np.minimum(rank, site_count[executions.export] - 1)
    first = _segment_starts(executions.iteration, executions.export, slot)
    executions, slot = executions.reduce(first), slot[first]
    rank, size = _rank_in_group(executions)
    wanted = site_count[executions.export]
    shared = np.where((rank == size - 1) & (size < wanted), wanted - size + 1, 1)  # sites sharing each row
    row = np.repeat(np.arange(len(shared)), shared)
    offset = np.arange(len(row)) - np.repeat(np.cumsum(shared) - shared, shared)
    executions = executions.take(row)
    executions.tiles = executions.tiles // shared[row]
    call_site = site_table[executions.export, slot[row] + offset]
    return _frame(executions, names, capture).assign(call_site=pd.array(call_site, dtype="Int64")).sort_values(
        ["start_ns", "call_site"], kind="stable", ignore_index=True
    )


def _rank_in_group(executions: _Executions) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's position within its (iteration, export) group, and that group's size."""
    first = _segment_starts(executions.iteration, executions.export)
    size = np.diff(np.r_[first, len(executions.start)])
    return np.arange(len(executions.start)) - np.repeat(first, size), np.repeat(size, size)


def _frame(executions: _Executions, names: list[str], capture: TracyCapture) -> pd.DataFrame:
    """Executions as events of the shared schema (no call sites yet), in the same order."""
    masks, which = np.unique(executions.threads, axis=0, return_inverse=True)
    thread_names = capture.zones["thread"].cat.categories.astype(str).tolist()
    labels = [",".join(sorted(thread_names[bit] for bit in _bits(mask))) for mask in masks]
    return make_events({
        "collector": "tracy",
        "iteration": executions.iteration,
        "export": np.array(names, dtype=object)[executions.export],
        "start_ns": executions.start,
        "duration_ns": executions.end - executions.start,
        "tile_duration_sum_ns": executions.tiles,
        "thread": np.array(labels, dtype=object)[which.ravel()],
    })


def _bits(mask: np.ndarray) -> list[int]:
    """The positions of the set bits of a multi-word bit set."""
    width = 8 * mask.dtype.itemsize
    return [width * word + bit for word, value in enumerate(mask.tolist()) for bit in range(width) if value >> bit & 1]


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
