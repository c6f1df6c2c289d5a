"""The summary's memory of one call: the peak and what makes it, live bytes over the dispatch sequence,
and the source lines holding most of it."""

from __future__ import annotations

from tracelink.report.cells import short_loc
from tracelink.report.fmt import el, size
from tracelink.report.model import ReportModel, short_export
from tracelink.report.summary import memory_text, short_paths
from tracelink.report.svg import live_bytes
from tracelink.report.widgets import grid_table


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
    names = short_paths([str(file) for position in held for file, line, _ in position if line is not None])
    labels = {}
    for position, index in enumerate(run_sites):
        lines = held[position] if position < len(held) else []
        labels[position] = f" · call site {index}, {short_export(sites[index]['export'])}" + "".join(
            f"\n{holder(file, line, names)} {size(value)}" for file, line, value in lines)
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


def holder(file: str, line: int | None, names: dict[str, str]) -> str:
    """A holder of live bytes: ``file:line``, an argument's copy (no line: its name), or ``(no line)``."""
    if not file:
        return "(no line)"
    return file if line is None else f"{names.get(file, file)}:{line}"
