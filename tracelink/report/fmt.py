"""Number formatting and small lxml helpers shared by the report modules."""

from __future__ import annotations

import math

from lxml import etree

from tracelink.textsafe import XML_INVALID


def clean(text: str) -> str:
    """Text lxml accepts: characters XML cannot hold become U+FFFD."""
    return XML_INVALID.sub("\ufffd", text)


def ns(value: float | None) -> str:
    """Nanoseconds in the unit that keeps three significant digits: ``812 ns``, ``45.1 µs``, ``3.20 ms``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    value = float(value)
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.3g} {unit}" if scaled < 100 else f"{scaled:.0f} {unit}"
    return f"{value:.0f} ns"


def pct(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value == 0:
        return "0%"
    return f"{value:.1%}" if value >= 0.001 else "<0.1%"


def rate(value: float | None, unit: str) -> str:
    """A throughput with three significant digits (``52.1 GFLOP/s``); a dash when undefined."""
    if value is None or not math.isfinite(float(value)):
        return "–"
    return f"{float(value):.3g} {unit}"


def lower_bound_mark(lower_bound) -> str:
    """"≥" before a rate whose FLOPs or bytes are lower bounds (a dynamic size the run did not fix); a
    missing value (an older profile, NaN after a CSV round trip) is not one."""
    if lower_bound is None or isinstance(lower_bound, str):
        return ""
    try:
        return "≥" if lower_bound == lower_bound and bool(lower_bound) else ""  # NaN != NaN
    except TypeError:  # pandas' NA
        return ""


def text_or_empty(value) -> str:
    """A table cell's text: empty for missing values (NaN after a CSV round trip)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def heat(share: float | None) -> int:
    """A heat level 0..6 for a share of time (square-root scale, so small shares still show)."""
    if not share or share <= 0:
        return 0
    return max(1, min(6, math.ceil(math.sqrt(min(share, 1.0)) * 6)))


def el(parent: etree._Element | None, tag: str, attrib: dict | None = None, text: str | None = None, **kwargs) -> etree._Element:
    """An element (appended to ``parent`` when given); ``class_`` and other keyword attributes allowed."""
    attributes = {k: clean(str(v)) for k, v in (attrib or {}).items() if v is not None}
    attributes.update({k.rstrip("_").replace("_", "-"): clean(str(v)) for k, v in kwargs.items() if v is not None})
    node = etree.SubElement(parent, tag, attributes) if parent is not None else etree.Element(tag, attributes)
    if text is not None:
        node.text = clean(str(text))
    return node
