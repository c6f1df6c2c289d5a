"""The zoo sweep (`make zoo`, tests/bench/zoo.py) on a fixed few `transformers` architectures of different
kinds, through the sweep's own code: each row says exported and profiled, its profile holds lines of the
model's own ``modeling_*.py``, a rerun skips what is done, and a model that fails (a hang, an
out-of-memory) is one row with a one-line reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))
import zoo  # noqa: E402  (a benchmark script, not a package)

# a decoder, a vision model and an audio model
ARCHITECTURES = ("gpt2", "vit", "wav2vec2")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, zoo.Row], Path]:
    out = tmp_path_factory.mktemp("zoo")
    rows = zoo.sweep(list(ARCHITECTURES), out, jobs=len(ARCHITECTURES), limits=zoo.Limits())
    return {row.architecture: row for row in rows}, out


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_each_kind_exports_and_profiles_with_its_own_lines(swept, architecture):
    rows, out = swept
    row = rows[architecture]
    assert row.exported and row.profiled and not row.failed_stage and not row.reason, row
    lines = pd.read_csv(Path(row.profile_dir) / "source_lines.csv")
    assert lines["file"].astype(str).str.endswith(f"transformers/models/{architecture}/modeling_{architecture}.py").any()
    assert row.model_lines > 0 and row.hottest_line.startswith(f"modeling_{architecture}.py:")
    # the model file the profile was made from is the user's script the sweep wrote
    assert (out / architecture / "model.py").is_file() and (out / architecture / "config.json").is_file()


def test_a_rerun_skips_the_done_rows_and_the_table_counts_them(swept):
    rows, out = swept
    results = out / zoo.RESULTS
    before = results.read_text()
    again = zoo.sweep(list(ARCHITECTURES), out, jobs=1, limits=zoo.Limits(timeout_s=1))  # a stage would time out: none runs
    assert results.read_text() == before and len(before.splitlines()) == len(ARCHITECTURES)
    assert {row.architecture for row in again if row.profiled} == set(ARCHITECTURES)
    printed = zoo.table(again, 1.0)
    assert "architectures tried      3" in printed and "profiled by tracelink    3  (100 % of exported)" in printed


def test_a_model_that_hangs_or_runs_out_of_memory_is_one_row_with_one_line(tmp_path):
    hung = zoo.sweep_one("gpt2", tmp_path / "hung", zoo.Limits(timeout_s=1))
    assert (hung.exported, hung.profiled, hung.failed_stage, hung.reason) == (False, False, "build", "timed out after 1 s")
    starved = zoo.sweep_one("vit", tmp_path / "starved", zoo.Limits(memory_bytes=64 << 20))
    assert not starved.exported and starved.failed_stage == "build"
    assert starved.reason and "\n" not in starved.reason and len(starved.reason) <= 400, starved.reason
    printed = zoo.table([hung, starved], 2.0)
    assert "failed at build: 2" in printed and "timed out after N s" in printed
    json.dumps(hung.__dict__)  # a row is a JSON line of results.jsonl


def test_a_retry_of_some_architectures_keeps_the_rows_of_the_others(tmp_path):
    quick = zoo.Limits(timeout_s=1)  # each build times out: a failed row in seconds
    zoo.sweep(["gpt2", "vit"], tmp_path, jobs=1, limits=quick)
    before = {row.architecture: row for row in zoo.load_rows(tmp_path / zoo.RESULTS)}
    zoo.sweep(["gpt2"], tmp_path, jobs=1, limits=quick, retry=("build",))
    after = zoo.load_rows(tmp_path / zoo.RESULTS)
    assert sorted(row.architecture for row in after) == ["gpt2", "vit"]
    assert next(row for row in after if row.architecture == "vit") == before["vit"]


def test_a_failure_s_cause_leaves_out_what_differs_between_models():
    first = zoo.cause("/tmp/a/model.py:make: IREE cannot lower aten.cummax (torch.operator), from /x/modeling_a.py:14; "
                      "torch has no decomposition of it (log: /tmp/a/compile.log)")
    second = zoo.cause("/tmp/b/model.py:make: IREE cannot lower aten.cummax (torch.operator), from /y/modeling_b.py:90; "
                       "torch has no decomposition of it (log: /tmp/b/compile.log)")
    assert first == second == "IREE cannot lower aten.cummax (torch.operator), from <line>; torch has no decomposition of it"


def test_a_shrunk_config_keeps_one_layer_of_each_kind_and_its_widths_consistent():
    import zoo_models

    kinds = ["linear_attention"] * 3 + ["full_attention"]
    fields = zoo_models.shrink({"num_hidden_layers": 8, "layer_types": kinds * 2, "per_layer_config": {3: "a", 7: "b"},
                                "hidden_size": 3584, "num_attention_heads": 28, "intermediate_size": 18944,
                                "rope_parameters": {"mrope_section": [16, 24, 24]}, "full_attention_layer": 7})
    assert fields["layer_types"] == ["linear_attention", "full_attention"] and fields["num_hidden_layers"] == 2
    assert fields["per_layer_config"] == {1: "a"} and fields["full_attention_layer"] == 1
    # every width divided by one power of two that divides them all: a head's size and the rotary sections still add up
    hidden, sections = fields["hidden_size"], fields["rope_parameters"]["mrope_section"]
    assert hidden % 28 == 0 and sum(sections) * 2 == hidden // 28 and 3584 // hidden == 18944 // fields["intermediate_size"]


def test_a_model_the_sweep_cannot_try_here_is_counted_apart():
    rows = [zoo.Row("a", exported=True, profiled=True), zoo.Row("b", not_tried="needs timm")]
    printed = zoo.table(rows, 1.0)
    assert "architectures tried      1  (1 more not tried" in printed and "not tried: 1" in printed and "needs timm" in printed
