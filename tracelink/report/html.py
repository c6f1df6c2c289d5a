"""The HTML provenance report: one self-contained file built with lxml from a profile directory.

This module assembles the page: head, top bar, the sections in order (each built by its own module:
``summary_section``, ``source_view``, ``dispatches``, ``strategies``, ``zones``, ``graph_view``,
``audit``, ``glossary``), the drill-down panel and its templates (``drill``), the viewer's assets and
its data (``viewer_contract``).

The page is rendered in full, so it shows without any script; ``viewer/report.js`` only adds the
interactions (selecting a line, sorting, drill-downs, graph neighbourhoods), reading the JSON embedded
in ``<script type="application/json" id="tl-data">``. Every piece of program text goes through lxml
(escaped); the JSON has ``<``, ``>`` and ``&`` escaped.

A big program keeps the page light: the graph shows its hot subgraph (the full one in a template), and
when the templates (drill-downs, executable sources, full graph) hold much markup they travel packed
(gzip, base64) in the JSON, unpacked by the viewer when one is first opened.
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
from tracelink.profile_dir import Profile, load_profile
from tracelink.report.assemble import build_model
from tracelink.report.audit import audit_section
from tracelink.report.dispatches import dispatch_section
from tracelink.report.drill import drill_template, executable_template
from tracelink.report.fmt import clean, el
from tracelink.report.glossary import glossary_section
from tracelink.report.graph_view import graph_section
from tracelink.report.layout import GraphLayout, hot_call_sites, layout_graph
from tracelink.report.model import ReportModel, short_export
from tracelink.report.source_view import flame_section, source_section
from tracelink.report.sources import SourcePolicy
from tracelink.report.strategies import strategies_section
from tracelink.report.summary_section import summary_section
from tracelink.report.viewer_contract import viewer_data
from tracelink.report.zones import runtime_section
from tracelink.tools import InChildProcess

ASSETS = ("report.css", "report.js")

# Templates (drill-downs, executable sources, full graph) with more markup than this are packed.
PACK_BYTES = 200_000
# From this many call sites on, two thirds of their drill-downs (which are most of a big page's elements:
# 107,000 of 150,000 for 606 call sites) are built by a forked child while the page builds its sections
# and the other third (the two took about as long on this 2-core VM). Each drill-down is over 2 kB of
# markup, so the templates are then packed whatever else they hold.
DRILLS_APART_AT = 200


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


def page(model: ReportModel, layouts: dict[str, GraphLayout]) -> etree._Element:
    """The whole page: the sections, the panel and the templates, the viewer's data and assets inlined."""
    css, js = viewer_assets()
    apart = model.call_sites[: len(model.call_sites) * 2 // 3] if len(model.call_sites) >= DRILLS_APART_AT else []
    drills_apart = InChildProcess(lambda: drill_markup(model, apart), "tracelink-drills") if apart else None
    root = el(None, "html", lang="en")
    head(root, model, css)
    body = el(root, "body")
    top_bar(body, model)
    main = el(body, "main")
    templates = etree.Element("div", id="templates", hidden="hidden")  # filled here, added to the body below
    try:
        sections(main, model, layouts, templates)
        el(body, "footer", class_="foot", text=f"tracelink {__version__} · report of {clean(str(model.profile.directory))} · opens offline; trace.json opens in ui.perfetto.dev")
        drill_panel(body)
        for site in model.call_sites[len(apart):]:
            drill_template(templates, model, site)
        for executable in model.executables.values():
            executable_template(templates, model, executable)
        viewer = viewer_data(model, layouts)
        markup = lxml_html.tostring(templates, encoding="unicode", method="html")
        if drills_apart is not None:  # the templates' order does not matter: the viewer finds each by its id
            markup = markup.removesuffix("</div>") + drills_apart.wait() + "</div>"
    except BaseException:
        if drills_apart is not None:
            drills_apart.cancel()
        raise
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


def drill_markup(model: ReportModel, sites: list[dict]) -> str:
    """The drill-down templates of ``sites``, as markup."""
    holder = etree.Element("div")
    for site in sites:
        drill_template(holder, model, site)
    return "".join(lxml_html.tostring(template, encoding="unicode", method="html") for template in holder)


def viewer_assets() -> tuple[str, str]:
    """The viewer's stylesheet and script, checked to be safe to inline."""
    assets = viewer_dir()
    css, js = ((assets / name).read_text() for name in ASSETS)
    for name, text, closing in (("report.css", css, "</style"), ("report.js", js, "</script")):
        if closing in text.lower():
            raise TracelinkError(f"{assets / name}: must not contain '{closing}'")
    return css, js


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

    A big report's drill-downs, executable sources and full graph are most of its bytes and of the
    nodes the browser would parse at load; packed, they cost a few percent of that (the markup is
    repetitive) and nothing until a drill-down or the full graph is opened. Level 6, not 9: on a
    424-call-site page (8 MB of markup) it packs in half the time (0.04 s) into 5 % more bytes.
    """
    return base64.b64encode(gzip.compress(markup.encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii")


def json_for_script(value) -> str:
    """JSON safe inside a script element: no ``<``, ``>`` or ``&`` characters at all."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
