"""Per-workgroup views of a hook-collector profile: what each call site's workgroups did, and counters per op.

``profile.workgroups`` has one row per workgroup run (``WORKGROUP_COLUMNS``, one nullable integer
column per perf counter, then ``call_site`` and ``iteration``). For each call site this gives the
distribution of its workgroup durations, the mean duration of each workgroup id over the iterations
(a heat map of the grid: load imbalance shows as hot cells), and per counter its mean per workgroup
and its Pearson correlation with the duration. Per source op, each counter is summed over the
workgroups of the call sites the op feeds, split by the same edge fractions as time
(:func:`tracelink.aggregate.attribution`), so the ops of a call site add up to its counter total.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracelink.collect.hook_tables import WORKGROUP_COLUMNS
from tracelink.profile_dir.profile import Profile
from tracelink.report.fmt import el, ns
from tracelink.report.model import ReportModel
from tracelink.report.svg import heat_map, histogram
from tracelink.report.view_data import CounterStats, HeatGrid, WorkgroupData, WorkgroupSite
from tracelink.report.widgets import bar, chips, grid_table, line_link, number_text, op_link

LABEL_COLUMNS = {"call_site", "iteration"}
MAX_CELLS = 1024  # bigger grids are shown as blocks of consecutive workgroup ids
CELL_BUDGET = 40_000  # heat-map cells of all call sites together (they are in the page): fewer per site beyond
MIN_CELLS = 64
MAX_GRID_COLUMNS = 64  # wider x (or taller y·z) extents are laid out linearly, wrapped
WRAP = 32  # columns of a wrapped linear (1-D or blocked) layout, at least (a square beyond 32²)
TIME_COUNTERS = ("task-clock", "cpu-clock")  # perf software counters measured in ns


def counter_names(workgroups: pd.DataFrame) -> list[str]:
    """The counter columns: numeric columns beyond the hook's own and the call-site labels."""
    known = set(WORKGROUP_COLUMNS) | LABEL_COLUMNS
    return [c for c in workgroups.columns if c not in known and pd.api.types.is_numeric_dtype(workgroups[c])]


def workgroup_data(profile: Profile) -> WorkgroupData | None:
    """The per-workgroup views of a profile, None without workgroups (collectors other than hook)."""
    frame = profile.workgroups
    if frame is None or frame.empty or "call_site" not in frame:
        return None
    frame = frame.dropna(subset=["call_site"]).astype({"call_site": "int64"})
    if frame.empty:
        return None
    counters = counter_names(frame)
    iterations = int(frame["iteration"].nunique()) if "iteration" in frame else 1
    groups = list(frame.groupby("call_site", sort=True))
    max_cells = max(MIN_CELLS, min(MAX_CELLS, CELL_BUDGET // max(len(groups), 1)))
    sites = {int(site): site_view(int(site), group, counters, max_cells) for site, group in groups}
    totals = frame.groupby("call_site")[counters].sum(min_count=1).astype("float64") if counters else pd.DataFrame(index=sorted(sites))
    op_site, by_op = counters_per_op(profile, totals, counters)
    return WorkgroupData(counters=counters, sites=sites, iterations=max(iterations, 1), site_totals=totals, op_site=op_site, by_op=by_op)


def site_view(call_site: int, runs: pd.DataFrame, counters: list[str], max_cells: int = MAX_CELLS) -> WorkgroupSite:
    durations = runs["duration_ns"].to_numpy(dtype=np.float64)
    return WorkgroupSite(
        call_site=call_site, durations=durations,
        iterations=int(runs["iteration"].nunique()) if "iteration" in runs else 1,
        heat=heat_grid(runs, max_cells), counters=[counter_stats(name, durations, runs[name]) for name in counters],
        threads=thread_rows(runs),
    )


def counter_stats(name: str, durations: np.ndarray, values: pd.Series) -> CounterStats:
    """Mean of a counter per workgroup run and its Pearson correlation with the run's duration."""
    present = values.notna().to_numpy()
    counted = values[present].to_numpy(dtype=np.float64)
    paired = durations[present]
    mean = float(counted.mean()) if len(counted) else None
    correlation = None
    if len(counted) >= 3 and counted.std() > 0 and paired.std() > 0:
        correlation = float(np.corrcoef(paired, counted)[0, 1])
    return CounterStats(name=name, mean=mean, correlation=correlation, samples=int(present.sum()))


def grid_of(runs: pd.DataFrame) -> tuple[int, int, int]:
    """The call site's grid (the largest extent seen on each axis, for grids that vary between runs)."""
    return tuple(max(int(runs[f"workgroup_count_{axis}"].max()), 1) for axis in "xyz")  # type: ignore[return-value]


def heat_grid(runs: pd.DataFrame, max_cells: int = MAX_CELLS) -> HeatGrid:
    """Mean duration of each workgroup id over its runs, in a layout that fits a small chart.

    Up to ``max_cells`` ids one cell each; a bigger grid gets one cell per block of consecutive ids."""
    count_x, count_y, count_z = grid = grid_of(runs)
    size = count_x * count_y * count_z
    linear = (runs["workgroup_x"] + count_x * (runs["workgroup_y"] + count_y * runs["workgroup_z"])).to_numpy(dtype=np.int64)
    block = math.ceil(size / max_cells) if size > max_cells else 1
    cells = math.ceil(size / block)
    cell = np.clip(linear // block, 0, cells - 1)
    sums = np.bincount(cell, weights=runs["duration_ns"].to_numpy(dtype=np.float64), minlength=cells)
    counts = np.bincount(cell, minlength=cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    if block == 1 and 1 < count_y * count_z <= MAX_GRID_COLUMNS and count_x <= MAX_GRID_COLUMNS:
        labels = [f"({i % count_x}, {(i // count_x) % count_y}, {i // (count_x * count_y)})" for i in range(cells)]
        return HeatGrid(grid, "grid", 1, count_x, values, counts, labels)
    if block == 1:
        labels = [f"({i % count_x}, {(i // count_x) % count_y}, {i // (count_x * count_y)})" for i in range(cells)]
    else:
        labels = [f"ids {i * block}–{min((i + 1) * block, size) - 1}" for i in range(cells)]
    return HeatGrid(grid, "linear", block, min(cells, max(WRAP, math.ceil(math.sqrt(cells)))), values, counts, labels)


def thread_rows(runs: pd.DataFrame) -> list[dict]:
    """Per worker thread: workgroup runs and busy time per iteration (how evenly the work was spread)."""
    iterations = max(int(runs["iteration"].nunique()) if "iteration" in runs else 1, 1)
    grouped = runs.groupby(runs["thread"].astype("string").fillna("?"), sort=True)["duration_ns"].agg(["count", "sum", "mean"])
    return [
        {"thread": str(thread), "runs": int(row["count"]) / iterations, "busy_ns": float(row["sum"]) / iterations, "mean_ns": float(row["mean"])}
        for thread, row in grouped.iterrows()
    ]


def counters_per_op(profile: Profile, totals: pd.DataFrame, counters: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each call site's counter totals split over its source ops by the time-attribution fractions."""
    shares = profile.attribution.astype({"call_site": "int64"})
    op_site = shares[shares["call_site"].isin(totals.index)].reset_index(drop=True)
    for name in counters:
        op_site[name] = op_site["fraction"] * op_site["call_site"].map(totals[name]).astype("float64")
    if op_site.empty:
        return op_site, pd.DataFrame(columns=["op", *counters, "call_sites"])
    by_op = op_site.groupby("op", sort=False).agg(**{name: (name, "sum") for name in counters}, call_sites=("call_site", lambda s: sorted(set(map(int, s)))))
    return op_site, by_op.reset_index()


def format_counter(name: str, value: float | None) -> str:
    """A counter value: ns for time counters, else three significant digits with a thousands separator."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if name in TIME_COUNTERS:
        return ns(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


# Markup --------------------------------------------------------------------------------------------


def workgroup_templates(parent, data: WorkgroupData) -> None:
    """Each call site's workgroups, a template (``t-wg-<call site>``) the viewer adds to its drill-down
    (built in the browser from the page's data; these views stay markup, only hook profiles have them)."""
    for index, site in data.sites.items():
        workgroup_drill(el(parent, "template", id=f"t-wg-{index}"), site)


def workgroup_drill(parent, site: WorkgroupSite) -> None:
    """A call site's workgroups in its drill-down: cards, duration histogram, heat map, counters, threads."""
    count_x, count_y, count_z = site.heat.grid
    box = el(parent, "div", class_="workgroups", data_cs=site.call_site)
    el(box, "h4", None, "Workgroups (hook collector)")
    el(box, "p", class_="note", text=(
        f"{len(site.durations)} workgroup runs over {site.iterations} iteration{'s' if site.iterations != 1 else ''}, "
        f"grid {count_x}×{count_y}×{count_z}. The heat map shows each workgroup id's mean duration over the iterations: "
        "a few hot cells among pale ones is load imbalance (the dispatch waits for its slowest workgroups)."
    ))
    stats = el(box, "div", class_="cards small")
    imbalance = site.imbalance
    for value, label in (
        (f"{len(site.durations) / max(site.iterations, 1):.0f}", "workgroup runs per iteration"),
        (ns(float(site.durations.mean())) if len(site.durations) else "–", "mean workgroup"),
        (ns(float(np.median(site.durations))) if len(site.durations) else "–", "p50 workgroup"),
        (f"{imbalance:.2f}" if imbalance is not None else "–", "slowest id ÷ mean of ids"),
    ):
        card = el(stats, "div", class_="card")
        el(card, "div", class_="big", text=value)
        el(card, "div", class_="muted", text=label)
    charts = el(box, "div", class_="charts")
    figure = el(charts, "figure", class_="wg-hist")
    figure.append(histogram(site.durations, what="workgroup"))
    el(figure, "figcaption", None, "workgroup durations")
    figure = el(charts, "figure", class_="wg-heat")
    figure.append(heat_map(site.heat))
    el(figure, "figcaption", None, "mean duration per workgroup id" + (f" (blocks of {site.heat.block} ids)" if site.heat.block > 1 else ""))
    if site.counters:
        counter_stats_table(box, site)
    if site.threads:
        body = grid_table(box, ("thread", "workgroups per iteration", "busy per iteration", "mean workgroup"), class_="grid wg-threads")
        for row in site.threads:
            tr = el(body, "tr")
            el(tr, "td", class_="mono", text=row["thread"])
            el(tr, "td", class_="num", text=f"{row['runs']:.1f}")
            el(tr, "td", class_="num", text=ns(row["busy_ns"]))
            el(tr, "td", class_="num", text=ns(row["mean_ns"]))


def counter_stats_table(parent, site: WorkgroupSite) -> None:
    table = el(parent, "table", class_="grid wg-counters")
    header = el(el(table, "thead"), "tr")
    for label, title in (
        ("counter", None), ("mean per workgroup", "over the workgroup runs where the counter was read"),
        ("correlation with duration", "Pearson r between a workgroup's duration and this counter (– when either is constant)"),
        ("runs read", None),
    ):
        el(header, "th", None, label, title=title)
    body = el(table, "tbody")
    for stats in site.counters:
        row = el(body, "tr", data_counter=stats.name)
        el(row, "td", class_="mono", text=stats.name)
        el(row, "td", class_="num", data_v=number_text(stats.mean), text=format_counter(stats.name, stats.mean))
        text = f"{stats.correlation:+.2f}" if stats.correlation is not None else "– (constant)"
        el(row, "td", class_="num corr", data_v=number_text(stats.correlation), text=text)
        el(row, "td", class_="num", text=f"{stats.samples}/{len(site.durations)}")


def counters_section(parent, model: ReportModel, data: WorkgroupData) -> None:
    """The "Counters per source op" table: each counter per iteration, split like time."""
    if not data.counters or data.by_op.empty:
        return
    el(parent, "h3", None, "Counters per source op")
    el(parent, "p", class_="note", text=(
        "Each perf counter summed over the workgroups of the dispatches a source op feeds, split between the ops of a "
        f"dispatch by the same fractions as its time; per iteration (mean of {data.iterations}). Click a column to sort."
    ))
    wrap = el(parent, "div", class_="table-wrap")
    table = el(wrap, "table", id="counter-table", class_="grid sortable")
    header = el(el(table, "thead"), "tr")
    columns = [("op", "text"), ("lines", "text"), ("dispatches", "text"), ("share of time", "num")] + [(name, "num") for name in data.counters]
    for position, (label, kind) in enumerate(columns):
        el(header, "th", None, label, data_sort=kind, data_col=position)
    body = el(table, "tbody")
    rows = sorted(data.by_op.to_dict("records"), key=lambda r: (-model.ops.get(r["op"], {}).get("share", 0.0), r["op"]))
    for record in rows:
        op = record["op"]
        info = model.ops.get(op, {})
        row = el(body, "tr", data_op=op)
        op_link(el(row, "td", class_="mono"), model, op)
        lines = el(row, "td", class_="mono")
        for key in info.get("lines", [])[:3]:
            line_link(lines, model, key)
            el(lines, "br")
        roles = dict(info.get("call_sites", []))
        chips(el(row, "td"), {i: roles.get(i) for i in record["call_sites"]}, 6)
        bar(el(row, "td", data_v=number_text(info.get("share"))), info.get("share"))
        for name in data.counters:
            value = record[name] / data.iterations
            el(row, "td", class_="num", data_v=number_text(value), data_counter=name, title=f"{format_counter(name, record[name])} over all iterations", text=format_counter(name, value))
