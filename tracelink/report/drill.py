"""The report's drill-down of a call site and the executable sources it shows: templates the viewer puts
in its side panel when a call site is opened."""

from __future__ import annotations

import numpy as np

from tracelink.report.cells import stat_card, verdict_badge
from tracelink.report.fmt import el, lower_bound_mark, ns, pct, rate
from tracelink.report.layout import op_label
from tracelink.report.model import ReportModel
from tracelink.report.sources import EXECUTABLE_DUMPS
from tracelink.report.svg import histogram, per_iteration
from tracelink.report.widgets import badge, bar, chips, grid_table, line_link, op_link
from tracelink.report.workgroups import workgroup_drill


def drill_template(parent, model: ReportModel, site: dict) -> None:
    """A call site's drill-down: what it is, its times, why, its source ops, charts and executable source."""
    index = site["index"]
    template = el(parent, "template", id=f"t-cs-{index}")
    drill = el(template, "div", class_="drill", data_cs=index)
    el(drill, "h3", None, f"Call site #{index}")
    executable = model.executables.get(site["executable"])
    site_facts(drill, site, executable)
    timing_cards(drill, site)
    why_block(drill, site)
    source_ops_table(drill, model, site)
    charts = el(drill, "div", class_="charts")
    figure = el(charts, "figure")
    figure.append(histogram(model.durations.get(index, np.array([]))))
    el(figure, "figcaption", None, "execution times")
    figure = el(charts, "figure")
    figure.append(per_iteration(model.per_iteration.get(index, [])))
    el(figure, "figcaption", None, "time per iteration (run order)")
    if model.workgroups is not None:
        workgroup_drill(drill, model.workgroups, index)
    executable_note(drill, model, site, executable)


def site_facts(drill, site: dict, executable) -> None:
    """What the call site runs, where it comes from, how it is tiled, which dumps hold it."""
    kv = el(drill, "dl", class_="kv")
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


def timing_cards(drill, site: dict) -> None:
    """The call site's execution times, share, tiles and the collector's counters."""
    stats = el(drill, "div", class_="cards small")
    parallel = site["tile_duration_sum_mean_ns"] / site["mean_ns"] if site["tile_duration_sum_mean_ns"] and site["mean_ns"] else None
    for value, label in (
        (f"{int(site['count'] or 0)}", "executions"), (ns(site["mean_ns"]), "mean"), (ns(site["median_ns"]), "p50"),
        (f"{ns(site['p10_ns'])} – {ns(site['p90_ns'])}", "p10 – p90"), (f"{ns(site['ci95_low_ns'])} – {ns(site['ci95_high_ns'])}", "95% CI of the mean"),
        (ns(site["total_ns"]), "total"), (pct(site["share"]), "of dispatch time"),
        (f"{site['tile_count_mean']:.0f} / {site['workgroup_count']}" if site["tile_count_mean"] is not None else "–", "tiles run / workgroups"),
        (f"{parallel:.2f}" if parallel is not None else "–", "busy cores (tile time ÷ wall)"),
    ):
        stat_card(stats, value, label)
    for name, value in site["extra"].items():
        stat_card(stats, f"{value:.4g}" if value is not None else "–", name)


def source_ops_table(drill, model: ReportModel, site: dict) -> None:
    """The source ops the call site computes, each with its role, share of the dispatch and lines."""
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


def executable_note(drill, model: ReportModel, site: dict, executable) -> None:
    """How to read the executable source, and the slot the viewer puts it in (one template per executable)."""
    el(drill, "h4", None, "Executable source")
    if executable is None or executable.text is None:
        el(drill, "p", class_="muted", text="The executable's dumped source is not in the profile directory.")
        return
    note = "Locations removed for reading; each marked line names the source op its op came from — root op, fused producer, or another op (e.g. an input's producer)."
    dumped = model.dumped_sites[site["executable"]]
    if len(executable.call_sites) > 1 and dumped is not None and dumped != site["index"]:
        note += f" This executable is shared by {len(executable.call_sites)} call sites; IREE dumps it once, with the locations of call site #{dumped}."
    el(drill, "p", class_="note", text=note)
    el(drill, "div", class_="exe-slot", data_x=executable.id)


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
        stat_card(stats, value, label)


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
