"""Number formatting and small lxml helpers shared by the report modules."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING

from lxml import etree

from tracelink.collect.hal_losses import DISPATCH_STREAM
from tracelink.textsafe import XML_INVALID

if TYPE_CHECKING:
    from tracelink.profile_dir.profile import Profile


def clean(text: str) -> str:
    """Text lxml accepts: characters XML cannot hold become U+FFFD."""
    if text.isascii() and text.isprintable():  # most of a page's strings: nothing to replace (checked in C)
        return text
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


def size(value: float | None) -> str:
    """Bytes in binary units with three significant digits: ``812 B``, ``64.0 KiB``, ``4.09 MiB``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    value = float(value)
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.3g} {unit}" if scaled < 100 else f"{scaled:.0f} {unit}"
    return f"{value:.0f} B"


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


def ranges(numbers: list[int], shown: int = 6) -> str:
    """Sorted integers as runs, the first ``shown`` of them: ``3, 7, 10–12, 4094–4999``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs[:shown])
    return text + (f", … ({len(runs) - shown} more runs)" if len(runs) > shown else "")


def missing_events_text(summary: dict) -> str | None:
    """The warning for call sites with fewer events than calls of the function, or None when none lack any."""
    cover = summary.get("coverage", {})
    missing = cover.get("missing_events") or []
    if not missing:
        return None
    expected = cover.get("events_expected_per_call_site", 0)
    dropped = (summary.get("profiler_dropped_records") or {}).get(DISPATCH_STREAM, 0)
    return (
        f"{len(missing)} of {cover.get('call_sites', 0)} call sites have fewer events than the {expected} calls run "
        f"({cover.get('events_missing', 0):,} events missing; call sites {ranges([site['call_site'] for site in missing])}), "
        "so their time is missing from every total"
        + (f"; IREE's HAL profiler dropped {dropped:,} host-execution records, warm-up included (it keeps 4,096 "
           "between flushes, and its flushes did not keep up)" if dropped else "")
    )


def flushed_run_text(summary: dict) -> str | None:
    """The note for a HAL profile taken again, with IREE's rings flushed during the calls or after the
    profiler failed the run before (or both), or None."""
    failure = summary.get("profiler_rerun_after")
    failed = f"IREE's profiler failed the run before ({failure}; its log is run.failed.log)" if failure else None
    flushed = summary.get("profiler_flushed")
    if not flushed:
        return f"these events come from a second run: {failed}" if failed else None
    first = (flushed.get("first_run_dropped_records") or {}).get(DISPATCH_STREAM, 0)
    return (
        f"the first run lost {first:,} dispatch records (IREE's HAL profiler keeps 4,096 between flushes), so these "
        f"events come from a second run flushing it every {flushed.get('interval_ms', 1)} ms, which can slow short dispatches"
        + (f"; that run was taken once more: {failed}" if failed else "")
    )


def heat(share: float | None) -> int:
    """A heat level 0..6 for a share of time (square-root scale, so small shares still show)."""
    if not share or share <= 0:
        return 0
    return max(1, min(6, math.ceil(math.sqrt(min(share, 1.0)) * 6)))


@functools.cache
def attribute_name(keyword: str) -> str:
    """The HTML attribute a keyword argument names: ``class_`` is ``class``, ``data_cs`` is ``data-cs``."""
    return keyword.rstrip("_").replace("_", "-")


def el(parent: etree._Element | None, tag: str, attrib: dict | None = None, text: str | None = None, **kwargs) -> etree._Element:
    """An element (appended to ``parent`` when given); ``class_`` and other keyword attributes allowed."""
    # plain loops: a big report makes some 150,000 elements
    attributes = {}
    if attrib:
        for key, value in attrib.items():
            if value is not None:
                attributes[key] = clean(value if type(value) is str else str(value))
    for key, value in kwargs.items():
        if value is not None:
            attributes[attribute_name(key)] = clean(value if type(value) is str else str(value))
    node = etree.SubElement(parent, tag, attributes) if parent is not None else etree.Element(tag, attributes)
    if text is not None:
        node.text = clean(text if type(text) is str else str(text))
    return node


@functools.lru_cache(maxsize=4096)
def file_name(path: str) -> str:
    """The last part of a path (``Path(path).name``), remembered: a report names the same few files thousands of times."""
    return Path(path).name


def concrete(step: str, profile: "Profile") -> str:
    """A next step with its `tracelink tune PROFILE` pointing at this profile's directory."""
    return step.replace("tracelink tune PROFILE", f"tracelink tune {profile.directory}")
