"""Memory of one call of a dynamic program: the peak split with the sizes the run fixed, checked against IREE.

``tests/data/dynamic_attention.py`` exports a causal attention over ``?`` tokens that writes its keys and
values into a ``?x2048xf32`` cache argument (8,192 bytes a page) in place, as a paged decoder's cache
is. IREE copies the cache into the call's transient slab, updates it there and copies it back: the slab
holds the cache, the result is ``tokens x 64`` f32, and every size and offset of the plan is computed
from the token and page counts at run time. Profiled for real with two token and page counts; the figures are checked against `iree-profile memory` of a
call run on its own with IREE's tools.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_profile
from tests.test_memory import iree_profile_memory, one_call_bundle
from tracelink.commands.cli import main
from tracelink.commands.diff import REGRESSION
from tracelink.report.summary import memory_text

EXPORT = REPO / "tests" / "data" / "dynamic_attention.py"
F32 = 4
PAGE_BYTES = 2048 * F32


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("dynamic_attention") / "attention.mlir"
    subprocess.run([sys.executable, str(EXPORT), str(path)], check=True, capture_output=True, timeout=300)
    return path


SIZES = [(32, 16), (100, 24)]  # (tokens, cache pages)


@pytest.fixture(scope="module")
def profiles(program):
    """The program profiled at each of :data:`SIZES`, by token count."""
    return {tokens: run_profile(program, program.parent / f"out{tokens}", function="prefill",
                                inputs=[f"{tokens}x64xf32=0.1", f"{pages}x2048xf32=0"], repetitions=2) for tokens, pages in SIZES}


@pytest.fixture(scope="module", params=SIZES)
def profiled(request, profiles):
    tokens, pages = request.param
    return tokens, pages, profiles[tokens]


def test_the_split_names_the_cache_and_adds_up_to_iree_high_water(profiled):
    tokens, pages, profile = profiled
    memory = profile.summary["memory"]
    split = memory["split"]
    assert memory["split_inputs"] == [{"argument": 1, "type": f"{pages}x2048xf32", "bytes": pages * PAGE_BYTES}]
    assert split["inputs"] == pages * PAGE_BYTES and split["other"] == 0 and memory["split_other"] == []
    assert split["outputs"] == tokens * 64 * F32
    iree = iree_profile_memory(one_call_bundle(profile))
    assert sum(split.values()) == memory["peak_bytes"] == iree["high_water"]
    # IREE's own allocations: the result, still open, and the slab (freed), which holds the cache's copy
    allocations = {(record["lifecycle_total_open_bytes"], record["open_at_end"]) for record in iree["allocations"]}
    assert allocations == {(split["outputs"], True), (split["inputs"] + split["transients"], False)}, iree["allocations"]
    # the cache is held once besides the call, however often the program imports it
    assert memory["resident_bytes"]["inputs"] == pages * PAGE_BYTES + tokens * 64 * F32


def test_the_lines_hold_the_transients_live_at_the_peak(profiled):
    tokens, pages, profile = profiled
    memory, lines = profile.summary["memory"], profile.memory_lines
    assert 0.5 * memory["split"]["transients"] <= lines["transient_bytes_at_peak"].sum() <= memory["split"]["transients"]
    assert lines["bytes_at_peak"].sum() == memory["live_at_peak_bytes"] > 0
    assert (lines["file"].str.endswith("dynamic_attention.py")).all()
    assert len(memory["timeline_bytes"]) == (profile.call_sites["phase"] == "run").sum() and memory["attributed"]
    # the queries, keys and values (line 29's projection, then copied into the cache by lines 31-32)
    assert lines.set_index("line").loc[29, "bytes_allocated"] >= 3 * tokens * 64 * F32
    # the chart's holders name the cache where it is live
    assert [f"argument 1 ({pages}x2048xf32)", None, pages * PAGE_BYTES] in memory["timeline_holders"][memory["peak_dispatch"]]


def test_every_timed_dispatch_gives_its_root_lines_time(profiled):
    *_, profile = profiled
    assert_root_lines_timed(profile)


def assert_root_lines_timed(profile) -> None:
    """Every root op of a timed run-phase dispatch, and its own line, read more than 0 ns."""
    ops, lines = profile.source_ops.set_index("op"), profile.source_lines.set_index(["file", "line"])
    timed = profile.call_sites[(profile.call_sites["phase"] == "run") & (profile.call_sites["total_ns"] > 0)]
    roots = {op for cell in timed["root_ops"] for op in str(cell).split(";") if op}
    assert roots
    for op in roots:
        assert ops.loc[op, "total_ns"] > 0, ops.loc[op]
        file, line = ops.loc[op, "file"], int(ops.loc[op, "line"])
        assert lines.loc[(file, line), "total_ns"] > 0, (file, line)


def test_the_summary_names_the_cache(profiled):
    tokens, pages, profile = profiled
    line = memory_text(profile.summary["memory"])
    assert line.startswith("memory: peak ") and f"{pages * 8} KiB inputs (argument 1: {pages}x2048xf32)" in line, line
    # the report's chart: hovering the peak dispatch names the cache beside the lines
    from lxml import html

    chart = html.parse(str(profile.directory / "report.html")).xpath('//svg[@aria-label="live bytes over the dispatch sequence of one call"]')[0]
    hover = chart.xpath(f'.//rect[@data-position="{profile.summary["memory"]["peak_dispatch"]}"]/title')[0].text
    assert f"\nargument 1 ({pages}x2048xf32) {pages * 8} KiB" in hover and "dynamic_attention.py:" in hover, hover


def test_fail_if_larger_gates_a_longer_sequence(profiles, capsys):
    shorter, longer = profiles[32], profiles[100]
    assert main(["diff", str(shorter.directory), str(longer.directory), "--rounds", "0", "--json", "--fail-if-larger", "1"]) == REGRESSION
    larger = json.loads(capsys.readouterr().out)["gates"]["larger"]
    assert larger["failed"] and larger["tuned_peak_bytes"] == longer.summary["memory"]["peak_bytes"] > larger["base_peak_bytes"]


TWO_FUNCTIONS = """func.func @first(%a: tensor<?x256xf32>, %b: tensor<256x128xf32>) -> tensor<?x128xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x256xf32>
  %e = tensor.empty(%m) : tensor<?x128xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x128xf32>) -> tensor<?x128xf32> loc("model.py":3:1)
  %p = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x128xf32>) outs(%z : tensor<?x128xf32>) -> tensor<?x128xf32> loc("model.py":3:1)
  %e2 = tensor.empty(%m) : tensor<?x128xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<?x128xf32>) -> tensor<?x128xf32> loc("model.py":4:1)
  %w = arith.constant dense<0.5> : tensor<128x128xf32>
  %q = linalg.matmul ins(%p, %w : tensor<?x128xf32>, tensor<128x128xf32>) outs(%z2 : tensor<?x128xf32>) -> tensor<?x128xf32> loc("model.py":4:1)
  return %q : tensor<?x128xf32>
}
func.func @second(%a: tensor<?x128xf32>, %b: tensor<128x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x128xf32>
  %e = tensor.empty(%m) : tensor<?x64xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32> loc("model.py":8:1)
  %p = linalg.matmul ins(%a, %b : tensor<?x128xf32>, tensor<128x64xf32>) outs(%z : tensor<?x64xf32>) -> tensor<?x64xf32> loc("model.py":8:1)
  return %p : tensor<?x64xf32>
}
"""


def test_each_function_of_a_profile_is_split_on_its_own_sizes(tmp_path):
    from tracelink.pipeline.options import FunctionRun

    # first: 300 rows through two matmuls (the first's product a transient, the second's the result);
    # second: 50 rows through one (its result only)
    (tmp_path / "two.mlir").write_text(TWO_FUNCTIONS)
    runs = (FunctionRun("first", ("300x256xf32=0.1", "256x128xf32=0.1")), FunctionRun("second", ("50x128xf32=1", "128x64xf32=1")))
    profiles = run_profile(tmp_path / "two.mlir", tmp_path / "out", functions=runs, repetitions=2).profiles
    first, second = profiles["first"].summary["memory"], profiles["second"].summary["memory"]
    assert first["split"] | {"transients": 0, "outputs": 0} == second["split"] | {"transients": 0, "outputs": 0} == dict.fromkeys(first["split"], 0)
    assert first["split"]["transients"] == first["split"]["outputs"] == 300 * 128 * F32 and first["peak_bytes"] == 2 * 300 * 128 * F32
    assert second["split"]["outputs"] == second["peak_bytes"] == 50 * 64 * F32 and second["split"]["transients"] == 0
    lines = profiles["first"].memory_lines.set_index("line")
    assert lines.loc[3, "transient_bytes_at_peak"] == lines.loc[4, "output_bytes_at_peak"] == 300 * 128 * F32
