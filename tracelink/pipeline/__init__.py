"""`tracelink profile`: compile → provenance → collect → aggregate → report, into one directory.

The compiler runs while the input program is parsed and the provenance graph is built from each dump
once written (:mod:`tracelink.pipeline.provenance_job`); the graph is finished before the program runs, never
during it: on a machine with few cores, building it beside the run slowed the dispatches it measured
(docs/reference/numbers.md). The memory of one call comes from the timed run (the HAL collector
on a CPU) or from an untimed run of one call, started after the timed run, so a broken program is
reported by the run that times it, and run while the events are aggregated. Every output is written as
soon as it exists, so a later failure (a crashing or hanging program, bad inputs) leaves the compiled
artifacts and the graph on disk.
"""

from __future__ import annotations

import gc
import importlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pandas as pd
from rich.console import Console

from tracelink.version import __version__
from tracelink.errors import Crashed, TracelinkError
from tracelink.aggregate import attribution, call_site_table, coverage, export_table, op_line_shares, run_load, set_roofs, source_line_table, source_op_table
from tracelink.aggregate.memory import memory_tables
from tracelink.aggregate.reference import reference_components, reference_lines, reference_record
from tracelink.collect.machine import Machine, cpu_model, machine_peaks
from tracelink.collect.machine.gpu import device_info, device_peaks
from tracelink.aggregate.host_time import host_time
from tracelink.aggregate.shown import shown_tables
from tracelink.aggregate.utilization import call_site_utilization, op_and_line_utilization
from tracelink.collect.collectors import Collected, RunRequest, start_collection
from tracelink.collect.hal import wall_ns_per_call
from tracelink.collect.memory import MemoryCapture, read_memory_events, run_memory_capture
from tracelink.collect.reference import LABELS, IreeBuild
from tracelink.collect.reference.race import run_references
from tracelink.compile import CompileResult, PendingCompile, compile_manifest_entries, write_manifest
from tracelink.compile.frontends import PythonModel, python_model
from tracelink.compile.targets import device_target
from tracelink.compile.frames import LIBRARY_FRAMES
from tracelink.pipeline.crash import named_crash
from tracelink.pipeline.options import ProfileOptions, StartedProfile, for_function, start_compile, with_collector_requirements, with_exported_model
from tracelink.profile_dir.functions import FunctionProfiles, assemble_function_profiles, copy_compile_outputs, function_directory, write_function_profiles
from tracelink.profile_dir.profile import Profile, write_profile, write_profile_summary
from tracelink.pipeline.provenance_job import BuiltProvenance, ProvenanceJob
from tracelink.provenance.build import Provenance, written
from tracelink.provenance.graph import audit_of, run_call_sites, write_graphml
from tracelink.provenance.program import InputProgram, read_input_program
from tracelink.report import build_report, write_trace
from tracelink.report.functions_page import build_functions_report
from tracelink.report.pprof import write_pprof
from tracelink.report.sources import SourcePolicy
from tracelink.report.textmap import SourceTexts
from tracelink.textsafe import TerminalConsole
from tracelink.tools import InBackground, InChildProcess
from tracelink.profile_dir import files


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
    program: Path | PythonModel, out: Path, options: ProfileOptions, console: Console | None = None, pending: StartedProfile | None = None,
    aggregated: Callable[[Profile], None] | None = None,
) -> Profile | FunctionProfiles:
    """Profile ``program`` into directory ``out`` and return the result (also written to ``out``): one
    function's profile, or with several ``options.functions`` the profiles of each.

    ``program`` is an ``.mlir``/``.onnx`` file, a Python model (``model.py:make``) or a loaded one.
    ``pending`` is the compile of ``program`` when the caller started it already (:func:`start_compile`).
    ``aggregated`` is called with each function's profile once its tables and memory are aggregated, while
    its report is built (the profile has no report yet). The directory stays locked until the profile is
    written.
    """
    pending = pending or start_compile(program, out, options)
    options = replace(options, reference=pending.reference)
    try:
        if pending.exported is not None:  # a Python model: its example inputs and its sources
            options = with_exported_model(options, pending.exported)
            # The model and what its export made are garbage now, held in cycles: freed here, beside the
            # compiler, rather than kept by the heap's freeze below through the run, where they took the
            # memory the benchmark tool loads the weights into.
            gc.collect()
        model = Path(pending.exported.origin) if pending.exported is not None else Path(program).resolve()
        return run_profile(pending.compile.input_path, Path(out), options, console or TerminalConsole(stderr=True), pending.compile, model,
                           aggregated or (lambda _: None))
    finally:
        pending.stop()


def profile_python(target: object, args: tuple, out: Path, options: ProfileOptions, console: Console | None = None) -> Profile:
    """Profile a JAX function or a ``torch.nn.Module`` at example ``args`` (see :func:`tracelink.profile`)."""
    return profile(python_model(target, args), Path(out), options, console)


class StageClock:
    """The seconds each stage took (profile.json's ``timings_s``)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    def stop(self, name: str, started: float) -> None:
        self.timings[name] = round(time.perf_counter() - started, 4)


def run_profile(
    program: Path, out: Path, options: ProfileOptions, console: Console, pending: PendingCompile, model: Path | None,
    aggregated: Callable[[Profile], None],
) -> Profile | FunctionProfiles:
    """The stages of :func:`profile`, once the directory is claimed and the compiler started.

    ``program`` is the MLIR compiled; ``model`` the file the user gave when it differs (an ``.onnx``
    model imported into ``program``). With several ``options.functions``, each is profiled into its own
    directory under ``out/functions/`` after the one compile.
    """
    clock = StageClock()
    options = with_collector_requirements(options)
    requested = [run.name for run in options.functions] or [options.function]
    with heap_frozen():
        return profile_functions(program, out, options, console, pending, model, requested, clock, aggregated)


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Leave the objects alive now (every module loaded) out of the collector's full passes until the
    block ends: they outlive the profile, and each pass over them found nothing to free."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection until the block ends: aggregating the tables and building the report
    and trace leave few objects in cycles, yet the collector's passes over what they allocate cost a
    noticeable share of their CPU time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def profile_functions(program: Path, out: Path, options: ProfileOptions, console: Console, pending: PendingCompile, model: Path | None,
                      requested: list[str | None], clock: StageClock, aggregated: Callable[[Profile], None]) -> Profile | FunctionProfiles:
    """:func:`run_profile` once the collector's requirements are applied: one function, or each of several."""
    source, entries, compiled, compile_entries, job = finish_compile(program, requested, options, console, pending, out, clock)
    if job is not None:
        return profile_function(program, out, console, (source, entries[0], compiled, compile_entries), job, clock, model, aggregated)
    profiles, texts = {}, report_texts(options)  # the program's text is parsed once for every function's report
    for run in options.functions:
        directory = function_directory(out, run.name)
        with console.status(f"copying the compiled program into {directory}"):
            copied = copy_compile_outputs(compiled, directory)
        write_manifest(copied.artifacts, {"function": run.name})
        function_clock = StageClock()
        function_clock.timings["compile"] = clock.timings["compile"]
        function_options = for_function(options, run)
        job = ProvenanceJob(source, run.name, function_options, directory, lambda copied=copied: copied, written, texts=texts)
        profiles[run.name] = profile_function(program, directory, console, (source, run.name, copied, compile_entries), job,
                                              function_clock, model, aggregated)
    run_info = {"program": str(program), "model": str(model or program), "tracelink": __version__, "export": options.export,
                "compiler": compile_entries["compiler"]["version"], "timings_s": clock.timings}
    result = assemble_function_profiles(out, profiles, run_info)
    write_function_profiles(result)
    with console.status("writing the report"):
        build_functions_report(result)
    return result


def profile_function(
    program: Path, out: Path, console: Console, built: tuple[InputProgram, str, CompileResult, dict], job: ProvenanceJob,
    clock: StageClock, model: Path | None, aggregated: Callable[[Profile], None],
) -> Profile:
    """Profile one function of the compiled program into ``out``: provenance, timed run, memory, tables, report.

    ``built`` is the input program, the function, the compile's result and its manifest entries; ``job``
    builds the function's provenance (started beside the compiler when one function is profiled). A
    call's memory comes from the timed run where its collector records it; else the memory run (one call,
    untimed) starts once the timed run's tools have ended, so a broken program is reported by the run that
    times it, and runs while the timed run's events are read and aggregated. The report is built by a
    forked child while ``aggregated`` is called (see :func:`profile`) and the tables, trace, pprof profile
    and GraphML are written.
    """
    _, entry, compiled, compile_entries = built
    options, artifacts = job.options, out / files.ARTIFACTS
    started = time.perf_counter()
    with console.status("building the provenance graph"):
        built_provenance = job.result()
    gc.freeze()  # the graph and the parsed program outlive the profile too (heap_frozen's end unfreezes them)
    provenance, inputs = built_provenance.provenance, built_provenance.inputs
    clock.stop("provenance", started)
    device, machine = device_and_peaks(options, console)  # measured (once per machine) with nothing running beside it
    memory_run = MemoryRun(compiled.vmfb, entry, inputs, options, artifacts)
    try:
        started = time.perf_counter()
        try:
            collected = timed_run(compiled.vmfb, entry, inputs, options, artifacts, provenance, console, memory_run)
        except Crashed as crash:
            raise named_crash(crash, time.perf_counter() - started, compiled, entry, inputs, options, artifacts, provenance.graph,
                              built_provenance.line_shares, console) from None
        clock.stop("run", started)
        if collected.events.empty:
            raise TracelinkError(f"{program}: the run recorded no dispatches (see {artifacts / files.RUN_LOG})")
        with collector_paused():
            started = time.perf_counter()
            run_info = run_summary(program, model, entry, options, device, compile_entries, inputs, clock, built_provenance.runtime_sizes, collected, artifacts)
            result = assemble_profile(out, collected.events, provenance.graph, run_info, collected.workgroups, collected.zones, options.library_frames,
                                      machine, built_provenance.line_shares)
            clock.stop("aggregate", started)
            started = time.perf_counter()
            with console.status("measuring memory (one call)"):
                capture = collected.memory if collected.memory is not None else read_memory_events(memory_run.result())
                memory = memory_of(capture, built_provenance, options)
            result.summary["memory"], result.memory_lines, result.memory_components = memory
            reference_started = time.perf_counter()
            build = IreeBuild(compiled.vmfb, entry, inputs, options.parameters, options.timeout_s, iree_seconds_per_call(result.summary))
            compare_with_references(result, build, options, console)
            clock.stop("reference", reference_started)
            started += clock.timings["reference"]  # its own stage, not the report's
            # the report is built by a forked child, beside the caller's turn and the profile's files written here
            report = InChildProcess(lambda: build_report(result, texts=built_provenance.texts), "tracelink-report")
            try:
                aggregated(result)
                with console.status("writing the profile and its report"):
                    write_profile_files(result)
            except Exception:
                with suppress(TracelinkError):  # the tables' failure is the one to say
                    report.wait()  # the report is kept whatever became of the tables
                raise
            except BaseException:
                report.cancel()
                raise
            report.wait()
    except BaseException:
        memory_run.cancel()
        raise
    clock.stop("write_and_report", started)
    # profile.json was written before the last stage ended: write it again with every stage timed.
    write_profile_summary(result)
    write_manifest(artifacts, {"timings_s": clock.timings})
    return result


def iree_seconds_per_call(summary: dict) -> float:
    """A call's wall time in the profiled run (its dispatch time where no wall time is known), in seconds."""
    return float((summary.get("host_time") or {}).get("wall_ns_per_call") or summary.get("dispatch_ns_per_iteration") or 0.0) / 1e9


def compare_with_references(result: Profile, build: IreeBuild, options: ProfileOptions, console: Console) -> None:
    """The framework's own runs (:mod:`tracelink.collect.reference`) after every run of IREE's build, never
    beside one: profile.json's ``references``, and the first one's time per line and component."""
    subject = options.reference.for_function(build.function) if options.reference is not None else None
    if subject is None or device_target(options.compile.device).is_gpu:  # the references are CPU runtimes, raced on local-task
        return
    if subject.framework == "onnx":  # onnxruntime takes the inputs IREE's run took
        subject = replace(subject, args=tuple(build.inputs))
    with console.status("running the framework's own reference") as status:
        results = run_references(subject, build, result.artifacts / "reference",
                                 started=lambda name: status.update(f"racing {LABELS[name]} against IREE's build"))
    records = [reference_record(item) for item in results]
    result.summary["references"] = records
    lined = next(((item, record) for item, record in zip(results, records) if item.samples is not None), None)
    if lined is not None:
        iterations = max(int(result.summary["iterations"]), 1)
        result.reference_lines = reference_lines(lined[0], lined[1], result.source_lines, iterations, options.library_frames)
        result.reference_components = reference_components(lined[0], lined[1])


def run_summary(program: Path, model: Path | None, entry: str, options: ProfileOptions, device: dict[str, str], compile_entries: dict,
                inputs: list[str], clock: StageClock, runtime_sizes: dict | None, collected: Collected, artifacts: Path) -> dict:
    """What profile.json says of the run, before the tables are aggregated."""
    return {
        "program": str(program),
        "model": str(model or program),
        "function": entry,
        "target": run_target(options, device),
        "versions": {"tracelink": __version__, "compiler": compile_entries["compiler"]["version"]},
        "collector": options.collector,
        "export": options.export,  # a Python model's: what was decomposed, automatically or on request
        "inputs": inputs,
        "parameters": list(options.parameters),  # the run's --parameters, so the run can be repeated
        "repetitions": options.repetitions,
        "warmup": options.warmup,
        **SourcePolicy.for_run([program, model or program], options.source_roots, options.source_map, options.embed_sources).record(),
        "timings_s": clock.timings,
        "memory": None,  # set once the call's memory events are read
        "runtime_sizes": runtime_sizes,  # the hooked call that fixed sizes the inputs' shapes did not
        # a call's wall time beside its dispatches (CPU: the events' clock is the host's)
        "host_time": None if device_target(options.compile.device).is_gpu else host_time(collected.events, wall_ns_per_call(artifacts)),
    } | collected.summary


def finish_compile(program: Path, requested: list[str | None], options: ProfileOptions, console: Console, pending: PendingCompile,
                   out: Path, clock: StageClock) -> tuple[InputProgram, list[str], CompileResult, dict, ProvenanceJob | None]:
    """Parse the input program while the compiler runs; the functions to profile (``requested``, None: the
    default one), the compiled program, the manifest's compile entries and, when one function is
    profiled, the job building its provenance, started beside the compiler."""
    started = pending.started  # the compile stage counts from the compiler's start
    with console.status(f"compiling {program.name} with iree-compile"):
        # The bindings load a dialect's Python module on the first op of it walked (slow for linalg);
        # loading it now overlaps that with the compiler instead of the graph building later.
        importlib.import_module("iree.compiler.dialects.linalg")
        source = read_input_program(program)
        entries = [choose_function(source.public_functions(), name, program) for name in requested]
        build: Future[CompileResult] = Future()
        job = None if options.functions else ProvenanceJob(source, entries[0], options, out, build.result, pending.wait_for_phase,
                                                           texts=report_texts(options))
        try:
            compiled = pending.finish()
        except BaseException:
            build.cancel()
            if job is not None:
                job.cancel()
            raise
        build.set_result(compiled)
    compile_entries = compile_manifest_entries(compiled, options.compile)
    chosen = {"function": entries[0]} if len(entries) == 1 else {"functions": entries}
    write_manifest(out / files.ARTIFACTS, compile_entries | chosen | {"tracelink": __version__})
    clock.stop("compile", started)
    return source, entries, compiled, compile_entries, job


def report_texts(options: ProfileOptions) -> SourceTexts | None:
    """What keeps the sources the report shows, parsed beside the compiler; None when it embeds none (``--no-sources``)."""
    return SourceTexts() if options.embed_sources else None


class MemoryRun:
    """The untimed run of one call with memory events (:func:`run_memory_capture`), in the background
    once :meth:`start` is called."""

    def __init__(self, vmfb: Path, entry: str, inputs: list[str], options: ProfileOptions, artifacts: Path) -> None:
        self._capture = lambda: run_memory_capture(vmfb, entry, inputs, options.parameters, artifacts, options.timeout_s, options.compile.device)
        self._run: InBackground[Path] | None = None

    def start(self) -> None:
        self._run = InBackground(self._capture, "tracelink-memory")

    def result(self) -> Path:
        """The exported memory events; the run was started when the timed run's tools ended."""
        assert self._run is not None, "the memory run is started by the timed run's end"
        return self._run.result()

    def cancel(self) -> None:
        if self._run is not None:
            self._run.cancel()


def timed_run(vmfb: Path, entry: str, inputs: list[str], options: ProfileOptions, artifacts: Path, provenance: Provenance,
              console: Console, memory_run: MemoryRun) -> Collected:
    """Run ``entry`` under the collector; its events matched to the run-phase call sites, warm-up dropped.
    Unless the collector records a call's memory, ``memory_run`` starts once the run's tools have ended,
    before its events are read."""
    request = RunRequest(vmfb, entry, inputs, options.parameters, options.warmup + options.repetitions, artifacts, options.timeout_s,
                         options.hook_events, options.compile.device)
    collection = start_collection(options.collector, request)
    try:
        with console.status(f"running {entry} ({options.warmup} warm-up + {options.repetitions} repetitions, {options.collector} collector)"):
            run_exports = [export for _, export in run_call_sites(provenance.graph)]
            return collection.finish(run_exports, options.warmup, (lambda: None) if collection.records_memory else memory_run.start)
    except BaseException:
        collection.cancel()
        raise


def memory_of(capture: MemoryCapture, built: BuiltProvenance, options: ProfileOptions) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """profile.json's ``memory``, memory_lines and memory_components of one call."""
    return memory_tables(capture, built.stream_plan, built.provenance.graph, run_call_sites(built.provenance.graph), built.line_shares)


def device_and_peaks(options: ProfileOptions, console: Console) -> tuple[dict[str, str], Machine]:
    """The device's facts as IREE lists them and its roofline peaks: the CPU's, or a GPU's measured on it."""
    compile_options = options.compile
    target = device_target(compile_options.device)
    if not target.is_gpu:
        return {"name": cpu_model()}, machine_peaks()
    info = device_info(target.driver, options.timeout_s)
    with console.status(f"measuring the peaks of {info.get('name', target.device)} (once per device)"):
        return info, device_peaks(target.device, compile_options.target_chip, compile_options.target_features, info)


def run_target(options: ProfileOptions, device: dict[str, str]) -> dict:
    """What profile.json records of the target: backend, device, the device's name, and the CPU or GPU chip compiled for."""
    compile_options = options.compile
    target = device_target(compile_options.device)
    named = {"backend": target.backend, "device": target.device, "device_name": device.get("name", "unknown")}
    if not target.is_gpu:
        return named | {"cpu": compile_options.target_cpu}
    given = {"chip": compile_options.target_chip, "features": compile_options.target_features}
    return named | {"device_type": device.get("type", "unknown")} | {key: value for key, value in given.items() if value}


def assemble_profile(
    out: Path, events: pd.DataFrame, graph: nx.DiGraph, run_info: dict,
    workgroups: pd.DataFrame | None = None, zones: pd.DataFrame | None = None,
    library_frames: tuple[str, ...] = LIBRARY_FRAMES, machine: Machine | None = None, line_shares: pd.DataFrame | None = None,
) -> Profile:
    """Aggregate matched events over the provenance graph into a :class:`Profile` with its summary
    (the roofline of ``machine``, this CPU's by default). ``line_shares`` is the graph's
    :func:`~tracelink.aggregate.op_line_shares` with ``library_frames`` when the caller made it already."""
    machine = machine or machine_peaks()
    # a dispatch's time splits between its ops at the machine's roofs, the rest of its median by their work
    set_roofs(graph, machine.peak_gflops, machine.peak_gbps, events.groupby("call_site")["duration_ns"].median().to_dict())
    attributed = attribution(graph)
    shares = line_shares if line_shares is not None else op_line_shares(graph, library_frames)
    call_sites = call_site_utilization(call_site_table(events, graph, attributed), graph, machine)
    source_ops, source_lines = op_and_line_utilization(
        call_sites, source_op_table(events, graph, attributed), source_line_table(events, attributed, shares, library_frames),
        attributed, shares, machine,
    )
    iterations = int(events["iteration"].max()) + 1 if events["iteration"].notna().any() else 0
    total = float(events["duration_ns"].sum())
    summary = run_info | {
        "iterations": iterations,
        "total_dispatch_ns": total,
        "dispatch_ns_per_iteration": total / iterations if iterations else 0.0,
        "coverage": coverage(events, call_sites, graph, run_info.get("repetitions")),
        **run_load(events),
        "library_frames": list(library_frames),
        "audit": audit_of(graph),
        "machine": machine.as_dict(),
    }
    return Profile(
        directory=out, summary=summary, events=events, call_sites=call_sites,
        exports=export_table(events, graph), source_ops=source_ops, source_lines=source_lines, graph=graph,
        attribution=attributed, line_shares=shares, shown=shown_tables(call_sites, source_lines, source_ops, summary, None),
        workgroups=workgroups, zones=zones,
    )


def write_profile_files(result: Profile) -> None:
    """The tables and summary of ``result``, then its exports for other tools: the trace (Perfetto), the
    pprof profile and the provenance graph's GraphML (its node-link JSON was written before the run)."""
    write_profile(result)
    write_trace(result, result.directory / files.TRACE)
    write_pprof(result)
    write_graphml(result.graph, result.directory / files.GRAPHML)


def publish_profile(result: Profile, console: Console) -> None:
    """Write the profile directory (tables, summary, trace, pprof profile, GraphML), then the report built from it."""
    write_profile_files(result)
    with console.status("writing the report"):
        build_report(result)
