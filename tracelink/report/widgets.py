"""Small pieces of markup every part of the report uses: sections, share bars, call-site chips, links."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lxml import etree

from tracelink.report.fmt import el, heat, pct
from tracelink.report.layout import op_label

if TYPE_CHECKING:
    from tracelink.report.model import ReportModel

MAX_CHIPS = 8


def section(parent, anchor: str, title: str, note: str | None = None):
    node = el(parent, "section", id=anchor)
    el(node, "h2", None, title)
    if note:
        el(node, "p", class_="note", text=note)
    return node


def bar(parent, share: float | None):
    """A share as its percentage after a bar of that length: one element (its background draws the bar),
    so a table of hundreds of rows stays light."""
    return el(parent, "span", class_=f"heat h{heat(share)}", style=f"--w:{min(max(share or 0.0, 0.0), 1.0) * 100:.1f}%", text=pct(share))


def chip(parent, index: int, role: str | None = None, title: str | None = None):
    classes = "chip" + (f" {role}" if role else "")
    return el(parent, "a", href="#", class_=classes, data_cs=index, title=title, text=f"#{index}")


def chips(parent, call_sites, limit: int = MAX_CHIPS):
    items = list(call_sites.items()) if isinstance(call_sites, dict) else [(i, None) for i in call_sites]
    for index, role in items[:limit]:
        chip(parent, index, role, f"call site #{index}" + (f" ({role})" if role else ""))
    if len(items) > limit:
        el(parent, "span", class_="more", text=f"+{len(items) - limit}")


def line_link(parent, model: ReportModel, key: str, name: str | None = None):
    """A link selecting a source line: ``name:LINE`` (``name`` defaults to the file's name), the path in its tooltip."""
    line = model.lines[key]
    source = model.files[line.file]
    return el(parent, "a", href="#", class_="lnk", data_k=key, title=source.path, text=f"{name or source.name}:{line.number}")


def op_link(parent, model: ReportModel, op: str):
    info = model.ops.get(op, {})
    return el(parent, "a", href="#", class_="opl", data_op=op, title=info.get("label", op), text=op_label(info) if info else op)


def number_text(value) -> str:
    """A number for a ``data-v`` attribute (sorting, tests): empty when missing."""
    if value is None or math.isnan(float(value)):
        return ""
    return f"{float(value):.6g}"


def grid_table(parent, labels: Sequence[str], class_: str = "grid", titles: Sequence[str | None] = (), **attributes) -> etree._Element:
    """A table with a header row of plain ``labels`` (``titles``: their tooltips); returns its (empty) ``tbody``."""
    table = el(parent, "table", class_=class_, **attributes)
    header = el(el(table, "thead"), "tr")
    for position, label in enumerate(labels):
        el(header, "th", None, label, title=titles[position] if position < len(titles) else None)
    return el(table, "tbody")
