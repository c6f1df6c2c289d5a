"""The report page's summary section: the run, its headline numbers, then which part of the model, which
lines and which dispatches take the time (the first screen), and one call's memory."""

from __future__ import annotations

from tracelink.report.cells import short_loc, stat_card
from tracelink.report.components import components_view
from tracelink.report.device_time import device_time_parts
from tracelink.report.fmt import el, flushed_run_text, missing_events_text, ns, pct
from tracelink.report.gains import gains_table
from tracelink.report.hot_lines import hot_lines_table
from tracelink.report.memory_view import memory_view
from tracelink.report.model import ReportModel, short_export
from tracelink.report.summary import host_time_text
from tracelink.report.svg import iteration_strip
from tracelink.report.widgets import bar, chip, grid_table, section


def summary_section(main, model: ReportModel) -> None:
    summary = model.summary
    node = section(main, "summary", "Summary")
    missing, flushed = missing_events_text(summary), flushed_run_text(summary)
    if missing:
        el(node, "p", class_="warning", text=f"Warning: {missing}.")
    if flushed:
        el(node, "p", class_="note", text=f"Note: {flushed}.")
    run_facts(node, summary)
    headline_cards(node, model)
    if summary.get("host_time"):
        el(node, "p", class_="note", text=host_time_text(summary).capitalize() + ".")
    device_time_cards(node, summary)
    components_view(node, model)
    hot_lines_table(node, model)
    memory_view(node, model)  # after the hottest lines, which stay on the first screen
    if model.iteration_strip:
        sites = {site["index"]: site for site in model.call_sites}
        el(node, "h3", None, "One iteration over time")
        figure = el(node, "div", class_="strip-wrap")
        figure.append(iteration_strip(model.iteration_strip, {i: s["share"] or 0.0 for i, s in sites.items()}, {i: short_export(s["export"]) for i, s in sites.items()}))
    hottest_dispatches(node, model)
    if model.gains is not None:
        gains_table(node, model, model.gains)


def run_facts(node, summary: dict) -> None:
    """What ran: program, function, target, versions, collector, iterations and inputs."""
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


def headline_cards(node, model: ReportModel) -> None:
    """Wall and dispatch time, how much of it is attributed to lines and call sites, the audit's count."""
    summary = model.summary
    cover = summary.get("coverage", {})
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
        stat_card(cards, value, label, hint)


HOT_DISPATCHES = 12


def hottest_dispatches(node, model: ReportModel) -> None:
    """The call sites with most time."""
    el(node, "h3", None, "Hottest dispatches")
    body = grid_table(node, ("call site", "export", "source", "mean", "share"), class_="grid hot-dispatches")
    for site in sorted(model.call_sites, key=lambda s: -(s["total_ns"] or 0))[:HOT_DISPATCHES]:
        row = el(body, "tr")
        chip(el(row, "td"), site["index"])
        el(row, "td", class_="mono ex", title=site["export"], text=short_export(site["export"]))
        el(row, "td", class_="src", title=site["loc"], text=short_loc(site["loc"]))
        el(row, "td", class_="num", text=ns(site["mean_ns"]))
        bar(el(row, "td"), site["share"])


def device_time_cards(parent, summary: dict) -> None:
    """On a GPU: the dispatches' device time and the queue, submission and host time around them, per iteration."""
    parts = device_time_parts(summary)
    if not parts:
        return
    wall = summary["device_time"]["wall_ns_per_iteration"]
    el(parent, "h3", None, f"Device time and overhead per iteration (median of {summary['device_time']['iterations']}; wall time {ns(wall)})")
    cards = el(parent, "div", class_="cards device-time")
    for value, label, hint in parts:
        stat_card(cards, ns(value), f"{label} ({pct(value / wall) if wall else '–'} of wall)", hint)


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
