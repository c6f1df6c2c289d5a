"""The report page's provenance graph section: the default view (the hot subgraph of a big program), the
full one in a template, the search, group and minimap controls the viewer drives."""

from __future__ import annotations

from tracelink.report.fmt import el, pct
from tracelink.report.layout import GraphLayout
from tracelink.report.model import ReportModel
from tracelink.report.svg import graph_svg
from tracelink.report.widgets import section


def graph_section(main, model: ReportModel, layouts: dict[str, GraphLayout], templates) -> None:
    """The graph's default view, and for a big graph the full one in a template (inert until asked for)."""
    node = section(
        main, "graph", "Provenance graph",
        "Source ops (grouped by name scope, else file) → dispatch call sites → exports → executables. Click a node to highlight everything "
        "it is connected to; click a group title to collapse it. Solid edges: root op; dashed: fused producer; dotted: an op absorbed into it (a fill that "
        "CSE shares between layers is connected, not drawn). The minimap beside it shows the whole view; click or drag on it to scroll.",
    )
    tools = el(node, "div", class_="tools")
    el(tools, "input", type="search", id="graph-search", placeholder="search ops, call sites, executables…", aria_label="search the graph")
    el(tools, "button", type="button", id="graph-collapse", text="collapse groups")
    el(tools, "button", type="button", id="graph-expand", text="expand groups")
    full = layouts["full"]
    hot = layouts.get("hot")
    if hot is not None:
        label = f"show all {len(model.call_sites)} call sites"
        el(tools, "button", type="button", id="graph-full", data_full=label, data_hot="show the hot subgraph", text=label)
    note = graph_note(model, hot or full, hot is not None)
    el(tools, "span", id="graph-info", class_="muted", text=note)
    area = el(node, "div", class_="graph-area")
    wrap = el(area, "div", class_="graph-wrap")
    wrap.append(graph_svg(hot or full, "hot" if hot is not None else "full"))
    wrap[-1].set("data-note", note)
    el(area, "canvas", id="graph-minimap", role="img", aria_label="minimap of the graph: click or drag to scroll there")
    if hot is not None:
        full_svg = graph_svg(full, "full")
        full_svg.set("data-note", graph_note(model, full, False))
        el(templates, "template", id="graph-full-template").append(full_svg)


def graph_note(model: ReportModel, layout: GraphLayout, is_hot: bool) -> str:
    """What the shown view holds: its size, and for the hot subgraph which call sites and how much time."""
    hidden = f"; {layout.hidden_ops} source ops feeding no dispatch are left out (see Audit)" if layout.hidden_ops else ""
    if not is_hot:
        return f"{len(layout.nodes)} nodes, {len(layout.edges)} edges" + hidden
    shown = [site for site in model.call_sites if f"cs:{site['index']}" in layout.nodes]
    share = sum(site["share"] or 0.0 for site in shown)
    return (f"the {len(shown)} hottest of {len(model.call_sites)} call sites ({pct(share)} of dispatch time) with their ops, exports and executables: "
            f"{len(layout.nodes)} nodes, {len(layout.edges)} edges" + hidden)
