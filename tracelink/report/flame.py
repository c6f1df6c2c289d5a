"""Flame graph by source: an icicle of self time along the source hierarchy, down to the dispatch.

Each call site's time is credited to its source ops by the attribution fractions, and each op's part
split equally between the members of its fused location (as self time is). A member's path from the
top is its Python call stack, outermost frame first, where the location carries one; its name scopes
(``encoder/layer_3/attention``) where its name has ``/``; else its file, then its line. The dispatch
(call site) is the last level. Frames narrower than :data:`MIN_FRACTION` of the total are left out.
The SVG carries each frame's extent (``data-x0``/``data-x1`` as fractions of the root, ``data-d`` its
depth) so ``report.js`` can zoom into a frame on click; a dispatch frame opens its drill-down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import networkx as nx
from lxml import etree

from tracelink.report.fmt import el, file_name, ns, pct
from tracelink.report.model import MAX_NAME_CHARS, ReportModel, bounded, short_export
from tracelink.report.svg import svg_root

MIN_FRACTION = 0.001
ROW_HEIGHT = 20
WIDTH = 1100
CHAR_WIDTH = 6.5  # of the frame labels' font, to drop labels that do not fit


@dataclass
class Frame:
    """One node of the icicle: a level of the source hierarchy and the time under it."""

    label: str
    value: float = 0.0
    call_site: int | None = None
    children: dict[str, Frame] = field(default_factory=dict)

    def add(self, path: list[str], value: float, call_site: int) -> None:
        self.value += value
        node = self
        for depth, label in enumerate(path):
            node = node.children.setdefault(label, Frame(label, call_site=call_site if depth == len(path) - 1 else None))
            node.value += value


def member_path(member: dict, name: str) -> list[str]:
    """The levels of one location member, outermost first (see the module docstring), each cut to
    :data:`MAX_NAME_CHARS`."""
    return [bounded(level, MAX_NAME_CHARS) for level in member_levels(member, name)]


def member_levels(member: dict, name: str) -> list[str]:
    positions = [position.rsplit(":", 2) for position in member.get("positions", [])]
    if len(positions) > 1:
        return [f"{file_name(path)}:{line}" for path, line, _ in reversed(positions)]
    if "/" in name:
        return [part for part in name.split("/") if part]
    if positions:
        path, line, _ = positions[0]
        return [file_name(path), f"line {line}"]
    return [name or "(no location)"]


def flame_tree(model: ReportModel, graph: nx.DiGraph) -> Frame:
    """The icicle's root: every timed call site's time along its ops' source paths."""
    root = Frame("all dispatches")
    for site in model.call_sites:
        total = site["total_ns"] or 0.0
        if total <= 0:
            continue
        leaf = f"#{site['index']} {short_export(site['export'])}"
        placed = 0.0
        for op, _, fraction in site["ops"]:
            data = graph.nodes[op] if op in graph else {}
            members = json.loads(data.get("members") or "[]") or [{}]
            for member in members:
                part = total * fraction / len(members)
                root.add([*member_path(member, str(data.get("name") or "")), leaf], part, site["index"])
                placed += part
        if total - placed > total * 1e-9:  # a dispatch with no source op still shows its time
            root.add(["(no source op)", leaf], total - placed, site["index"])
    return root


def flame_svg(root: Frame) -> etree._Element:
    """The icicle as SVG: one ``g.fr`` per frame wide enough to see."""
    rows: list[tuple[Frame, int, float, float]] = []
    stack = [(root, 0, 0.0)] if root.value > 0 else []
    while stack:  # depth first, children widest first: a stack, not recursion (a call stack may be 1,000 deep)
        frame, level, start = stack.pop()
        rows.append((frame, level, start, start + frame.value / root.value))
        offset, shown = start, []
        for child in sorted(frame.children.values(), key=lambda f: -f.value):
            if child.value / root.value >= MIN_FRACTION:
                shown.append((child, level + 1, offset))
            offset += child.value / root.value
        stack.extend(reversed(shown))
    depth = max((d for _, d, _, _ in rows), default=0) + 1
    svg = svg_root(WIDTH, depth * ROW_HEIGHT, "flame graph of self time by source", "chart flame")
    svg.set("id", "flame-svg")
    for frame, level, x0, x1 in rows:
        group = el(svg, "g", {"class": "fr" + (" leaf" if frame.call_site is not None else ""), "data-x0": f"{x0:.6f}", "data-x1": f"{x1:.6f}",
                              "data-d": level, "data-cs": frame.call_site, "data-l": frame.label, "tabindex": "0"})
        x, width = x0 * WIDTH, (x1 - x0) * WIDTH
        el(group, "rect", {"x": f"{x:.1f}", "y": level * ROW_HEIGHT, "width": f"{max(width - 0.5, 0.5):.1f}", "height": ROW_HEIGHT - 1})
        el(group, "title", None, f"{frame.label}: {ns(frame.value)} ({pct(frame.value / root.value)})")
        el(group, "text", {"x": f"{x + 3:.1f}", "y": level * ROW_HEIGHT + 14}, fitted(frame.label, width))
    return svg


def fitted(label: str, width: float) -> str:
    """The label cut to the frame's width (``report.js`` does the same after a zoom)."""
    room = int((width - 6) // CHAR_WIDTH)
    return label if len(label) <= room else (label[: room - 1] + "…" if room > 2 else "")
