"""The summary `tracelink profile` prints: time by component and by op kind, hottest lines of the user's code, hottest dispatches, coverage.

It opens with which part of the model takes the time: the top levels of the component tree (name
scopes, :mod:`tracelink.aggregate.components`) and the op kinds summed over repeated layers, after one
line on the memory peak of a call and the source lines holding most of it.

Each dispatch shows what bounds it and the first words of its next step (see :mod:`tracelink.aggregate.utilization`).
Lines are ranked by self time in the user view (library frames folded into the user's line calling
them), dispatches by their median × count (a robust total: one slow outlier cannot put a dispatch on
top). Paths are shown relative to the files' common folder and cut from the left, so the line number
always shows. A run whose iterations spread widely (``loaded`` in the summary) gets one warning line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tracelink.aggregate.host_time import HOST_DOMINATES_SHARE
from tracelink.aggregate.components import NO_SCOPE
from tracelink.aggregate.reference import LOSS_RATIO
from tracelink.compile.frontends.decompositions import OWN
from tracelink.profile_dir.functions import FunctionProfiles
from tracelink.profile_dir.profile import Profile
from tracelink.report.device_time import device_time_parts
from tracelink.report.fmt import concrete, flushed_run_text, lower_bound_mark, missing_events_text, ns, pct, rate, size, text_or_empty
from tracelink.report.model import short_export
from tracelink.report.strategies import advised, print_strategies
from tracelink.textsafe import TerminalConsole
from tracelink.profile_dir import files

PATH_WIDTH = 30
# Width of the tables when the output is not a terminal (a pipe or a file): wide enough for every
# column, where rich's default of 80 would cut them.
PIPE_WIDTH = 150


def summary_console(stderr: bool = False) -> Console:
    """A console for the summary: the terminal's width, or :data:`PIPE_WIDTH` when writing to a pipe or file."""
    console = TerminalConsole(stderr=stderr)
    return console if console.is_terminal else TerminalConsole(stderr=stderr, width=PIPE_WIDTH)
NEXT_STEPS_SHOWN = 3  # the hottest dispatches get their next step printed under the table
COMPONENT_ROWS = 10  # rows of the component tree printed (the report shows all of it)
KIND_ROWS = 8


def short_paths(paths: list[str], width: int = PATH_WIDTH) -> dict[str, str]:
    """Each path relative to the common folder of all of them (the file name alone for one file), cut from the left."""
    distinct = sorted({p for p in paths if p})
    if not distinct:
        return {}
    if len(distinct) == 1:
        root = os.path.dirname(distinct[0])
    else:
        root = os.path.commonpath(distinct) if all(p.startswith("/") for p in distinct) else ""
    shown = {}
    for path in distinct:
        relative = os.path.relpath(path, root) if root and root != "/" else path
        shown[path] = relative if len(relative) <= width else "…" + relative[-(width - 1):]
    return shown


def op_kinds(profile: Profile, ops: str, limit: int = 2) -> str:
    """The distinct compute op kinds of a line's source ops (``linalg.matmul``, ``onnx.Conv``)."""
    ops_table = profile.source_ops
    column = "op_kinds" if "op_kinds" in ops_table else "op_names"  # profiles written before op kinds existed
    names = ops_table.set_index("op")[column].fillna("") if not ops_table.empty else pd.Series(dtype=str)
    kinds = list(dict.fromkeys(kind for op in str(ops).split(";") if op in names.index for kind in str(names[op]).split(", ") if kind))
    return ", ".join(kinds[:limit]) + (f" +{len(kinds) - limit}" if len(kinds) > limit else "")


def host_time_text(summary: dict) -> str:
    """A call's time outside its dispatches, split; with what helps when it is most of the call."""
    host = summary.get("host_time")
    if not host or host["wall_ns_per_call"] <= 0:
        return ""
    text = (f"host time: {pct(host['host_share'])} of each call is outside the dispatches "
            f"({ns(host['between_dispatches_ns_per_call'])} between them, {ns(host['outside_dispatches_ns_per_call'])} before the first "
            f"and after the last; dispatches busy {ns(host['dispatch_busy_ns_per_call'])})")
    if host["host_share"] > HOST_DOMINATES_SHARE:
        text += ("; host time dominates: fewer, larger dispatches help (`tracelink tune` races options that fuse more), "
                 "and a small model may run faster on --device local-sync, which wakes no worker threads")
    return text


def print_summary(result: Profile, console: Console, top: int = 10, tables: str | None = None) -> None:
    """The first line and the notes (the memory peak among them), then the tables of :func:`print_tables`,
    or ``tables``, their text as :func:`rendered_tables` gave it."""
    for line in reference_headlines(result.summary):  # first: is IREE faster or slower than what the user runs today
        console.print(escape(line), soft_wrap=True)
    console.print(headline(result.summary), soft_wrap=True)  # one line, for grep and logs
    print_notes(result.summary, console)
    if tables is None:
        print_tables(result, console, top)
    else:
        console.file.write(tables)
        console.file.flush()


def rendered_tables(result: Profile, console: Console, top: int = 10) -> str:
    """The text ``console`` prints for :func:`print_tables` (terminal codes included), printing nothing:
    `tracelink profile` renders it while a forked child builds the report."""
    with console.capture() as captured:
        print_tables(result, console, top)
    return captured.get()


def print_tables(result: Profile, console: Console, top: int = 10) -> None:
    """Time by component and op kind, the hottest source lines (or ops) and dispatches, and the audit."""
    result = advised(result)  # next steps name what tune measured to help
    iterations = max(int(result.summary["iterations"]), 1)
    print_components(result, console, iterations)
    print_hot_lines(result, console, iterations, top)
    if result.summary["coverage"].get("dispatch_time_with_source_lines_share", 1.0) < 1.0 and not result.source_ops.empty:
        print_hot_ops(result, console, iterations, top)
    print_hot_dispatches(result, console, top)
    print_audit(result, console)


def print_function_profiles(result: FunctionProfiles, console: Console, top: int = 10) -> None:
    """Several functions compiled together: each one's first line, then the source lines side by side."""
    console.print(f"[bold]{escape(Path(result.summary.get('model') or result.summary['program']).name)}[/]: "
                  f"{len(result.profiles)} functions, one compile")
    if decomposed := export_text(result.summary):
        console.print(escape(decomposed))
    for name, profile in result.profiles.items():
        console.print(headline(profile.summary), soft_wrap=True)
        if host_text := host_time_text(profile.summary):
            console.print("  " + escape(host_text))
    lines = result.lines.head(top)
    if not lines.empty:
        shown = short_paths(list(lines["file"]))
        table = Table(title="Source lines across functions (self time per call; library frames count for the line calling them)",
                      title_justify="left")
        table.add_column("line", no_wrap=True)
        for name in result.profiles:
            table.add_column(escape(name), justify="right", no_wrap=True)
        for row in lines.itertuples(index=False):
            table.add_row(escape(f"{shown.get(row.file, row.file)}:{row.line}"), *(ns(row[2 + i]) for i in range(len(result.profiles))))
        console.print(table)
    console.print(f"written to {escape(str(result.directory))}/ — open {escape(str(result.directory / files.REPORT))}; "
                  f"each function's profile is in {escape(str(result.directory / files.FUNCTIONS))}/<name>/")


def headline(summary: dict) -> str:
    """The first line: the program, the time per call, and how much of it is mapped to the source."""
    cover = summary["coverage"]
    initializer = cover.get("call_sites_initializer", 0)
    dispatch_ns = summary["dispatch_ns_per_iteration"]
    if host := summary.get("host_time"):
        # dispatches on several workers overlap, so their sum can exceed the wall time
        overlap = " (summed over workers running at once)" if dispatch_ns > host["wall_ns_per_call"] else ""
        timing = f"{ns(host['wall_ns_per_call'])} of wall time per call, {ns(dispatch_ns)} of dispatch time{overlap}"
    else:
        timing = f"{ns(dispatch_ns)} of dispatches per iteration"
    return (
        f"[bold]{escape(Path(summary.get('model') or summary['program']).name)}[/] @{escape(summary['function'])}: "
        f"{summary['iterations']} iterations, {timing}; "
        f"{pct(cover['dispatch_time_attributed_share'])} of dispatch time attributed to source locations, "
        f"{cover['call_sites_mapped']}/{cover['call_sites']} call sites mapped"
        + (f"; {initializer} more run once at load (not timed)" if initializer else "")
    )


def print_notes(summary: dict, console: Console) -> None:
    """Host time, lost events, a second run, the device's time split, a loaded machine and the memory peak."""
    if host_text := host_time_text(summary):
        console.print(escape(host_text))
    if missing := missing_events_text(summary):
        console.print(f"[bold red]warning:[/] {escape(missing)}")
    if flushed := flushed_run_text(summary):
        console.print(f"note: {escape(flushed)}")
    if parts := device_time_parts(summary):
        wall = summary["device_time"]["wall_ns_per_iteration"]
        console.print(
            f"{escape(str(summary['target'].get('device_name')))} ({summary['target']['device']}), medians per iteration: "
            + ", ".join(f"{label} {ns(value)}" for value, label, _ in parts) + f" of {ns(wall)} wall time"
        )
    if summary.get("loaded"):
        console.print(
            f"[yellow]warning:[/] the machine was loaded during the run: the slow iterations took "
            f"{summary['iteration_spread']:.1f}× the fast ones (p90/p10), so times are inflated and noisy; profile again on a quieter machine"
        )
    if memory := memory_text(summary.get("memory")):
        console.print(escape(memory))
    if decomposed := export_text(summary):
        console.print(escape(decomposed))


def export_text(summary: dict) -> str | None:
    """One line naming the ops a Python model's export decomposed because IREE could not lower them."""
    if automatic := (summary.get("export") or {}).get("decomposed_automatically"):
        own = [name for name in automatic if f"{name}.default" in OWN or name in OWN]
        whose = f"; tracelink's own for {', '.join(own)}, which no torch table decomposes" if own else ""
        return f"export: IREE could not lower {', '.join(automatic)} whole; decomposed from torch's own tables{whose}"
    return None


def print_hot_lines(result: Profile, console: Console, iterations: int, top: int) -> None:
    """The source lines with the most user self time, then the strategies that help them."""
    lines = result.source_lines
    if lines.empty:
        return
    hot = lines[lines["user_self_ns"] > 0].sort_values("user_self_ns", ascending=False, kind="stable").head(top)
    shown = short_paths(list(hot["file"]))
    table = Table(title="Hottest source lines (self time; library frames count for the line calling them)", title_justify="left")
    line_width = max((len(shown.get(f, f)) + len(str(n)) + 1 for f, n in zip(hot["file"], hot["line"])), default=4)
    table.add_column("line", no_wrap=True, min_width=line_width)
    for column, width in (("self", 6), ("per iter.", 9), ("incl.", 6)):
        table.add_column(column, justify="right", no_wrap=True, min_width=width)
    table.add_column("ops", no_wrap=True, overflow="ellipsis", max_width=24)
    table.add_column("call sites", no_wrap=True, overflow="ellipsis", max_width=12)
    reference = reference_columns(result, [(str(f), int(n)) for f, n in zip(hot["file"], hot["line"])])
    if reference is not None:
        table.add_column("reference", justify="right", no_wrap=True, min_width=9)
        table.add_column("IREE/ref.", justify="right", no_wrap=True, min_width=9)
    for position, row in enumerate(hot.itertuples()):
        sites = str(row.call_site_ids or "").split(";")
        table.add_row(
            escape(f"{shown.get(row.file, row.file)}:{row.line}"), pct(row.user_self_share), ns(row.user_self_ns / iterations),
            pct(row.inclusive_share), escape(op_kinds(result, row.ops)), ",".join(sites[:4]) + ("…" if len(sites) > 4 else ""),
            *(reference[position] if reference is not None else ()),
        )
    console.print(table)
    if reference is not None:
        console.print("reference: the framework's own run per line, scaled to its unprofiled call; IREE/ref. is IREE's time over it, "
                      "! where IREE is more than 1.5x slower (all lines: reference_lines.csv)")
    print_reference_only(result, console, top)
    print_strategies(result, console, lambda path: shown.get(path, path))


def reference_headlines(summary: dict) -> list[str]:
    """One line per framework reference: IREE's time per call, the reference's, and which is faster by how
    much with the race's 95 % interval; a failed reference is one line saying so."""
    lines = []
    for record in summary.get("references") or []:
        if record["status"] != "measured" or not record.get("race"):
            lines.append(f"{record['label']}: not compared ({record.get('error') or 'no race'}); IREE's profile is complete")
            continue
        race = record["race"]
        speedup, low, high = race["speedup"], race.get("ci_low"), race.get("ci_high")
        if speedup >= 1:
            how = f"{speedup:.1f}x faster" + (f", 95 % interval {low:.2f}-{high:.2f}x" if low is not None else "")
        else:
            how = f"{1 / speedup:.1f}x slower" + (f", 95 % interval {1 / high:.2f}-{1 / low:.2f}x" if low is not None else "")
        outputs = record.get("outputs") or {}
        lines.append(f"IREE {ns(race['base_ns'])} per call; {record['label']} {ns(race['tuned_ns'])} ({how}; "
                     f"{race['rounds']} alternating rounds, {record['threads']} threads each"
                     + ("" if outputs.get("agree", True) else f"; outputs differ: {outputs.get('detail')}") + ")")
        if race.get("load_warning"):
            lines.append(f"warning: {race['load_warning']}")
    return lines


def reference_columns(result: Profile, keys: list[tuple[str, int]]) -> list[tuple[str, str]] | None:
    """The reference's time per call and IREE's over it for each (file, line), "!" where IREE loses by more
    than 1.5x; None without a per-line reference."""
    lines = result.reference_lines
    if lines is None or lines.empty:
        return None
    indexed = lines.assign(line=lines["line"].astype(int)).set_index(["file", "line"])
    cells = []
    for key in keys:
        if key not in indexed.index:
            cells.append(("–", "IREE only"))
            continue
        row = indexed.loc[key]
        row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
        ratio = row["ratio"]
        shown = "IREE only" if pd.isna(row["reference_ns"]) else ("ref. only" if pd.isna(ratio) else f"{ratio:.2g}x")
        cells.append((ns(row["reference_ns"]) if pd.notna(row["reference_ns"]) else "–", shown + (" !" if bool(row["iree_loses"]) else "")))
    return cells


def print_reference_only(result: Profile, console: Console, top: int) -> None:
    """The lines only the reference spends time on: listed, never dropped."""
    lines = result.reference_lines
    if lines is None or lines.empty:
        return
    alone = lines[lines["only_in"] == "reference"].head(top)
    if alone.empty:
        return
    shown = short_paths([str(f) for f in alone["file"]])
    where = ", ".join((f"{shown.get(str(row.file), row.file)}:{row.line}" if row.file else "outside the model's lines")
                      + f" {ns(row.reference_ns)}" for row in alone.itertuples())
    console.print(f"lines only {escape(str(alone['reference'].iloc[0]))} spends time on (per call): {escape(where)}")


def print_hot_dispatches(result: Profile, console: Console, top: int) -> None:
    """The call sites by median × count, then the next step for the hottest."""
    dispatches = Table(title="Hottest dispatches (by median × count)", title_justify="left")
    # the export name carries the root op's kind and shape; numbers keep their width, the name is cut
    for column, width in (("#", 3), ("export", 0), ("median", 8), ("p90", 8), ("share", 6), ("noisy", 5), ("bound", 11), ("GFLOP/s", 7)):
        dispatches.add_column(column, justify="left" if column in ("export", "bound") else "right", no_wrap=True,
                              overflow="ellipsis", min_width=width or None, max_width=None if width else 28)
    sites = result.call_sites
    ranked = sites.assign(robust=sites["median_ns"] * sites["count"]).sort_values("robust", ascending=False, kind="stable")
    for row in ranked.head(top).itertuples():
        dispatches.add_row(
            str(row.call_site), escape(short_export(row.export)), ns(row.median_ns), ns(row.p90_ns), pct(row.share),
            "yes" if bool(row.noisy) else "", escape(text_or_empty(getattr(row, "verdict", None)).removesuffix("-bound")),
            lower_bound_mark(getattr(row, "lower_bound", None)) + rate(getattr(row, "gflops_s", None), ""),
        )
    console.print(dispatches)
    for row in ranked.head(NEXT_STEPS_SHOWN).itertuples():
        if step := text_or_empty(getattr(row, "next_step", None)):
            console.print(f"  #{row.call_site}: {escape(concrete(step, result))}")


def print_audit(result: Profile, console: Console) -> None:
    """What the provenance could not map, by reason, and where the profile was written."""
    cover = result.summary["coverage"]
    console.print(
        "audit: " + ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in cover["audit_counts"].items())
        + "".join(f"\n  {count} {escape(reason)}" for reason, count in cover.get("audit_reasons", {}).items())
        + f"\nwritten to {escape(str(result.directory))}/ — open {escape(str(result.directory / files.REPORT))}"
    )


def memory_text(memory: dict | None, holders: int = 3) -> str | None:
    """One line: the peak of one call, what it is made of and the lines holding most of it."""
    if not memory:
        return None
    held_inputs, results = memory.get("split_inputs"), memory.get("split_outputs")
    named = {"inputs": ", ".join(f"argument {held.get('argument')}: {held.get('type')}" for held in held_inputs
                                 if isinstance(held, dict)) if isinstance(held_inputs, list) else "",
             # a result filled from an argument: a cache returned updated rather than updated in place
             "outputs": ", ".join(f"result {out.get('result')}: argument {out.get('argument')} updated" for out in results
                                  if isinstance(out, dict) and out.get("argument") is not None) if isinstance(results, list) else ""}
    split = ", ".join(f"{size(value)} {name}" + (f" ({named[name]})" if named.get(name) else "")
                      for name, value in memory["split"].items() if value)
    held = ", ".join(f"{name} {size(value)}" for name, value in memory["resident_bytes"].items() if value)
    top = [row for row in memory["top"] if row["bytes_at_peak"]][:holders]
    shown = short_paths([row["file"] for row in top])
    where = ", ".join(f"{shown.get(row['file'], row['file'])}:{row['line']} {size(row['bytes_at_peak'])}" if row["file"] else
                      f"{some_ops(row['ops'])} {size(row['bytes_at_peak'])}" for row in top)
    return (f"memory: peak {size(memory['peak_bytes'])} in one call ({split or 'nothing allocated'})"
            + (f"; held besides: {held}" if held else "")
            + (f"; at dispatch #{memory['peak_call_site']}: {where}" if where and memory.get("peak_call_site") is not None else ""))


def some_ops(ops: str, shown: int = 3) -> str:
    """The first ``shown`` of ``;``-joined op names, and how many more (a line-less holder can be every op
    writing one transient slab: 31 names on ONNX's SqueezeNet)."""
    names = [name for name in str(ops).split(";") if name]
    return ";".join(names[:shown]) + (f" and {len(names) - shown} more ops" if len(names) > shown else "")


def shown_components(components: pd.DataFrame, levels: int = 2, rows: int = COMPONENT_ROWS) -> list[tuple[int, str, dict]]:
    """The top ``levels`` of the component tree as (level, label, row), ``rows`` at most, depth-first.

    A scope with no ops of its own and one child is one row with its child (JAX's ``jit(f)/Model``),
    so the levels shown are the ones that split the time.
    """
    children = components.groupby("parent").size()
    merged = {row.component for row in components.itertuples() if children.get(row.component, 0) == 1 and row.self_ns == 0}
    level: dict[str, int] = {}
    label: dict[str, str] = {}
    shown: list[tuple[int, str, dict]] = []
    for row in components.to_dict("records"):  # not iterrows: a Series per row is slow on hundreds of scopes
        parent = row["parent"]
        if parent in merged:
            level[row["component"]], label[row["component"]] = level[parent], f"{label[parent]}/{row['name']}"
        else:
            level[row["component"]] = level[parent] + 1 if parent else 1
            label[row["component"]] = row["name"] if parent else row["component"]
        if row["component"] not in merged and level[row["component"]] <= levels:
            shown.append((level[row["component"]], label[row["component"]], row))
    return shown[:rows]


def print_components(result: Profile, console: Console, iterations: int) -> None:
    """Time by component (top levels of the scope tree) and by op kind across repeated layers."""
    components = result.shown.components
    if not components.empty and not (components["component"] == NO_SCOPE).all():
        table = Table(title="Time by component (name scope; inclusive, self = its own ops)", title_justify="left")
        table.add_column("component", no_wrap=True, overflow="ellipsis", max_width=56)
        for column, width in (("incl.", 6), ("per iter.", 9), ("self", 6)):
            table.add_column(column, justify="right", no_wrap=True, min_width=width)
        theirs = reference_by_component(result)
        if theirs is not None:
            for column in ("reference", "IREE/ref."):
                table.add_column(column, justify="right", no_wrap=True, min_width=9)
        for level, label, row in shown_components(components):
            mine = row["inclusive_ns"] / iterations
            extra = () if theirs is None else ((ns(theirs[row["component"]]), ratio_text(mine, theirs[row["component"]]))
                                               if row["component"] in theirs else ("–", "IREE only"))
            table.add_row(escape("  " * (level - 1) + label), pct(row["inclusive_share"]), ns(mine), pct(row["self_share"]), *extra)
        console.print(table)
    kinds = result.shown.kinds.head(KIND_ROWS)
    if not kinds.empty:
        table = Table(title="Time by op kind across repeated layers (numbers in scopes read as *)", title_justify="left")
        table.add_column("kind", no_wrap=True, overflow="ellipsis", max_width=28)
        table.add_column("in", no_wrap=True, overflow="ellipsis", max_width=40)
        for column, width in (("share", 6), ("per iter.", 9), ("×", 3)):
            table.add_column(column, justify="right", no_wrap=True, min_width=width)
        for row in kinds.itertuples():
            table.add_row(escape(row.kind), escape(row.pattern), pct(row.share), ns(row.total_ns / iterations), str(row.instances))
        console.print(table)


def reference_by_component(result: Profile) -> dict[str, float] | None:
    """The reference's inclusive time per call by component path, when it has components."""
    table = result.reference_components
    if table is None or table.empty:
        return None
    return dict(zip(table["component"].astype(str), table["inclusive_ns"].astype(float)))


def ratio_text(iree_ns: float, reference_ns: float) -> str:
    """IREE's time over the reference's, "!" where IREE is more than 1.5x slower."""
    if reference_ns <= 0:
        return "–"
    ratio = iree_ns / reference_ns
    return f"{ratio:.2g}x" + (" !" if ratio > LOSS_RATIO else "")


def print_hot_ops(result: Profile, console: Console, iterations: int, top: int) -> None:
    """Hottest source ops by self time: for locations with no file:line (ONNX node names), the only view."""
    ops = result.source_ops
    hot = ops[ops["total_ns"] > 0].sort_values("total_ns", ascending=False, kind="stable").head(top)
    table = Table(title="Hottest source ops (self time; some ops are located by a name only)", title_justify="left")
    table.add_column("op", no_wrap=True, overflow="ellipsis", max_width=48)
    for column, width in (("self", 6), ("per iter.", 9)):
        table.add_column(column, justify="right", no_wrap=True, min_width=width)
    table.add_column("kind", no_wrap=True, overflow="ellipsis", max_width=24)
    for row in hot.itertuples():
        kind = getattr(row, "op_kinds", "") or row.op_names
        table.add_row(escape(str(row.label)), pct(row.share), ns(row.total_ns / iterations), escape(text_or_empty(kind)))
    console.print(table)
