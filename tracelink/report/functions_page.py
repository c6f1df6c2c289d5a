"""The report of a profile of several functions: each one's figures and the source lines they share, side by side.

Each function's own report (``functions/<name>/report.html``) holds everything else; this page links to them.
"""

from __future__ import annotations

from pathlib import Path

from lxml import etree
from lxml import html as lxml_html

from tracelink.atomic import write_atomic
from tracelink.profile_dir.functions import FunctionProfiles
from tracelink.report.fmt import el, ns, pct, size
from tracelink.report.html import viewer_assets
from tracelink.report.summary import short_paths
from tracelink.report.widgets import grid_table
from tracelink.version import __version__
from tracelink.profile_dir import files

LINES_SHOWN = 30


def build_functions_report(result: FunctionProfiles) -> Path:
    """Write ``report.html`` at the top of the directory."""
    root = functions_page(result)
    text = lxml_html.tostring(root, doctype="<!DOCTYPE html>", encoding="unicode", method="html") + "\n"
    return write_atomic(result.directory / files.REPORT, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def functions_page(result: FunctionProfiles) -> etree._Element:
    """The page: a table of the functions, then the hottest source lines with each function's self time per call."""
    css, _ = viewer_assets()
    name = Path(str(result.summary.get("model") or result.summary.get("program", "program"))).name
    functions = [entry["function"] for entry in result.summary["functions"]]
    root = el(None, "html", lang="en")
    head = el(root, "head")
    el(head, "meta", charset="utf-8")
    el(head, "meta", name="generator", content=f"tracelink {__version__}")
    el(head, "title", None, f"{name}: {', '.join(functions)} · tracelink report")
    el(head, "style", None, css)
    body = el(root, "body")
    top = el(body, "header", class_="top")
    el(top, "span", class_="brand", text="tracelink")
    el(el(top, "span", class_="title"), "strong", None, f"{name}: {len(functions)} functions, one compile")
    main = el(body, "main")
    functions_section(main, result)
    lines_section(main, result, functions)
    el(body, "footer", class_="foot", text=f"tracelink {__version__} · functions of {result.directory}")
    return root


def functions_section(main, result: FunctionProfiles) -> None:
    section = el(main, "section", id="functions")
    el(section, "h2", None, "Functions")
    rows = grid_table(section, ["function", "wall time per call", "dispatch time per call", "outside dispatches", "call sites",
                                "memory peak", "report"], id="function-table")
    for entry in result.summary["functions"]:
        row = el(rows, "tr", data_function=entry["function"])
        el(row, "td", None, entry["function"])
        for text in (ns(entry["wall_ns_per_call"]), ns(entry["dispatch_ns_per_call"]), pct(entry["host_share"]),
                     str(entry["call_sites"]), size(entry["peak_bytes"])):
            el(row, "td", None, text)
        el(el(row, "td"), "a", href=f"{entry['directory']}/{files.REPORT}", text=f"{entry['directory']}/{files.REPORT}")


def lines_section(main, result: FunctionProfiles, functions: list[str]) -> None:
    section = el(main, "section", id="lines")
    el(section, "h2", None, "Source lines across functions")
    el(section, "p", class_="note", text="Self time per call of each source line in each function (library frames count for the line "
                                          "calling them), hottest first by its largest share of one function's time.")
    lines = result.lines.head(LINES_SHOWN)
    shown = short_paths(list(lines["file"]))
    rows = grid_table(section, ["line", *functions], id="line-table")
    for line in lines.itertuples(index=False):
        row = el(rows, "tr")
        el(row, "td", None, f"{shown.get(line.file, line.file)}:{line.line}", title=str(line.file))
        for position, function in enumerate(functions):
            el(row, "td", None, ns(line[2 + position]), data_function=function)
