"""The viewer's data contract: the JSON that report.html embeds in ``<script type="application/json"
id="tl-data">`` for the viewer (``viewer/drill.js``, ``viewer/report.js``), and the one function that
builds it.

The viewer reads it for what markup cannot hold cheaply: which call sites and lines a line or op is
connected to, the graph's adjacency and placement, and what each call site's drill-down shows (the
viewer builds it when it is opened: as markup, the drill-downs were most of a big page's elements). It
holds what the viewer reads and nothing else. An object of the JSON is a ``TypedDict`` here, an array
read by position a ``NamedTuple`` (written as an array); each key is documented under it. The records a
big program has thousands of (lines, ops, call sites) have keys of one or two letters: the JSON is a
large part of a big program's page (docs/reference/numbers.md).
``tests/test_report_contract.py`` checks a real page's data against these types, and that the viewer
reads every key of them and no other.
"""

# No ``from __future__ import annotations``: TypedDict sees NotRequired only in evaluated annotations.
from typing import NamedTuple, NotRequired, TypedDict

import numpy as np

from tracelink.report.layout import COLUMNS, GROUP_GAP, GROUP_HEADER, NODE_H, TOP, GraphLayout, op_label
from tracelink.report.model import ReportModel
from tracelink.report.svg import histogram_bins

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
    nm: str
    """its short name, the text of a drill-down's link to it: its location name, else file:line, else its label"""
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
    share: float
    """its share of the dispatch's time"""


class SiteFacts(NamedTuple):
    """What a call site runs and where it comes from (its export's facts are in ``ex``)."""

    loc: int
    """its location (the ops' names and call stack), a position in ``tx``"""
    root_op: str
    """its root op's name"""
    phase: str
    """``run`` (each call of the function) or ``initializer`` (once, at load: not timed)"""
    workgroups: str
    """its workgroup grid (``12x1x1``)"""
    workgroup_count: int
    """its number of workgroups"""


class SiteTimes(NamedTuple):
    """A call site's execution times, from call_sites.csv (its mean is the record's ``m``), ns; null when not timed."""

    count: int
    """executions timed"""
    total: float | None
    """their total"""
    median: float | None
    """the median execution"""
    p10: float | None
    """10th percentile"""
    p90: float | None
    """90th percentile"""
    ci_low: float | None
    """low end of the 95 % confidence interval of the mean"""
    ci_high: float | None
    """its high end"""
    tiles: float | None
    """tiles run per execution, mean (workgroups that ran)"""
    tile_ns: float | None
    """the tiles' summed time per execution, mean (÷ the mean execution: busy cores)"""


class SiteCost(NamedTuple):
    """A call site's cost model, achieved rates and verdict (null in its record when it has no verdict and no lower bound)."""

    verdict: str
    """what bounds it (``compute-bound``, ``memory-bound``…), empty when none"""
    next_step: int
    """what to try next, a position in ``tx``"""
    lower_bound: bool
    """its FLOPs and bytes (so its rates) are lower bounds: a dynamic size the run did not fix"""
    flops: float | None
    """FLOPs per execution"""
    bytes: float | None
    """compulsory bytes moved per execution"""
    intensity: float | None
    """FLOPs per byte"""
    gflops_s: float | None
    """achieved GFLOP/s"""
    flops_peak_share: float | None
    """of the machine's compute peak"""
    gbytes_s: float | None
    """achieved GB/s"""
    bandwidth_peak_share: float | None
    """of the machine's bandwidth"""


class Histogram(NamedTuple):
    """A call site's execution times, binned (numpy's bins: ``counts`` equal bins from ``low`` to ``high``)."""

    low: float
    """the shortest execution, ns: the first bin's low edge"""
    high: float
    """the longest (the shortest + 1 when all are equal), ns: the last bin's high edge"""
    median: float
    """the median execution, ns"""
    counts: list[int]
    """executions per bin"""


class IterationBar(NamedTuple):
    """A bar of a call site's time per iteration: one iteration, or the mean of a run of consecutive ones."""

    first: int
    """its first iteration"""
    last: int
    """its last iteration"""
    mean: float
    """the call site's time in an iteration of the run, ns, mean"""


class Iterations(NamedTuple):
    """A call site's time in each iteration (call of the function), in run order."""

    count: int
    """iterations recorded (more than the bars: each bar is the mean of a run of them)"""
    bars: list[IterationBar]
    """at most :data:`MAX_BARS` bars"""


class CallSiteRecord(TypedDict):
    """A dispatch call site (``cs``, keyed by its number as text): what a line's details and its drill-down show."""

    e: str
    """its export (the dispatch function), a key of ``ex``"""
    s: float | None
    """its share of all dispatch time"""
    m: float | None
    """the mean time of one execution, ns"""
    ops: list[SiteOp]
    """its source ops"""
    ln: list[str]
    """the line keys it computes"""
    f: SiteFacts
    """what it runs and where it comes from"""
    t: SiteTimes
    """its execution times"""
    c: SiteCost | None
    """its cost model and verdict"""
    h: Histogram | None
    """its execution times binned, null when none was recorded"""
    it: Iterations | None
    """its time per iteration, null when none was recorded"""
    k: NotRequired[dict[str, float | None]]
    """the counters a collector measured, by name: only when it measured some"""


class ExportRecord(TypedDict):
    """An export (dispatch function) of the call sites (``ex``, keyed by its name): what its call sites' drill-downs show of it."""

    x: str | None
    """its executable's id, a key of ``exe``"""
    sh: str
    """its operand shapes"""
    ws: str
    """its workgroup size"""
    lc: str
    """its lowering config"""
    src: str
    """its dumped source, relative to artifacts/ (empty when not dumped)"""
    tgt: str
    """its dumped target code, relative to artifacts/"""


class ExecutableRecord(TypedDict):
    """An executable whose source the drill-downs show (``exe``, keyed ``x0``, ``x1``…: the ``data-x`` of a drill-down's
    source slot and the id of its ``t-x…`` template)."""

    name: str
    """its name"""
    cs: list[int]
    """the call sites running it"""
    source: bool
    """whether the page has its dumped source (not when the dump is missing or sources were not embedded)"""
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
    tx: list[str]
    """the call sites' locations and next steps, each text once (many call sites share one: a layer's location, a verdict's step)"""
    ex: dict[str, ExportRecord]
    """the call sites' exports, by name"""
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
    texts: dict[str, int] = {}
    data = ViewerData(files=[FileRecord(id=f.id, name=f.name, path=f.path) for f in model.files], lines=line_records(model), ops=op_records(model),
                      cs=call_site_records(model, texts), tx=list(texts), ex=export_records(model), exe=executable_records(model), graph=graph_data(layouts))
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
        op: OpRecord(l=info["label"], nm=op_label(info), n=info["op_names"], ln=info["lines"])
        for op, info in model.ops.items() if op in used
    }


def call_site_records(model: ReportModel, texts: dict[str, int]) -> dict[str, CallSiteRecord]:
    """Every call site's record; ``texts`` gets their long texts, each with its position in ``tx``."""
    return {str(site["index"]): call_site_record(model, site, texts) for site in model.call_sites}


def call_site_record(model: ReportModel, site: dict, texts: dict[str, int]) -> CallSiteRecord:
    """A call site's record: what a line's details and its drill-down show (numbers unrounded: the viewer
    formats them as the page's Python does, and a rounded one could round differently)."""
    index = site["index"]
    durations = model.durations.get(index)
    record = CallSiteRecord(
        e=site["export"], s=site["share"], m=site["mean_ns"],
        ops=[SiteOp(op, ROLE_CODES.get(role, role), fraction) for op, role, fraction in site["ops"]], ln=site["lines"],
        f=SiteFacts(texts.setdefault(site["loc"], len(texts)), site["root_op"], site["phase"], site["workgroups"], site["workgroup_count"]),
        t=SiteTimes(int(site["count"] or 0), site["total_ns"], site["median_ns"], site["p10_ns"], site["p90_ns"], site["ci95_low_ns"],
                    site["ci95_high_ns"], site["tile_count_mean"], site["tile_duration_sum_mean_ns"]),
        c=site_cost(site, texts), h=histogram(durations) if durations is not None and len(durations) else None,
        it=iterations(model.per_iteration[index]) if model.per_iteration.get(index) else None,
    )
    if site["extra"]:
        record["k"] = site["extra"]
    return record


def site_cost(site: dict, texts: dict[str, int]) -> SiteCost | None:
    if not site["verdict"] and not site["lower_bound"]:
        return None
    return SiteCost(site["verdict"], texts.setdefault(site["next_step"], len(texts)), site["lower_bound"], site["flops"], site["bytes"], site["intensity"],
                    site["gflops_s"], site["flops_peak_share"], site["gbytes_s"], site["bandwidth_peak_share"])


def histogram(durations: np.ndarray) -> Histogram:
    counts, edges, median = histogram_bins(durations)
    return Histogram(float(edges[0]), float(edges[-1]), median, counts.tolist())


MAX_BARS = 100  # longer runs are shown as the mean of consecutive iterations


def iterations(series: list[tuple[int, float]]) -> Iterations:
    """At most :data:`MAX_BARS` bars of ``series`` ((iteration, ns) in run order), each the mean of a run of consecutive iterations."""
    count = len(series)
    groups = min(count, MAX_BARS)
    bars = []
    for group in range(groups):
        part = series[group * count // groups : (group + 1) * count // groups]
        bars.append(IterationBar(part[0][0], part[-1][0], sum(v for _, v in part) / len(part)))
    return Iterations(count, bars)


def export_records(model: ReportModel) -> dict[str, ExportRecord]:
    ids = {name: executable.id for name, executable in model.executables.items()}
    return {  # a site's export facts are its export's: the sites of one export give the same
        site["export"]: ExportRecord(x=ids.get(site["executable"]), sh=site["shapes"], ws=site["workgroup_size"], lc=site["lowering_config"],
                                     src=site["source_file"], tgt=site["target_file"])
        for site in model.call_sites
    }


def executable_records(model: ReportModel) -> dict[str, ExecutableRecord]:
    return {
        executable.id: ExecutableRecord(name=name, cs=executable.call_sites, source=executable.text is not None, dumped=model.dumped_sites[name])
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
