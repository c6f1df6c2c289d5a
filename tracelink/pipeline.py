"""`tracelink profile`: compile → provenance → collect → aggregate → report, into one directory.

The compiler runs while the input program is parsed, and the program runs while the provenance graph
is built. Every output is written as soon as it exists, so a later failure (a crashing or hanging
program, bad inputs) leaves the compiled artifacts, and the graph when it was built, on disk.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import networkx as nx
import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tracelink import TracelinkError, __version__
from tracelink.aggregate import call_site_table, coverage, export_table, source_line_table, source_op_table
from tracelink.collect.collectors import RunRequest, start_collection
from tracelink.collect.inputs import check_inputs, generate_inputs, read_signature
from tracelink.compile import PendingCompile, compile_manifest_entries, write_manifest
from tracelink.options import ProfileOptions, StartedProfile, start_compile, with_collector_requirements
from tracelink.profile_dir import Profile, write_profile
from tracelink.provenance.build import build_provenance, phase_dump
from tracelink.provenance.graph import audit_of, write_graph
from tracelink.provenance.program import read_input_program
from tracelink.report import build_report, write_trace
from tracelink.report.fmt import ns, pct


def choose_function(public: list[str], requested: str | None, program: Path) -> str:
    """The function to profile: the requested one, else the only or first public one."""
    if requested is not None:
        if requested not in public:
            raise TracelinkError(f"{program}: no public function '{requested}' (public functions: {', '.join(public) or 'none'})")
        return requested
    if not public:
        raise TracelinkError(f"{program}: no public function to profile")
    return public[0]


def profile(
    program: Path, out: Path, options: ProfileOptions, console: Console | None = None, pending: StartedProfile | None = None,
) -> Profile:
    """Profile ``program`` into directory ``out`` and return the result (also written to ``out``).

    ``pending`` is the compile of ``program`` when the caller started it already (:func:`start_compile`).
    The directory stays locked until the profile is written.
    """
    pending = pending or start_compile(program, out, options)
    try:
        return run_profile(Path(program).resolve(), Path(out), options, console or Console(stderr=True), pending.compile)
    finally:
        pending.stop()


def run_profile(program: Path, out: Path, options: ProfileOptions, console: Console, pending: PendingCompile) -> Profile:
    """The stages of :func:`profile`, once the directory is claimed and the compiler started."""
    artifacts = out / "artifacts"
    timings: dict[str, float] = {}

    def stage(name: str, started: float) -> None:
        timings[name] = round(time.perf_counter() - started, 4)

    options = with_collector_requirements(options)
    # The compiler and then the program run in the background while tracelink parses and builds.
    started = time.perf_counter()
    with console.status(f"compiling {program.name} with iree-compile"):
        # The bindings load a dialect's Python module on the first op of it walked (linalg: ~0.25 s);
        # loading it now overlaps that with the compiler instead of the graph building later.
        importlib.import_module("iree.compiler.dialects.linalg")
        source = read_input_program(program)
        entry = choose_function(source.public_functions(), options.function, program)
        compiled = pending.finish()
    compile_entries = compile_manifest_entries(compiled, options.compile)
    write_manifest(artifacts, compile_entries | {"function": entry, "tracelink": __version__})
    stage("compile", started)

    started = time.perf_counter()
    specs = read_signature(phase_dump(compiled.phases, "abi"), entry)
    if options.inputs:
        check_inputs(options.inputs, specs)
        inputs = list(options.inputs)
    else:
        inputs = generate_inputs(specs, artifacts / "inputs", options.seed)
    request = RunRequest(compiled.vmfb, entry, inputs, options.parameters, options.warmup + options.repetitions, artifacts, options.timeout_s, options.hook_events)
    collection = start_collection(options.collector, request)
    try:
        with console.status(f"running {entry} ({options.warmup} warm-up + {options.repetitions} repetitions, {options.collector} collector)"):
            provenance = build_provenance(source, artifacts, entry)
            write_graph(provenance.graph, out / "provenance.graphml", out / "provenance.json")
            run_exports = [site.export for site in provenance.call_sites if site.phase == "run"]
            collected = collection.finish(run_exports, options.warmup)
    except BaseException:
        collection.cancel()
        raise
    events = collected.events
    stage("provenance_and_run", started)
    if events.empty:
        raise TracelinkError(f"{program}: the run recorded no dispatches (see {artifacts / 'run.log'})")

    started = time.perf_counter()
    run_info = {
        "program": str(program),
        "function": entry,
        "target": {"backend": "llvm-cpu", "cpu": options.compile.target_cpu, "device": "local-task"},
        "versions": {"tracelink": __version__, "compiler": compile_entries["compiler"]["version"]},
        "collector": options.collector,
        "inputs": inputs,
        "repetitions": options.repetitions,
        "warmup": options.warmup,
        "source_roots": [str(root.resolve()) for root in options.source_roots],
        "embed_sources": options.embed_sources,
        "timings_s": timings,
    }
    result = assemble_profile(out, events, provenance.graph, run_info, collected.workgroups, collected.zones)
    stage("aggregate", started)
    started = time.perf_counter()
    publish_profile(result, console)
    stage("write_and_report", started)
    write_manifest(artifacts, {"timings_s": timings})
    return result


def assemble_profile(
    out: Path, events: pd.DataFrame, graph: nx.DiGraph, run_info: dict,
    workgroups: pd.DataFrame | None = None, zones: pd.DataFrame | None = None,
) -> Profile:
    """Aggregate matched events over the provenance graph into a :class:`Profile` with its summary."""
    call_sites = call_site_table(events, graph)
    iterations = int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0
    total = float(events["duration_ns"].sum())
    summary = run_info | {
        "iterations": iterations,
        "total_dispatch_ns": total,
        "dispatch_ns_per_iteration": total / iterations if iterations else 0.0,
        "coverage": coverage(events, call_sites, graph),
        "audit": audit_of(graph),
    }
    return Profile(
        directory=out, summary=summary, events=events, call_sites=call_sites,
        exports=export_table(events, graph), source_ops=source_op_table(events, graph),
        source_lines=source_line_table(events, graph), graph=graph, workgroups=workgroups, zones=zones,
    )


def publish_profile(result: Profile, console: Console) -> None:
    """Write the profile directory, then the trace and the report built from it."""
    write_profile(result)
    with console.status("writing the report"):
        write_trace(result, result.directory / "trace.json")
        build_report(result)


def print_summary(result: Profile, console: Console, top: int = 10) -> None:
    """The hottest source lines and dispatches, and the coverage figures."""
    summary = result.summary
    cover = summary["coverage"]
    console.print(
        f"[bold]{escape(Path(summary['program']).name)}[/] @{escape(summary['function'])}: {summary['iterations']} iterations, "
        f"{ns(summary['dispatch_ns_per_iteration'])} of dispatches per iteration; "
        f"{pct(cover['dispatch_time_attributed_share'])} of dispatch time attributed to source locations, "
        f"{cover['call_sites_mapped']}/{cover['call_sites']} call sites mapped"
    )
    lines = Table(title="Hottest source lines (inclusive)", title_justify="left")
    for column in ("line", "share", "per iteration", "call sites"):
        lines.add_column(column, justify="right" if column != "line" else "left")
    for row in result.source_lines.head(top).itertuples():
        lines.add_row(Text(f"{short_path(row.file)}:{row.line}"), pct(row.share), ns(row.mean_ns), row.call_site_ids or "")
    console.print(lines)
    dispatches = Table(title="Hottest dispatches", title_justify="left")
    for column in ("#", "export", "root op", "source", "mean", "p90", "share"):
        dispatches.add_column(column, justify="right" if column in ("#", "mean", "p90", "share") else "left")
    for row in result.call_sites.sort_values("total_ns", ascending=False).head(top).itertuples():
        dispatches.add_row(str(row.call_site), Text(row.export), row.root_op, Text(str(row.loc)), ns(row.mean_ns), ns(row.p90_ns), pct(row.share))
    console.print(dispatches)
    audit = cover["audit_counts"]
    console.print(
        "audit: " + ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in audit.items())
        + f"\nwritten to {escape(str(result.directory))}/ — open {escape(str(result.directory / 'report.html'))}"
    )


def short_path(path: str) -> str:
    """A path relative to the working directory when it lies below it, else unchanged."""
    candidate = Path(path)
    if candidate.is_absolute() and candidate.is_relative_to(Path.cwd()):
        return str(candidate.relative_to(Path.cwd()))
    return path
