"""Attribution invariants on every real program, checked against an independent reading of IREE's output.

Each workload in ../shared/workloads (the MLIR ones; raw .onnx files need the ONNX importer), each
example and a real-weight ONNX SqueezeNet (ONNX's light model given random weights by
../shared/tools/materialize_weights.py here, so its convolutions are real ones) are profiled for real. The checks do not use tracelink's provenance code: they parse the input
program and the ``hal`` / ``dispatch-creation`` phase dumps here, with the MLIR bindings, and compare
with what the runtime measured (the HAL collector's events).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from iree.compiler import ir

from tests.conftest import EXAMPLES, WORKLOAD_RUNS, WORKLOADS, run_profile
from rich.console import Console

from tracelink.aggregate import op_line_shares
from tracelink.aggregate.components import NO_SCOPE, component_table, kind_table
from tracelink.compile import CompileOptions
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.report.summary import print_summary

PROGRAMS = {name: WORKLOADS / f"{name}.mlir" for name in WORKLOAD_RUNS} | {name: EXAMPLES / f"{name}.mlir" for name in ("mlp", "attention", "convnet")}
REPETITIONS = 3
# The invariants hold on a GPU too: these programs are also profiled with --device vulkan on lavapipe
# (as "name@vulkan"). The larger workloads take minutes there (lavapipe is the CPU running SPIR-V).
ON_VULKAN = ("jax_flax_mnist_mlp_locs", "braggnn_torch", "mnist_mlp_trained", "clip_text_toy_f32", "mlp", "attention", "convnet")
# The convolution networks run IREE's default SPIR-V at about a MFLOP/s on lavapipe (one call of the 64x64
# SqueezeNet: 15 s; of the 224x224 ones: minutes): checked with TRACELINK_SLOW_VULKAN=1, one repetition, not in make test.
SLOW_ON_VULKAN = ("linalg_squeezenet1_1_64x64", "onnx_light_squeezenet_nodelocs", "linalg_resnet18") if os.environ.get("TRACELINK_SLOW_VULKAN") else ()


def program_of(case: str) -> str:
    """The program of a test case: ``name`` (llvm-cpu, local-task) or ``name@vulkan``."""
    return case.split("@")[0]
REAL_WEIGHTS = "light_squeezenet_real_weights"  # made at test time (the weights are not kept in the repository)


def test_every_shared_mlir_workload_is_covered():
    assert {p.stem for p in WORKLOADS.glob("*.mlir")} == set(WORKLOAD_RUNS)


class Profiles(dict):
    """Profiles by case, each made the first time a test asks for it (the real-weight SqueezeNet: the
    session's, see tests/conftest.py)."""

    def __init__(self, base: Path, real_squeezenet: Callable[[], Profile]) -> None:
        super().__init__()
        self.base = base
        self.real_squeezenet = real_squeezenet

    def __missing__(self, case: str):
        name, _, device = case.partition("@")
        if name == REAL_WEIGHTS:
            self[case] = self.real_squeezenet()
            return self[case]
        function, inputs, parameters = WORKLOAD_RUNS.get(name, (None, [], []))
        slow = name in SLOW_ON_VULKAN and device == "vulkan"
        self[case] = run_profile(PROGRAMS[name], self.base / case, function=function, inputs=inputs, parameters=parameters,
                                 repetitions=1 if slow else REPETITIONS, warmup=0 if slow else 1, timeout_s=7200 if slow else 600,
                                 compile=CompileOptions(device=device or "local-task"))
        return self[case]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory, real_squeezenet):
    return Profiles(tmp_path_factory.mktemp("attribution"), real_squeezenet)


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


def keys(loc: ir.Location) -> list[tuple[str, int]]:
    """The positions of a location, or for members located by a name only (ONNX nodes), their names as (name, 0)."""
    found = positions(loc)
    if found:
        return found
    if isinstance(loc, ir.NameLoc):
        return [(loc.name_str, 0)]
    if isinstance(loc, ir.CallSiteLoc):
        return keys(loc.callee)
    if isinstance(loc, ir.FusedLoc):
        return [key for member in loc.locations for key in keys(member)]
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
    """The input program's own lines: where functions start and where ops are written.

    ``path`` is the file the lines belong to: the program, or the ONNX model an imported program was read from.
    """

    def __init__(self, program: Path, context: ir.Context, path: Path | None = None) -> None:
        module = ir.Module.parseFile(str(program), context)
        self.path = str(path or program)
        self.function_lines = {p for op in module.body.operations if op.operation.name in ("func.func", "util.func") for p in positions(op.operation.location)}
        self.op_lines = {p for top in module.body.operations for op in all_ops(top.operation) for p in positions(op.location)}
        # Lines where only constants are written: no work at run time, even when IREE fuses their
        # location into a dispatch's root (ResNet-18's zero bias in the pooling dispatch).
        self.constant_lines = self.op_lines - {
            p for top in module.body.operations for op in all_ops(top.operation) if op.name != "arith.constant" for p in positions(op.location)
        }


# Ops that carry a location without doing work of their own: terminators, buffers, constants, fills
# (CSE shares them between layers), and the dispatch's loads and stores.
NO_WORK = ("tensor.empty", "linalg.fill", "arith.constant", "flow.return", "iree_tensor_ext.dispatch.tensor.load", "iree_tensor_ext.dispatch.tensor.store")


def does_work(op: ir.Operation) -> bool:
    return op.name not in NO_WORK and not op.name.endswith("yield")


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
        workgroups = [op for op in all_ops(created.operation) if op.name == "flow.dispatch.workgroups"]
        self.regions = [(set(positions(op.location)), {p for inner in all_ops(op) for p in positions(inner.location)}) for op in workgroups]
        # Lines of the ops each region computes under their own location, not one the compiler merged.
        self.unmerged = [
            {tuple(keys(inner.location)) for inner in all_ops(op) if does_work(inner) and len(members(inner.location)) == 1} for op in workgroups
        ]
        self.region_keys = [set(keys(op.location)) for op in workgroups]


class Readings(dict):
    """The independent readings of each case's input program and phase dumps, made on first use."""

    def __init__(self, profiles: Profiles) -> None:
        super().__init__()
        self.profiles = profiles
        self.context = ir.Context()
        self.context.allow_unregistered_dialects = True

    def __missing__(self, case: str):
        # the path the profile compiled (resolved: a symlinked checkout names the file as IREE saw it)
        self[case] = (input_reading(program_of(case), self.profiles[case], self.context),
                      PhaseReading(self.profiles[case].directory / "artifacts" / "phases", self.context))
        return self[case]


@pytest.fixture(scope="module")
def readings(profiles):
    return Readings(profiles)


def input_reading(name: str, profile, context: ir.Context) -> InputReading:
    if name in PROGRAMS:
        return InputReading(PROGRAMS[name].resolve(), context)
    return InputReading(profile.directory / "artifacts" / "imported.mlir", context, Path(profile.summary["model"]))


def lines_with(frame: pd.DataFrame, column: str) -> set[tuple[str, int]]:
    return {(row.file, int(row.line)) for row in frame.itertuples() if getattr(row, column) > 0}


# Invariants ---------------------------------------------------------------------------------------

NAMES = [*PROGRAMS, REAL_WEIGHTS] + [f"{name}@vulkan" for name in (*ON_VULKAN, *SLOW_ON_VULKAN)]


@pytest.mark.parametrize("name", NAMES)
def test_call_sites_are_the_hal_dispatches_and_the_runtime_ran_each_run_site_once_per_iteration(profiles, readings, name):
    profile = profiles[name]
    _, phases = readings[name]
    assert len(profile.call_sites) == len(phases.dispatch_locations)
    run = profile.call_sites[profile.call_sites["phase"] == "run"]
    events = profile.events
    per_iteration = events.groupby("iteration").size()
    assert (per_iteration == len(run)).all() and len(per_iteration) == profile.summary["repetitions"]
    assert events["call_site"].notna().all()


@pytest.mark.parametrize("name", NAMES)
def test_root_location_of_every_run_call_site_has_self_time_unless_only_constants(profiles, readings, name):
    profile = profiles[name]
    source, phases = readings[name]
    self_lines = lines_with(profile.source_lines, "total_ns")
    # Dispatches the runtime ran every iteration: exports it ran as often per iteration as the hal
    # phase dispatches them (an export also used by an initializer is left out).
    ran = profile.events.groupby("export").size() / profile.summary["repetitions"]
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
def test_diff_attributes_each_op_the_time_the_profile_does(profiles, name):
    """`tracelink diff` splits every iteration's call-site times over the ops as the profile's tables do."""
    from tracelink.compare.diff import per_iteration

    profile = profiles[name]
    ops, matrix = per_iteration(profile)
    diffed = pd.Series(matrix.sum(axis=0), index=ops.index)
    recorded = profile.source_ops.set_index("op")["total_ns"].fillna(0.0)
    pd.testing.assert_series_equal(diffed.reindex(recorded.index), recorded, check_names=False, rtol=1e-9, atol=1e-3)


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


@pytest.mark.parametrize("name", NAMES)
def test_no_op_gets_time_from_a_dispatch_holding_none_of_its_own_ops(profiles, readings, name):
    """A member of a location the compiler merged gets no part of a dispatch when its own ops run elsewhere.

    An op's own ops are those written at its location alone. When some dispatch region computes ops at
    an op's lines under their own location, the op's work is there: any other dispatch crediting it
    must hold such an op too (checked on the regions whose location is the call site's). An op the
    compiler absorbed without its location (role ``absorbed``) is exempt: it has no op left anywhere.
    """
    profile = profiles[name]
    source, phases = readings[name]
    graph = profile.graph

    def innermost(stacks) -> set[tuple[str, int]]:
        """The innermost line of each position stack that is not a function's line (IREE's wrapper)."""
        return {line for stack in stacks for line in [p for p in stack if p not in source.function_lines][:1]}

    def op_lines(node: str) -> set[tuple[str, int]]:
        stacks = [
            [(p.rsplit(":", 2)[0], int(p.rsplit(":", 2)[1])) for p in member["positions"]]
            or [(member["frames"][0].removeprefix('loc("').split('"')[0], 0)]  # located by a name only
            for member in json.loads(graph.nodes[node]["members"])
        ]
        return innermost(stacks)

    unmerged = [innermost(stacks) for stacks in phases.unmerged]
    anywhere = set().union(*unmerged)
    checked = 0
    for source_op, target, data in graph.edges(data=True):
        if data.get("kind") != "feeds" or data.get("role") in ("init", "absorbed") or data.get("weight", 0) <= 0:
            continue
        lines = op_lines(source_op)
        if not lines & anywhere:
            continue  # no op of its own anywhere: it exists only inside merged ops
        # the hal dispatches of the call site's export (call sites are numbered run first, initializers last)
        export = graph.nodes[target]["export"]
        site_lines = {p for loc, name in zip(phases.dispatch_locations, phases.dispatch_exports) if name == export for p in keys(loc)}
        site_lines -= source.function_lines
        here = set().union(*(lines_here for own, lines_here in zip(phases.region_keys, unmerged) if own & site_lines))
        assert lines & here, (name, graph.nodes[target]["label"], graph.nodes[source_op]["label"], data["weight"])
        checked += 1
    assert checked > 0


def test_onnx_operators_are_compute_ops_shown_by_their_op_type(profiles):
    profile = profiles["onnx_light_squeezenet_nodelocs"]
    assert load_profile(profile.directory).source_lines.empty  # no file:line anywhere: an empty table reads back
    # The hottest op is named by its node, the one a dispatch is named after (which conv or reduction it is
    # depends on the split at the machine's roofs: a conv's fused bias and ReLU write its output)
    hottest = profile.source_ops.loc[profile.source_ops["total_ns"].idxmax()]
    assert re.fullmatch(r"n\d+", hottest["label"]) and hottest["label"] in set(profile.call_sites["loc"]), hottest["label"]
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


@pytest.mark.parametrize("name", list(WORKLOAD_RUNS) + [f"{name}@vulkan" for name in (*ON_VULKAN, *SLOW_ON_VULKAN) if name in WORKLOAD_RUNS])
def test_every_call_site_maps_to_a_source_location(profiles, name):
    profile = profiles[name]
    run_sites = profile.call_sites[profile.call_sites["phase"] == "run"]
    assert len(run_sites) > 0
    assert (run_sites["root_ops"].str.len() > 0).all(), run_sites.loc[run_sites["root_ops"] == "", ["call_site", "export"]]
    cover = profile.summary["coverage"]
    assert cover["dispatch_time_attributed_share"] == 1.0
    assert cover["events_unmatched"] == 0
    assert (run_sites["count"] == profile.summary["repetitions"]).all()


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
    assert "profiler_flushed" not in summary and not summary.get("profiler_dropped_records")  # far below IREE's ring: one run, nothing lost
    assert cover["events_expected_per_call_site"] == summary["repetitions"]
    assert cover["missing_events"] == [] and cover["events_missing"] == 0
    assert cover["events"] == cover["call_sites"] * summary["repetitions"]


@pytest.mark.parametrize("name", NAMES)
def test_a_lines_call_sites_give_it_time_and_its_ops_lead_with_the_one_holding_most(profiles, name):
    profile = profiles[name]
    graph = profile.graph
    feeding = {(source, graph.nodes[target]["index"]) for source, target, data in graph.edges(data=True)
               if data.get("kind") == "feeds" and data.get("weight", 0) > 0}
    shares = op_line_shares(graph).set_index(["op", "file", "line"])[["self", "user_self"]].max(axis=1)
    op_ns = profile.source_ops.set_index("op")["total_ns"]
    checked = 0
    for row in profile.source_lines[(profile.source_lines["total_ns"] > 0) | (profile.source_lines["user_self_ns"] > 0)].itertuples():
        ops = str(row.ops).split(";")
        for site in str(row.call_site_ids).split(";"):
            assert any((op, int(site)) in feeding for op in ops), (name, row.file, row.line, site)
        held = [op_ns.get(op, 0.0) * shares.get((op, row.file, row.line), 0.0) for op in ops]
        assert held[0] == pytest.approx(max(held)), (name, row.file, row.line)
        checked += 1
    assert checked > 0 or program_of(name) == "onnx_light_squeezenet_nodelocs"


# Components ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_component_times_add_up_self_and_inclusive(profiles, name):
    ops = profiles[name].source_ops
    timed = float(ops["total_ns"].sum())
    components = component_table(ops)
    assert components["self_ns"].sum() == pytest.approx(timed)
    assert components.loc[components["depth"] == 1, "inclusive_ns"].sum() == pytest.approx(timed)
    children = components.groupby("parent")["inclusive_ns"].sum()
    for row in components.itertuples():  # inclusive = self + the children's inclusive
        assert row.inclusive_ns == pytest.approx(row.self_ns + children.get(row.component, 0.0))
    kinds = kind_table(ops)
    assert kinds["total_ns"].sum() == pytest.approx(timed)
    assert (kinds["instances"] >= 1).all()


def test_jax_components_are_its_name_scopes_and_the_summary_opens_with_them(profiles):
    profile = profiles["jax_flax_mnist_mlp_locs"]
    components = component_table(profile.source_ops).set_index("component")
    dense = [f"jit(<lambda>)/MNISTMLPModel/Dense_{i}" for i in range(3)]
    assert set(dense) <= set(components.index)
    # the three Dense layers hold the matmuls: nearly all of the time, and the model scope includes them
    assert sum(components.loc[d, "inclusive_share"] for d in dense) > 0.9
    assert components.loc["jit(<lambda>)/MNISTMLPModel", "inclusive_ns"] >= sum(components.loc[d, "inclusive_ns"] for d in dense)
    kinds = kind_table(profile.source_ops)
    top = kinds.iloc[0]
    assert (top["kind"], top["pattern"], top["instances"]) == ("stablehlo.dot_general", "jit(<lambda>)/MNISTMLPModel/Dense_*", 3)
    console = Console(record=True, width=150)
    print_summary(profile, console)
    text = console.export_text()
    order = [text.index(title) for title in ("Time by component", "Time by op kind", "Hottest source lines", "Hottest dispatches")]
    assert order == sorted(order)
    assert "Dense_0" in text.split("Time by op kind")[0]


def test_ops_without_a_name_scope_form_their_own_group(profiles):
    components = component_table(profiles["linalg_resnet18"].source_ops)  # file:line locations only, no names
    assert list(components["component"]) == [NO_SCOPE]

