"""Layout of the provenance graph for the report: four layers, source ops grouped by name scope or file.

Columns, left to right: source ops (only those feeding a call site), call sites (execution order),
exports, executables. A big graph is laid out twice: its *hot subgraph* (the hottest call sites, see
:func:`hot_call_sites`, with their ops, exports and executables), shown by default, and the whole
graph, shown on demand. Source ops are grouped by their name scope (``encoder/layer_3`` of
``encoder/layer_3/attention/MatMul``, ``layer1`` of ``layer1.fc``), so a one-file model still folds
by layer; ops without a scoped name by the file of their outermost position (the user's own code for a
Python call stack). Groups and the ops in them are ordered by the mean execution index of the call sites
they compute in (barycentre ordering; execution order, which is source order in straight-line code),
so edges run mostly level and uncrossed. Call sites are spread evenly
along the source-op column; exports and executables sit as near as their order allows to the median
height of their neighbours on the left (isotonic regression with a minimum gap: nodes never overlap).
The graph itself is walked with networkx."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from tracelink.provenance.graph import nodes_of_kind

ROW = 22  # vertical pitch of nodes
NODE_H = 18
GROUP_HEADER = 24
GROUP_GAP = 12
TOP = 34  # room for the column titles
COLUMNS = {  # kind -> (x, width, title)
    "source_op": (10, 270, "source ops"),
    "call_site": (370, 250, "call sites"),
    "export": (700, 270, "exports"),
    "executable": (1050, 230, "executables"),
}
WIDTH = 1290
# The default view of a big graph: the hottest call sites until they cover this share of dispatch
# time, at most HOT_SITES_MAX of them (a graph with no more call sites than that is shown whole).
HOT_SHARE = 0.9
HOT_SITES_MAX = 40


@dataclass
class Placed:
    id: str
    kind: str
    x: float
    y: float  # top
    w: float
    label: str
    title: str
    group: str | None = None
    share: float = 0.0
    extra: str = ""  # a css class


@dataclass
class Group:
    id: str
    title: str  # the scope or the file's full path
    label: str  # what the header shows: the scope, or the file's name
    y: float  # top of the header
    height: float  # header and its nodes
    nodes: list[str] = field(default_factory=list)
    share: float = 0.0


@dataclass
class GraphLayout:
    width: float
    height: float
    nodes: dict[str, Placed]
    groups: list[Group]
    edges: list[tuple[str, str, str]]  # source, target, role ("root", "producer" or "")
    hidden_ops: int  # source ops feeding no call site, left out


def hot_call_sites(call_sites: list[dict]) -> set[int] | None:
    """The call sites of the default graph view; None when the graph is small enough to show whole.

    The hottest call sites (by total time) until they cover :data:`HOT_SHARE` of dispatch time, at
    most :data:`HOT_SITES_MAX`; untimed ones (initializers) never.
    """
    if len(call_sites) <= HOT_SITES_MAX:
        return None
    ranked = sorted((site for site in call_sites if (site["total_ns"] or 0) > 0), key=lambda site: (-site["total_ns"], site["index"]))
    total = sum(site["total_ns"] for site in ranked)
    hot: set[int] = set()
    covered = 0.0
    for site in ranked[:HOT_SITES_MAX]:
        if covered >= HOT_SHARE * total:
            break
        hot.add(site["index"])
        covered += site["total_ns"]
    return hot


def name_scope(name: str) -> str:
    """The scope of an op's name: ``encoder/layer_3`` of ``/encoder/layer_3/attention/MatMul``, ``layer1`` of ``layer1.0.conv``.

    Names with ``/`` keep two components (a model, then its layer), dotted names one; a name with no
    scope gives "". An op-type prefix (``onnx.Conv:``) and leading transforms (JAX's ``jit(f)``) are
    not part of the scope.
    """
    name = name.rsplit(":", 1)[-1]
    separator = "/" if "/" in name else "."
    parts = [part for part in name.split(separator) if part]
    while len(parts) > 2 and "(" in parts[0]:  # a transform, not a layer: JAX's jit(f)/Model/Dense_0/...
        parts = parts[1:]
    if len(parts) < 2:
        return ""
    return separator.join(parts[: 2 if separator == "/" and len(parts) > 2 else 1])


def group_key(op: dict) -> tuple[str, str]:
    """The op's group as (key, header label): its name scope, else the file of its outermost position."""
    scope = name_scope(op["name"])
    if scope:
        return scope, scope
    path = op["positions"][-1][0] if op["positions"] else op["file"]
    if path:
        return path, Path(path).name or path
    return ("(named ops)",) * 2 if op["name"] else ("(no location)",) * 2


def pav(values: list[float], gap: float) -> list[float]:
    """Closest non-decreasing positions to ``values`` with at least ``gap`` between neighbours (least squares)."""
    shifted = [v - i * gap for i, v in enumerate(values)]
    blocks: list[list[float]] = []  # [mean, weight]
    for value in shifted:
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean2, weight2 = blocks.pop()
            mean1, weight1 = blocks.pop()
            blocks.append([(mean1 * weight1 + mean2 * weight2) / (weight1 + weight2), weight1 + weight2])
    fitted: list[float] = []
    for mean, weight in blocks:
        fitted.extend([mean] * int(weight))
    return [v + i * gap for i, v in enumerate(fitted)]


def median(values: list[float]) -> float | None:
    """The median (one far neighbour does not drag a node away from the others)."""
    if not values:
        return None
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def place_column(order: list[str], desired: dict[str, float], top: float) -> dict[str, float]:
    """Heights (top of node) for ``order``, near ``desired`` centres, in order, a row apart, not above ``top``."""
    if not order:
        return {}
    wanted = [desired.get(node, top) - NODE_H / 2 for node in order]
    placed = pav(wanted, ROW)
    lift = max(0.0, top - placed[0])
    return {node: y + lift for node, y in zip(order, placed)}


LABEL_FONT_PX = 11.5  # the graph's label font (report.css)
# Advance widths in em of a sans-serif font, a little generous: a label cut to fit by them never runs
# into the share printed at the right end of its box.
NARROW, WIDE = set("ijlI.,:;'|!()[]/ `"), set("MWmw@%")


def char_em(c: str) -> float:
    return 0.34 if c in NARROW else 0.92 if c in WIDE else 0.72 if c.isupper() else 0.6


def text_width(text: str, size: float = LABEL_FONT_PX) -> float:
    """The width (px) ``text`` takes at ``size`` px, estimated from per-character classes."""
    return size * sum(map(char_em, text))


def short_label(text: str, room: float, from_left: bool = False, size: float = LABEL_FONT_PX) -> str:
    """``text`` cut (with "…") to fit ``room`` px: its end kept when ``from_left`` (a scoped name's leaf).

    One pass over the characters from the kept end (cutting one character at a time and measuring again
    is quadratic in the name's length)."""
    if text_width(text, size) <= room:
        return text
    budget, used, kept = room - text_width("…", size), 0.0, 0
    for c in reversed(text) if from_left else text:
        used += size * char_em(c)
        if used > budget:
            break
        kept += 1
    return "…" + text[len(text) - kept:] if from_left else text[:kept] + "…"


def op_label(op: dict) -> str:
    """A short name for an op: its location name, else file:line."""
    if op["name"]:
        return op["name"]
    if op["file"]:
        return f"{Path(op['file']).name}:{op['line']}"
    return op["label"]


def op_kind(name: str) -> str:
    """An op name without its dialect: ``torch.aten.mul.Tensor`` → ``mul.Tensor``, ``linalg.matmul`` → ``matmul``."""
    parts = name.split(".")
    return ".".join(parts[2:] if len(parts) > 2 else parts[1:]) or name


def outer_line(op: dict) -> int:
    return op["positions"][-1][1] if op["positions"] else op["line"]


def graph_label(op: dict) -> str:
    """An op's label inside its file's group: its name, else ``line: op`` (``101: conv2d @ conv.py:443`` for a stack)."""
    if op["name"]:
        return op["name"]
    if op["positions"]:
        kind = op_kind(op["op_names"].split(", ")[0]) if op["op_names"] else ""
        (inner_file, inner_line), (_, outer_line) = op["positions"][0], op["positions"][-1]
        label = f"{outer_line}: {kind}" if kind else f"line {outer_line}"
        if len(op["positions"]) > 1:
            label += f" @ {Path(inner_file).name}:{inner_line}"
        return label
    return op["label"]


def layout_graph(graph: nx.DiGraph, ops: dict[str, dict], call_sites: list[dict], short_export, shown: set[int] | None = None) -> GraphLayout:
    """The placed graph: every call site, or only those in ``shown`` with the ops, exports and executables they touch."""
    if shown is not None:
        call_sites = [site for site in call_sites if site["index"] in shown]
    indices = {site["index"] for site in call_sites}
    feeds = {node: [(index, role) for index, role in ops.get(node, {}).get("call_sites", []) if index in indices] for node in nodes_of_kind(graph, "source_op")}
    hidden = sum(1 for node in feeds if not ops.get(node, {}).get("call_sites"))
    nodes, groups = place_source_ops(ops, feeds)
    height = max((g.y + g.height + GROUP_GAP for g in groups), default=TOP)
    place_call_sites(nodes, graph, call_sites, short_export)
    for kind in ("export", "executable"):
        place_by_neighbours(nodes, graph, kind, height, short_export, whole=shown is None)
    edges = [(source, target, str(data.get("role") or "")) for source, target, data in graph.edges(data=True) if source in nodes and target in nodes]
    bottom = max((placed.y + NODE_H for placed in nodes.values()), default=TOP)
    return GraphLayout(WIDTH, max(height, bottom) + 16, nodes, groups, edges, hidden)


def place_source_ops(ops: dict[str, dict], feeds: dict[str, list[tuple[int, str]]]) -> tuple[dict[str, Placed], list[Group]]:
    """The source-op column: the ops feeding a shown call site, grouped (name scope, else file), groups and
    ops in barycentre order, a row apart (a group header and gap more between groups)."""

    def barycentre(node: str) -> float:
        """Mean index of the call sites the op computes in: an init op (a fill CSE shares between layers) stays with its own layer."""
        computing = [index for index, role in feeds[node] if role != "init"] or [index for index, _ in feeds[node]]
        return sum(computing) / len(computing)

    grouped: dict[tuple[str, str], list[str]] = {}
    for node, fed in feeds.items():
        if fed:
            grouped.setdefault(group_key(ops[node]), []).append(node)
    ordered_groups = sorted(grouped.items(), key=lambda item: (sum(map(barycentre, item[1])) / len(item[1]), item[0][0]))
    nodes: dict[str, Placed] = {}
    groups: list[Group] = []
    x, w, _ = COLUMNS["source_op"]
    top = float(TOP + GROUP_HEADER)
    for number, ((key, label), members) in enumerate(ordered_groups):
        group = Group(id=f"g{number}", title=key, label=label, y=0, height=0)
        for position, node in enumerate(sorted(members, key=lambda n: (barycentre(n), outer_line(ops[n]), n))):
            if nodes:
                top += ROW if position else ROW + GROUP_GAP + GROUP_HEADER
            op = ops[node]
            title = "\n".join(filter(None, [op["label"], op["op_names"], f"{op['share']:.1%} of dispatch time"]))
            nodes[node] = Placed(node, "source_op", x, top, w, short_label(graph_label(op), w - 50, from_left=bool(op["name"])), title, group.id, op["share"])
            group.nodes.append(node)
            group.share += op["share"]
        group.y = nodes[group.nodes[0]].y - GROUP_HEADER
        group.height = nodes[group.nodes[-1]].y + ROW - group.y
        groups.append(group)
    return nodes, groups


def place_call_sites(nodes: dict[str, Placed], graph: nx.DiGraph, call_sites: list[dict], short_export) -> None:
    """Call sites in execution order, spread evenly over the height of the source-op column: with ops
    ordered by the call sites they feed, edges run roughly level and parallel."""
    order = [site for site in call_sites if f"cs:{site['index']}" in graph]
    span = (max(placed.y for placed in nodes.values()) + ROW - TOP) if nodes else 0.0
    pitch = max(ROW, span / max(len(order), 1))
    x, w, _ = COLUMNS["call_site"]
    for position, site in enumerate(order):
        top = TOP + position * pitch + (pitch - ROW) / 2
        label = f"#{site['index']} {site['root_op'] or short_export(site['export'])}"
        title = "\n".join(filter(None, [f"call site #{site['index']}", site["export"], site["loc"], f"{(site['share'] or 0):.1%} of dispatch time"]))
        extra = "init" if site["phase"] != "run" else ""
        node = f"cs:{site['index']}"
        nodes[node] = Placed(node, "call_site", x, top, w, short_label(label, w - 50), title, None, site["share"] or 0.0, extra)


def place_by_neighbours(nodes: dict[str, Placed], graph: nx.DiGraph, kind: str, height: float, short_export, whole: bool) -> None:
    """The export or executable column: each node as near as the column's order allows to the median
    height of its placed neighbours on the left (those with none at the bottom); in a partial view only
    the nodes some placed neighbour leads to."""
    members = [node for node in nodes_of_kind(graph, kind) if whole or any(p in nodes for p in graph.predecessors(node))]
    centre = {node: placed.y + NODE_H / 2 for node, placed in nodes.items()}
    wanted = {node: median([centre[n] for n in graph.predecessors(node) if n in centre]) for node in members}
    order = sorted(members, key=lambda n: (wanted[n] is None, wanted[n] or 0.0, n))
    fallback = {n: (wanted[n] if wanted[n] is not None else height) for n in order}
    x, w, _ = COLUMNS[kind]
    for node, top in place_column(order, fallback, TOP).items():
        data = graph.nodes[node]
        name = str(data.get("label") or node.split(":", 1)[1])
        share = sum(nodes[p].share for p in graph.predecessors(node) if p in nodes)
        title = f"{kind} {name}\n{share:.1%} of dispatch time"
        if kind == "export" and data.get("shapes"):
            title += f"\n{data['shapes']}"
        nodes[node] = Placed(node, kind, x, top, w, short_label(short_export(name), w - 50), title, None, share)
