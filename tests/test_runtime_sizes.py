"""Exact runtime sizes: dynamic sizes only the run fixes, read from each dispatch's push constants.

Each program takes a dynamic size from tensor *data* (a row count, a cache length), which the host
program's index arithmetic cannot follow: costed statically, its dispatches are lower bounds. Built for
real, run once under the real hook (:class:`HookedSizes`), their push constants give the sizes, and
every call site costs what a hand count gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelink.collect.hook_sizes import SIZES_DIR, HookedSizes
from tracelink.compile import CompileOptions, compile_program
from tracelink.ir_utils import new_context, parse_file
from tracelink.provenance.build import Provenance, build_provenance, phase_dump
from tracelink.provenance.executable_workloads import ExportWorkloads, entry_constants
from tracelink.provenance.locations import Normaliser
from tracelink.provenance.program import read_input_program
from tracelink.provenance.regions import member_costs

F32 = 4
DYNAMIC = Path(__file__).parent / "data" / "dynamic.mlir"  # a ?x256 · 256x128 matmul at line 9
# A matmul over the first M rows of a 512x64 matrix, M read from a tensor: 2·M·64·48 FLOPs.
MATMUL = """
func.func @main(%a: tensor<512x64xf32>, %b: tensor<64x48xf32>, %rows: tensor<i64>) -> tensor<?x48xf32> {
  %n = tensor.extract %rows[] : tensor<i64>
  %m = arith.index_cast %n : i64 to index
  %part = tensor.extract_slice %a[0, 0] [%m, 64] [1, 1] : tensor<512x64xf32> to tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x48xf32>) -> tensor<?x48xf32>
  %product = linalg.matmul ins(%part, %b : tensor<?x64xf32>, tensor<64x48xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  return %product : tensor<?x48xf32>
}
"""
# Attention of 4 queries over the first L entries of a 128-entry K/V cache, L read from a tensor:
# scores Q·Kᵀ (2·4·L·32), a softmax over L (5 per score), P·V (2·4·L·32).
ATTENTION = """
func.func @main(%q: tensor<4x32xf32>, %kcache: tensor<128x32xf32>, %vcache: tensor<128x32xf32>, %length: tensor<i64>) -> tensor<4x32xf32> {
  %n = tensor.extract %length[] : tensor<i64>
  %l = arith.index_cast %n : i64 to index
  %k = tensor.extract_slice %kcache[0, 0] [%l, 32] [1, 1] : tensor<128x32xf32> to tensor<?x32xf32>
  %v = tensor.extract_slice %vcache[0, 0] [%l, 32] [1, 1] : tensor<128x32xf32> to tensor<?x32xf32>
  %zero = arith.constant 0.0 : f32
  %scores_empty = tensor.empty(%l) : tensor<4x?xf32>
  %scores_init = linalg.fill ins(%zero : f32) outs(%scores_empty : tensor<4x?xf32>) -> tensor<4x?xf32>
  %scores = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%q, %k : tensor<4x32xf32>, tensor<?x32xf32>) outs(%scores_init : tensor<4x?xf32>) -> tensor<4x?xf32>
  %probabilities = linalg.softmax dimension(1) ins(%scores : tensor<4x?xf32>) outs(%scores_empty : tensor<4x?xf32>) -> tensor<4x?xf32>
  %out_empty = tensor.empty() : tensor<4x32xf32>
  %out_init = linalg.fill ins(%zero : f32) outs(%out_empty : tensor<4x32xf32>) -> tensor<4x32xf32>
  %out = linalg.matmul ins(%probabilities, %v : tensor<4x?xf32>, tensor<?x32xf32>) outs(%out_init : tensor<4x32xf32>) -> tensor<4x32xf32>
  return %out : tensor<4x32xf32>
}
"""
# A RoPE-like fused dispatch (elementwise_8xD): a widening convert (its extf, line 11) fused into a
# rotation by a table (line 14, the root; its multiply and add, lines 16 and 17), over the first D
# columns, D read from a tensor.
ROPE = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<8x4096xf16>, %cos: tensor<8xf32>, %length: tensor<i64>) -> tensor<8x?xf32> {
  %n = tensor.extract %length[] : tensor<i64>
  %d = arith.index_cast %n : i64 to index
  %part = tensor.extract_slice %x[0, 0] [8, %d] [1, 1] : tensor<8x4096xf16> to tensor<8x?xf16>
  %e = tensor.empty(%d) : tensor<8x?xf32>
  %converted = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%part : tensor<8x?xf16>) outs(%e : tensor<8x?xf32>) {
  ^bb0(%a: f16, %o: f32):
    %f = arith.extf %a : f16 to f32
    linalg.yield %f : f32
  } -> tensor<8x?xf32>
  %rotated = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%converted, %cos : tensor<8x?xf32>, tensor<8xf32>) outs(%e : tensor<8x?xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %m, %a : f32
    linalg.yield %s : f32
  } -> tensor<8x?xf32>
  return %rotated : tensor<8x?xf32>
}
"""


def build(tmp_path: Path, text: str, inputs: list[str], hooked: bool) -> tuple[Provenance, HookedSizes]:
    """Compile ``text`` for real and build its provenance, with the sizes of a hooked run or without."""
    tmp_path.mkdir(exist_ok=True)
    program = tmp_path / "program.mlir"
    program.write_text(text)
    options = CompileOptions()
    compiled = compile_program(program, tmp_path / "artifacts", options)
    sizes = HookedSizes(lambda: compiled, options, "main", inputs, [], tmp_path / "artifacts", timeout_s=120)
    return build_provenance(read_input_program(program), tmp_path / "artifacts", "main", None, sizes if hooked else None), sizes


def call_sites(provenance: Provenance) -> list[dict]:
    graph = provenance.graph
    return [graph.nodes[node] | {"node": node} for node in graph if graph.nodes[node]["kind"] == "call_site"]


@pytest.mark.parametrize("rows", [100, 7])
def test_a_matmul_whose_rows_only_data_fixes_costs_exactly(tmp_path, rows):
    inputs = ["512x64xf32=1", "64x48xf32=1", f"i64={rows}"]
    static, _ = build(tmp_path / "static", MATMUL, inputs, hooked=False)
    (before,) = call_sites(static)
    assert not before["cost_exact"] and before["flops"] == 2 * 1 * 64 * 48  # today's lower bound: M counted as 1
    provenance, sizes = build(tmp_path / "hooked", MATMUL, inputs, hooked=True)
    (matmul,) = call_sites(provenance)
    assert matmul["cost_exact"], matmul
    assert matmul["flops"] == 2 * rows * 64 * 48
    assert matmul["bytes"] == F32 * (512 * 64 + 64 * 48 + rows * 48)  # reads both operands whole, writes M rows
    # the default build embeds its executables, so the hook ran on a second, system-library build
    assert sizes.summary["seconds"] > 0 and "failure" not in sizes.summary and sizes.summary["rebuild_seconds"] > 0
    assert (tmp_path / "hooked" / "artifacts" / SIZES_DIR / "app.vmfb").is_file()


def test_attention_over_a_cache_length_only_data_fixes_costs_exactly(tmp_path):
    length = 100
    provenance, _ = build(tmp_path, ATTENTION, ["4x32xf32=1", "128x32xf32=1", "128x32xf32=1", f"i64={length}"], hooked=True)
    sites = call_sites(provenance)
    assert all(site["cost_exact"] for site in sites), sites
    assert sum(site["flops"] for site in sites) == 2 * 4 * length * 32 + 5 * 4 * length + 2 * 4 * length * 32
    softmax = next(site for site in sites if "softmax" in site["export"])
    assert softmax["flops"] == 5 * 4 * length and softmax["bytes"] == 2 * F32 * 4 * length


def test_every_line_of_a_fused_dispatch_with_a_dynamic_size_gets_time(tmp_path):
    columns = 2048
    provenance, _ = build(tmp_path, ROPE, ["8x4096xf16=1", "8xf32=1", f"i64={columns}"], hooked=True)
    (rope,) = call_sites(provenance)
    assert rope["cost_exact"] and rope["flops"] == 2 * 8 * columns  # a multiply and an add per element; the convert is 0
    weights = {provenance.graph.nodes[source]["line"]: edge["weight"] for source, _, edge in provenance.graph.in_edges(rope["node"], data=True)}
    # one share per line: every op and body op runs over the same 8xD points
    assert weights == pytest.approx({11: 0.25, 14: 0.25, 16: 0.25, 17: 0.25}), weights


def test_the_hook_records_each_dispatch_s_push_constants_and_they_give_its_workload(tmp_path):
    provenance, sizes = build(tmp_path, MATMUL, ["512x64xf32=1", "64x48xf32=1", "i64=33"], hooked=False)
    constants = sizes()
    assert constants is not None and set(constants) == {call_sites(provenance)[0]["export"]}
    [(export, [recorded])] = [(name, list(values)) for name, values in constants.items()]
    workloads = ExportWorkloads(tmp_path / "artifacts" / "executables", new_context())
    assert workloads.workload(export, recorded) == {0: 33}  # the one dynamic size, M, is workload ordinal 0
    assert workloads.workload("no_such_export", recorded) == {}


def test_constants_are_not_used_where_an_export_ran_another_number_of_times():
    recorded = {"a": [(1,), (2,), (3,)], "b": [(7,), (8,)]}
    # "a": one dispatch in an initializer, then two in the entry; "b": two recorded for one region (a host loop)
    assert entry_constants(recorded, ["a", "b", "a"], ["a"]) == [(2,), None, (3,)]


def test_a_graph_without_a_hooked_run_keeps_lower_bounds(tmp_path):
    provenance, sizes = build(tmp_path, ROPE, ["8x4096xf16=1", "8xf32=1", "i64=64"], hooked=False)
    (rope,) = call_sites(provenance)
    assert not rope["cost_exact"] and rope["flops"] == 2 * 8 * 1  # D counted as 1: a lower bound
    assert sizes.summary == {}  # never called: nothing ran


def test_own_work_before_fusion_takes_the_run_s_input_shapes(tmp_path):
    """The split of a location the compiler merged weighs each member by its own work in the ``input``
    phase: a ``?x256 · 256x128`` matmul's FLOPs there are the run's, not those of one row."""
    artifacts = tmp_path / "artifacts"
    compiled = compile_program(DYNAMIC, artifacts, CompileOptions())
    program = read_input_program(DYNAMIC)
    context = new_context()
    input_phase = parse_file(phase_dump(compiled.phases, "input"), context)
    normalise = Normaliser(program.enclosing_locations)
    rows = 384
    exact = member_costs(input_phase, normalise, "main", [(rows, 256), (256, 128), ()])
    static = member_costs(input_phase, normalise)
    matmul_line = next(frames for frames in exact.flops if '.mlir":9:' in frames[-1])
    assert exact.flops[matmul_line] == 2 * rows * 256 * 128
    assert static.flops[matmul_line] == 2 * 1 * 256 * 128


def test_a_build_of_system_libraries_is_run_as_it_is(tmp_path):
    """A profile built for the hook collector needs no second build: its own module is run."""
    program = tmp_path / "program.mlir"
    program.write_text(MATMUL)
    options = CompileOptions(link_embedded=False)
    compiled = compile_program(program, tmp_path / "artifacts", options)
    sizes = HookedSizes(lambda: compiled, options, "main", ["512x64xf32=1", "64x48xf32=1", "i64=5"], [], tmp_path / "artifacts", timeout_s=120)
    constants = sizes()
    assert constants is not None and [list(values) for values in constants.values()] == [[(5, 0)]]
    assert "rebuild_seconds" not in sizes.summary and not (tmp_path / "artifacts" / SIZES_DIR / "app.vmfb").exists()


def test_a_failed_hooked_run_leaves_lower_bounds_and_says_why(tmp_path):
    provenance, sizes = build(tmp_path, MATMUL, ["512x64xf32=1", "i64=5"], hooked=True)  # an input missing
    (matmul,) = call_sites(provenance)
    assert not matmul["cost_exact"]
    assert "iree-run-module exited with status" in sizes.summary["failure"] and "run.log" in sizes.summary["failure"]
