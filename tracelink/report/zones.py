"""Runtime overhead around dispatches, from the zones of a Tracy capture (``profile.zones``).

Iterations are the ``BenchmarkIteration`` zones of ``iree-benchmark-module`` (one call of the
function each), the first ``warmup`` of them left out; a capture without them is one window from
the first dispatch's start to the last one's end. A zone belongs to the iteration its start falls
in. *Dispatch zones* are those named after an export (IREE names each dispatch's tile-execution zone
so); every other zone in an iteration is the runtime's own work: VM invoke, queue submission, task
drain, command-buffer issue, waits. Per iteration: wall time, the time at least one dispatch ran
(the union of dispatch zones over all threads), and what is left — the share of wall time not spent
in dispatches. Runtime zones are grouped by source-location name with their inclusive total and
their *self* time (minus their child zones), so nested zones are not counted twice; zones whose
name says they wait (fences, semaphores) are marked: their self time is blocking, not work.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracelink.profile_dir.profile import Profile
from tracelink.report.fmt import el, ns, pct
from tracelink.report.svg import iteration_split, zone_timeline
from tracelink.report.view_data import ZoneData
from tracelink.report.widgets import number_text

ITERATION_ZONE = "BenchmarkIteration"
WAIT_MARKERS = ("wait", "await")
TOP_ZONES = 25
MAX_TIMELINE_ZONES = 2500  # zones drawn for the median iteration; the narrowest are left out beyond this


def zone_data(profile: Profile) -> ZoneData | None:
    """The runtime-overhead view of a profile, None without zones (collectors other than tracy)."""
    zones = profile.zones
    if zones is None or zones.empty:
        return None
    zones = zones.reset_index(drop=True)
    exports = set(profile.exports["export"].astype(str)) if not profile.exports.empty else set()
    exports |= set(profile.events["export"].dropna().astype(str))
    names = zones["name"].astype(str).to_numpy()
    is_dispatch = np.isin(names, list(exports))
    duration = zones["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    start = zones["start_ns"].to_numpy(dtype=np.int64)
    windows, described = iteration_windows(zones, start, duration, is_dispatch, int(profile.summary.get("warmup") or 0))
    if windows.empty:
        return None
    iteration = window_index(start, windows)
    self_ns = self_times(zones["depth"].to_numpy(dtype=np.int64), duration, zones["thread_index"].to_numpy() if "thread_index" in zones else None)
    waiting = wait_mask(zones)
    measured = iteration >= 0
    is_runtime = measured & ~is_dispatch & (names != ITERATION_ZONE)
    per_iteration = iteration_rows(windows, iteration, start, duration, self_ns, is_dispatch & measured, is_runtime, waiting)
    median = int(per_iteration.sort_values("wall_ns", kind="stable")["iteration"].iloc[len(per_iteration) // 2])
    timeline, left_out = timeline_rows(zones, windows.loc[median], iteration == median, is_dispatch, waiting)
    return ZoneData(
        windows=described, iterations=per_iteration,
        top=runtime_table(zones[is_runtime], self_ns[is_runtime], waiting[is_runtime], len(windows)),
        dispatch_zones=int((is_dispatch & measured).sum()), runtime_zones=int(is_runtime.sum()),
        timeline=timeline, timeline_left_out=left_out, median_iteration=median,
    )


def iteration_windows(zones, start, duration, is_dispatch, warmup: int) -> tuple[pd.DataFrame, str]:
    """[start, end) of each measured iteration, and how they were found."""
    marked = (zones["name"].astype(str).to_numpy() == ITERATION_ZONE) & ~np.isnan(duration)
    if marked.any():
        starts, ends = start[marked], start[marked] + duration[marked].astype(np.int64)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        dropped = warmup if len(starts) > warmup else 0
        text = f"the {ITERATION_ZONE} zones of iree-benchmark-module" + (f", the first {dropped} (warm-up) left out" if dropped else "")
        frame = pd.DataFrame({"start_ns": starts[dropped:], "end_ns": ends[dropped:]})
    else:
        finished = is_dispatch & ~np.isnan(duration)
        if not finished.any():
            return pd.DataFrame(columns=["start_ns", "end_ns"]), ""
        frame = pd.DataFrame({"start_ns": [int(start[finished].min())], "end_ns": [int((start[finished] + duration[finished]).max())]})
        text = "no iteration zones in the capture: one window from the first dispatch's start to the last one's end"
    return frame.rename_axis("iteration").astype("int64"), text


def window_index(start: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """The iteration whose window holds each zone's start, -1 for none."""
    starts, ends = windows["start_ns"].to_numpy(), windows["end_ns"].to_numpy()
    position = np.searchsorted(starts, start, side="right") - 1
    inside = (position >= 0) & (start < ends[np.clip(position, 0, None)])
    return np.where(inside, position, -1)


def self_times(depth: np.ndarray, duration: np.ndarray, thread: np.ndarray | None) -> np.ndarray:
    """Each zone's duration minus its children's (zones are per thread, depth first: a zone's parent is
    the last zone before it one level up). NaN for unfinished zones."""
    count = len(depth)
    index = np.arange(count)
    parent = np.full(count, -1)
    thread_start = np.zeros(count, dtype=np.int64)
    if thread is not None and count:
        change = np.r_[True, thread[1:] != thread[:-1]]
        thread_start = np.maximum.accumulate(np.where(change, index, 0))
    for level in range(1, int(depth.max()) + 1 if count else 0):
        last_above = np.maximum.accumulate(np.where(depth == level - 1, index, -1))
        here = depth == level
        parent[here] = np.where(last_above[here] >= thread_start[here], last_above[here], -1)
    child = parent >= 0
    children = np.bincount(parent[child], weights=np.nan_to_num(duration[child]), minlength=count) if count else np.zeros(0)
    return duration - children


def wait_mask(zones: pd.DataFrame) -> np.ndarray:
    """Zones that wait (fence, semaphore and spin waits): their self time is blocking."""
    text = (zones["srcloc_name"].astype(str) + " " + zones["function"].astype(str)).str.lower()
    return text.str.contains("|".join(WAIT_MARKERS), regex=True).to_numpy(dtype=bool)


def iteration_rows(windows, iteration, start, duration, self_ns, dispatch, runtime, waiting) -> pd.DataFrame:
    """Per iteration: wall time, time in dispatches (union and CPU sum), runtime self time, waits."""
    lows, highs = windows["start_ns"].to_numpy(), windows["end_ns"].to_numpy()
    chosen = dispatch & ~np.isnan(duration)
    owner = iteration[chosen]
    spans = pd.DataFrame({
        "iteration": owner,
        "begin": np.clip(start[chosen], lows[owner], highs[owner]).astype(np.float64),
        "end": np.clip(start[chosen] + duration[chosen], lows[owner], highs[owner]),
    }).sort_values(["iteration", "begin"], kind="stable")
    reach = spans.groupby("iteration")["end"].cummax()
    gaps = (spans["begin"] - reach.groupby(spans["iteration"]).shift()).clip(lower=0).fillna(0.0)
    per = spans.assign(reach=reach, gap=gaps, busy=spans["end"] - spans["begin"]).groupby("iteration").agg(
        first=("begin", "min"), last=("reach", "max"), gaps=("gap", "sum"), cpu=("busy", "sum"))
    inside = (per["last"] - per["first"] - per["gaps"]).reindex(windows.index, fill_value=0.0)
    work = pd.Series(self_ns[runtime & ~waiting], index=iteration[runtime & ~waiting]).groupby(level=0).sum()
    waits = pd.Series(self_ns[runtime & waiting], index=iteration[runtime & waiting]).groupby(level=0).sum()
    wall = (windows["end_ns"] - windows["start_ns"]).astype(np.float64)
    return pd.DataFrame({
        "iteration": windows.index.to_numpy(), "start_ns": lows, "wall_ns": wall.to_numpy(), "dispatch_ns": inside.to_numpy(),
        "dispatch_cpu_ns": per["cpu"].reindex(windows.index, fill_value=0.0).to_numpy(),
        "runtime_ns": work.reindex(windows.index, fill_value=0.0).to_numpy(), "wait_ns": waits.reindex(windows.index, fill_value=0.0).to_numpy(),
        "outside_share": np.where(wall > 0, 1.0 - inside.to_numpy() / wall.to_numpy().clip(min=1), 0.0),
    })


def runtime_table(zones: pd.DataFrame, self_ns: np.ndarray, waiting: np.ndarray, iterations: int) -> pd.DataFrame:
    """The runtime's zones grouped by source-location name, by total time."""
    frame = pd.DataFrame({
        "zone": zones["srcloc_name"].astype(str).to_numpy(), "function": zones["function"].astype(str).to_numpy(),
        "file": zones["file"].astype(str).to_numpy(), "line": zones["line"].to_numpy(), "thread": zones["thread"].astype(str).to_numpy(),
        "duration_ns": zones["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan), "self_ns": self_ns, "wait": waiting,
    })
    grouped = frame.groupby("zone", sort=False).agg(
        function=("function", "first"), file=("file", "first"), line=("line", "first"),
        threads=("thread", lambda t: sorted(set(t))), count=("duration_ns", "size"),
        total_ns=("duration_ns", "sum"), self_ns=("self_ns", "sum"), wait=("wait", "any"),
    )
    grouped["mean_ns"] = grouped["total_ns"] / grouped["count"]
    grouped["per_iteration_ns"] = grouped["total_ns"] / max(iterations, 1)
    return grouped.sort_values("total_ns", ascending=False, kind="stable").reset_index()


def timeline_rows(zones, window, chosen, is_dispatch, waiting) -> tuple[pd.DataFrame, int]:
    """Zones of one iteration for the timeline: a lane per (thread, depth), the narrowest dropped past a cap."""
    part = zones[chosen].assign(kind=np.where(is_dispatch[chosen], "dispatch", np.where(waiting[chosen], "wait", "runtime")))
    part = part[part["name"].astype(str) != ITERATION_ZONE].dropna(subset=["duration_ns"])
    left_out = max(0, len(part) - MAX_TIMELINE_ZONES)
    if left_out:
        part = part.nlargest(MAX_TIMELINE_ZONES, "duration_ns")
    threads = sorted(part["thread"].astype(str).unique(), key=lambda t: (not t.lower().startswith("main"), t))
    rows = []
    lane = 0
    for thread in threads:
        mine = part[part["thread"].astype(str) == thread]
        base = int(mine["depth"].min())
        for zone in mine.itertuples(index=False):
            rows.append({
                "thread": thread, "lane": lane + int(zone.depth) - base, "start": int(zone.start_ns) - int(window["start_ns"]),
                "duration": int(zone.duration_ns), "name": str(zone.name), "srcloc": str(zone.srcloc_name), "kind": zone.kind,
            })
        lane += int(mine["depth"].max()) - base + 1
    return pd.DataFrame(rows, columns=["thread", "lane", "start", "duration", "name", "srcloc", "kind"]), left_out


# Markup --------------------------------------------------------------------------------------------


def runtime_section(parent, data: ZoneData) -> None:
    """The "Runtime overhead" section: cards, per-iteration split, one iteration's zones, top runtime zones."""
    node = el(parent, "section", id="runtime")
    el(node, "h2", None, "Runtime overhead around dispatches")
    el(node, "p", class_="note", text=(
        f"From the Tracy capture's zones. Iterations: {data.windows}. Dispatch zones are those named after an export; "
        "every other zone is the runtime's own work, grouped by source location. Self time excludes child zones; "
        "waits (fences, semaphores) block rather than work."
    ))
    rows = data.iterations
    wall, inside = float(rows["wall_ns"].sum()), float(rows["dispatch_ns"].sum())
    cards = el(node, "div", class_="cards")
    for value, label, hint in (
        (ns(float(rows["wall_ns"].median())), "wall time per iteration (median)", f"median of {len(rows)} iterations"),
        (ns(float(rows["dispatch_ns"].median())), "with a dispatch running (median per iteration)", "median per iteration of the union of the dispatch zones of all threads"),
        (pct(float(rows["outside_share"].median())), "of wall time not in dispatches (median per iteration)",
         f"median over iterations; {pct(1.0 - inside / wall if wall else 0.0)} of all iterations' wall time together. "
         "Host work, submission, synchronisation and idle gaps"),
        (ns(float(rows["runtime_ns"].median())), "runtime self time (median per iteration)", "median per iteration: self time of the runtime zones that do not wait, all threads"),
        (ns(float(rows["wait_ns"].median())), "waiting (median per iteration)", "median per iteration: self time of wait zones (fences, semaphores)"),
    ):
        card = el(cards, "div", class_="card", title=hint)
        el(card, "div", class_="big", text=value)
        el(card, "div", class_="muted", text=label)
    el(node, "p", class_="overall", text=(
        f"All {len(rows)} iterations together: {ns(wall)} wall, {ns(inside)} with a dispatch running, "
        f"{pct(1.0 - inside / wall if wall else 0.0)} not in dispatches; runtime self time {ns(float(rows['runtime_ns'].sum()))}, "
        f"waiting {ns(float(rows['wait_ns'].sum()))}."
    ))
    columns = el(node, "div", class_="charts")
    figure = el(columns, "figure")
    figure.append(iteration_split(rows.to_dict("records")))
    el(figure, "figcaption", None, "wall time per iteration: with a dispatch running (orange) and without (grey)")
    if not data.timeline.empty:
        el(node, "h3", None, f"Iteration {data.median_iteration} (median wall time), zone by zone")
        wrap = el(node, "div", class_="strip-wrap")
        span = float(rows.loc[rows["iteration"] == data.median_iteration, "wall_ns"].iloc[0])
        wrap.append(zone_timeline(data.timeline.to_dict("records"), span))
        if data.timeline_left_out:
            el(node, "p", class_="muted small", text=f"{data.timeline_left_out} shortest zones of this iteration left out of the drawing.")
    el(node, "h3", None, f"Top runtime zones ({min(TOP_ZONES, len(data.top))} of {len(data.top)} source locations)")
    runtime_zone_table(node, data)


def runtime_zone_table(parent, data: ZoneData) -> None:
    iterations = max(len(data.iterations), 1)
    wall = float(data.iterations["wall_ns"].sum())
    wrap = el(parent, "div", class_="table-wrap")
    table = el(wrap, "table", id="zone-table", class_="grid sortable")
    header = el(el(table, "thead"), "tr")
    columns = [
        ("zone", "text", "source-location name"), ("count", "num", "zones in the measured iterations"),
        ("total", "num", "inclusive time, all measured iterations"), ("per iteration", "num", None),
        ("self", "num", "total minus child zones"), ("mean", "num", None), ("of wall", "num", "total ÷ wall time of the iterations (inclusive)"),
        ("threads", "text", None), ("where", "text", "function and source file of the zone"),
    ]
    for position, (label, kind, title) in enumerate(columns):
        el(header, "th", None, label, data_sort=kind, data_col=position, title=title)
    body = el(table, "tbody")
    for row in data.top.head(TOP_ZONES).itertuples(index=False):
        tr = el(body, "tr", data_zone=row.zone)
        cell = el(tr, "td", class_="mono")
        el(cell, "span", None, row.zone)
        if row.wait:
            el(cell, "span", class_="badge", title="a wait: its self time is blocking", text="wait")
        el(tr, "td", class_="num", data_v=int(row.count), text=f"{int(row.count)}")
        for value in (row.total_ns, row.per_iteration_ns, row.self_ns, row.mean_ns):
            el(tr, "td", class_="num", data_v=number_text(value), text=ns(value))
        share = row.total_ns / wall if wall else None
        el(tr, "td", class_="num", data_v=number_text(share), text=pct(share))
        el(tr, "td", class_="mono small", text=", ".join(row.threads))
        el(tr, "td", class_="src", title=f"{row.function} · {row.file}:{row.line}", text=f"{row.function} · {row.file.rsplit('/', 1)[-1]}:{row.line}")
    el(parent, "p", class_="muted small", text=f"{data.runtime_zones} runtime zones and {data.dispatch_zones} dispatch zones in {iterations} iterations.")
