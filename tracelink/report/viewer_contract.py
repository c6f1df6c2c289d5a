"""The viewer's data contract: the JSON that report.html embeds in ``<script type="application/json"
id="tl-data">`` for ``viewer/report.js``, and the one function that builds it.

The page is complete without it; the viewer reads it for what markup cannot hold cheaply: which call
sites and lines a line or op is connected to, the graph's adjacency and placement. It holds what the
viewer reads and nothing else. An object of the JSON is a ``TypedDict`` here, an array read by
position a ``NamedTuple`` (written as an array); each key is documented under it. The records a big
program has thousands of (lines, ops, call sites) have keys of one or two letters: the JSON is a large
part of a big program's page, and full names made a 500-call-site page 5 % bigger.
``tests/test_report_contract.py`` checks a real page's data against these types, and that the viewer
reads every key of them and no other.
"""

# No ``from __future__ import annotations``: TypedDict sees NotRequired only in evaluated annotations.
from typing import NamedTuple, NotRequired, TypedDict

from tracelink.report.layout import COLUMNS, GROUP_GAP, GROUP_HEADER, NODE_H, TOP, GraphLayout
from tracelink.report.model import ReportModel

# A call site's role codes: what an op (or a line's ops) does in the dispatch.
ROLE_CODES = {"root": "r", "producer": "p", "init": "i", "absorbed": "a"}


class SiteRole(NamedTuple):
    """A call site a line computes in."""

    index: int
    """the call site's number, its key in ``cs``"""
    role: str
    """its role there: ``r`` root op, ``p`` fused producer, ``i`` init (a fill), ``a`` absorbed (any other role as named)"""


class FileRecord(TypedDict):
    """A source file the page shows (``files``, in tab order)."""

    id: str
    """``f0``, ``f1``…: the file part of line keys (``f0:12``) and of element ids (``file-f0``, ``L-f0-12``)"""
    name: str
    """its file name"""
    path: str
    """its path as locations name it"""


class LineRecord(TypedDict):
    """A source line with ops (``lines``, keyed ``<file id>:<line number>``)."""

    s: float
    """self share of all dispatch time"""
    t: float
    """self time per iteration, ns"""
    cs: list[SiteRole]
    """the call sites that give it time (not those where it is only an init op), in execution order"""
    ops: list[str]
    """its source ops, keys of ``ops``"""


class OpRecord(TypedDict):
    """A source op that feeds a call site or sits at a line (``ops``, keyed by its graph node id)."""

    l: str  # noqa: E741  (the viewer's key)
    """its label (location name, or file:line)"""
    n: str
    """its op names (``linalg.matmul, linalg.fill``)"""
    ln: list[str]
    """the line keys it sits at (``lines``), innermost position first"""


class SiteOp(NamedTuple):
    """A source op of a call site."""

    op: str
    """the op, a key of ``ops``"""
    role: str
    """its role in the dispatch, coded as in :class:`SiteRole`"""


class CallSiteRecord(TypedDict):
    """A dispatch call site (``cs``, keyed by its number as text)."""

    e: str
    """its export (the dispatch function)"""
    s: float
    """its share of all dispatch time"""
    m: float
    """the mean time of one execution, ns"""
    ops: list[SiteOp]
    """its source ops"""
    ln: list[str]
    """the line keys it computes"""


class ExecutableRecord(TypedDict):
    """An executable whose source the drill-downs show (``exe``, keyed ``x0``, ``x1``…: the ``data-x`` of a drill-down's
    source slot and the id of its ``t-x…`` template)."""

    dumped: int | None
    """the call site whose locations IREE's (deduplicated) dump carries: its ops mark the source lines"""


class PlacedNode(NamedTuple):
    """Where a node of a graph view sits."""

    x: float
    """left edge, px"""
    y: float
    """top edge, px, with every group expanded"""
    w: float
    """width, px"""
    group: str | None
    """its group's id (source ops only), else null"""


class PlacedGroup(NamedTuple):
    """A group of source ops in a graph view."""

    id: str
    """``g0``, ``g1``…: the ``data-g`` of its markup"""
    y: float
    """top of its header, px"""
    height: float
    """height of the header and its nodes, px"""


class GraphView(TypedDict):
    """One laid-out view of the graph (``graph.views``: ``full``, and ``hot`` for a big program)."""

    nodes: dict[str, PlacedNode]
    """every node the view shows, by node id (``cs:3``, ``export:…``, an op's id)"""
    groups: list[PlacedGroup]
    """its groups of source ops, top to bottom"""


class GraphDims(TypedDict):
    """The layout's constants (``tracelink/report/layout.py``) the viewer re-lays groups with, px."""

    top: int
    """room above the first group for the column titles"""
    nodeH: int
    """height of a node"""
    header: int
    """height of a group's header"""
    gap: int
    """gap between groups"""
    opX: int
    """left edge of the source-op column"""
    opW: int
    """width of the source-op column"""


class GraphData(TypedDict):
    """The provenance graph: the adjacency of the whole graph (neighbourhoods are the whole graph's in either view) and its views."""

    views: dict[str, GraphView]
    """the views by name, the ``data-view`` of their SVG"""
    succ: dict[str, list[str]]
    """each node's successors (source op → call site → export → executable)"""
    pred: dict[str, list[str]]
    """each node's predecessors"""
    dims: GraphDims
    """the layout's constants"""


class LineGain(NamedTuple):
    """What tuning did to a line (``gains``), from ``tracelink diff``."""

    speedup: float | None
    """tuned speedup of the line's time"""
    ci_low: float | None
    """low end of its 95 % confidence interval (null when unknown: several ops)"""
    ci_high: float | None
    """high end of that interval"""
    verdict: str
    """``faster`` or ``slower`` when the interval excludes 1, else ``unclear``: a class of the line's gain note"""


class ViewerData(TypedDict):
    """The whole JSON of ``#tl-data``."""

    files: list[FileRecord]
    """the source files shown, in tab order"""
    lines: dict[str, LineRecord]
    """the lines with ops, by line key ``<file id>:<number>``"""
    ops: dict[str, OpRecord]
    """the source ops a line or call site names, by graph node id"""
    cs: dict[str, CallSiteRecord]
    """every call site, by its number as text"""
    exe: dict[str, ExecutableRecord]
    """every executable, by id"""
    graph: GraphData
    """the provenance graph's adjacency and views"""
    gains: NotRequired[dict[str, LineGain]]
    """per line key, what tuning did to it: only with a diff of a tuned profile"""
    packed: NotRequired[str]
    """a big page's templates (``#templates``), gzip-compressed and base64-encoded: unpacked by the viewer when first needed"""


def viewer_data(model: ReportModel, layouts: dict[str, GraphLayout]) -> ViewerData:
    """The data of the page (without ``packed``, which the page adds when it packs its templates)."""
    data = ViewerData(files=[FileRecord(id=f.id, name=f.name, path=f.path) for f in model.files], lines=line_records(model), ops=op_records(model),
                      cs=call_site_records(model), exe=executable_records(model), graph=graph_data(layouts))
    if model.gains is not None:
        data["gains"] = {key: LineGain(gain.speedup, gain.ci_low, gain.ci_high, gain.verdict) for key, gain in model.gains.lines.items()}
    return data


def line_records(model: ReportModel) -> dict[str, LineRecord]:
    return {
        key: LineRecord(s=round(line.share, 6), t=round(line.mean_ns, 1), cs=[SiteRole(index, ROLE_CODES.get(role, role)) for index, role in line.call_sites.items()], ops=line.ops)
        for key, line in model.lines.items()
    }


def op_records(model: ReportModel) -> dict[str, OpRecord]:
    """The ops a line or call site names (the others are in no dispatch and at no line: the viewer never asks)."""
    used = {op for line in model.lines.values() for op in line.ops} | {op for site in model.call_sites for op, _, _ in site["ops"]}
    return {
        op: OpRecord(l=info["label"], n=info["op_names"], ln=info["lines"])
        for op, info in model.ops.items() if op in used
    }


def call_site_records(model: ReportModel) -> dict[str, CallSiteRecord]:
    return {
        str(site["index"]): CallSiteRecord(
            e=site["export"], s=round(site["share"] or 0.0, 6), m=round(site["mean_ns"] or 0.0, 1),
            ops=[SiteOp(op, ROLE_CODES.get(role, role)) for op, role, _ in site["ops"]], ln=site["lines"],
        )
        for site in model.call_sites
    }


def executable_records(model: ReportModel) -> dict[str, ExecutableRecord]:
    return {
        executable.id: ExecutableRecord(dumped=model.dumped_sites[name])
        for name, executable in model.executables.items()
    }


def graph_data(layouts: dict[str, GraphLayout]) -> GraphData:
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for source, target, _ in layouts["full"].edges:  # neighbourhoods are the whole graph's, in either view
        succ.setdefault(source, []).append(target)
        pred.setdefault(target, []).append(source)
    views = {
        name: GraphView(
            nodes={node: PlacedNode(round(p.x, 1), round(p.y, 1), p.w, p.group) for node, p in layout.nodes.items()},
            groups=[PlacedGroup(g.id, round(g.y, 1), round(g.height, 1)) for g in layout.groups],
        )
        for name, layout in layouts.items()
    }
    dims = GraphDims(top=TOP, nodeH=NODE_H, header=GROUP_HEADER, gap=GROUP_GAP, opX=COLUMNS["source_op"][0], opW=COLUMNS["source_op"][1])
    return GraphData(views=views, succ=succ, pred=pred, dims=dims)
