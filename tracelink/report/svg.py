"""Inline SVG charts of the report: runtime histogram, per-iteration bars, iteration strip, the graph."""

from __future__ import annotations

import numpy as np
from lxml import etree

from tracelink.report.fmt import el, heat, ns, pct
from tracelink.report.layout import COLUMNS, GROUP_HEADER, NODE_H, GraphLayout


def svg_root(width: float, height: float, label: str, class_: str = "chart") -> etree._Element:
    return el(None, "svg", {"viewBox": f"0 0 {width:g} {height:g}", "width": f"{width:g}", "height": f"{height:g}", "role": "img", "aria-label": label, "class": class_})


def histogram(durations: np.ndarray, width: float = 400, height: float = 150) -> etree._Element:
    """Distribution of one call site's execution times."""
    root = svg_root(width, height, "histogram of execution times")
    left, right, top, bottom = 54, 10, 16, 28
    if len(durations) == 0:
        el(root, "text", {"x": width / 2, "y": height / 2, "text-anchor": "middle", "class": "muted"}, "no executions recorded")
        return root
    low, high = float(durations.min()), float(durations.max())
    if high <= low:
        high = low + 1.0
    bins = int(min(30, max(6, np.ceil(np.sqrt(len(durations)) * 2))))
    counts, edges = np.histogram(durations, bins=bins, range=(low, high))
    peak = max(int(counts.max()), 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    bar_w = plot_w / bins
    el(root, "line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"})
    for i, count in enumerate(counts):
        if count == 0:
            continue
        bar_h = plot_h * count / peak
        bar = el(root, "rect", {"x": f"{left + i * bar_w + 0.5:.1f}", "y": f"{top + plot_h - bar_h:.1f}", "width": f"{max(bar_w - 1, 1):.1f}", "height": f"{bar_h:.1f}", "class": "hb"})
        el(bar, "title", None, f"{ns(edges[i])} – {ns(edges[i + 1])}: {int(count)} execution{'s' if count != 1 else ''}")
    for value, anchor, x in ((low, "start", left), (high, "end", left + plot_w)):
        el(root, "text", {"x": x, "y": height - 8, "text-anchor": anchor, "class": "tick"}, ns(value))
    median = float(np.median(durations))
    mx = left + plot_w * (median - low) / (high - low)
    el(root, "line", {"x1": f"{mx:.1f}", "y1": top, "x2": f"{mx:.1f}", "y2": top + plot_h, "class": "marker"})
    anchor = "start" if mx < left + plot_w * 0.7 else "end"
    el(root, "text", {"x": f"{mx + (4 if anchor == 'start' else -4):.1f}", "y": top + 10, "text-anchor": anchor, "class": "tick strong"}, f"p50 {ns(median)}")
    el(root, "text", {"x": left - 4, "y": top + 8, "text-anchor": "end", "class": "tick"}, str(peak))
    el(root, "text", {"x": left - 4, "y": top + plot_h, "text-anchor": "end", "class": "tick"}, "0")
    return root


def per_iteration(series: list[tuple[int, float]], width: float = 400, height: float = 150) -> etree._Element:
    """One call site's time in each iteration (call of the function), as bars in run order."""
    root = svg_root(width, height, "time per iteration")
    left, right, top, bottom = 54, 10, 16, 28
    if not series:
        el(root, "text", {"x": width / 2, "y": height / 2, "text-anchor": "middle", "class": "muted"}, "no iterations recorded")
        return root
    first, last = series[0][0], series[-1][0]
    buckets = bucketed(series, MAX_BARS)
    peak = max(value for _, _, value in buckets) or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / len(buckets)
    el(root, "line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"})
    for position, (low, high, value) in enumerate(buckets):
        bar_h = max(plot_h * value / peak, 1.0)
        bar = el(root, "rect", {"x": f"{left + position * step + 0.5:.1f}", "y": f"{top + plot_h - bar_h:.1f}", "width": f"{max(step - 1.5, 1):.1f}", "height": f"{bar_h:.1f}", "class": "hb"})
        el(bar, "title", None, f"iteration {low}: {ns(value)}" if low == high else f"iterations {low}–{high}: {ns(value)} on average")
    el(root, "text", {"x": left, "y": height - 8, "class": "tick"}, f"iteration {first}")
    if len(buckets) < len(series):
        el(root, "text", {"x": left + plot_w / 2, "y": height - 8, "text-anchor": "middle", "class": "tick"}, f"mean of every {len(series) // len(buckets)}+")
    el(root, "text", {"x": left + plot_w, "y": height - 8, "text-anchor": "end", "class": "tick"}, f"{last}")
    el(root, "text", {"x": left - 4, "y": top + 8, "text-anchor": "end", "class": "tick"}, ns(peak))
    el(root, "text", {"x": left - 4, "y": top + plot_h, "text-anchor": "end", "class": "tick"}, "0")
    return root


MAX_BARS = 100  # longer runs are shown as the mean of consecutive iterations


def bucketed(series: list[tuple[int, float]], limit: int) -> list[tuple[int, int, float]]:
    """(first iteration, last iteration, mean) of at most ``limit`` runs of consecutive iterations."""
    count = len(series)
    groups = min(count, limit)
    out = []
    for group in range(groups):
        part = series[group * count // groups : (group + 1) * count // groups]
        out.append((part[0][0], part[-1][0], sum(v for _, v in part) / len(part)))
    return out


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


def graph_svg(layout: GraphLayout) -> etree._Element:
    """The provenance graph: nodes as labelled boxes, edges as curves, source ops in collapsible groups."""
    root = svg_root(layout.width, layout.height, "provenance graph", "graph")
    root.set("id", "graph-svg")
    for kind, (x, w, title) in COLUMNS.items():
        el(root, "text", {"x": x, "y": 16, "class": "col-title"}, title)
    edges = el(root, "g", {"class": "edges"})
    for source, target, role in layout.edges:
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
        el(header, "text", {"x": x + 4, "y": group.y + 16, "class": "grp-title"}, f"▾ {short(group_name(group.title), 24)}")
        el(header, "text", {"x": x + w - 2, "y": group.y + 16, "text-anchor": "end", "class": "grp-count"}, f"{len(group.nodes)} ops · {pct(min(group.share, 1.0))}")
        el(header, "title", None, f"{group.title}\n{len(group.nodes)} source ops; click to collapse or expand")
        for node in group.nodes:
            add_node(g, layout.nodes[node])
    for placed in layout.nodes.values():
        if placed.group is None:
            add_node(body, placed)
    return root


def group_name(title: str) -> str:
    """A file group by its file name (the full path is in the tooltip)."""
    return title.rsplit("/", 1)[-1] or title


def short(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def add_node(parent: etree._Element, placed) -> None:
    kind = {"source_op": "op", "call_site": "cs", "export": "ex", "executable": "exe"}[placed.kind]
    g = el(parent, "g", {"class": f"node {kind} {placed.extra}".strip(), "data-id": placed.id, "tabindex": "0"})
    el(g, "rect", {"x": placed.x, "y": f"{placed.y:.1f}", "width": placed.w, "height": NODE_H, "rx": 4, "class": f"box h{heat(placed.share)}"})
    el(g, "text", {"x": placed.x + 6, "y": f"{placed.y + 13:.1f}"}, placed.label)
    if placed.share:
        el(g, "text", {"x": placed.x + placed.w - 5, "y": f"{placed.y + 13:.1f}", "text-anchor": "end", "class": "num"}, pct(placed.share))
    el(g, "title", None, placed.title)

