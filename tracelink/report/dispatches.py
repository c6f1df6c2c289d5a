"""The report page's dispatches section: the roofline, the call sites folded by kind, and the sortable
table of every call site."""

from __future__ import annotations

from tracelink.report.cells import short_loc, verdict_badge
from tracelink.report.fmt import el, lower_bound_mark, ns, pct, rate
from tracelink.report.model import ReportModel, short_export
from tracelink.report.svg import roofline
from tracelink.report.widgets import bar, chip, chips, grid_table, number_text, section
from tracelink.report.workgroups import counters_section


DISPATCH_COLUMNS = [  # (label, sort type, title): the most telling first, so a narrow window keeps them
    ("#", "num", "call site, in execution order"),
    ("source", "text", "the location of the op that formed the dispatch"),
    ("export", "text", "the dispatch function"),
    ("root op", "text", "the op codegen tiles (its heaviest)"),
    ("share", "num", "share of all dispatch time"),
    ("bound", "text", "what limits it: compute, memory, parallelism (fewer workgroups than workers) or launch overhead"),
    ("GFLOP/s", "num", "FLOPs of one execution ÷ its median time"),
    ("GB/s", "num", "compulsory bytes (operands and results once) ÷ median time"),
    ("FLOP/B", "num", "arithmetic intensity: FLOPs per byte moved"),
    ("% peak", "num", "achieved share of the peak that bounds it (compute peak if compute-bound, else bandwidth)"),
    ("total", "num", "total time over all iterations"),
    ("mean", "num", "mean time of one execution"),
    ("p50", "num", "median execution time"),
    ("p90", "num", "90th percentile"),
    ("count", "num", "executions measured"),
    ("workgroups", "num", "workgroup grid (x×y×z)"),
    ("tiles", "num", "workgroups executed per dispatch (mean)"),
    ("par.", "num", "CPU time in tiles ÷ wall time: how many cores the dispatch kept busy"),
    ("executable", "text", None),
    ("shapes", "text", "operand and result types of the root op"),
]


def dispatch_section(main, model: ReportModel) -> None:
    node = section(main, "dispatches", "Dispatches", "Every dispatch call site of the function. Click a column to sort, a row for its drill-down.")
    machine = model.summary.get("machine") or {}
    if machine:
        el(node, "p", class_="note", text=(
            f"Roofline of {machine.get('cpu', 'this machine')}: {machine.get('workers')} workers, peak {rate(machine.get('peak_gflops'), 'GFLOP/s')} "
            f"(f32 matmul in numpy's BLAS, per core × workers), {rate(machine.get('peak_gbps'), 'GB/s')} streaming bandwidth. One dot per call site, sized by its time; click one for its drill-down."))
        figure = el(node, "figure", class_="roof-wrap")
        figure.append(roofline(model.call_sites, machine))
    kinds_table(node, model)
    tools = el(node, "div", class_="tools")
    el(tools, "input", type="search", id="dispatch-filter", placeholder="filter: export, op, file…", aria_label="filter dispatches")
    el(tools, "span", class_="muted", id="dispatch-count", text=f"{len(model.call_sites)} call site{'' if len(model.call_sites) == 1 else 's'}")
    wrap = el(node, "div", class_="table-wrap")
    table = el(wrap, "table", id="dispatch-table", class_="grid sortable")
    header = el(el(table, "thead"), "tr")
    columns = DISPATCH_COLUMNS + [(name, "num", "counter from the collector") for name in model.counters]
    for position, (label, kind, title) in enumerate(columns):
        el(header, "th", None, label, data_sort=kind, data_col=position, title=title)
    body = el(table, "tbody")
    for site in model.call_sites:
        index = site["index"]
        row = el(body, "tr", id=f"cs-{index}", data_cs=index, class_="init" if site["phase"] != "run" else None)
        cell = el(row, "td", data_v=index)
        chip(cell, index)
        if site["phase"] != "run":
            el(cell, "span", class_="badge", title="runs once, at load (initializer)", text="init")
        shown = short_loc(site["loc"])  # a title only where the text is cut (the viewer titles cut cells on hover)
        el(row, "td", class_="src", title=site["loc"] if shown != site["loc"] else None, text=shown)
        el(row, "td", class_="mono", title=site["export"], text=short_export(site["export"]))
        el(row, "td", class_="mono", text=site["root_op"])
        bar(el(row, "td", data_v=number_text(site["share"])), site["share"])
        el(row, "td", data_v=site["verdict"], title=site["next_step"] or None).append(verdict_badge(site["verdict"]))
        bound = lower_bound_mark(site["lower_bound"])  # "≥": FLOPs and bytes are lower bounds
        el(row, "td", class_="num", data_v=number_text(site["gflops_s"]), text=bound + rate(site["gflops_s"], ""))
        el(row, "td", class_="num", data_v=number_text(site["gbytes_s"]), text=bound + rate(site["gbytes_s"], ""))
        el(row, "td", class_="num", data_v=number_text(site["intensity"]), text=rate(site["intensity"], ""))
        share = bound_share(site)
        el(row, "td", class_="num", data_v=number_text(share), text=bound + pct(share))
        for key in ("total_ns", "mean_ns", "median_ns", "p90_ns"):
            el(row, "td", class_="num", data_v=number_text(site[key]), text=ns(site[key]) if site["count"] else "–")
        el(row, "td", class_="num", data_v=number_text(site["count"]), text=f"{int(site['count'] or 0)}")
        el(row, "td", class_="mono", data_v=site["workgroup_count"], text=site["workgroups"])
        tiles = site["tile_count_mean"]
        el(row, "td", class_="num", data_v=number_text(tiles), text=f"{tiles:.0f}" if tiles is not None else "–")
        parallel = site["tile_duration_sum_mean_ns"] / site["mean_ns"] if site["tile_duration_sum_mean_ns"] and site["mean_ns"] else None
        el(row, "td", class_="num", data_v=number_text(parallel), text=f"{parallel:.2f}" if parallel is not None else "–")
        el(row, "td", class_="mono", title=site["executable"], text=short_export(site["executable"]))
        el(row, "td", class_="mono shapes", text=site["shapes"])
        for name in model.counters:
            value = site["extra"].get(name)
            el(row, "td", class_="num", data_v=number_text(value), text=f"{value:.4g}" if value is not None else "–")
    if model.workgroups is not None:
        counters_section(node, model, model.workgroups)


def bound_share(site: dict) -> float | None:
    """The achieved share of the peak that bounds the dispatch: compute peak when compute-bound, else bandwidth."""
    return site["flops_peak_share"] if site["verdict"] == "compute-bound" else site["bandwidth_peak_share"]


# Op types that say nothing about what a dispatch computes: the kind table shows the root op instead.
GENERIC_KINDS = ("torch.operator", "linalg.generic", "linalg.fill", "tensor.empty")


def site_kind(graph, site: dict) -> str:
    """What a call site computes, by its root ops' input op types (``onnx.MatMul``, ``torch.aten.mm``), else its root op."""
    kinds = [kind for op, role, _ in site["ops"] if role == "root" for kind in str(graph.nodes[op].get("op_kinds") or "").split(", ") if kind]
    useful = [kind for kind in dict.fromkeys(kinds) if kind not in GENERIC_KINDS]
    return ", ".join(useful[:3]) if useful else site["root_op"]


def dispatch_signature(export: str) -> str:
    """An export's name without its function and number: ``main_dispatch_3_matmul_64x256x128_f32`` → ``matmul_64x256x128_f32``."""
    tail = short_export(export).split("_", 2)
    return tail[2] if len(tail) == 3 and tail[0] == "dispatch" else export


def kinds_table(parent, model: ReportModel) -> None:
    """Call sites folded by op kind and dispatch signature (shape): how many, how much time, what bounds them."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for site in model.call_sites:
        if site["phase"] == "run":
            groups.setdefault((site_kind(model.profile.graph, site), dispatch_signature(site["export"])), []).append(site)
    el(parent, "h3", None, f"By kind ({len(groups)})")
    body = grid_table(parent, ("kind", "dispatch", "call sites", "executables", "share", "bound"), id="kind-table")
    for (kind, signature), sites in sorted(groups.items(), key=lambda item: -sum(s["share"] or 0.0 for s in item[1])):
        row = el(body, "tr", class_="kind")
        el(row, "td", class_="mono", text=kind)
        el(row, "td", class_="mono", text=signature)
        chips(el(row, "td"), [s["index"] for s in sites], 8)
        el(row, "td", class_="num", text=str(len({s["executable"] for s in sites})))
        bar(el(row, "td"), sum(s["share"] or 0.0 for s in sites))
        verdicts = el(row, "td")
        for verdict in dict.fromkeys(s["verdict"] for s in sorted(sites, key=lambda s: -(s["share"] or 0.0))):
            verdicts.append(verdict_badge(verdict))
