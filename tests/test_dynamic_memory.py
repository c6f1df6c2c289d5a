"""Memory of one call of a dynamic program: the peak split with the sizes the run fixed, checked against IREE.

``tests/data/dynamic_attention.py`` exports a causal attention over ``?`` tokens that writes its keys and
values into a ``16x2048xf32`` cache argument (131,072 bytes) in place. IREE copies the cache into the
call's transient slab, updates it there and copies it back: the slab holds the cache, the result is
``tokens x 64`` f32, and every size and offset of the plan is computed from the token count at run time.
Profiled for real with two token counts; the figures are checked against `iree-profile memory` of a
call run on its own with IREE's tools.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_profile
from tests.test_memory import iree_profile_memory, one_call_bundle
from tracelink.cli import main
from tracelink.diff_command import REGRESSION
from tracelink.report.summary import memory_text

EXPORT = REPO / "tests" / "data" / "dynamic_attention.py"
CACHE_BYTES = 16 * 2048 * 4
F32 = 4


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("dynamic_attention") / "attention.mlir"
    subprocess.run([sys.executable, str(EXPORT), str(path)], check=True, capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="module", params=[32, 100])
def profiled(request, program):
    tokens = request.param
    out = program.parent / f"out{tokens}"
    return tokens, run_profile(program, out, function="prefill", inputs=[f"{tokens}x64xf32=0.1", "16x2048xf32=0"], repetitions=2)


def test_the_split_names_the_cache_and_adds_up_to_iree_high_water(profiled):
    tokens, profile = profiled
    memory = profile.summary["memory"]
    split = memory["split"]
    assert memory["split_inputs"] == [{"argument": 1, "type": "16x2048xf32", "bytes": CACHE_BYTES}]
    assert split["inputs"] == CACHE_BYTES and split["other"] == 0 and memory["split_other"] == []
    assert split["outputs"] == tokens * 64 * F32
    iree = iree_profile_memory(one_call_bundle(profile))
    assert sum(split.values()) == memory["peak_bytes"] == iree["high_water"]
    # IREE's own allocations: the result, still open, and the slab (freed), which holds the cache's copy
    allocations = {(record["lifecycle_total_open_bytes"], record["open_at_end"]) for record in iree["allocations"]}
    assert allocations == {(split["outputs"], True), (split["inputs"] + split["transients"], False)}, iree["allocations"]
    # the cache is held once besides the call, however often the program imports it
    assert memory["resident_bytes"]["inputs"] == CACHE_BYTES + tokens * 64 * F32


def test_the_lines_hold_the_transients_live_at_the_peak(profiled):
    tokens, profile = profiled
    memory, lines = profile.summary["memory"], profile.memory_lines
    assert 0.5 * memory["split"]["transients"] <= lines["transient_bytes_at_peak"].sum() <= memory["split"]["transients"]
    assert lines["bytes_at_peak"].sum() == memory["live_at_peak_bytes"] > 0
    assert (lines["file"].str.endswith("dynamic_attention.py")).all() and len(memory["timeline_bytes"]) == 8
    # the queries, keys and values (line 29's projection, then copied into the cache by lines 31-32)
    assert lines.set_index("line").loc[29, "bytes_allocated"] >= 3 * tokens * 64 * F32
    # the chart's holders name the cache where it is live
    assert ["argument 1 (16x2048xf32)", None, CACHE_BYTES] in memory["timeline_holders"][memory["peak_dispatch"]]


def test_every_timed_dispatch_gives_its_root_lines_time(profiled):
    _, profile = profiled
    ops, lines = profile.source_ops.set_index("op"), profile.source_lines.set_index(["file", "line"])
    timed = profile.call_sites[(profile.call_sites["phase"] == "run") & (profile.call_sites["total_ns"] > 0)]
    roots = {op for cell in timed["root_ops"] for op in str(cell).split(";") if op}
    assert roots
    for op in roots:
        assert ops.loc[op, "total_ns"] > 0, ops.loc[op]
        file, line = ops.loc[op, "file"], int(ops.loc[op, "line"])
        assert lines.loc[(file, line), "total_ns"] > 0, (file, line)


def test_the_summary_names_the_cache(profiled):
    tokens, profile = profiled
    line = memory_text(profile.summary["memory"])
    assert line.startswith("memory: peak ") and "128 KiB inputs (argument 1: 16x2048xf32)" in line, line


def test_fail_if_larger_gates_a_longer_sequence(profiled, program, capsys):
    tokens, profile = profiled
    if tokens != 100:
        pytest.skip("compares the two token counts once")
    shorter = program.parent / "out32"
    assert main(["diff", str(shorter), str(profile.directory), "--rounds", "0", "--json", "--fail-if-larger", "1"]) == REGRESSION
    larger = json.loads(capsys.readouterr().out)["gates"]["larger"]
    assert larger["failed"] and larger["tuned_peak_bytes"] == profile.summary["memory"]["peak_bytes"] > larger["base_peak_bytes"]
