"""The HTML provenance report: one self-contained file built with lxml from a profile directory.

This module assembles the page: head, top bar, the sections in order (each built by its own module:
``summary_section``, ``source_view``, ``dispatches``, ``strategies``, ``zones``, ``graph_view``,
``audit``, ``glossary``), the drill-down panel and the templates its drill-downs show (executable
sources: ``drill``; a hook profile's workgroups: ``workgroups``), the viewer's assets and its data
(``viewer_contract``).

The page is rendered in full, so it shows without any script; the viewer (``viewer/drill.js``,
``viewer/report.js``) adds the interactions (selecting a line, sorting, drill-downs, graph
neighbourhoods), reading the JSON embedded in ``<script type="application/json" id="tl-data">``. It
builds a call site's drill-down from that JSON when it is opened: a reader without script loses
nothing, as drill-downs in ``<template>`` elements are inert without script all the same (and as markup
they were most of a big page's elements). Every piece of program text goes through lxml (escaped) or
the viewer's ``textContent``; the JSON has ``<``, ``>`` and ``&`` escaped.

A big program keeps the page light: the graph shows its hot subgraph (the full one in a template), and
when the templates (executable sources, workgroups, full graph, a long file's lines) hold much markup
they travel packed (gzip, base64) in the JSON, unpacked by the viewer when one is first opened.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

from lxml import etree
from lxml import html as lxml_html

from tracelink.version import __version__
from tracelink.atomic import make_directory, write_atomic
from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.report.assemble import build_model
from tracelink.report.audit import audit_section
from tracelink.report.dispatches import dispatch_section
from tracelink.report.drill import executable_template
from tracelink.report.fmt import clean, el
from tracelink.report.glossary import glossary_section
from tracelink.report.graph_view import graph_section
from tracelink.report.layout import GraphLayout, hot_call_sites, layout_graph
from tracelink.report.model import ReportModel, short_export
from tracelink.report.source_view import flame_section, source_section
from tracelink.report.sources import SourcePolicy
from tracelink.report.strategies import strategies_section
from tracelink.report.summary_section import summary_section
from tracelink.report.textmap import SourceTexts
from tracelink.report.viewer_contract import viewer_data
from tracelink.report.workgroups import workgroup_templates
from tracelink.report.zones import runtime_section
from tracelink.profile_dir import files

# The stylesheet, then the scripts, inlined in this order into one script element (report.js uses what drill.js defines).
ASSETS = ("report.css", "drill.js", "report.js")

# Templates (executable sources, workgroups, full graph, long files) with more markup than this are packed.
PACK_BYTES = 200_000


def viewer_dir() -> Path:
    """The report assets: ``<repo>/viewer`` (editable install) or ``tracelink/viewer`` (wheel)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "viewer", package / "viewer"):
        if all((candidate / name).is_file() for name in ASSETS):
            return candidate
    raise TracelinkError(f"report assets ({', '.join(ASSETS)}) not found in {package.parent / 'viewer'} nor {package / 'viewer'}")


def build_report(profile_or_dir: Profile | Path | str, output: Path | None = None, sources: SourcePolicy | None = None,
                 texts: SourceTexts | None = None) -> Path:
    """Write the report of a profile (or profile directory) to ``output`` (default ``<dir>/report.html``).

    ``sources`` decides which source files are embedded (default: the policy the profile was written with);
    ``texts`` are the program and dumps already parsed (`tracelink profile` parses them beside the compiler).
    The whole page is built in memory and written atomically: a failure leaves any previous report intact.
    """
    profile = profile_or_dir if isinstance(profile_or_dir, Profile) else load_profile(Path(profile_or_dir))
    output = Path(output) if output is not None else profile.directory / files.REPORT
    page_bytes = render_report(profile, sources, texts)
    make_directory(output.parent)
    return write_atomic(output, lambda temporary: temporary.write_bytes(page_bytes))


def render_report(profile: Profile, sources: SourcePolicy | None = None, texts: SourceTexts | None = None) -> bytes:
    """The report page, UTF-8 encoded (as its ``<meta charset>`` says): lxml serializes it to bytes
    directly, where text first would be decoded and encoded again."""
    model = build_model(profile, sources, texts)
    root = page(model, graph_layouts(model))
    return lxml_html.tostring(root, doctype="<!DOCTYPE html>", encoding="utf-8", method="html") + b"\n"


def graph_layouts(model: ReportModel) -> dict[str, GraphLayout]:
    """The graph's views: "full", and "hot" (the default) when the graph is too big to show whole."""
    layouts = {"full": layout_graph(model.profile.graph, model.ops, model.call_sites, short_export)}
    hot = hot_call_sites(model.call_sites)
    if hot is not None:
        layouts["hot"] = layout_graph(model.profile.graph, model.ops, model.call_sites, short_export, hot)
    return layouts


def page(model: ReportModel, layouts: dict[str, GraphLayout]) -> etree._Element:
    """The whole page: the sections, the panel and the templates, the viewer's data and assets inlined."""
    css, js = viewer_assets()
    root = el(None, "html", lang="en")
    head(root, model, css)
    body = el(root, "body")
    top_bar(body, model)
    main = el(body, "main")
    templates = etree.Element("div", id="templates", hidden="hidden")  # filled here, added to the body below
    sections(main, model, layouts, templates)
    el(body, "footer", class_="foot", text=f"tracelink {__version__} · report of {clean(str(model.profile.directory))} · opens offline; trace.json opens in ui.perfetto.dev")
    drill_panel(body)
    for executable in model.executables.values():
        executable_template(templates, model, executable)
    if model.workgroups is not None:
        workgroup_templates(templates, model.workgroups)
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


def sections(main, model: ReportModel, layouts: dict[str, GraphLayout], templates) -> None:
    """The page's sections, in order; those with hidden parts put them in ``templates``."""
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


def viewer_assets() -> tuple[str, str]:
    """The viewer's stylesheet and its scripts (one text), checked to be safe to inline."""
    assets = viewer_dir()
    texts = {name: (assets / name).read_text() for name in ASSETS}
    for name, text in texts.items():
        closing = "</style" if name.endswith(".css") else "</script"
        if closing in text.lower():
            raise TracelinkError(f"{assets / name}: must not contain '{closing}'")
    css, *scripts = texts.values()
    return css, "\n".join(scripts)


def program_name(model: ReportModel) -> str:
    """The file the user gave (a model.py:make, an .onnx), as the printed summary names it."""
    return Path(str(model.summary.get("model") or model.summary.get("program", "program"))).name


def head(root, model: ReportModel, css: str) -> None:
    node = el(root, "head")
    el(node, "meta", charset="utf-8")
    el(node, "meta", name="viewport", content="width=device-width, initial-scale=1")
    el(node, "meta", name="generator", content=f"tracelink {__version__}")
    el(node, "title", None, f"{program_name(model)} @{model.summary.get('function', '')} · tracelink report")
    el(node, "style", None, css)


def top_bar(body, model: ReportModel) -> None:
    """The program and function, and a link to each section the page has."""
    top = el(body, "header", class_="top")
    el(top, "span", class_="brand", text="tracelink")
    title = el(top, "span", class_="title")
    el(title, "strong", None, program_name(model))
    el(title, "span", class_="muted", text=f" @{model.summary.get('function', '')}")
    nav = el(top, "nav")
    anchors = [("summary", "Summary"), ("source", "Source"), ("flame", "Flame graph"), ("dispatches", "Dispatches"), ("graph", "Graph"),
               ("audit", "Audit"), ("glossary", "Glossary")]
    if model.zones is not None:
        anchors.insert(3, ("runtime", "Runtime"))
    if model.profile.strategies is not None:
        anchors.insert(anchors.index(("dispatches", "Dispatches")) + 1, ("strategies", "Strategies"))
    for anchor, label in anchors:
        el(nav, "a", href=f"#{anchor}", text=label)


def drill_panel(body) -> None:
    """The side panel the viewer fills with a call site's drill-down."""
    panel = el(body, "aside", id="panel", class_="panel", hidden="hidden")
    panel_head = el(panel, "div", class_="panel-head")
    el(panel_head, "span", id="panel-title", class_="panel-title")
    el(panel_head, "button", id="panel-close", type="button", title="close (Esc)", text="×")
    el(panel, "div", id="panel-body", class_="panel-body")


def packed(markup: str) -> str:
    """The templates' markup, gzip-compressed and base64-encoded, for the viewer to unpack when first needed.

    A big report's executable sources, full graph and long files are most of its bytes and of the
    nodes the browser would parse at load; packed, they cost a few percent of that (the markup is
    repetitive) and nothing until a drill-down or the full graph is opened. Level 6, not 9: half the
    time for a few per cent more bytes (docs/reference/numbers.md).
    """
    return base64.b64encode(gzip.compress(markup.encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii")


def json_for_script(value) -> str:
    """JSON safe inside a script element: no ``<``, ``>`` or ``&`` characters at all."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
