"""Inline SVG charts of the report: workgroup histogram, iteration strip, live bytes, the graph, heat map, roofline."""

from __future__ import annotations

import numpy as np
from lxml import etree

from tracelink.report.fmt import el, heat, ns, pct, size
from tracelink.report.layout import COLUMNS, GROUP_HEADER, NODE_H, GraphLayout, short_label, text_width


def svg_root(width: float, height: float, label: str, class_: str = "chart") -> etree._Element:
    return el(None, "svg", {"viewBox": f"0 0 {width:g} {height:g}", "width": f"{width:g}", "height": f"{height:g}", "role": "img", "aria-label": label, "class": class_})


def histogram_bins(durations: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Times (at least one) binned: the counts, the bin edges (6 to 30 equal bins from the shortest to the
    longest) and the median."""
    low, high = float(durations.min()), float(durations.max())
    if high <= low:
        high = low + 1.0
    bins = int(min(30, max(6, np.ceil(np.sqrt(len(durations)) * 2))))
    counts, edges = np.histogram(durations, bins=bins, range=(low, high))
    return counts, edges, float(np.median(durations))


def histogram(durations: np.ndarray, width: float = 400, height: float = 150, what: str = "execution") -> etree._Element:
    """Distribution of a call site's workgroup (or execution) times; each bar's count in ``data-n``.

    ``viewer/drill.js`` draws a drill-down's histogram of execution times the same way, from the same bins."""
    root = svg_root(width, height, f"histogram of {what} times")
    left, right, top, bottom = 54, 10, 16, 28
    if len(durations) == 0:
        el(root, "text", {"x": width / 2, "y": height / 2, "text-anchor": "middle", "class": "muted"}, f"no {what}s recorded")
        return root
    counts, edges, median = histogram_bins(durations)
    low, high, bins = float(edges[0]), float(edges[-1]), len(counts)
    peak = max(int(counts.max()), 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    bar_w = plot_w / bins
    el(root, "line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"})
    for i, count in enumerate(counts):
        if count == 0:
            continue
        bar_h = plot_h * count / peak
        bar = el(root, "rect", {"x": f"{left + i * bar_w + 0.5:.1f}", "y": f"{top + plot_h - bar_h:.1f}", "width": f"{max(bar_w - 1, 1):.1f}", "height": f"{bar_h:.1f}", "class": "hb", "data-n": int(count)})
        el(bar, "title", None, f"{ns(edges[i])} – {ns(edges[i + 1])}: {int(count)} {what}{'s' if count != 1 else ''}")
    for value, anchor, x in ((low, "start", left), (high, "end", left + plot_w)):
        el(root, "text", {"x": x, "y": height - 8, "text-anchor": anchor, "class": "tick"}, ns(value))
    mx = left + plot_w * (median - low) / (high - low)
    el(root, "line", {"x1": f"{mx:.1f}", "y1": top, "x2": f"{mx:.1f}", "y2": top + plot_h, "class": "marker"})
    anchor = "start" if mx < left + plot_w * 0.7 else "end"
    el(root, "text", {"x": f"{mx + (4 if anchor == 'start' else -4):.1f}", "y": top + 10, "text-anchor": anchor, "class": "tick strong"}, f"p50 {ns(median)}")
    el(root, "text", {"x": left - 4, "y": top + 8, "text-anchor": "end", "class": "tick"}, str(peak))
    el(root, "text", {"x": left - 4, "y": top + plot_h, "text-anchor": "end", "class": "tick"}, "0")
    return root


MAX_TITLED = 400  # dispatches up to which each gets its own hover target in the live-bytes chart


def live_bytes(timeline: list[int], peak_at: int, labels: dict[int, str], width: float = 1000, height: float = 150) -> etree._Element:
    """Bytes live in one call at each dispatch (its position in the call's order), as a step area, the peak marked.

    ``labels``: what to say of each dispatch position on hover after its live bytes (its call site, the lines holding most).
    """
    root = svg_root(width, height, "live bytes over the dispatch sequence of one call")
    left, right, top, bottom = 64, 10, 16, 28
    if not timeline:
        el(root, "text", {"x": width / 2, "y": height / 2, "text-anchor": "middle", "class": "muted"}, "no dispatches planned")
        return root
    peak = max(max(timeline), 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / len(timeline)
    points = [f"M{left:.1f},{top + plot_h:.1f}"]
    for position, value in enumerate(timeline):
        y = top + plot_h - plot_h * value / peak
        points.append(f"L{left + position * step:.1f},{y:.1f}L{left + (position + 1) * step:.1f},{y:.1f}")
    points.append(f"L{left + plot_w:.1f},{top + plot_h:.1f}Z")
    el(root, "path", {"d": "".join(points), "class": "hb"})
    if len(timeline) <= MAX_TITLED:
        for position, value in enumerate(timeline):
            target = el(root, "rect", {"x": f"{left + position * step:.1f}", "y": top, "width": f"{max(step, 1):.1f}", "height": plot_h,
                                       "fill": "transparent", "data-position": position})
            el(target, "title", None, f"dispatch {position}: {size(value)} live{labels.get(position, '')}")
    el(root, "line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"})
    mx = left + (peak_at + 0.5) * step
    el(root, "line", {"x1": f"{mx:.1f}", "y1": top, "x2": f"{mx:.1f}", "y2": top + plot_h, "class": "marker"})
    anchor = "start" if mx < left + plot_w * 0.7 else "end"
    el(root, "text", {"x": f"{mx + (4 if anchor == 'start' else -4):.1f}", "y": top + 10, "text-anchor": anchor, "class": "tick strong"},
       f"peak {size(timeline[peak_at])} at dispatch {peak_at}")
    el(root, "text", {"x": left, "y": height - 8, "class": "tick"}, "dispatch 0")
    el(root, "text", {"x": left + plot_w, "y": height - 8, "text-anchor": "end", "class": "tick"}, f"{len(timeline) - 1}")
    el(root, "text", {"x": left - 4, "y": top + 8, "text-anchor": "end", "class": "tick"}, size(peak))
    el(root, "text", {"x": left - 4, "y": top + plot_h, "text-anchor": "end", "class": "tick"}, "0")
    return root


def iteration_strip(dispatches: list[dict], shares: dict[int, float], labels: dict[int, str], width: float = 1000, height: float = 58) -> etree._Element:
    """Every dispatch of one iteration on its time axis; gaps are host work and synchronisation."""
    root = svg_root(width, height, "dispatches of one iteration over time", "chart strip")
    if not dispatches:
        return root
    span = max(d["start"] + d["duration"] for d in dispatches) or 1
    top, bar_h = 6, 28
    el(root, "rect", {"x": 0, "y": top, "width": width, "height": bar_h, "class": "lane"})
    for dispatch in dispatches:
        index = dispatch["call_site"]
        x = width * dispatch["start"] / span
        w = max(width * dispatch["duration"] / span, 1.0)
        bar = el(root, "rect", {"x": f"{x:.2f}", "y": top, "width": f"{w:.2f}", "height": bar_h, "class": f"d h{heat(shares.get(index, 0.0))}", "data-cs": index})
        el(bar, "title", None, f"#{index} {labels.get(index, '')}\nstarts at {ns(dispatch['start'])}, takes {ns(dispatch['duration'])}")
    el(root, "text", {"x": 0, "y": height - 6, "class": "tick"}, "0")
    el(root, "text", {"x": width, "y": height - 6, "text-anchor": "end", "class": "tick"}, ns(span))
    el(root, "text", {"x": width / 2, "y": height - 6, "text-anchor": "middle", "class": "tick"}, f"iteration {dispatches[0]['iteration']} (median total time); click a dispatch for its drill-down")
    return root


def edge_path(x1: float, y1: float, x2: float, y2: float) -> str:
    middle = (x1 + x2) / 2
    return f"M{x1:.1f},{y1:.1f}C{middle:.1f},{y1:.1f} {middle:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"


def graph_svg(layout: GraphLayout, view: str) -> etree._Element:
    """The provenance graph: nodes as labelled boxes, edges as curves, source ops in collapsible groups.

    ``view`` ("hot" or "full") goes to ``data-view``: the viewer swaps the two views of a big graph.
    """
    root = svg_root(layout.width, layout.height, "provenance graph", "graph")
    root.set("id", "graph-svg")
    root.set("data-view", view)
    for kind, (x, w, title) in COLUMNS.items():
        el(root, "text", {"x": x, "y": 16, "class": "col-title"}, title)
    edges = el(root, "g", {"class": "edges"})
    # A fill that CSE shares between layers feeds every dispatch of its shape from one layer's op: its
    # edges say nothing about where the work is and would run screens long, so they are not drawn
    # (they stay in the neighbourhoods: selecting the op still lights up those call sites).
    for source, target, role in (edge for edge in layout.edges if edge[2] != "init"):
        a, b = layout.nodes[source], layout.nodes[target]
        path = edge_path(a.x + a.w, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2)
        el(edges, "path", {"d": path, "class": f"edge {role}".strip(), "data-s": source, "data-t": target})
    body = el(root, "g", {"class": "nodes"})
    for group in layout.groups:
        g = el(body, "g", {"class": "grp", "data-g": group.id})
        x, w, _ = COLUMNS["source_op"]
        el(g, "rect", {"x": x - 4, "y": group.y, "width": w + 8, "height": group.height, "rx": 6, "class": "grp-box"})
        header = el(g, "g", {"class": "grp-head", "data-g": group.id, "tabindex": "0"})
        el(header, "rect", {"x": x - 4, "y": group.y, "width": w + 8, "height": GROUP_HEADER, "rx": 6, "class": "grp-hit"})
        count = f"{len(group.nodes)} ops · {pct(min(group.share, 1.0))}"
        room = w - 6 - text_width(count, COUNT_FONT_PX) - 12
        el(header, "text", {"x": x + 4, "y": group.y + 16, "class": "grp-title"}, "▾ " + short_label(group.label, room - text_width("▾ "), from_left=True, size=TITLE_FONT_PX))
        el(header, "text", {"x": x + w - 2, "y": group.y + 16, "text-anchor": "end", "class": "grp-count"}, count)
        el(header, "title", None, f"{group.title}\n{len(group.nodes)} source ops; click to collapse or expand")
        for node in group.nodes:
            add_node(g, layout.nodes[node])
    for placed in layout.nodes.values():
        if placed.group is None:
            add_node(body, placed)
    return root


# A group header's title (bold) and its count ("12 ops · 10.5%") share the column's width; the title
# is cut from the left (a scope's layer, a file's name stay).
TITLE_FONT_PX = 12.5  # 11.5 px at weight 650 is about as wide as 12.5 px regular
COUNT_FONT_PX = 10.5


def add_node(parent: etree._Element, placed) -> None:
    kind = {"source_op": "op", "call_site": "cs", "export": "ex", "executable": "exe"}[placed.kind]
    g = el(parent, "g", {"class": f"node {kind} {placed.extra}".strip(), "data-id": placed.id, "tabindex": "0"})
    el(g, "rect", {"x": placed.x, "y": f"{placed.y:.1f}", "width": placed.w, "height": NODE_H, "rx": 4, "class": f"box h{heat(placed.share)}"})
    el(g, "text", {"x": placed.x + 6, "y": f"{placed.y + 13:.1f}", "class": "lb"}, placed.label)
    if placed.share:
        el(g, "text", {"x": placed.x + placed.w - 5, "y": f"{placed.y + 13:.1f}", "text-anchor": "end", "class": "num"}, pct(placed.share))
    el(g, "title", None, placed.title)



def heat_level(value: float, low: float, high: float) -> int:
    """1..6 for a value between low and high (3 when they are equal): the cell's colour."""
    if high <= low:
        return 3
    return int(min(6, max(1, 1 + np.floor(6 * (value - low) / (high - low)))))


def heat_map(cells, width: float = 400) -> etree._Element:
    """A call site's mean workgroup duration per workgroup id (a :class:`~tracelink.report.workgroups.HeatGrid`).

    One cell per id (or block of ids), coloured from the fastest (pale) to the slowest (dark); each
    cell carries its id in ``data-wg``, its mean in ``data-v`` and its run count in ``data-n``.
    """
    values = cells.values
    finite = values[~np.isnan(values)]
    low, high = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 0.0)
    left, top, right, bottom = 44, 18, 8, 30
    size = max(4.0, min(28.0, (width - left - right) / max(cells.columns, 1)))
    plot_w, plot_h = size * cells.columns, size * cells.rows
    root = svg_root(max(left + plot_w + right, 240), top + plot_h + bottom, "mean workgroup duration per workgroup id", "chart heatmap")
    count_x, count_y, count_z = cells.grid
    axis = "x →   (y, z) ↓" if cells.layout == "grid" else ("workgroup id →" if cells.block == 1 else f"workgroup ids, {cells.block} per cell →")
    el(root, "text", {"x": left, "y": 12, "class": "tick"}, f"grid {count_x}×{count_y}×{count_z} · {axis}")
    for position, (value, runs, label) in enumerate(zip(values, cells.runs, cells.labels)):
        row, column = divmod(position, cells.columns)
        x, y = left + column * size, top + row * size
        if np.isnan(value):
            rect = el(root, "rect", {"x": f"{x:.1f}", "y": f"{y:.1f}", "width": f"{size - 1:.1f}", "height": f"{size - 1:.1f}", "class": "wg none", "data-wg": label, "data-n": 0})
            el(rect, "title", None, f"workgroup {label}: never ran")
            continue
        level = heat_level(float(value), low, high)
        rect = el(root, "rect", {
            "x": f"{x:.1f}", "y": f"{y:.1f}", "width": f"{size - 1:.1f}", "height": f"{size - 1:.1f}",
            "class": f"wg h{level}", "data-wg": label, "data-v": f"{float(value):.9g}", "data-n": int(runs),
        })
        el(rect, "title", None, f"workgroup {label}: {ns(float(value))} on average over {int(runs)} run{'s' if runs != 1 else ''}")
    for row in range(cells.rows):
        if cells.rows <= 16 or row % max(1, cells.rows // 8) == 0:
            label = f"{row % count_y},{row // count_y}" if cells.layout == "grid" else str(row * cells.columns * cells.block)
            el(root, "text", {"x": left - 4, "y": f"{top + row * size + size / 2 + 3:.1f}", "text-anchor": "end", "class": "tick"}, label)
    legend_y = top + plot_h + 8
    el(root, "text", {"x": left, "y": legend_y + 12, "class": "tick"}, ns(low))
    for level in range(1, 7):
        el(root, "rect", {"x": left + 44 + (level - 1) * 12, "y": legend_y + 3, "width": 11, "height": 10, "class": f"wg h{level}"})
    el(root, "text", {"x": left + 44 + 6 * 12 + 4, "y": legend_y + 12, "class": "tick"}, ns(high))
    return root


OUTLIER_CLIP = 4.0  # iteration bars taller than this many medians are cut, their value written above


def iteration_split(rows: list[dict], width: float = 560, height: float = 160) -> etree._Element:
    """Each iteration's wall time as a bar: the part with a dispatch running, and the rest (runtime, gaps)."""
    root = svg_root(width, height, "wall time per iteration, in and out of dispatches")
    left, right, top, bottom = 54, 10, 16, 28
    if not rows:
        el(root, "text", {"x": width / 2, "y": height / 2, "text-anchor": "middle", "class": "muted"}, "no iterations recorded")
        return root
    walls = [row["wall_ns"] for row in rows]
    peak = min(max(walls), OUTLIER_CLIP * float(np.median(walls))) or 1.0  # an outlier does not flatten the others
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / len(rows)
    el(root, "line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"})
    for position, row in enumerate(rows):
        x, w = left + position * step + 0.5, max(step - 1.5, 1.0)
        wall_h, inside_h = plot_h * min(row["wall_ns"], peak) / peak, plot_h * min(row["dispatch_ns"], peak) / peak
        group = el(root, "g", {"class": "split" + (" clipped" if row["wall_ns"] > peak else ""), "data-iteration": row["iteration"]})
        if row["wall_ns"] > peak:
            el(group, "text", {"x": f"{x + w / 2:.1f}", "y": top - 4, "text-anchor": "middle", "class": "tick strong"}, f"↑{ns(row['wall_ns'])}")
        el(group, "rect", {"x": f"{x:.1f}", "y": f"{top + plot_h - wall_h:.1f}", "width": f"{w:.1f}", "height": f"{wall_h - inside_h:.1f}", "class": "out"})
        el(group, "rect", {"x": f"{x:.1f}", "y": f"{top + plot_h - inside_h:.1f}", "width": f"{w:.1f}", "height": f"{inside_h:.1f}", "class": "in"})
        el(group, "title", None, f"iteration {row['iteration']}: {ns(row['wall_ns'])} wall, {ns(row['dispatch_ns'])} with a dispatch running, "
           f"{pct(row['outside_share'])} without; runtime self time {ns(row['runtime_ns'])}, waiting {ns(row['wait_ns'])}")
    el(root, "text", {"x": left, "y": height - 8, "class": "tick"}, f"iteration {rows[0]['iteration']}")
    el(root, "text", {"x": left + plot_w, "y": height - 8, "text-anchor": "end", "class": "tick"}, str(rows[-1]["iteration"]))
    el(root, "text", {"x": left - 4, "y": top + 8, "text-anchor": "end", "class": "tick"}, ns(peak))
    el(root, "text", {"x": left - 4, "y": top + plot_h, "text-anchor": "end", "class": "tick"}, "0")
    return root


def zone_timeline(zones: list[dict], span: float, width: float = 1000, lane_h: float = 12) -> etree._Element:
    """The zones of one iteration: a lane per thread and nesting depth, dispatches orange, waits hatched."""
    lanes = max((zone["lane"] for zone in zones), default=-1) + 1
    label_w, top, bottom = 110, 4, 22
    plot_w = width - label_w
    height = top + lanes * lane_h + bottom
    root = svg_root(width, height, "zones of one iteration by thread", "chart strip zones")
    span = span or 1.0
    first_lane: dict[str, int] = {}
    for zone in zones:
        first_lane[zone["thread"]] = min(first_lane.get(zone["thread"], zone["lane"]), zone["lane"])
    for thread, lane in first_lane.items():
        el(root, "line", {"x1": 0, "y1": top + lane * lane_h - 0.5, "x2": width, "y2": top + lane * lane_h - 0.5, "class": "lane-sep"})
        el(root, "text", {"x": 2, "y": f"{top + lane * lane_h + 9:.1f}", "class": "tick"}, thread if len(thread) <= 18 else thread[:17] + "…")
    for zone in zones:
        x = label_w + plot_w * max(zone["start"], 0) / span
        w = max(plot_w * zone["duration"] / span, 0.6)
        rect = el(root, "rect", {"x": f"{x:.2f}", "y": f"{top + zone['lane'] * lane_h:.1f}", "width": f"{min(w, width - x):.2f}", "height": lane_h - 1.5, "class": f"z {zone['kind']}"})
        name = zone["name"] if zone["name"] == zone["srcloc"] else f"{zone['name']} ({zone['srcloc']})"
        el(rect, "title", None, f"{name}\n{zone['kind']} · {ns(zone['duration'])}, starts at +{ns(zone['start'])}")
    el(root, "text", {"x": label_w, "y": height - 6, "class": "tick"}, "0")
    el(root, "text", {"x": width, "y": height - 6, "text-anchor": "end", "class": "tick"}, ns(span))
    el(root, "text", {"x": label_w + plot_w / 2, "y": height - 6, "text-anchor": "middle", "class": "tick"}, "orange: dispatch · grey: runtime · blue: wait")
    return root


def roofline(sites: list[dict], machine: dict, width: float = 640, height: float = 340) -> etree._Element:
    """Achieved GFLOP/s against arithmetic intensity (log-log) under the machine's roofs.

    One dot per timed call site with a cost model (``circle.rf``, ``data-cs`` its index), its area
    proportional to its share of dispatch time, coloured by its verdict; clicking it opens its drill-down.
    """
    root = svg_root(width, height, "roofline: achieved GFLOP/s against arithmetic intensity", "chart roofline")
    root.set("id", "roofline")
    left, right, top, bottom = 58, 14, 14, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [s for s in sites if s.get("intensity") and s.get("gflops_s") and s["intensity"] > 0 and s["gflops_s"] > 0]
    peak, bandwidth = float(machine.get("peak_gflops") or 0), float(machine.get("peak_gbps") or 0)
    if not points or peak <= 0 or bandwidth <= 0:
        el(root, "text", {"x": width / 2, "y": height / 2, "text-anchor": "middle", "class": "muted"}, "no call site with a cost model and a time")
        return root
    ridge = peak / bandwidth
    x_low = np.log10(min(min(s["intensity"] for s in points), ridge) / 2)
    x_high = np.log10(max(max(s["intensity"] for s in points), ridge) * 2)
    y_low = np.log10(min(min(s["gflops_s"] for s in points), bandwidth * 10 ** x_low) / 2)
    y_high = np.log10(peak * 2)

    def x_of(value: float) -> float:
        return left + plot_w * (np.log10(value) - x_low) / (x_high - x_low)

    def y_of(value: float) -> float:
        return top + plot_h * (1 - (np.log10(value) - y_low) / (y_high - y_low))

    el(root, "line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"})
    el(root, "line", {"x1": left, "y1": top, "x2": left, "y2": top + plot_h, "class": "axis"})
    for exponent in range(int(np.ceil(x_low)), int(np.floor(x_high)) + 1):
        el(root, "text", {"x": f"{x_of(10.0 ** exponent):.1f}", "y": height - 20, "text-anchor": "middle", "class": "tick"}, f"{10.0 ** exponent:g}")
    for exponent in range(int(np.ceil(y_low)), int(np.floor(y_high)) + 1):
        el(root, "text", {"x": left - 4, "y": f"{y_of(10.0 ** exponent) + 3:.1f}", "text-anchor": "end", "class": "tick"}, f"{10.0 ** exponent:g}")
    el(root, "text", {"x": left + plot_w / 2, "y": height - 4, "text-anchor": "middle", "class": "tick"}, "arithmetic intensity (FLOP/byte)")
    el(root, "text", {"x": 12, "y": top + plot_h / 2, "text-anchor": "middle", "class": "tick", "transform": f"rotate(-90 12 {top + plot_h / 2:.1f})"}, "GFLOP/s")
    start = 10 ** x_low
    roof = f"M{x_of(start):.1f},{y_of(bandwidth * start):.1f} L{x_of(ridge):.1f},{y_of(peak):.1f} L{left + plot_w:.1f},{y_of(peak):.1f}"
    el(root, "path", {"d": roof, "class": "roof"})
    el(root, "text", {"x": left + plot_w - 4, "y": f"{y_of(peak) - 4:.1f}", "text-anchor": "end", "class": "tick strong"}, f"peak {peak:.3g} GFLOP/s")
    el(root, "text", {"x": f"{x_of(ridge) - 6:.1f}", "y": f"{y_of(peak) + 14:.1f}", "text-anchor": "end", "class": "tick strong"}, f"{bandwidth:.3g} GB/s")
    largest = max(s["share"] or 0.0 for s in points) or 1.0
    for site in sorted(points, key=lambda s: -(s["share"] or 0.0)):  # big dots first, small ones stay clickable on top
        radius = 3 + 11 * np.sqrt((site["share"] or 0.0) / largest)
        dot = el(root, "circle", {
            "cx": f"{x_of(site['intensity']):.1f}", "cy": f"{y_of(site['gflops_s']):.1f}", "r": f"{radius:.1f}",
            "class": f"rf {site['verdict'].split('-')[0] or 'none'}", "data-cs": site["index"], "tabindex": "0",
        })
        bound = site.get("lower_bound")
        el(dot, "title", None, f"#{site['index']} {site['export']}: {site['gflops_s']:.3g} GFLOP/s at {site['intensity']:.3g} FLOP/B, "
                               f"{pct(site['share'])} of dispatch time · {site['verdict'] or 'no verdict'}"
                               + (" · FLOPs and bytes are lower bounds (a dynamic size the run did not fix)" if bound else ""))
    return root
