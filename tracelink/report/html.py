"""The HTML provenance report: one self-contained file built with lxml from a profile directory.

The page is rendered in full here (tables, code views, SVG charts and graph), so it shows without any
script; ``viewer/report.js`` only adds the interactions (selecting a line, sorting, drill-downs, graph
neighbourhoods), reading the JSON embedded in ``<script type="application/json" id="tl-data">``. Every
piece of program text goes through lxml (escaped); the JSON has ``<``, ``>`` and ``&`` escaped.

A big program keeps the page light: the graph shows its hot subgraph (the full one in a template), and
when the templates (drill-downs, executable sources, full graph) hold much markup they travel packed
(gzip, base64) in the JSON, unpacked by the viewer when one is first opened.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import numpy as np

from lxml import etree
from lxml import html as lxml_html

from tracelink import __version__
from tracelink.errors import TracelinkError
from tracelink.atomic import make_directory, write_atomic
from tracelink.profile_dir import Profile, load_profile
from tracelink.report.device_time import device_time_parts
from tracelink.report.fmt import clean, el, flushed_run_text, heat, lower_bound_mark, missing_events_text, ns, pct, rate, size
from tracelink.report.components import components_view
from tracelink.report.flame import flame_svg, flame_tree
from tracelink.report.gains import gain_badge, gains_table
from tracelink.report.layout import COLUMNS, GROUP_GAP, GROUP_HEADER, NODE_H, ROW, TOP, GraphLayout, hot_call_sites, layout_graph, op_label
from tracelink.report.assemble import build_model
from tracelink.report.model import ReportModel, short_export
from tracelink.report.sources import EXECUTABLE_DUMPS, SourcePolicy
from tracelink.report.summary import host_time_text, memory_text, short_paths
from tracelink.report.strategies import strategies_section
from tracelink.report.svg import graph_svg, histogram, iteration_strip, live_bytes, per_iteration, roofline
from tracelink.report.widgets import badge, bar, chip, chips, grid_table, line_link, number_text, op_link, section
from tracelink.report.workgroups import counters_section, workgroup_drill
from tracelink.report.zones import runtime_section

ASSETS = ("report.css", "report.js")
# Templates (drill-downs, executable sources, full graph) with more markup than this are packed.
PACK_BYTES = 200_000
# A file view with more lines than this is a template too (packed with the others in a big report): the
# viewer puts it in place once the page is interactive, or when a line is first asked for. A 1,000-layer
# program's text was a third of its report and most of the nodes parsed at load.
TEMPLATE_FILE_LINES = 1000
# Op types that say nothing about what a dispatch computes: the kind table shows the root op instead.
GENERIC_KINDS = ("torch.operator", "linalg.generic", "linalg.fill", "tensor.empty")


def viewer_dir() -> Path:
    """The report assets: ``<repo>/viewer`` (editable install) or ``tracelink/viewer`` (wheel)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "viewer", package / "viewer"):
        if all((candidate / name).is_file() for name in ASSETS):
            return candidate
    raise TracelinkError(f"report assets ({', '.join(ASSETS)}) not found in {package.parent / 'viewer'} nor {package / 'viewer'}")


def build_report(profile_or_dir: Profile | Path | str, output: Path | None = None, sources: SourcePolicy | None = None) -> Path:
    """Write the report of a profile (or profile directory) to ``output`` (default ``<dir>/report.html``).

    ``sources`` decides which source files are embedded (default: the policy the profile was written with).
    The whole page is built in memory and written atomically: a failure leaves any previous report intact.
    """
    profile = profile_or_dir if isinstance(profile_or_dir, Profile) else load_profile(Path(profile_or_dir))
    output = Path(output) if output is not None else profile.directory / "report.html"
    text = render_report(profile, sources)
    make_directory(output.parent)
    return write_atomic(output, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def render_report(profile: Profile, sources: SourcePolicy | None = None) -> str:
    """The report page as text."""
    model = build_model(profile, sources)
    root = page(model, graph_layouts(model))
    return lxml_html.tostring(root, doctype="<!DOCTYPE html>", encoding="unicode", method="html") + "\n"


def graph_layouts(model: ReportModel) -> dict[str, GraphLayout]:
    """The graph's views: "full", and "hot" (the default) when the graph is too big to show whole."""
    layouts = {"full": layout_graph(model.profile.graph, model.ops, model.call_sites, short_export)}
    hot = hot_call_sites(model.call_sites)
    if hot is not None:
        layouts["hot"] = layout_graph(model.profile.graph, model.ops, model.call_sites, short_export, hot)
    return layouts


# Page ----------------------------------------------------------------------------------------------


def page(model: ReportModel, layouts: dict[str, GraphLayout]) -> etree._Element:
    assets = viewer_dir()
    css, js = ((assets / name).read_text() for name in ASSETS)
    for name, text, closing in (("report.css", css, "</style"), ("report.js", js, "</script")):
        if closing in text.lower():
            raise TracelinkError(f"{assets / name}: must not contain '{closing}'")
    summary = model.summary
    # the file the user gave (a model.py:make, an .onnx), as the printed summary names it
    program = Path(str(summary.get("model") or summary.get("program", "program")))
    root = el(None, "html", lang="en")
    head = el(root, "head")
    el(head, "meta", charset="utf-8")
    el(head, "meta", name="viewport", content="width=device-width, initial-scale=1")
    el(head, "meta", name="generator", content=f"tracelink {__version__}")
    el(head, "title", None, f"{program.name} @{summary.get('function', '')} · tracelink report")
    el(head, "style", None, css)
    body = el(root, "body")
    top = el(body, "header", class_="top")
    el(top, "span", class_="brand", text="tracelink")
    title = el(top, "span", class_="title")
    el(title, "strong", None, program.name)
    el(title, "span", class_="muted", text=f" @{summary.get('function', '')}")
    nav = el(top, "nav")
    anchors = [("summary", "Summary"), ("source", "Source"), ("flame", "Flame graph"), ("dispatches", "Dispatches"), ("graph", "Graph"),
               ("audit", "Audit"), ("glossary", "Glossary")]
    if model.zones is not None:
        anchors.insert(3, ("runtime", "Runtime"))
    if model.profile.strategies is not None:
        anchors.insert(anchors.index(("dispatches", "Dispatches")) + 1, ("strategies", "Strategies"))
    for anchor, label in anchors:
        el(nav, "a", href=f"#{anchor}", text=label)
    main = el(body, "main")
    templates = etree.Element("div", id="templates", hidden="hidden")  # filled here, added to the body below
    summary_section(main, model)
    source_section(main, model, templates)
    flame_section(main, model)
    dispatch_section(main, model)
    strategies_section(main, model.profile)
    if model.zones is not None:
        runtime_section(main, model.zones)
    graph_section(main, model, layouts, templates)
    audit_section(main, model)
    glossary_section(main)
    el(body, "footer", class_="foot", text=f"tracelink {__version__} · report of {clean(str(model.profile.directory))} · opens offline; trace.json opens in ui.perfetto.dev")
    panel = el(body, "aside", id="panel", class_="panel", hidden="hidden")
    panel_head = el(panel, "div", class_="panel-head")
    el(panel_head, "span", id="panel-title", class_="panel-title")
    el(panel_head, "button", id="panel-close", type="button", title="close (Esc)", text="×")
    el(panel, "div", id="panel-body", class_="panel-body")
    for site in model.call_sites:
        drill_template(templates, model, site)
    for executable in model.executables.values():
        executable_template(templates, model, executable)
    viewer = viewer_data(model, layouts)
    markup = lxml_html.tostring(templates, encoding="unicode", method="html")
    if len(markup) > PACK_BYTES:
        viewer["packed"] = packed(markup)
        del templates[:]  # the viewer fills it back when unpacking
    body.append(templates)
    data = el(body, "script", type="application/json", id="tl-data")
    data.text = json_for_script(viewer)
    el(body, "script", None, js)
    return root


def packed(markup: str) -> str:
    """The templates' markup, gzip-compressed and base64-encoded, for the viewer to unpack when first needed.

    A big report's drill-downs, executable sources and full graph are most of its bytes and of the
    nodes the browser would parse at load; packed, they cost a few percent of that (the markup is
    repetitive) and nothing until a drill-down or the full graph is opened.
    """
    return base64.b64encode(gzip.compress(markup.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def json_for_script(value) -> str:
    """JSON safe inside a script element: no ``<``, ``>`` or ``&`` characters at all."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


# Summary -------------------------------------------------------------------------------------------


def summary_section(main, model: ReportModel) -> None:
    summary = model.summary
    cover = summary.get("coverage", {})
    node = section(main, "summary", "Summary")
    missing, flushed = missing_events_text(summary), flushed_run_text(summary)
    if missing:
        el(node, "p", class_="warning", text=f"Warning: {missing}.")
    if flushed:
        el(node, "p", class_="note", text=f"Note: {flushed}.")
    meta = el(node, "dl", class_="meta")
    target = summary.get("target", {})
    versions = summary.get("versions", {})
    rows = [
        ("program", str(summary.get("program", ""))),
        ("function", str(summary.get("function", ""))),
        ("target", " · ".join(f"{k} {v}" for k, v in target.items()) if isinstance(target, dict) else str(target)),
        ("versions", " · ".join(f"{k} {v}" for k, v in versions.items()) if isinstance(versions, dict) else str(versions)),
        ("collector", str(summary.get("collector", ""))),
        ("run", f"{summary.get('iterations', 0)} measured iterations ({summary.get('repetitions', '?')} repetitions after {summary.get('warmup', 0)} warm-up)"),
        ("inputs", inputs_text(summary.get("inputs", []))),
    ]
    for label, value in rows:
        el(meta, "dt", None, label)
        el(meta, "dd", None, value, title=inputs_title(summary.get("inputs", [])) if label == "inputs" else None)
    cards = el(node, "div", class_="cards")
    audit_counts = cover.get("audit_counts", {})
    host = summary.get("host_time")
    wall_card = [(ns(host["wall_ns_per_call"]), "wall time per call", host_time_text(summary))] if host else []
    for value, label, hint in (
        *wall_card,
        (ns(summary.get("dispatch_ns_per_iteration")), "dispatch time per iteration", "sum of all dispatch durations in one call of the function"),
        (ns(summary.get("total_dispatch_ns")), "total dispatch time", f"over {summary.get('iterations', 0)} iterations, {cover.get('events', 0)} dispatch executions"),
        (pct(cover.get("dispatch_time_attributed_share")), "of dispatch time attributed to source lines" + text_coverage_note(model, cover), "time of call sites whose ops have a file:line position"),
        (f"{cover.get('call_sites_mapped', 0)}/{cover.get('call_sites', 0)}", "call sites mapped to source lines", f"{cover.get('events_unmatched', 0)} executions matched no call site"),
        (str(sum(audit_counts.values())) if audit_counts else "0", "audit findings", ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in audit_counts.items())),
    ):
        card = el(cards, "div", class_="card", title=hint)
        el(card, "div", class_="big", text=value)
        el(card, "div", class_="muted", text=label)
    if host:
        el(node, "p", class_="note", text=host_time_text(summary).capitalize() + ".")
    device_time_cards(node, summary)
    components_view(node, model)
    hot_lines_table(node, model)
    memory_view(node, model)  # after the hottest lines, which stay on the first screen
    strip_sites = {site["index"]: site for site in model.call_sites}
    if model.iteration_strip:
        el(node, "h3", None, "One iteration over time")
        figure = el(node, "div", class_="strip-wrap")
        figure.append(iteration_strip(model.iteration_strip, {i: s["share"] or 0.0 for i, s in strip_sites.items()}, {i: short_export(s["export"]) for i, s in strip_sites.items()}))
    el(node, "h3", None, "Hottest dispatches")
    body = grid_table(node, ("call site", "export", "source", "mean", "share"), class_="grid hot-dispatches")
    for site in sorted(model.call_sites, key=lambda s: -(s["total_ns"] or 0))[:12]:
        row = el(body, "tr")
        chip(el(row, "td"), site["index"])
        el(row, "td", class_="mono ex", title=site["export"], text=short_export(site["export"]))
        el(row, "td", class_="src", title=site["loc"], text=short_loc(site["loc"]))
        el(row, "td", class_="num", text=ns(site["mean_ns"]))
        bar(el(row, "td"), site["share"])
    if model.gains is not None:
        gains_table(node, model, model.gains)


MEMORY_ROWS = 8


def memory_view(parent, model: ReportModel) -> None:
    """One call's memory: the peak and what it is made of, live bytes over the dispatch sequence with the
    peak marked, and the source lines holding most of it."""
    memory = model.summary.get("memory")
    if not memory:
        return
    el(parent, "h3", None, "Memory of one call")
    el(parent, "p", class_="note", text=memory_text(memory))
    sites = {site["index"]: site for site in model.call_sites}
    run_sites = sorted(index for index, site in sites.items() if site.get("phase", "run") == "run") if memory.get("attributed") else []
    held = memory.get("timeline_holders", [])
    names = short_paths([str(file) for position in held for file, _, _ in position])
    labels = {}
    for position, index in enumerate(run_sites):
        lines = held[position] if position < len(held) else []
        labels[position] = f" · call site {index}, {short_export(sites[index]['export'])}" + "".join(
            f"\n{names.get(file, file)}:{line} {size(value)}" if file else f"\n(no line) {size(value)}" for file, line, value in lines)
    figure = el(parent, "div", class_="strip-wrap", id="memory-live")
    figure.append(live_bytes(memory["timeline_bytes"], memory["peak_dispatch"], labels))
    if labels:
        el(parent, "p", class_="note pre", id="memory-at", text="Click a dispatch in the chart to see what is live there, by line.")
    lines = model.profile.memory_lines
    if lines is None or lines.empty:
        return
    names = short_paths([str(file) for file in lines["file"].fillna("")])
    body = grid_table(parent, ("line", "live at the peak", "allocated per call", "live over dispatches", "ops"), class_="grid memory-lines")
    for row in lines.head(MEMORY_ROWS).itertuples():
        tr = el(body, "tr")
        file = "" if row.file is None or row.file != row.file else str(row.file)
        el(tr, "td", class_="mono", text=f"{names.get(file, file)}:{row.line}" if file else "(no line)")
        el(tr, "td", class_="num", text=size(row.bytes_at_peak))
        el(tr, "td", class_="num", text=size(row.bytes_allocated))
        el(tr, "td", class_="num", text=f"{row.first_dispatch}–{row.last_dispatch}")
        el(tr, "td", class_="src", text=short_loc(str(row.ops)))


def device_time_cards(parent, summary: dict) -> None:
    """On a GPU: the dispatches' device time and the queue, submission and host time around them, per iteration."""
    parts = device_time_parts(summary)
    if not parts:
        return
    wall = summary["device_time"]["wall_ns_per_iteration"]
    el(parent, "h3", None, f"Device time and overhead per iteration (median of {summary['device_time']['iterations']}; wall time {ns(wall)})")
    cards = el(parent, "div", class_="cards device-time")
    for value, label, hint in parts:
        card = el(cards, "div", class_="card", title=hint)
        el(card, "div", class_="big", text=ns(value))
        el(card, "div", class_="muted", text=f"{label} ({pct(value / wall) if wall else '–'} of wall)")


HOT_LINES = 12
HOT_LINE_TITLES = (
    "file:line of the source (lines holding the very same ops are listed together)",
    "the compute ops at the line (linalg, torch, ONNX op types)",
    "the line's self time: its ops' time, each fused op's time split between its locations, library frames counted for the model line calling them",
    "self time in one call of the function",
    "what limits the dispatches giving the line most time, and the line's achieved rate (GFLOP/s, or GB/s when memory-bound); hover for the next step",
    "other lines computed in the same dispatches (fused into them or fusing this one)",
    "the dispatch call sites the line computes in",
)
LINE_NAME_CHARS = 28  # file names longer than this are cut from the left: the line number always shows


def hot_lines_table(parent, model: ReportModel) -> None:
    """The hottest source lines: where (file:line, never cut), what (op kinds), why (verdict, achieved rate), fused with what."""
    el(parent, "h3", None, "Hottest source lines")
    hot_lines = hottest_lines(model, HOT_LINES)
    if not hot_lines:
        el(parent, "p", class_="muted", text="No dispatch time is attributed to a source line (ops have no file:line locations nor text in the input program).")
        return
    names = file_labels(model)
    body = grid_table(parent, ("line", "kind", "self share", "per iteration", "bound", "fused with", "dispatches"), id="hot-lines", class_="grid hot-lines", titles=HOT_LINE_TITLES)
    for same in hot_lines:
        line = same[0]
        row = el(body, "tr", data_k=line.key)
        cell = el(row, "td", class_="mono where")
        for position, item in enumerate(same[:4]):
            if position:
                el(cell, "br")
            line_link(cell, model, item.key, names.get(model.files[item.file].path))
        if len(same) > 4:
            el(cell, "span", class_="more", text=f" +{len(same) - 4}")
        el(row, "td", class_="mono kind", text=line_kinds(model, line.ops))
        bar(el(row, "td"), line.user_share)
        el(row, "td", class_="num", text=ns(line.user_mean_ns))
        judged = next((item for item in same if item.verdict), line)
        verdict = el(row, "td", class_="verdict", data_v=judged.verdict, title=judged.next_step or None)
        verdict.append(verdict_badge(judged.verdict))
        if judged.verdict or judged.lower_bound:
            el(verdict, "span", class_="num rate", text=lower_bound_mark(judged.lower_bound) + line_rate(judged))
        fused_cell(el(row, "td", class_="fused"), model, same, names)
        chips(el(row, "td"), line.call_sites, 3)


def file_labels(model: ReportModel) -> dict[str, str]:
    """How the first screen names each file: its name when no other file has it, else its path from the
    files' common folder; cut from the left when long (the line number after it always shows)."""
    names = [source.name for source in model.files]
    if len(set(names)) == len(names):
        shown = short_paths(names, LINE_NAME_CHARS)
        return {source.path: shown[source.name] for source in model.files}
    return short_paths([source.path for source in model.files], LINE_NAME_CHARS)


def line_kinds(model: ReportModel, ops: list[str]) -> str:
    """The distinct compute op kinds of a line's ops, fills and empties left out when there is anything else."""
    kinds = list(dict.fromkeys(kind for op in ops for kind in model.ops[op]["kinds"].split(", ") if kind))
    useful = [kind for kind in kinds if kind not in ("linalg.fill", "tensor.empty")] or kinds
    return ", ".join(useful) if useful else "–"


def line_rate(line) -> str:
    """The achieved rate that goes with a line's verdict: bandwidth when memory-bound, else arithmetic."""
    if line.verdict == "memory-bound" or not line.gflops_s:
        return rate(line.gbytes_s, "GB/s")
    return rate(line.gflops_s, "GFLOP/s")


FUSED_SHOWN = 3


def fused_cell(cell, model: ReportModel, same: list, names: dict[str, str]) -> None:
    """The other lines computed in the dispatches a line computes in (one per op set), each with what it is.

    Init ops (a fill CSE shares between layers) compute nothing in a dispatch: neither the dispatches a
    line only initialises nor the init ops of the others count.
    """
    own = {item.key for item in same}
    own_ops = tuple(sorted(same[0].ops))
    sites = {site["index"]: site for site in model.call_sites}
    by_ops: dict[tuple[str, ...], object] = {}
    computing = [index for index, role in same[0].call_sites.items() if role != "init" and index in sites]
    computed = [op for index in computing for op, role, _ in sites[index]["ops"] if role != "init"]
    for key in dict.fromkeys(key for op in computed for key in model.ops[op]["lines"]):
        other = model.lines[key]
        ops = tuple(sorted(other.ops))
        if key not in own and ops != own_ops:
            current = by_ops.get(ops)
            # one line per op set: the location's own line rather than the program text's
            if current is None or (model.files[current.file].is_program and not model.files[other.file].is_program):
                by_ops[ops] = other
    fused = sorted(by_ops.values(), key=lambda other: (-other.share, other.file, other.number))
    if not fused:
        el(cell, "span", class_="muted", text="–")
        return
    for position, other in enumerate(fused[:FUSED_SHOWN]):
        if position:
            el(cell, "br")
        line_link(cell, model, other.key, names.get(model.files[other.file].path))
        el(cell, "span", class_="muted small", text=f" {line_kinds(model, other.ops)}")
    if len(fused) > FUSED_SHOWN:
        el(cell, "span", class_="more", text=f" +{len(fused) - FUSED_SHOWN} more")


INPUTS_IN_TITLE = 40  # a program with a thousand weight arguments lists the first ones


def inputs_title(inputs: list) -> str:
    """Every input on its own line, the first :data:`INPUTS_IN_TITLE` of them."""
    listed = "\n".join(map(str, inputs[:INPUTS_IN_TITLE]))
    return listed + (f"\n… {len(inputs) - INPUTS_IN_TITLE} more" if len(inputs) > INPUTS_IN_TITLE else "")


def inputs_text(inputs: list, shown: int = 4) -> str:
    """The inputs of the run, the first few of a long list (all of them in the tooltip)."""
    if not inputs:
        return "–"
    text = ", ".join(map(str, inputs[:shown]))
    return text + (f", … {len(inputs) - shown} more" if len(inputs) > shown else "")


def text_coverage_note(model: ReportModel, cover: dict) -> str:
    """When the program's text lines explain more time than locations do (ops located by name only)."""
    shown = sum((site["share"] or 0.0) for site in model.call_sites if site["lines"])
    by_location = cover.get("dispatch_time_attributed_share") or 0.0
    return f" ({pct(shown)} to lines shown here, with the program's text lines)" if shown > by_location + 0.001 else ""


def hottest_lines(model: ReportModel, count: int) -> list[list]:
    """The hottest lines by user self time (as the summary ranks them), lines with the very same ops (one
    op's text line and its locations) merged."""
    merged: dict[tuple[str, ...], list] = {}
    for line in sorted(model.lines.values(), key=lambda line: (-line.user_share, line.file, line.number)):
        if line.user_share > 0:
            merged.setdefault(tuple(sorted(line.ops)), []).append(line)
    return list(merged.values())[:count]


def short_loc(loc: str, limit: int = 48) -> str:
    """A location for a narrow cell: file names without their directories."""
    parts = []
    for piece in loc.split(" "):
        if "/" in piece and ":" in piece:
            piece = piece.rsplit("/", 1)[1]
        parts.append(piece)
    text = " ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Source --------------------------------------------------------------------------------------------


def source_section(main, model: ReportModel, templates) -> None:
    node = section(
        main, "source", "Source",
        "Each line's self share of dispatch time: an op's time is split between the members of its fused location, each part on its innermost line. "
        "Click a line to see the dispatches it feeds (root op or fused producer) and the lines fused with it.",
    )
    if not model.files:
        el(node, "p", class_="muted", text="No source file: the program path is unknown and no op has a file location.")
        return
    tabs = el(node, "div", class_="tabs", role="tablist")
    for source in model.files:
        label = f"{source.name}" + (" (program)" if source.is_program else "")
        tab = el(tabs, "button", type="button", class_="tab" + (" on" if source.index == 0 else ""), data_f=source.id, title=source.path, role="tab")
        el(tab, "span", None, label)
        el(tab, "span", class_=f"tab-heat h{heat(source.max_share)}", text=pct(source.max_share) if source.max_share else "")
    layout = el(node, "div", class_="source-layout")
    files = el(layout, "div", class_="files")
    for source in model.files:
        file_view(files, model, source, templates)
    details = el(layout, "aside", id="line-details", class_="details")
    el(details, "p", class_="muted", text="Select a line to see its dispatches.")
    skipped_sources(node, model.skipped_sources)


def skipped_sources(parent, skipped: dict[str, str]) -> None:
    """The files locations name that the report did not embed, and why."""
    if not skipped:
        return
    el(parent, "h3", None, f"Files not embedded ({len(skipped)})")
    ul = el(parent, "ul", class_="plain", id="skipped-sources")
    for path, reason in sorted(skipped.items()):
        el(ul, "li", class_="mono", text=f"{path}: {reason}")


def file_view(parent, model: ReportModel, source, templates) -> None:
    """One file's lines. A big program has thousands, so each is a few nodes: its number is a
    ``data-n`` the stylesheet shows, its share one element drawing its own bar (:func:`bar`). Beyond
    :data:`TEMPLATE_FILE_LINES` lines they go to a template the viewer puts in place (``data-packed``)."""
    view = el(parent, "div", class_="file", id=f"file-{source.id}", data_f=source.id)
    if source.index != 0:
        view.set("hidden", "hidden")
    head = el(view, "div", class_="file-head")
    el(head, "span", class_="mono", text=source.path)
    if source.text is None:
        el(head, "span", class_="muted", text=" · not on this machine: its mapped lines and their ops")
    elif not source.is_program:
        el(head, "span", class_="muted", text=" · mapped lines with context")
    hottest = sorted((line for line in source.lines.values() if line.share > 0), key=lambda line: -line.share)[:6]
    if hottest:
        jump = el(head, "span", class_="jump")
        el(jump, "span", class_="muted", text="hottest:")
        for line in hottest:
            el(jump, "a", href="#", class_="lnk", data_k=line.key, title=pct(line.share), text=f"{line.number} ({pct(line.share)})")
    classes = "code src" + (" gains" if model.gains is not None else "")
    if len(source.shown) > TEMPLATE_FILE_LINES:
        el(view, "div", class_=classes, data_packed=source.id, text=f"{len(source.shown)} lines, shown in a moment…")
        code = el(el(templates, "template", id=f"t-code-{source.id}"), "div", class_=classes)
    else:
        code = el(view, "div", class_=classes)
    previous = 0
    for number in source.shown:
        skipped = number - previous - 1
        if skipped > 0 and (previous > 0 or source.text is not None):
            el(code, "div", class_="gap", text=f"⋯ {skipped} line{'s' if skipped > 1 else ''}")
        previous = number
        line = source.lines.get(number)
        text = source.text[number - 1] if source.text is not None and number - 1 < len(source.text) else None
        if line is None:
            row = el(code, "div", class_="ln", data_n=number)
            el(row, "code", None, cut_text(text or ""))
            continue
        row = el(code, "div", class_=f"ln m h{heat(line.share)}", id=f"L-{source.id}-{number}", data_k=line.key, data_n=number, tabindex="0")
        if line.share > 0:
            bar(row, line.share)
        if line.call_sites:
            chips(el(row, "span", class_="cs"), line.call_sites, 3)
        if model.gains is not None:
            gain_badge(row, model.gains.lines.get(line.key))
        if text is not None:
            el(row, "code", None, cut_text(text))
        else:
            ranked = sorted(line.ops, key=lambda o: -model.ops[o]["share"])
            described = " · ".join(dict.fromkeys(describe_op(model.ops[o]) for o in ranked))
            el(row, "code", class_="desc", title="\n".join(model.ops[o]["label"] for o in ranked), text=cut_text(described))


def cut_text(text: str, limit: int = 400) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else f"{text[:limit]} … ({len(text) - limit} more characters)"


def describe_op(op: dict) -> str:
    """``torch.aten.mm @ conv.py:443:15``: what the op is and where its innermost position is."""
    what = op["name"] or op["op_names"] or "op"
    if op["positions"]:
        path, number = op["positions"][0]
        return f"{what} @ {Path(path).name}:{number}"
    return what


# Flame graph --------------------------------------------------------------------------------------


def flame_section(main, model: ReportModel) -> None:
    node = section(
        main, "flame", "Flame graph by source",
        "Self time along the source hierarchy: Python call stacks where locations carry them, name scopes where names have '/', "
        "else file and line, down to the dispatch. Click a frame to zoom into it, the top frame to zoom out, a dispatch to open its drill-down.",
    )
    wrap = el(node, "div", class_="flame-wrap")
    wrap.append(flame_svg(flame_tree(model, model.profile.graph)))


# Dispatches ----------------------------------------------------------------------------------------

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


def verdict_badge(verdict: str) -> etree._Element:
    """A coloured badge naming what bounds a dispatch (``compute-bound`` → ``compute``)."""
    node = etree.Element("span", {"class": f"bound {verdict.split('-')[0] or 'none'}"})
    node.text = verdict.removesuffix("-bound") if verdict else "–"
    return node


def bound_share(site: dict) -> float | None:
    """The achieved share of the peak that bounds the dispatch: compute peak when compute-bound, else bandwidth."""
    return site["flops_peak_share"] if site["verdict"] == "compute-bound" else site["bandwidth_peak_share"]


def why_block(drill, site: dict) -> None:
    """The drill-down's cost model, achieved rates and verdict with its next step."""
    el(drill, "h4", None, "Why it takes this long")
    bound = lower_bound_mark(site["lower_bound"])  # "≥": FLOPs and bytes are lower bounds, no verdict from them
    if not site["verdict"] and not bound:
        el(drill, "p", class_="muted", text="No verdict: the call site was not timed, or its dispatch region (and so its cost model) was not found.")
        return
    verdict = el(drill, "p", class_="why")
    verdict.append(verdict_badge(site["verdict"]))
    verdict[-1].tail = f" next step: {site['next_step']}"
    stats = el(drill, "div", class_="cards small")
    for value, label in (
        (f"{bound}{site['flops']:.4g}", "FLOPs per execution"), (f"{bound}{site['bytes']:.4g}", "bytes moved (compulsory)"),
        (rate(site["intensity"], "FLOP/B"), "arithmetic intensity"),
        (f"{bound}{rate(site['gflops_s'], 'GFLOP/s')} ({bound}{pct(site['flops_peak_share'])})", "achieved (of compute peak)"),
        (f"{bound}{rate(site['gbytes_s'], 'GB/s')} ({bound}{pct(site['bandwidth_peak_share'])})", "achieved (of bandwidth)"),
    ):
        card = el(stats, "div", class_="card")
        el(card, "div", class_="big", text=value)
        el(card, "div", class_="muted", text=label)


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


def drill_template(parent, model: ReportModel, site: dict) -> None:
    index = site["index"]
    template = el(parent, "template", id=f"t-cs-{index}")
    drill = el(template, "div", class_="drill", data_cs=index)
    el(drill, "h3", None, f"Call site #{index}")
    kv = el(drill, "dl", class_="kv")
    executable = model.executables.get(site["executable"])
    for label, value in (
        ("export", site["export"]), ("executable", site["executable"]), ("source", site["loc"]), ("root op", site["root_op"]),
        ("shapes", site["shapes"]), ("workgroups", f"{site['workgroups']} ({site['workgroup_count']} workgroups)"),
        ("workgroup size", site["workgroup_size"]), ("lowering config", site["lowering_config"]),
        ("phase", "run (each call)" if site["phase"] == "run" else f"{site['phase']} (runs once, at load: not timed)"),
        ("dumped source", f"artifacts/{site['source_file']}" if site["source_file"] else ""),
        ("target code", f"artifacts/{site['target_file']}" if site["target_file"] else ""),
    ):
        if value:
            el(kv, "dt", None, label)
            el(kv, "dd", class_="mono" if label not in ("phase", "workgroups") else None, text=value)
    if executable and len(executable.call_sites) > 1:
        el(kv, "dt", None, "shared by")
        chips(el(kv, "dd"), [i for i in executable.call_sites], 24)
    stats = el(drill, "div", class_="cards small")
    parallel = site["tile_duration_sum_mean_ns"] / site["mean_ns"] if site["tile_duration_sum_mean_ns"] and site["mean_ns"] else None
    for value, label in (
        (f"{int(site['count'] or 0)}", "executions"), (ns(site["mean_ns"]), "mean"), (ns(site["median_ns"]), "p50"),
        (f"{ns(site['p10_ns'])} – {ns(site['p90_ns'])}", "p10 – p90"), (f"{ns(site['ci95_low_ns'])} – {ns(site['ci95_high_ns'])}", "95% CI of the mean"),
        (ns(site["total_ns"]), "total"), (pct(site["share"]), "of dispatch time"),
        (f"{site['tile_count_mean']:.0f} / {site['workgroup_count']}" if site["tile_count_mean"] is not None else "–", "tiles run / workgroups"),
        (f"{parallel:.2f}" if parallel is not None else "–", "busy cores (tile time ÷ wall)"),
    ):
        card = el(stats, "div", class_="card")
        el(card, "div", class_="big", text=value)
        el(card, "div", class_="muted", text=label)
    for name, value in site["extra"].items():
        card = el(stats, "div", class_="card")
        el(card, "div", class_="big", text=f"{value:.4g}" if value is not None else "–")
        el(card, "div", class_="muted", text=name)
    why_block(drill, site)
    el(drill, "h4", None, "Source ops")
    body = grid_table(drill, ("role", "op", "op names", "share of this dispatch", "lines"), class_="grid ops-table")
    for op, role, fraction in site["ops"]:
        info = model.ops.get(op, {})
        row = el(body, "tr", data_op=op)
        el(row, "td", None).append(badge(role))
        cell = el(row, "td", class_="mono")
        op_link(cell, model, op)
        el(cell, "div", class_="muted small", text=info.get("label", ""))
        el(row, "td", class_="mono", text=info.get("op_names", ""))
        bar(el(row, "td"), fraction)
        lines = el(row, "td", class_="mono")
        for key in info.get("lines", [])[:6]:
            line_link(lines, model, key)
            el(lines, "br")
    if not site["ops"]:
        el(drill, "p", class_="muted", text="No source op: the dispatch's location is unknown.")
    charts = el(drill, "div", class_="charts")
    figure = el(charts, "figure")
    figure.append(histogram(model.durations.get(index, np.array([]))))
    el(figure, "figcaption", None, "execution times")
    figure = el(charts, "figure")
    figure.append(per_iteration(model.per_iteration.get(index, [])))
    el(figure, "figcaption", None, "time per iteration (run order)")
    if model.workgroups is not None:
        workgroup_drill(drill, model.workgroups, index)
    el(drill, "h4", None, "Executable source")
    if executable is None or executable.text is None:
        el(drill, "p", class_="muted", text="The executable's dumped source is not in the profile directory.")
        return
    note = "Locations removed for reading; each marked line names the source op its op came from — root op, fused producer, or another op (e.g. an input's producer)."
    dumped = dumped_call_site(model, executable)
    if len(executable.call_sites) > 1 and dumped is not None and dumped != index:
        note += f" This executable is shared by {len(executable.call_sites)} call sites; IREE dumps it once, with the locations of call site #{dumped}."
    el(drill, "p", class_="note", text=note)
    el(drill, "div", class_="exe-slot", data_x=executable.id)


def dumped_call_site(model: ReportModel, executable) -> int | None:
    """The call site whose locations the (deduplicated) executable dump carries: most ops in common."""
    in_dump = {op for ops in executable.line_ops.values() for op in ops}
    sites = {site["index"]: site for site in model.call_sites}
    best = max(executable.call_sites, key=lambda i: (len(in_dump & {op for op, _, _ in sites[i]["ops"]}) if i in sites else -1, -i), default=None)
    return best


def executable_template(parent, model: ReportModel, executable) -> None:
    template = el(parent, "template", id=f"t-{executable.id}")
    code = el(template, "div", class_="code exe")
    if executable.text is None:
        if EXECUTABLE_DUMPS in model.skipped_sources:
            el(code, "p", class_="muted", text=f"{executable.name}: executable source not embedded (--no-sources)")
        return
    text = executable.text[:-1] if executable.text and executable.text[-1] == "" else executable.text
    for number, line in enumerate(text, start=1):
        ops = executable.line_ops.get(number)
        row = el(code, "div", class_="ln" + (" m" if ops else ""), data_ops=" ".join(ops) if ops else None)
        el(row, "span", class_="no", text=str(number))
        tag = ", ".join(dict.fromkeys(op_label(model.ops[o]) for o in ops if o in model.ops)) if ops else ""
        el(row, "span", class_="tag", title=tag or None, text=("…" + tag[-25:]) if len(tag) > 26 else tag)
        el(row, "code", None, line)


# Graph ---------------------------------------------------------------------------------------------


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


# Audit ---------------------------------------------------------------------------------------------


def audit_section(main, model: ReportModel) -> None:
    audit = model.audit or {}
    node = section(main, "audit", "Audit", "What the mapping could not explain, or explains with a caveat.")
    without = audit.get("ops_without_location", [])
    el(node, "h3", None, f"Compute ops without a location ({len(without)})")
    if without:
        counts: dict[str, int] = {}
        for name in without:
            counts[str(name)] = counts.get(str(name), 0) + 1
        group = el(node, "details", class_="reason")
        el(group, "summary", None, f"{len(counts)} op names")
        ul = el(group, "ul", class_="plain")
        for name, count in sorted(counts.items()):
            el(ul, "li", class_="mono", text=f"{name} × {count}" if count > 1 else name)
    else:
        el(node, "p", class_="muted", text="None: every compute op of the input has a location.")
    missing = audit.get("ops_without_dispatch", [])
    el(node, "h3", None, f"Compute ops in no dispatch ({len(missing)})")
    if missing:
        by_reason: dict[str, list[dict]] = {}
        for item in missing:
            by_reason.setdefault(str(item.get("reason", "")), []).append(item)
        for reason, items in sorted(by_reason.items(), key=lambda pair: -len(pair[1])):
            group = el(node, "details", class_="reason")
            el(group, "summary", None, f"{reason} ({len(items)})")
            body = grid_table(group, ("op", "location", "op names"))
            for item in items:
                row = el(body, "tr")
                op_link(el(row, "td", class_="mono"), model, str(item.get("op", "")))
                el(row, "td", class_="mono", text=str(item.get("loc", "")))
                el(row, "td", class_="mono", text=str(item.get("op_names", "")))
    else:
        el(node, "p", class_="muted", text="None.")
    split = audit.get("ops_split", [])
    el(node, "h3", None, f"Ops split across dispatches ({len(split)})")
    el(node, "p", class_="note", text="A source op computed in several dispatches: split by the compiler, or recomputed as a fused producer in each consumer.")
    if split:
        by_roles: dict[str, list[dict]] = {}
        for item in split:
            by_roles.setdefault(split_reason(item.get("roles", [])), []).append(item)
        for reason, items in sorted(by_roles.items(), key=lambda pair: -len(pair[1])):
            group = el(node, "details", class_="reason")
            el(group, "summary", None, f"{reason} ({len(items)})")
            body = grid_table(group, ("op", "location", "call sites", "roles"))
            for item in items:
                row = el(body, "tr")
                op_link(el(row, "td", class_="mono"), model, str(item.get("op", "")))
                el(row, "td", class_="mono", text=str(item.get("loc", "")))
                roles = dict(model.ops.get(str(item.get("op")), {}).get("call_sites", []))
                chips(el(row, "td"), {int(i): roles.get(int(i)) for i in item.get("call_sites", [])}, 24)
                el(row, "td", None, ", ".join(item.get("roles", [])))
    else:
        el(node, "p", class_="muted", text="None: every source op is computed by one dispatch.")
    shared = audit.get("shared_executables", [])
    el(node, "h3", None, f"Executables shared by several call sites ({len(shared)})")
    el(node, "p", class_="note", text="IREE compiles identical dispatches once; a tool that knows one location per executable (e.g. Tracy's zones) cannot tell these call sites apart.")
    if shared:
        sites = {site["index"]: site for site in model.call_sites}
        group = el(node, "details", class_="reason")
        el(group, "summary", None, f"{len(shared)} executables serving {sum(len(item.get('call_sites', [])) for item in shared)} call sites")
        body = grid_table(group, ("export", "call sites", "total share", "sources"))
        for item in shared:
            indices = [int(i) for i in item.get("call_sites", [])]
            row = el(body, "tr")
            el(row, "td", class_="mono", title=str(item.get("export", "")), text=short_export(str(item.get("export", ""))))
            chips(el(row, "td"), indices, 24)
            bar(el(row, "td"), sum((sites[i]["share"] or 0.0) for i in indices if i in sites))
            el(row, "td", class_="src", text="; ".join(dict.fromkeys(short_loc(sites[i]["loc"], 40) for i in indices if i in sites)))
    else:
        el(node, "p", class_="muted", text="None: each executable serves one call site.")


def split_reason(roles: list[str]) -> str:
    """Why an op is in several dispatches, from its roles there: split (root of several), recomputed (a producer), or both."""
    distinct = set(roles)
    if distinct == {"root"}:
        return "split by the compiler (root op of several dispatches)"
    if distinct == {"root", "producer"}:
        return "root op of a dispatch, recomputed as a fused producer in others"
    return "recomputed as a fused producer in each consumer" if distinct == {"producer"} else "in several dispatches as " + ", ".join(sorted(distinct))


# Glossary ------------------------------------------------------------------------------------------

GLOSSARY = (
    ("dispatch, call site", "one launch of compiled code on the device; a call site is one place in the program that launches it, numbered in execution order"),
    ("export", "the dispatch function a call site runs (an entry point of an executable)"),
    ("executable", "a compiled unit holding exports; IREE compiles identical dispatches once, so one executable can serve several call sites"),
    ("root op", "the op a dispatch is formed around and named after (its heaviest); codegen tiles it and fuses the rest into its tiles"),
    ("producer", "an op fused into another op's dispatch (typically elementwise), so its work happens inside that dispatch"),
    ("absorbed", "an op the compiler merged into another op without keeping its location (a softmax's max, exp and sum raised into one softmax op at the divide's line); it shares that op's time by its own FLOPs"),
    ("init", "a fill that initialises an accumulator; it costs nothing and its location may come from another layer"),
    ("workgroup, tile", "a block of a dispatch's iteration space run by one worker thread; fewer workgroups than workers leaves cores idle"),
    ("self time", "time of the ops at a line itself (each fused op's time split between its locations)"),
    ("inclusive time", "time of every op whose call stack passes through a line, like a caller's time in a CPU profiler"),
    ("FLOPs, bytes", "arithmetic ops of one execution (from each op's iteration space and body) and the bytes it must read and write at least"),
    ("bound", "what limits a dispatch: compute (at 10 % of the FLOP peak or more), memory (below the ridge intensity), far-from-roofs (under 10 % of both peaks: the generated code), parallelism (fewer workgroups than workers) or overhead (under 5 µs); none when its FLOPs and bytes are lower bounds (≥: a dynamic size the run did not fix)"),
)


def glossary_section(main) -> None:
    node = section(main, "glossary", "Glossary")
    terms = el(node, "dl", class_="glossary")
    for term, meaning in GLOSSARY:
        el(terms, "dt", None, term)
        el(terms, "dd", None, meaning)


# Viewer data ---------------------------------------------------------------------------------------


def viewer_data(model: ReportModel, layouts: dict[str, GraphLayout]) -> dict:
    role_code = {"root": "r", "producer": "p", "init": "i", "absorbed": "a"}
    lines = {
        key: {"s": round(line.share, 6), "t": round(line.mean_ns, 1), "cs": [[i, role_code.get(r, r)] for i, r in line.call_sites.items()], "ops": line.ops}
        for key, line in model.lines.items()
    }
    used_ops = {op for line in model.lines.values() for op in line.ops} | {op for site in model.call_sites for op, _, _ in site["ops"]}
    ops = {
        op: {"l": info["label"], "n": info["op_names"], "s": round(info["share"], 6), "ln": info["lines"], "cs": [[i, role_code.get(r, r)] for i, r in info["call_sites"]]}
        for op, info in model.ops.items() if op in used_ops
    }
    exe_ids = {name: executable.id for name, executable in model.executables.items()}
    sites = {
        str(site["index"]): {
            "e": site["export"], "x": exe_ids.get(site["executable"]), "root": site["root_op"], "s": round(site["share"] or 0.0, 6),
            "m": round(site["mean_ns"] or 0.0, 1), "ops": [[op, role_code.get(r, r), round(f, 4)] for op, r, f in site["ops"]], "ln": site["lines"],
        }
        for site in model.call_sites
    }
    executables = {
        executable.id: {"n": executable.name, "cs": executable.call_sites, "dumped": dumped_call_site(model, executable)}
        for executable in model.executables.values()
    }
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for source, target, _ in layouts["full"].edges:  # neighbourhoods are the whole graph's, in either view
        succ.setdefault(source, []).append(target)
        pred.setdefault(target, []).append(source)
    views = {
        name: {
            "nodes": {node: [round(p.x, 1), round(p.y, 1), p.w, p.group] for node, p in layout.nodes.items()},
            "groups": [[g.id, round(g.y, 1), round(g.height, 1)] for g in layout.groups], "height": round(layout.height, 1),
        }
        for name, layout in layouts.items()
    }
    dims = {"top": TOP, "row": ROW, "nodeH": NODE_H, "header": GROUP_HEADER, "gap": GROUP_GAP, "opX": COLUMNS["source_op"][0], "opW": COLUMNS["source_op"][1]}
    graph = {"views": views, "succ": succ, "pred": pred, "dims": dims}
    files = [{"id": f.id, "name": f.name, "path": f.path} for f in model.files]
    data = {"files": files, "lines": lines, "ops": ops, "cs": sites, "exe": executables, "graph": graph}
    if model.gains is not None:  # speedup, CI low, CI high (null when unknown), verdict
        data["gains"] = {key: [gain.speedup, gain.ci_low, gain.ci_high, gain.verdict] for key, gain in model.gains.lines.items()}
    return data
