"""A paged LLaMA-style decoder's prefill profiled at two token counts: its memory split checked against IREE's
own tool, and the time of every line rooting a timed dispatch.

``tests/data/paged_decoder.py`` exports a small decoder with f16 weights in an ``.irpa`` archive whose
``prefill(tokens: 1x?, seq_block_ids: 1x?, cache: ?x2048xf16)`` writes each layer's keys and values into
the cache's pages in place (4,096 bytes a page), as sharktank's ``prefill_bs1`` does, and returns the
logits (``1 x tokens x 128`` f16). Its rotary embedding and norms compute in f32 and convert back, as
sharktank's LLaMA does. With ``--returned`` it returns the updated cache instead.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, run_profile
from tests.test_dynamic_memory import assert_root_lines_timed
from tests.test_memory import iree_profile_memory, one_call_bundle
from tracelink.report.summary import memory_text

EXPORT = REPO / "tests" / "data" / "paged_decoder.py"
F16 = 2
PAGE_BYTES = 2048 * F16
STRIDE, VOCAB = 16, 128  # the exporter's tokens a page and vocabulary
SIZES = [(2, 8), (6, 12)]  # (pages the tokens fill, pages of the cache)


def export(directory, *flags: str):
    """The decoder's program and parameter archive, exported into ``directory``."""
    directory.mkdir()
    program, archive = directory / "decoder.mlir", directory / "decoder.irpa"
    subprocess.run([sys.executable, str(EXPORT), str(program), str(archive), *flags], check=True, capture_output=True, timeout=300)
    return program, archive


def profile_prefill(program, archive, blocks: int, pages: int):
    """``prefill`` profiled on ``blocks`` pages of tokens (the last pages of the cache, in reverse order)."""
    ids = program.parent / f"ids{blocks}.npy"
    np.save(ids, np.arange(pages - 1, pages - 1 - blocks, -1, dtype=np.int64)[None])
    return run_profile(program, program.parent / f"out{blocks}", function="prefill", inputs=[f"1x{blocks * STRIDE}xi64=5", f"@{ids}", f"{pages}x2048xf16=0"],
                       parameters=[f"model={archive}"], repetitions=2, compare=("none",))


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    program, archive = export(tmp_path_factory.mktemp("paged_decoder") / "in_place")
    return {blocks: profile_prefill(program, archive, blocks, pages) for blocks, pages in SIZES}


@pytest.fixture(scope="module", params=SIZES)
def profiled(request, profiles):
    blocks, pages = request.param
    return blocks * STRIDE, pages, profiles[blocks]


def test_the_split_names_the_cache_and_adds_up_to_iree_high_water(profiled):
    tokens, pages, profile = profiled
    memory = profile.summary["memory"]
    split = memory["split"]
    assert memory["split_inputs"] == [{"argument": 2, "type": f"{pages}x2048xf16", "bytes": pages * PAGE_BYTES}]
    assert memory["split_outputs"] == [{"result": 0, "type": f"1x{tokens}x{VOCAB}xf16", "bytes": tokens * VOCAB * F16, "argument": None}]
    assert split["inputs"] == pages * PAGE_BYTES and split["outputs"] == tokens * VOCAB * F16
    assert split["other"] == 0 and memory["split_other"] == [] and split["transients"] > 0
    iree = iree_profile_memory(one_call_bundle(profile))
    assert sum(split.values()) == memory["peak_bytes"] == iree["high_water"]
    allocations = {(record["lifecycle_total_open_bytes"], record["open_at_end"]) for record in iree["allocations"]}
    assert allocations == {(split["outputs"], True), (split["inputs"] + split["transients"], False)}, iree["allocations"]
    # the cache is held once besides the call, though the program imports it twice
    assert memory["resident_bytes"]["inputs"] == pages * PAGE_BYTES + tokens * 8 + tokens // STRIDE * 8  # the cache, tokens and page ids


def test_the_lines_hold_the_transients_live_at_the_peak(profiled):
    tokens, pages, profile = profiled
    memory, lines = profile.summary["memory"], profile.memory_lines
    assert 0.5 * memory["split"]["transients"] <= lines["transient_bytes_at_peak"].sum() <= memory["split"]["transients"]
    assert lines["bytes_at_peak"].sum() == memory["live_at_peak_bytes"] > 0
    assert lines["file"].str.endswith("paged_decoder.py").all()
    assert len(memory["timeline_bytes"]) == (profile.call_sites["phase"] == "run").sum() and memory["attributed"]


def test_every_timed_dispatch_gives_its_root_lines_time(profiled):
    *_, profile = profiled
    assert_root_lines_timed(profile)


def test_a_returned_cache_is_counted_once_and_named(tmp_path_factory):
    # a functional cache: the call copies the argument into its second result and updates it there
    blocks, pages = SIZES[0]
    tokens = blocks * STRIDE
    program, archive = export(tmp_path_factory.mktemp("paged_decoder") / "returned", "--returned")
    profile = profile_prefill(program, archive, blocks, pages)
    memory = profile.summary["memory"]
    assert memory["split_outputs"] == [{"result": 0, "type": f"1x{tokens}x{VOCAB}xf16", "bytes": tokens * VOCAB * F16, "argument": None},
                                       {"result": 1, "type": f"{pages}x2048xf16", "bytes": pages * PAGE_BYTES, "argument": 2}]
    split = memory["split"]
    assert split["outputs"] == tokens * VOCAB * F16 + pages * PAGE_BYTES and split["inputs"] == 0 and memory["split_inputs"] == []
    assert sum(split.values()) == memory["peak_bytes"] == iree_profile_memory(one_call_bundle(profile))["high_water"]
    assert "outputs (result 1: argument 2 updated)" in memory_text(memory)
