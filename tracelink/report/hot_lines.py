"""The summary's hottest source lines: where (file:line, never cut), what (op kinds), why (verdict and
achieved rate) and fused with what."""

from __future__ import annotations

from tracelink.report.cells import verdict_badge
from tracelink.report.fmt import el, lower_bound_mark, ns, rate
from tracelink.report.model import ReportModel
from tracelink.report.summary import reference_columns, reference_headlines, short_paths
from tracelink.report.widgets import bar, chips, grid_table, line_link


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


REFERENCE_TITLES = (
    "the framework's own run (eager, onnxruntime) on the line, per call: its profiled ops' self time scaled to its unprofiled call",
    "IREE's time on the line over the reference's; ! where IREE is more than 1.5x slower (every line: reference_lines.csv)",
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
    for text in reference_headlines(model.summary):
        el(parent, "p", class_="reference-line", text=text)
    reference = reference_columns(model.profile, [(model.files[same[0].file].path, same[0].number) for same in hot_lines])
    columns, titles = ("line", "kind", "self share", "per iteration", "bound", "fused with", "dispatches"), HOT_LINE_TITLES
    if reference is not None:
        columns, titles = (*columns, "reference", "IREE / ref."), (*titles, *REFERENCE_TITLES)
    body = grid_table(parent, columns, id="hot-lines", class_="grid hot-lines", titles=titles)
    for position, same in enumerate(hot_lines):
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
        if reference is not None:
            theirs, ratio = reference[position]
            el(row, "td", class_="num", text=theirs)
            el(row, "td", class_="num loses" if ratio.endswith("!") else "num", text=ratio)


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


def hottest_lines(model: ReportModel, count: int) -> list[list]:
    """The hottest lines by user self time (as the summary ranks them), lines with the very same ops (one
    op's text line and its locations) merged."""
    merged: dict[tuple[str, ...], list] = {}
    for line in sorted(model.lines.values(), key=lambda line: (-line.user_share, line.file, line.number)):
        if line.user_share > 0:
            merged.setdefault(tuple(sorted(line.ops)), []).append(line)
    return list(merged.values())[:count]
