"""Attribution invariants on every real program, checked against an independent reading of IREE's output.

Each workload in ../shared/workloads (the MLIR ones; raw .onnx files need the ONNX importer) and each
example is profiled for real. The checks do not use tracelink's provenance code: they parse the input
program and the ``hal`` / ``dispatch-creation`` phase dumps here, with the MLIR bindings, and compare
with what the runtime measured (the HAL collector's events).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from iree.compiler import ir

from tests.conftest import EXAMPLES, WORKLOAD_RUNS, WORKLOADS, run_profile
from tracelink.compile import CompileOptions
from tracelink.profile_dir import load_profile

PROGRAMS = {name: WORKLOADS / f"{name}.mlir" for name in WORKLOAD_RUNS} | {name: EXAMPLES / f"{name}.mlir" for name in ("mlp", "attention", "convnet")}
REPETITIONS = 3
# The invariants hold on a GPU too: these programs are also profiled with --device vulkan on lavapipe
# (as "name@vulkan"). The larger workloads take minutes there (lavapipe is the CPU running SPIR-V).
ON_VULKAN = ("jax_flax_mnist_mlp_locs", "braggnn_torch", "mnist_mlp_trained", "clip_text_toy_f32", "mlp", "attention", "convnet")


def program_of(case: str) -> str:
    """The program of a test case: ``name`` (llvm-cpu, local-task) or ``name@vulkan``."""
    return case.split("@")[0]


def test_every_shared_mlir_workload_is_covered():
    assert {p.stem for p in WORKLOADS.glob("*.mlir")} == set(WORKLOAD_RUNS)


class Profiles(dict):
    """Profiles by case, each made the first time a test asks for it."""

    def __init__(self, base: Path) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, case: str):
        name, _, device = case.partition("@")
        function, inputs, parameters = WORKLOAD_RUNS.get(name, (None, [], []))
        # no "@" in the directory: iree-benchmark-module reads --module=a@b as a file and a suffix
        self[case] = run_profile(PROGRAMS[name], self.base / case.replace("@", "-on-"), function=function, inputs=inputs, parameters=parameters,
                                 repetitions=REPETITIONS, compile=CompileOptions(device=device or "local-task"))
        return self[case]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return Profiles(tmp_path_factory.mktemp("attribution"))


# Independent reading ------------------------------------------------------------------------------


def positions(loc: ir.Location) -> list[tuple[str, int]]:
    """(file, line) of every FileLineColLoc in a location, innermost first (a plain walk of the typed classes)."""
    if isinstance(loc, ir.FileLineColLoc):
        return [(loc.filename, loc.start_line)]
    if isinstance(loc, ir.NameLoc):
        return positions(loc.child_loc)
    if isinstance(loc, ir.CallSiteLoc):
        return positions(loc.callee) + positions(loc.caller)
    if isinstance(loc, ir.FusedLoc):
        return [p for member in loc.locations for p in positions(member)]
    return []


def members(loc: ir.Location) -> list[ir.Location]:
    """The members of a fused location (looking through call-site wrappers), else the location itself."""
    if isinstance(loc, ir.CallSiteLoc):
        inner = members(loc.callee)
        return inner if len(inner) > 1 else [loc]
    if isinstance(loc, ir.FusedLoc):
        return [m for member in loc.locations for m in members(member)]
    return [loc]


def all_ops(op: ir.Operation):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from all_ops(child.operation)


class InputReading:
    """The input program's own lines: where functions start and where ops are written."""

    def __init__(self, program: Path, context: ir.Context) -> None:
        module = ir.Module.parseFile(str(program), context)
        self.path = str(program)
        self.function_lines = {p for op in module.body.operations if op.operation.name in ("func.func", "util.func") for p in positions(op.operation.location)}
        self.op_lines = {p for top in module.body.operations for op in all_ops(top.operation) for p in positions(op.location)}
        # Lines where only constants are written: no work at run time, even when IREE fuses their
        # location into a dispatch's root (ResNet-18's zero bias in the pooling dispatch).
        self.constant_lines = self.op_lines - {
            p for top in module.body.operations for op in all_ops(top.operation) if op.name != "arith.constant" for p in positions(op.location)
        }


def dispatch_export(op: ir.Operation) -> str:
    """The export a ``hal.command_buffer.dispatch`` calls (``@exe::@variant::@export`` → ``export``)."""
    lookup = next(v.owner for v in op.operands if getattr(v.owner, "name", "") == "hal.executable.lookup.function")
    return str(lookup.attributes["entry_point"]).rsplit("@", 1)[-1]


class PhaseReading:
    """The dispatches of the ``hal`` phase and the op positions inside each ``dispatch-creation`` region."""

    def __init__(self, phases: Path, context: ir.Context) -> None:
        hal = ir.Module.parseFile(str(next(phases.glob("*.hal.mlir"))), context)
        dispatches = [op for op in all_ops(hal.operation) if op.name == "hal.command_buffer.dispatch"]
        self.dispatch_locations = [op.location for op in dispatches]
        self.dispatch_exports = [dispatch_export(op) for op in dispatches]
        created = ir.Module.parseFile(str(next(phases.glob("*.dispatch-creation.mlir"))), context)
        self.regions = [
            (set(positions(op.location)), {p for inner in all_ops(op) for p in positions(inner.location)})
            for op in all_ops(created.operation) if op.name == "flow.dispatch.workgroups"
        ]


class Readings(dict):
    """The independent readings of each case's input program and phase dumps, made on first use."""

    def __init__(self, profiles: Profiles) -> None:
        super().__init__()
        self.profiles = profiles
        self.context = ir.Context()
        self.context.allow_unregistered_dialects = True

    def __missing__(self, case: str):
        # the path the profile compiled (resolved: a symlinked checkout names the file as IREE saw it)
        self[case] = (InputReading(PROGRAMS[program_of(case)].resolve(), self.context),
                      PhaseReading(self.profiles[case].directory / "artifacts" / "phases", self.context))
        return self[case]


@pytest.fixture(scope="module")
def readings(profiles):
    return Readings(profiles)


def lines_with(frame: pd.DataFrame, column: str) -> set[tuple[str, int]]:
    return {(row.file, int(row.line)) for row in frame.itertuples() if getattr(row, column) > 0}


# Invariants ---------------------------------------------------------------------------------------

NAMES = list(PROGRAMS) + [f"{name}@vulkan" for name in ON_VULKAN]


@pytest.mark.parametrize("name", NAMES)
def test_call_sites_are_the_hal_dispatches_and_the_runtime_ran_each_run_site_once_per_iteration(profiles, readings, name):
    profile = profiles[name]
    _, phases = readings[name]
    assert len(profile.call_sites) == len(phases.dispatch_locations)
    run = profile.call_sites[profile.call_sites["phase"] == "run"]
    events = profile.events
    per_iteration = events.groupby("iteration").size()
    assert (per_iteration == len(run)).all() and len(per_iteration) == REPETITIONS
    assert events["call_site"].notna().all()


@pytest.mark.parametrize("name", NAMES)
def test_root_location_of_every_run_call_site_has_self_time_unless_only_constants(profiles, readings, name):
    profile = profiles[name]
    source, phases = readings[name]
    self_lines = lines_with(profile.source_lines, "total_ns")
    # Dispatches the runtime ran every iteration: exports it ran as often per iteration as the hal
    # phase dispatches them (an export also used by an initializer is left out).
    ran = profile.events.groupby("export").size() / REPETITIONS
    written = pd.Series(phases.dispatch_exports).value_counts()
    every_iteration = {export for export, count in ran.items() if written.get(export) == count}
    assert every_iteration, "the runtime ran none of the hal phase's dispatches"
    for loc, export in zip(phases.dispatch_locations, phases.dispatch_exports):
        if export not in every_iteration:
            continue
        for member in members(loc):
            innermost = [p for p in positions(member) if p not in source.function_lines][:1]
            for line in set(innermost) - source.constant_lines:
                assert line in self_lines, (export, line)


@pytest.mark.parametrize("name", NAMES)
def test_only_lines_holding_an_input_op_have_time(profiles, readings, name):
    profile = profiles[name]
    source, _ = readings[name]
    in_program = profile.source_lines[profile.source_lines["file"] == source.path]
    timed = lines_with(in_program, "total_ns") | lines_with(in_program, "inclusive_ns")
    assert not timed & source.function_lines, "a func.func header line got time"
    assert timed <= source.op_lines, timed - source.op_lines


@pytest.mark.parametrize("name", NAMES)
def test_self_times_add_up_to_the_measured_total(profiles, name):
    profile = profiles[name]
    measured = float(profile.events["duration_ns"].sum())
    assert profile.source_ops["total_ns"].sum() == pytest.approx(measured, rel=1e-9)
    with_lines = profile.summary["coverage"]["dispatch_time_with_source_lines_share"]
    if with_lines == 1.0:
        assert profile.source_lines["total_ns"].sum() == pytest.approx(measured, rel=1e-9)
    else:  # ONNX node names: no file:line anywhere
        assert program_of(name) == "onnx_light_squeezenet_nodelocs" and profile.source_lines["total_ns"].sum() == 0
    assert (profile.source_lines["inclusive_ns"] >= profile.source_lines["total_ns"] - 1e-6).all()


@pytest.mark.parametrize("name", NAMES)
def test_each_input_op_is_one_source_op(profiles, name):
    ops = profiles[name].source_ops
    assert not ops["label"].duplicated().any(), ops.loc[ops["label"].duplicated(keep=False), "label"].tolist()


@pytest.mark.parametrize("name", NAMES)
def test_no_root_of_a_dispatch_is_reported_without_dispatch(profiles, name):
    profile = profiles[name]
    run = profile.call_sites[profile.call_sites["phase"] == "run"]
    roots = {op for ops in run["root_ops"] for op in str(ops).split(";") if op}
    missing = {finding["op"] for finding in profile.summary["audit"]["ops_without_dispatch"]}
    assert not roots & missing


@pytest.mark.parametrize("name", NAMES)
def test_every_producer_is_written_inside_its_dispatch(profiles, readings, name):
    profile = profiles[name]
    _, phases = readings[name]
    graph = profile.graph

    def node_lines(node: str) -> set[tuple[str, int]]:
        return {(p.rsplit(":", 2)[0], int(p.rsplit(":", 2)[1])) for p in json.loads(graph.nodes[node]["positions"])}

    for source, target, data in graph.edges(data=True):
        if data.get("role") != "producer":
            continue
        root_lines = set().union(*(node_lines(op) for op, _, edge in graph.in_edges(target, data=True) if edge.get("role") == "root"))
        bodies = set().union(*(body for own, body in phases.regions if own & root_lines))
        producer_lines = node_lines(source)
        if producer_lines:
            assert producer_lines & bodies, (name, target, graph.nodes[source]["label"])


def test_onnx_operators_are_compute_ops_shown_by_their_op_type(profiles):
    profile = profiles["onnx_light_squeezenet_nodelocs"]
    assert load_profile(profile.directory).source_lines.empty  # no file:line anywhere: an empty table reads back
    # The hottest op is named by its node: the conv the hottest dispatch (first conv, ~17 %) is named after.
    hottest_site = profile.call_sites.loc[profile.call_sites["total_ns"].idxmax()]
    assert profile.source_ops.loc[profile.source_ops["total_ns"].idxmax(), "label"] == hottest_site["loc"] == "n0"
    ops = profile.source_ops
    hot_kinds = set(ops.loc[ops["total_ns"] > 0, "op_kinds"].fillna("").str.split(", ").explode())
    assert {"onnx.Conv", "onnx.Relu"} <= hot_kinds
    assert ops.loc[ops["total_ns"] > 0, "compute"].all()
    reasons = profile.summary["audit"]["reasons"]
    assert sum(reasons.values()) == len(profile.summary["audit"]["ops_without_dispatch"])


def test_initializer_call_sites_are_counted_apart_from_the_timed_ones(profiles):
    cover = profiles["clip_text_toy_f32"].summary["coverage"]
    assert cover["call_sites_initializer"] == 1 and cover["call_sites"] == 39 == cover["call_sites_mapped"]


# Workload specifics ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(WORKLOAD_RUNS) + [f"{name}@vulkan" for name in ON_VULKAN if name in WORKLOAD_RUNS])
def test_every_call_site_maps_to_a_source_location(profiles, name):
    profile = profiles[name]
    run_sites = profile.call_sites[profile.call_sites["phase"] == "run"]
    assert len(run_sites) > 0
    assert (run_sites["root_ops"].str.len() > 0).all(), run_sites.loc[run_sites["root_ops"] == "", ["call_site", "export"]]
    cover = profile.summary["coverage"]
    assert cover["dispatch_time_attributed_share"] == 1.0
    assert cover["events_unmatched"] == 0
    assert (run_sites["count"] == REPETITIONS).all()


def test_clip_call_sites_each_get_their_own_source_op(profiles):
    profile = profiles["clip_text_toy_f32"]
    sites = profile.call_sites
    assert len(sites) == 40
    assert sites["executable"].nunique() == 16
    assert (sites["root_ops"].str.split(";").str.len() == 1).all()
    shared = profile.summary["audit"]["shared_executables"]
    assert len(shared) == 12
    for entry in shared:  # a deduplicated executable's call sites each keep their own source op
        roots = sites.set_index("call_site").loc[entry["call_sites"], "root_ops"]
        assert roots.nunique() == len(roots), entry
    # ops rooted in several call sites are the ones IREE splits (layer norms: two reductions each)
    repeated = sites.loc[sites.duplicated("root_ops", keep=False), "root_ops"]
    split = {entry["op"] for entry in profile.summary["audit"]["ops_split"]}
    assert set(repeated) <= split
    assert (sites["phase"] == "initializer").sum() == 1


@pytest.mark.parametrize(("name", "python_file"), [("jax_flax_mnist_mlp_locs", ".py"), ("braggnn_torch", "braggnn.py")])
def test_python_locations_reach_the_line_table(profiles, name, python_file):
    lines = profiles[name].source_lines
    python_lines = lines[lines["file"].str.endswith(python_file)]
    assert len(python_lines) > 0
    assert python_lines["total_ns"].sum() > 0


def test_onnx_node_names_are_the_source_locations(profiles):
    profile = profiles["onnx_light_squeezenet_nodelocs"]
    hot = profile.source_ops[profile.source_ops["total_ns"] > 0]
    assert (hot["name"].fillna("") != "").all()  # ONNX node names (loc("n7")), no file:line
    assert profile.summary["coverage"]["dispatch_time_with_source_lines_share"] == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_every_run_call_site_has_one_event_per_call_and_none_is_reported_missing(profiles, name):
    summary = profiles[name].summary
    cover = summary["coverage"]
    assert "profiler_flushed" not in summary and not summary["profiler_dropped_records"]  # far below IREE's ring: one run, nothing lost
    assert cover["events_expected_per_call_site"] == REPETITIONS
    assert cover["missing_events"] == [] and cover["events_missing"] == 0
    assert cover["events"] == cover["call_sites"] * REPETITIONS
