"""`tracelink tune` and `tracelink diff` with the real compiler, runtime and measurements (no mocks).

The program is one 256^3 f32 matmul + bias + relu layer. Its "base" build is compiled with a tuning
spec that forces a poor tile config, so tuning has a real, large gain to find within a few trials.
"""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import iree.runtime as rt
import numpy as np
import pytest
from iree.compiler import ir
from lxml import html as lxml_html

from tests.conftest import EXAMPLES, run_profile
from tests.test_json_output import validated
from tracelink.errors import TracelinkError
from tracelink.compile import CompileOptions
from tracelink.profile_dir.profile import load_profile
from tracelink.report.html import render_report
from tracelink.tools import tool_path
from tracelink.tune.candidates import materialize
from tracelink.tune.config import TuneConfig
from tracelink.tune.dispatch import config_fields, is_root, load_dispatch, walk
from tracelink.compare.diff import diff_profiles
from tracelink.tune.model import History
from tracelink.tune.measure import MeasureOptions, Measurer, build, make_pool
from tracelink.aggregate.speedup import NOT_SIGNIFICANT
from tracelink.tune.program_check import FLAG_BASELINES, composable_with, validate_in_program
from tracelink.tune.targets import Outcome, select_targets
from tracelink.tune.schedule import TaskProgress, expected_gain, next_task
from tracelink.tune.space import SpaceOptions, TileSpace
from tracelink.tune.spec import Choice, check_applied, write_configurations, write_spec, write_tuning
from tracelink.tune.tuners import make_tuner, search
from tracelink.tune.tuners.loop import no_report

TRACELINK = [sys.executable, "-m", "tracelink.commands.cli"]
TARGET = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
          "--iree-llvmcpu-target-cpu=host"]

LAYER = """
#bias_map = affine_map<(d0, d1) -> (d1)>
#id_map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>, %b: tensor<256xf32>) -> tensor<256x256xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x256xf32>) -> tensor<256x256xf32> loc("fc"("net.py":3:5))
  %mm = linalg.matmul ins(%x, %w : tensor<256x256xf32>, tensor<256x256xf32>)
                      outs(%acc : tensor<256x256xf32>) -> tensor<256x256xf32> loc("fc"("net.py":3:5))
  %y = linalg.generic {indexing_maps = [#id_map, #bias_map, #id_map], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<256x256xf32>, tensor<256xf32>) outs(%empty : tensor<256x256xf32>) {
  ^bb0(%v: f32, %c: f32, %out: f32):
    %s = arith.addf %v, %c : f32 loc("bias"("net.py":4:5))
    %r = arith.maximumf %s, %zero : f32 loc("relu"("net.py":5:5))
    linalg.yield %r : f32
  } -> tensor<256x256xf32> loc("relu"("net.py":5:5))
  return %y : tensor<256x256xf32>
}
"""

# The same layer after an extra elementwise op on the input: the dispatches are numbered and fused
# differently, the layer's source locations are the same.
PRESCALED = LAYER.replace(
    "  %zero = arith.constant 0.0 : f32\n",
    "  %zero = arith.constant 0.0 : f32\n"
    "  %xs = linalg.generic {indexing_maps = [#id_map, #id_map], iterator_types = [\"parallel\", \"parallel\"]}\n"
    "      ins(%x : tensor<256x256xf32>) outs(%x : tensor<256x256xf32>) {\n"
    "  ^bb0(%v: f32, %o: f32):\n"
    "    %m = arith.mulf %v, %v : f32 loc(\"scale\"(\"net.py\":2:5))\n"
    "    linalg.yield %m : f32\n"
    "  } -> tensor<256x256xf32> loc(\"scale\"(\"net.py\":2:5))\n",
).replace("ins(%x, %w :", "ins(%xs, %w :")

POOR = {"distribution": [16, 16, 0], "vector_common_parallel": [4, 4, 0], "vector_reduction": [0, 0, 1]}
SMALL_SPACE = """
[space]
distribution_m = [32, 64]
distribution_n = [32, 64]
vector_m = [8]
vector_n = [16, 32]
vector_k = [4, 16]

[measure]
repetitions = 5

[select]
confirm_top = 2
confirm_rounds = 8
# the flag baselines' decision has a test of its own; here the spec is always handed over
baselines = false
"""


def run_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*TRACELINK, *args], capture_output=True, text=True, timeout=600, **kwargs)


def error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    assert lines and lines[-1].startswith("tracelink: error:"), done.stderr
    return lines[-1]


def dumped_benchmark(program: Path, dump: Path, *flags: str) -> Path:
    dump.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool_path("iree-compile"), str(program), "-o", str(dump / "app.vmfb"), *TARGET, *flags,
                    f"--iree-hal-dump-executable-benchmarks-to={dump}"], check=True, capture_output=True)
    return next(dump.glob("*_benchmark.mlir"))


def root_configs(path: Path) -> list[dict]:
    """The lowering configs of the root ops of one dumped executable."""
    module = ir.Module.parseFile(str(path), ir.Context())
    return [config_fields(op.attributes["lowering_config"]) for op in walk(module.operation) if is_root(op)]


def configured_roots(dump: Path) -> list[dict]:
    return [config for path in dump.glob("configured_*.mlir") for config in root_configs(path)]


def assert_tuned_build_computes_the_same(base: Path, function: str) -> None:
    """The program compiled with the tuning (``tune/spec_check``) gives the profiled build's outputs."""
    inputs = [np.load(path) for path in sorted((base / "artifacts" / "inputs").glob("input_*.npy"))]
    outputs = [getattr(rt.load_vm_flatbuffer_file(str(vmfb), driver="local-task"), function)(*inputs).to_host()
               for vmfb in (base / "artifacts" / "app.vmfb", base / "tune" / "spec_check" / "app.vmfb")]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """The program, a spec forcing the poor config, and the base profile built with it."""
    root = tmp_path_factory.mktemp("tune")
    program = root / "layer.mlir"
    program.write_text(LAYER)
    benchmark = dumped_benchmark(program, root / "dump")
    dispatch = load_dispatch(benchmark)
    poor_spec = write_spec([Choice(dispatch, POOR)], root / "poor_spec.mlir")
    base = root / "base"
    run_profile(program, base, repetitions=10, compile=CompileOptions(tuning_spec=poor_spec))
    # with a tuning spec the compiler runs on one thread (iree_tools.SINGLE_THREAD_FLAG)
    assert "--mlir-disable-threading" in (base / "artifacts" / "compile.log").read_text().split("\n", 1)[0]
    config = root / "tune.toml"
    config.write_text(SMALL_SPACE)
    return {"root": root, "program": program, "benchmark": benchmark, "dispatch": dispatch, "base": base,
            "config": config}


def test_space_respects_shapes_constraints_and_user_ranges(work):
    dispatch = work["dispatch"]
    assert dispatch.root_op == "linalg.matmul" and [loop.size for loop in dispatch.loops] == [256, 256, 256]
    space = TileSpace(dispatch)
    assert space.default_point in space.index
    for point in space.points:
        distribution, vector = space.tiles(point)
        assert all(d % v == 0 and 256 % d == 0 for d, v in zip(distribution[:2], vector[:2]))
        facts = space.derived(point)
        assert facts["register_bytes"] <= space.options.register_bytes and facts["workgroups"] >= 2
    narrow = TileSpace(dispatch, SpaceOptions(values={"vector_k": [4, 8], "distribution_m": [64]}))
    assert {narrow.knob_values(i)["vector_k"] for i in range(len(narrow))} == {4, 8}
    with pytest.raises(TracelinkError, match="search space is empty"):
        TileSpace(dispatch, SpaceOptions(values={"vector_m": [64], "vector_n": [64]}))


def test_tuners_propose_each_point_once_and_stop_early(work):
    """The search loop over a deterministic objective of the real space (the vector-level intensity)."""
    space = TileSpace(work["dispatch"], SpaceOptions(max_ratio=4))
    score = np.array([space.derived(p)["intensity"] for p in space.points])
    for name in ("xgb", "random", "grid"):
        tuner = make_tuner(name, space, seed=1, budget=40)
        proposed: list[int] = []

        def measure(indices: list[int]) -> list[float]:
            proposed.extend(indices)
            return [float(score[i]) for i in indices]

        result = search(tuner, measure, n_trial=40, batch_size=8)
        assert result.trials == 40 and len(set(proposed)) == 40
        assert result.best_throughput == max(score[i] for i in proposed)
    # early stopping: a flat objective never improves after the first trial
    result = search(make_tuner("random", space), lambda indices: [1.0] * len(indices), n_trial=100, batch_size=4,
                    early_stopping=8)
    assert result.stopped_early and result.trials < 20


def test_candidates_compile_verify_and_time(work, tmp_path):
    pool = make_pool(2)
    try:
        measurer = Measurer(work["dispatch"], tmp_path, MeasureOptions(repetitions=3), pool)
        default = measurer.measure_default()
        assert default.ok and default.timing.median > 0
        space = TileSpace(work["dispatch"], SpaceOptions(values={"distribution_m": [64], "distribution_n": [64],
                                                                 "vector_m": [8], "vector_n": [16, 32], "vector_k": [4]}))
        entries = [(i + 1, "test", space.knob_values(i), space.config(i)) for i in range(len(space))]
        trials = measurer.measure(entries)
    finally:
        pool.shutdown()
    assert len(trials) == 2
    for trial in trials:
        assert trial.verification == "ok", trial.error
        assert trial.timing.median > 0 and trial.gflops > 0
        low, high = trial.timing.ci()
        assert low <= trial.timing.median <= high


TWO_RESULTS = """
func.func @main(%a: tensor<4x64x128xf32>, %b: tensor<4x128x32xf32>, %c: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<4x64x32xf32>) {
  %d = arith.addf %c, %c : tensor<64x32xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x64x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x64x32xf32>) -> tensor<4x64x32xf32>
  %bm = linalg.batch_matmul ins(%a, %b : tensor<4x64x128xf32>, tensor<4x128x32xf32>) outs(%f : tensor<4x64x32xf32>) -> tensor<4x64x32xf32>
  return %d, %bm : tensor<64x32xf32>, tensor<4x64x32xf32>
}
"""


def test_verification_harness_computes_the_dispatch(tmp_path):
    """The verify entry point feeds the real bindings, including an output at an offset into a shared buffer."""
    program = tmp_path / "two.mlir"
    program.write_text(TWO_RESULTS)
    dumped_benchmark(program, tmp_path / "dump")
    dispatch = load_dispatch(next((tmp_path / "dump").glob("*dispatch_1*_benchmark.mlir")))
    assert dispatch.root_op == "linalg.batch_matmul" and dispatch.bindings[-1].offset > 0
    pool = make_pool(1)
    try:
        measurer = Measurer(dispatch, tmp_path / "work", MeasureOptions(repetitions=2), pool)
        measurer.measure_default()
    finally:
        pool.shutdown()
    a, b = (np.load(path) for path in measurer.inputs[:2])
    np.testing.assert_allclose(measurer.reference[0], np.matmul(a, b), rtol=1e-4, atol=1e-4)


def test_candidate_computing_something_else_is_rejected(work, tmp_path):
    """A candidate whose dispatch computes relu(x) with threshold 0.5 instead of 0 fails verification."""
    pool = make_pool(1)
    try:
        measurer = Measurer(work["dispatch"], tmp_path, MeasureOptions(repetitions=3), pool)
        measurer.measure_default()
    finally:
        pool.shutdown()
    fields = {"distribution": [64, 64, 0], "vector_common_parallel": [8, 16, 0], "vector_reduction": [0, 0, 4]}
    source = materialize(work["benchmark"], fields, tmp_path / "wrong.mlir")
    module = ir.Module.parseFile(str(source), ir.Context())
    changed = 0
    with module.context, ir.Location.unknown():
        for op in walk(module.operation):
            if op.name == "arith.constant" and str(op.results[0].type) == "f32":
                op.attributes["value"] = ir.FloatAttr.get(ir.F32Type.get(), 0.5)
                changed += 1
    assert changed
    source.write_text(str(module))
    subprocess.run([tool_path("iree-compile"), str(source), "-o", str(tmp_path / "wrong.vmfb")], check=True)
    trial = measurer.verify_and_time(tmp_path / "wrong.vmfb", 1, "test", {}, "wrong")
    assert trial.verification == "mismatch" and "differ" in trial.error
    assert not trial.ok and trial.timing is None and trial.gflops == 0
    # the same config left intact verifies
    error, _ = build(str(work["benchmark"]), fields, str(tmp_path / "right.mlir"), str(tmp_path / "right.vmfb"), 300)
    assert not error
    assert measurer.verify_and_time(tmp_path / "right.vmfb", 2, "test", {}, "right").verification == "ok"


@pytest.fixture(scope="module")
def tuned(work):
    """`tracelink tune` run once on the base profile: (spec path, the command's result)."""
    spec = work["root"] / "spec.mlir"
    done = run_cli("tune", str(work["base"]), "--no-strategies", "--trials", "6", "--tuner", "xgb", "--config", str(work["config"]), "-o", str(spec))
    return spec, done


def test_tune_writes_a_spec_that_applies_to_the_whole_program(work, tuned):
    base, (spec, done) = work["base"], tuned
    assert done.returncode == 0, done.stderr
    assert "in the spec" in done.stdout and spec.is_file()
    rows = list(csv.DictReader((base / "tune" / "trials.csv").open()))
    assert rows[0]["tuner"] == "default" and len(rows) == 7
    assert {"dispatch", "configuration", "runtime_ms", "gflops", "verification", "trial", "tuner"} <= set(rows[0])
    assert all(row["verification"] == "ok" for row in rows)
    summary = list(csv.DictReader((base / "tune" / "summary.csv").open()))
    assert summary[0]["selected"] == "True" and float(summary[0]["ci_low"]) > 1
    # both are views of the record log: a tile record per trial, a dispatch record per summary row
    records = [json.loads(line) for line in (base / "tune" / "records.jsonl").read_text().splitlines()]
    assert [r["trial"] for r in records if r["kind"] == "tile"] == [int(row["trial"]) for row in rows]
    assert [(r["export"], r["selected"]) for r in records if r["kind"] == "dispatch"] == [(summary[0]["export"], True)]
    chosen = config_fields(ir.Attribute.parse(summary[0]["configuration"], ir.Context()))
    # compile the whole program with the spec: the configured dump carries the chosen config
    dump = work["root"] / "with_spec"
    dump.mkdir()
    subprocess.run([tool_path("iree-compile"), str(work["program"]), "-o", str(dump / "app.vmfb"), *TARGET,
                    f"--iree-codegen-tuning-spec-path={spec}", f"--iree-hal-dump-executable-configurations-to={dump}"],
                   check=True, capture_output=True)
    assert configured_roots(dump) == [chosen]

    # --resume continues numbering and keeps the earlier trials (in a copy: the base keeps this tune's
    # results and spec for the report test); without the in-program checks, which the first run made
    resumed = Path(shutil.copytree(base, work["root"] / "resumed"))
    done = run_cli("tune", str(resumed), "--no-strategies", "--trials", "8", "--config", str(work["config"]), "--resume",
                   "--rounds", "0", "-o", str(work["root"] / "resumed_spec.mlir"))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((resumed / "tune" / "trials.csv").open()))
    assert [int(r["trial"]) for r in rows] == list(range(9))


def test_diff_after_tuning_shows_the_gain_on_the_source_line(work, tuned, tmp_path):
    spec, done = tuned
    assert done.returncode == 0, done.stderr
    tuned = work["root"] / "tuned"
    run_profile(work["program"], tuned, repetitions=10, compile=CompileOptions(tuning_spec=spec))
    done = run_cli("diff", str(work["base"]), str(tuned), "--json")
    assert done.returncode == 0, done.stderr
    diff = json.loads(done.stdout)  # diff_profiles' table and end-to-end figures, as --json prints them
    fc = next(op for op in diff["source_ops"] if op["label"].startswith("fc @ net.py:3"))
    assert fc["file"] == "net.py" and fc["line"] == 3
    assert fc["speedup"] > 1 and fc["ci_low"] > 1, fc
    assert diff["end_to_end"]["ci_low"] > 1
    header = (tuned / "diff.csv").read_text().splitlines()[0].split(",")
    assert header[:8] == ["label", "file", "line", "base_ns", "tuned_ns", "speedup", "ci_low", "ci_high"]
    # the tuned profile's report shows tune's own result next to the diff, on the tuned dispatch's lines
    summary = list(csv.DictReader((work["base"] / "tune" / "summary.csv").open()))[0]
    page = lxml_html.fromstring(render_report(load_profile(tuned)))
    row = page.get_element_by_id("tune-table").xpath(f".//tr[@data-export='{summary['export']}']")[0]
    assert float(row.get("data-isolated")) == pytest.approx(float(summary["speedup"]), rel=1e-5)
    assert float(row.get("data-in-program")) == pytest.approx(float(summary["program_speedup"]), rel=1e-5)
    assert f"{float(summary['program_speedup']):.2f}×" in row.text_content()
    assert "net.py:3" in [link.text for link in row.xpath(".//a[@data-k]")]
    badges = page.xpath(f"//span[@class='tuned'][@data-export='{summary['export']}']")
    assert badges and all(float(b.get("data-in-program")) == pytest.approx(float(summary["program_speedup"]), rel=1e-5)
                          for b in badges)
    # a damaged summary.csv: the report says so and still shows the diff
    damaged = Path(shutil.copytree(tuned, tmp_path / "tuned"))
    (tmp_path / "base" / "tune").mkdir(parents=True)
    (tmp_path / "base" / "tune" / "summary.csv").write_text('export,speedup\n"cut off,1\n')
    (damaged / "diff.json").write_text((tuned / "diff.json").read_text().replace(str(work["base"].resolve()), str(tmp_path / "base")))
    page = lxml_html.fromstring(render_report(load_profile(damaged)))
    assert not page.xpath("//*[@id='tune-table']") and page.xpath("//*[@id='gains-table']")
    assert "tune's summary is present but not used" in page.text_content()


def test_diff_matches_source_ops_across_different_dispatches(work):
    variant = work["root"] / "prescaled.mlir"
    variant.write_text(PRESCALED)
    other = work["root"] / "prescaled_profile"
    run_profile(variant, other, repetitions=5)
    base_exports = set(pd_read(work["base"] / "exports.csv")["export"])
    other_exports = set(pd_read(other / "exports.csv")["export"])
    assert base_exports != other_exports  # dispatch names differ between the builds
    frame = diff_profiles(work["base"], other, rounds=0).set_index("label")
    for label in ("fc @ net.py:3:5", "relu @ net.py:5:5"):
        assert np.isfinite(frame.loc[label, "base_ns"]) and np.isfinite(frame.loc[label, "tuned_ns"])
    assert np.isnan(frame.loc["scale @ net.py:2:5", "base_ns"])  # only in the second build


def pd_read(path: Path):
    import pandas as pd

    return pd.read_csv(path)


def fresh_copy(profile: Path, where: Path) -> Path:
    """A copy of a profile directory without its tune/ results."""
    return Path(shutil.copytree(profile, where / profile.name, ignore=shutil.ignore_patterns("tune")))


def test_interrupt_keeps_finished_trials(work, tmp_path):
    base = fresh_copy(work["base"], tmp_path)
    trials = base / "tune" / "trials.csv"
    config = tmp_path / "quick.toml"
    config.write_text("[search]\nbatch_size = 2\n[measure]\nrepetitions = 3\n")
    process = subprocess.Popen([*TRACELINK, "tune", str(base), "--no-strategies", "--trials", "200", "--tuner", "random",
                                "--config", str(config), "-o", str(tmp_path / "spec.mlir")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not trials.exists() or len(trials.read_text().splitlines()) < 4):
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "--resume" in err
    rows = list(csv.DictReader(trials.open()))
    assert len(rows) >= 3 and rows[0]["tuner"] == "default"


def test_bad_input_is_one_clear_line(work, tmp_path):
    # no tunable root op: an elementwise-only program
    program = tmp_path / "add.mlir"
    program.write_text("func.func @main(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {\n"
                       "  %r = arith.addf %a, %b : tensor<64xf32>\n"
                       "  return %r : tensor<64xf32>\n}\n")
    run_profile(program, tmp_path / "add", repetitions=2)
    assert "no tunable dispatch" in error_line(run_cli("tune", str(tmp_path / "add"), "--no-strategies"))
    # an empty space
    config = tmp_path / "empty.toml"
    config.write_text("[space]\nvector_m = [64]\nvector_n = [64]\n")
    base = fresh_copy(work["base"], tmp_path)
    line = error_line(run_cli("tune", str(base), "--no-strategies", "--config", str(config), "-o", str(tmp_path / "s.mlir")))
    assert "search space is empty" in line
    # not a profile directory
    assert "not a profile directory" in error_line(run_cli("diff", str(tmp_path), str(base)))
    # an unknown key names the file
    config.write_text("[space]\ntile_q = [1]\n")
    assert "empty.toml" in error_line(run_cli("tune", str(base), "--no-strategies", "--config", str(config)))
    # every candidate failing to compile: logged per trial, then one error
    config.write_text("[space]\nmax_vector_bytes = 100000000\nregister_bytes = 100000000\ndistribution_m = [64]\n"
                      "distribution_n = [64]\nvector_m = [32]\nvector_n = [32, 64]\nvector_k = [64]\n")
    out = tmp_path / "failing"
    line = error_line(run_cli("tune", str(base), "--no-strategies", "--config", str(config), "-o", str(out / "s.mlir")))
    assert "every candidate failed" in line
    rows = list(csv.DictReader((base / "tune" / "trials.csv").open()))
    failed = [r for r in rows if r["tuner"] != "default"]
    assert failed and all(r["verification"] == "compile_error" and "iree-compile failed" in r["error"] for r in failed)


def test_a_a_diff_is_not_significant(work, tmp_path):
    """Two profiles of the same program: recorded alone they claim nothing; re-run alternately, no difference."""
    again = tmp_path / "again"
    run_profile(work["program"], again, repetitions=10, compile=CompileOptions(tuning_spec=work["root"] / "poor_spec.mlir"))
    recorded = diff_profiles(work["base"], again, rounds=0).attrs["end_to_end"]
    assert np.isnan(recorded["ci_low"]) and recorded["verdict"].startswith("not tested")
    # A 95 % interval excludes 1 in 5 % of A/A comparisons by construction; twice in a row (0.25 %)
    # means the interval is too narrow.
    verdicts = []
    for _ in range(2):
        total = diff_profiles(work["base"], again, rounds=4, iterations=10).attrs["end_to_end"]
        assert total["rounds"] == 4 and total["ci_low"] < total["speedup"] < total["ci_high"]
        verdicts.append(total["verdict"])
        if total["verdict"] == NOT_SIGNIFICANT:
            break
    assert NOT_SIGNIFICANT in verdicts, verdicts


def test_candidate_timed_above_the_peak_is_rejected(work, tmp_path):
    pool = make_pool(1)
    try:
        measurer = Measurer(work["dispatch"], tmp_path, MeasureOptions(repetitions=3), pool)
        default = measurer.measure_default()
        assert 0 < default.gflops <= measurer.max_gflops  # the measured peak bounds the real default
        fields = {"distribution": [64, 64, 0], "vector_common_parallel": [8, 16, 0], "vector_reduction": [0, 0, 4]}
        error, _ = build(str(work["benchmark"]), fields, str(tmp_path / "c.mlir"), str(tmp_path / "c.vmfb"), 300)
        assert not error
        measurer.max_gflops = default.gflops / 1000  # a peak this candidate's timing must exceed
        trial = measurer.verify_and_time(tmp_path / "c.vmfb", 1, "test", {}, "c")
    finally:
        pool.shutdown()
    assert trial.verification == "above_peak" and not trial.ok and "peak" in trial.error


CHAIN = """
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>, %v: tensor<64xf32>) -> (tensor<64x64xf32>, tensor<64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %a : f32
    linalg.yield %m : f32
  } -> tensor<64x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %m1 = linalg.matmul ins(%sq, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %t1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m1 : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  %m2 = linalg.matmul ins(%t1, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %t2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m2 : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<64x64xf32>
  %m3 = linalg.matmul ins(%t2, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %ev = tensor.empty() : tensor<64xf32>
  %accv = linalg.fill ins(%zero : f32) outs(%ev : tensor<64xf32>) -> tensor<64xf32>
  %vm = linalg.vecmat ins(%v, %w : tensor<64xf32>, tensor<64x64xf32>) outs(%accv : tensor<64xf32>) -> tensor<64xf32>
  return %m3, %vm : tensor<64x64xf32>, tensor<64xf32>
}
"""


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Path:
    """A program whose deduplicated matmul+tanh dispatch writes at a push-constant offset, plus a vecmat."""
    root = tmp_path_factory.mktemp("chain")
    program = root / "chain.mlir"
    program.write_text(CHAIN)
    dumped_benchmark(program, root / "dump")
    return root


def measured_default(dispatch, workdir: Path) -> Measurer:
    pool = make_pool(1)
    try:
        measurer = Measurer(dispatch, workdir, MeasureOptions(repetitions=2), pool)
        measurer.measure_default()
    finally:
        pool.shutdown()
    return measurer


def test_push_constant_binding_offset_is_tunable(chain, tmp_path):
    dispatches = [load_dispatch(path) for path in (chain / "dump").glob("*_benchmark.mlir")
                  if "tanh" in path.read_text() and "constant.load" in path.read_text()]
    assert dispatches, "the program no longer yields a push-constant offset"
    dispatch = dispatches[0]
    written = [b for b in dispatch.bindings if not b.readonly]
    assert dispatch.constants and written[0].offset in dispatch.constants  # the offset comes from a constant
    measurer = measured_default(dispatch, tmp_path)
    a, w = (np.load(measurer.inputs[b.index]).reshape(-1)[b.offset // 4:][:64 * 64].reshape(64, 64)
            for b in dispatch.bindings if b.readonly)
    np.testing.assert_allclose(measurer.reference[0], np.tanh(a @ w), rtol=1e-4, atol=1e-4)


def test_vecmat_is_tuned_like_a_contraction(chain, tmp_path):
    path = next(p for p in (chain / "dump").glob("*_benchmark.mlir") if "linalg.vecmat" in p.read_text())
    dispatch = load_dispatch(path)
    assert dispatch.root_op == "linalg.vecmat" and [(l.role, l.size) for l in dispatch.loops] == [("n", 64), ("k", 64)]
    assert len(TileSpace(dispatch)) > 1
    measurer = measured_default(dispatch, tmp_path)
    v, w = (np.load(p) for p in measurer.inputs[:2])
    np.testing.assert_allclose(measurer.reference[0], v @ w, rtol=1e-4, atol=1e-4)


def test_tune_states_the_tunable_share_and_skips_in_one_line(chain, tmp_path):
    profile = tmp_path / "profile"
    run_profile(chain / "chain.mlir", profile, repetitions=3)
    config = tmp_path / "small.toml"
    config.write_text("[search]\nbatch_size = 2\n[measure]\nrepetitions = 2\n[select]\nconfirm_rounds = 6\n")
    done = run_cli("tune", str(profile), "--no-strategies", "--trials", "2", "--top", "1", "--rounds", "0", "--config", str(config), "--json")
    assert "Traceback" not in done.stderr, done.stderr
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped ")]
    assert any("no tunable root op" in line for line in skipped), done.stderr
    share = next(line for line in done.stderr.splitlines() if line.startswith("tunable: "))
    assert 0 < float(share.split()[1].rstrip("%")) < 100
    document = validated(done.stdout)  # --json: the one document on stdout
    assert document["command"] == "tune" and [d["trials"] for d in document["dispatches"]] == [2]


# A poor config for the convnet's 3x3 convolutions (batch, img0, img1, oc, filter0, filter1, ic), so
# tuning has a large gain to find within a few trials.
POOR_CONV = {"distribution": [0, 2, 4, 2, 0, 0, 0], "vector_common_parallel": [1, 1, 1, 1, 0, 0, 0],
             "vector_reduction": [0, 0, 0, 0, 1, 1, 1]}


def test_convnet_hottest_convolution_is_tuned_applied_and_verified(tmp_path):
    # IREE folds the unit batch of these convolutions before a spec could match them and restores it
    # after, dropping the spec's config: they are tuned through their configured executables.
    program = EXAMPLES / "convnet.mlir"
    dump = tmp_path / "dump"
    dumped_benchmark(program, dump)
    conv = load_dispatch(next(dump.glob("*dispatch_1_*_benchmark.mlir")))
    assert conv.kind == "convolution" and conv.loops[0].role == "batch"
    poor = write_configurations([Choice(conv, POOR_CONV)], tmp_path / "poor")
    base = tmp_path / "base"
    run_profile(program, base, repetitions=10,
                compile=CompileOptions(extra_flags=[f"--iree-hal-substitute-executable-configurations-from={poor}"]))
    config = tmp_path / "small.toml"
    config.write_text("[space]\ndistribution_img0 = [4, 8]\ndistribution_img1 = [32]\ndistribution_oc = [16]\n"
                      "vector_img1 = [4, 8]\nvector_oc = [4, 8]\nvector_ic = [8]\n"  # near IREE's default
                      "[search]\nbatch_size = 2\n[measure]\nrepetitions = 3\n[select]\nconfirm_top = 2\nconfirm_rounds = 6\n")
    done = run_cli("tune", str(base), "--no-strategies", "--top", "1", "--trials", "4", "--rounds", "0", "--config", str(config))
    assert done.returncode == 0, done.stderr
    share = next(line for line in done.stderr.splitlines() if line.startswith("tunable: "))
    assert float(share.split()[1].rstrip("%")) > 90, done.stderr  # the convolutions are most of the time
    summary = list(csv.DictReader((base / "tune" / "summary.csv").open()))
    assert summary[0]["export"] == conv.export and summary[0]["selected"] == "True", summary
    chosen = config_fields(ir.Attribute.parse(summary[0]["configuration"], ir.Context()))
    # block 3's convolution is the same op in an executable of its own (its consumer differs): it gets
    # the config too
    twin = load_dispatch(next(dump.glob("*dispatch_3_*_benchmark.mlir")))
    assert summary[0]["shared_with"] == twin.export
    for executable in (conv.executable, twin.executable):
        assert (base / "tune" / "configurations" / f"{executable}.mlir").is_file()
    assert "--iree-hal-substitute-executable-configurations-from=" in done.stdout
    # the program compiled with the tuning runs the chosen config (the dump written after substitution) ...
    configured = base / "tune" / "spec_check" / "configured"
    for number in (1, 3):
        assert root_configs(next(configured.glob(f"*dispatch_{number}_*_benchmark.mlir"))) == [chosen]
    # ... and computes what the profiled build computes
    assert_tuned_build_computes_the_same(base, "convnet")


# A 1x1 stride-2 convolution whose filter is a splat constant, as in the downsampling branches of a
# ResNet with folded weights: IREE folds the filter into the body and runs a strided sum over the input
# channels, broadcast to every output channel (d0, which the input does not index). IREE vectorises it
# along the innermost parallel loop (strided loads); a vector along d0 is one broadcast sum.
SPLAT_FILTER_CONV = """
func.func @forward(%x: tensor<1x64x56x56xf32>) -> tensor<1x128x28x28xf32> {
  %w = arith.constant dense<0.01> : tensor<128x64x1x1xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x128x28x28xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x128x28x28xf32>) -> tensor<1x128x28x28xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%x, %w : tensor<1x64x56x56xf32>, tensor<128x64x1x1xf32>) outs(%f : tensor<1x128x28x28xf32>) -> tensor<1x128x28x28xf32>
  return %c : tensor<1x128x28x28xf32>
}
"""


def test_a_reduction_generic_is_tuned_through_its_configured_executable(tmp_path):
    program = tmp_path / "splat_conv.mlir"
    program.write_text(SPLAT_FILTER_CONV)
    reduction = load_dispatch(dumped_benchmark(program, tmp_path / "dump"))
    assert reduction.kind == "reduction" and reduction.delivery == "configuration"
    assert [(loop.role, loop.kind) for loop in reduction.loops] == [("p0", "parallel"), ("p1", "parallel"), ("p2", "parallel"), ("r", "reduction")]
    # one sum per point of the input, broadcast to the 128 output channels: FLOPs (and the above-peak
    # bound a candidate is checked against) count the sum once
    assert reduction.flops == 2 * 28 * 28 * 64
    # the loop IREE leaves scalar (vector tile 1) is a knob of the space
    assert reduction.default_config["vector_common_parallel"][0] == 1
    assert 16 in next(knob.values for knob in TileSpace(reduction).knobs if knob.name == "vector_p0")
    base = tmp_path / "base"
    run_profile(program, base, repetitions=10)
    config = tmp_path / "small.toml"
    config.write_text("[space]\ndistribution_p0 = [16]\ndistribution_p1 = [14]\ndistribution_p2 = [28]\n"
                      "vector_p0 = [8, 16]\nvector_p1 = [1]\nvector_p2 = [1, 4]\n"
                      "[search]\nbatch_size = 2\n[measure]\nrepetitions = 3\n[select]\nconfirm_top = 2\nconfirm_rounds = 6\n")
    done = run_cli("tune", str(base), "--no-strategies", "--top", "1", "--trials", "4", "--rounds", "0", "--config", str(config))
    assert done.returncode == 0, done.stderr
    summary = list(csv.DictReader((base / "tune" / "summary.csv").open()))
    assert summary[0]["export"] == reduction.export and summary[0]["selected"] == "True", summary
    chosen = config_fields(ir.Attribute.parse(summary[0]["configuration"], ir.Context()))
    assert chosen["vector_common_parallel"][0] in (8, 16)
    assert (base / "tune" / "configurations" / f"{reduction.executable}.mlir").is_file()
    assert not (base / "tune" / "spec.mlir").exists()  # no spec matcher for a reduction: nothing to match
    # the program compiled with the tuning runs the chosen config and computes what the profiled build computes
    assert root_configs(next((base / "tune" / "spec_check" / "configured").glob("*_benchmark.mlir"))) == [chosen]
    assert_tuned_build_computes_the_same(base, "forward")


# A weight computed from constants: with const-eval off, IREE hoists its matmul into an initializer
# that runs once at load; the function's own matmul is the only run-time dispatch.
HOISTED = """
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %a = arith.constant dense<0.5> : tensor<64x96xf32>
  %b = arith.constant dense<0.25> : tensor<96x64xf32>
  %e = tensor.empty() : tensor<64x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %w = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x64xf32>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  %y = linalg.matmul ins(%x, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
"""


def test_an_initializer_only_dispatch_is_never_a_target(tmp_path):
    program = tmp_path / "hoisted.mlir"
    program.write_text(HOISTED)
    profile = run_profile(program, tmp_path / "profile", repetitions=3,
                          compile=CompileOptions(extra_flags=["--iree-opt-const-eval=false"]))
    phases = dict(zip(profile.call_sites["export"], profile.call_sites["phase"]))
    hoisted = next(export for export, phase in phases.items() if phase == "initializer")
    targets, _, skipped, share = select_targets(profile.exports, profile.call_sites, profile.artifacts, 5, None)
    assert [t.export for t in targets] == [next(e for e, p in phases.items() if p == "run")]
    assert share == pytest.approx(1.0)  # of the run's time, all of it in the tunable matmul
    reason = next(t.reason for t in skipped if t.export == hoisted)
    assert "initializer-only" in reason


def test_a_config_that_loses_inside_the_program_is_rejected(work, tmp_path):
    # Taken as an isolated winner (2x), a scalar config that is slower than the base build's: the
    # per-config check builds the program with it, times the dispatch in both builds alternately
    # under the HAL profiler, and drops it.
    profile = load_profile(work["base"])
    scalar = {"distribution": [16, 16, 0], "vector_common_parallel": [1, 1, 0], "vector_reduction": [0, 0, 1]}
    choice = Choice(work["dispatch"], scalar, 2.0)
    outcome = Outcome(work["dispatch"].export, 1.0, speedup=2.0, selected=True, dispatch=work["dispatch"])
    missed, vmfb = check_applied(work["program"], profile.manifest["compiler"]["flags"],
                                 write_tuning([choice], tmp_path / "tuning"), [choice], tmp_path / "build", 300)
    assert missed == []
    config = TuneConfig()
    config.select.validate_rounds = 3
    kept = validate_in_program(profile, [choice], [outcome], tmp_path, config, no_report, vmfb)
    assert kept == [] and not outcome.selected
    assert outcome.program_speedup < 1 and outcome.program_ci_low < 1
    assert "inside the program" in outcome.note


def test_trials_of_earlier_dispatches_plan_the_first_batch_of_the_next(work, tmp_path):
    # A history where configs with more workgroups were faster: saved, read back as another run
    # would, its model ranks a new space's configs, and the XGBoost tuner's first batch follows it.
    space = TileSpace(work["dispatch"])
    workgroups = np.array([space.derived(point)["workgroups"] for point in space.points], dtype=float)
    path = tmp_path / "history.npy"
    History(path).add(space, list(range(len(space))), list(workgroups))
    history = History(path)
    assert len(history.rows) == len(space) and history.rows[:, -1].max() == 1.0
    tuner = make_tuner("xgb", space, plan_size=4, prior=history.model(space))
    first = tuner.next_batch(4)
    assert np.mean(workgroups[first]) > np.median(workgroups)
    assert History(tmp_path / "none.npy").model(space) is None  # no history: random first batch
    # a space of one point (every knob given one value) has no neighbours to anneal over: its point is the plan
    single = TileSpace(work["dispatch"], SpaceOptions(values={"distribution_m": [64], "distribution_n": [64], "vector_m": [8],
                                                              "vector_n": [16], "vector_k": [4]}))
    assert list(make_tuner("xgb", single, plan_size=4, prior=history.model(single)).next_batch(4)) == [0]


def test_scheduler_follows_share_and_recent_improvement():
    """Rounds go by share × improvement rate: equal histories split by share, equal shares by improvement."""
    big, small = TaskProgress(0.9, [(0, 1.0)]), TaskProgress(0.1, [(0, 1.0)])
    order = []
    for _ in range(10):
        chosen = next_task([big, small])
        order.append(chosen)
        task = (big, small)[chosen]
        task.history.append((task.trials + 2, task.history[-1][1]))  # no improvement anywhere
    assert order[:2] == [0, 1] and order.count(0) >= 7  # warm-up in order, then mostly the 90 % task
    improving = TaskProgress(0.5, [(0, 1.0), (2, 0.5), (4, 0.25)])
    flat = TaskProgress(0.5, [(0, 1.0), (2, 1.0), (4, 1.0)])
    assert next_task([flat, improving]) == 1 and expected_gain(improving) > expected_gain(flat)
    flat.finished = improving.finished = True
    assert next_task([flat, improving]) is None


# A 256^3 matmul (given a poor config, so tuning finds a large gain) and a 64^3 one with ~1 % of the time.
TWO_SIZES = """
func.func @main(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>, %s: tensor<64x64xf32>) -> (tensor<256x256xf32>, tensor<64x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %big = linalg.matmul ins(%x, %w : tensor<256x256xf32>, tensor<256x256xf32>)
                       outs(%acc : tensor<256x256xf32>) -> tensor<256x256xf32> loc("big"("net.py":7:5))
  %e2 = tensor.empty() : tensor<64x64xf32>
  %acc2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %small = linalg.matmul ins(%s, %s : tensor<64x64xf32>, tensor<64x64xf32>)
                         outs(%acc2 : tensor<64x64xf32>) -> tensor<64x64xf32> loc("small"("net.py":8:5))
  return %big, %small : tensor<256x256xf32>, tensor<64x64xf32>
}
"""


def test_trials_follow_the_share_and_the_tuning_is_weighed_against_the_best_flag_baseline(tmp_path):
    program = tmp_path / "two.mlir"
    program.write_text(TWO_SIZES)
    dumped_benchmark(program, tmp_path / "dump")
    big = next(d for d in map(load_dispatch, (tmp_path / "dump").glob("*_benchmark.mlir")) if d.loops[0].size == 256)
    base = tmp_path / "base"
    run_profile(program, base, repetitions=10,
                compile=CompileOptions(tuning_spec=write_spec([Choice(big, POOR)], tmp_path / "poor.mlir")))
    config = tmp_path / "small.toml"
    config.write_text(SMALL_SPACE.replace("baselines = false", "validate_rounds = 0") + "[search]\nbatch_size = 2\n")
    done = run_cli("tune", str(base), "--no-strategies", "--top", "2", "--trials", "3", "--rounds", "8", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    document = validated(done.stdout)
    # 6 trials in rounds of 2: one round each (warm-up), the rest to the dispatch with most of the time
    # (about 99 % on a quiet machine; a loaded one has read 80 %)
    trials = {d["export"]: d["trials"] for d in document["dispatches"]}
    shares = {d["export"]: d["share"] for d in document["dispatches"]}
    assert sum(trials.values()) == 6 and shares[big.export] > 0.5
    assert trials[big.export] > trials[next(e for e in trials if e != big.export)], trials
    schedule = list(csv.DictReader((base / "tune" / "schedule.csv").open()))
    assert len(schedule) == 3 and schedule[2]["dispatch"] == big.export
    records = [json.loads(line) for line in (base / "tune" / "records.jsonl").read_text().splitlines()]
    assert [r["dispatch"] for r in records if r["kind"] == "round"] == [row["dispatch"] for row in schedule]
    # the decision follows the rounds' own numbers: the best significant flag baseline, then the faster
    # of tuning+flags and tuning alone over it when its interval lies above 1, else the flags
    whole = document["whole_program"]
    assert whole is not None and whole["ci_low"] > 1, done.stderr  # the tuned program beats the poor base
    faster = {name: b for name, b in whole["baselines"].items() if b["ci_low"] > 1}
    assert faster, whole["baselines"]  # IREE's default configs (flag builds) beat the poor base too
    best = max(faster, key=lambda name: faster[name]["speedup"])
    flags = whole["flags"]
    assert flags["baseline"] == best and f"against the best flag baseline {best}" in done.stderr
    winners = {build: flags[build]["speedup"] for build in ("tuning+flags", "tuning")
               if flags[build] is not None and flags[build]["ci_low"] > 1}
    assert flags["verdict"] == (max(winners, key=winners.get) if winners else "flags")
    assert f"verdict: {flags['verdict']}" in done.stderr
    spec = base / "tune" / "spec.mlir"
    if flags["verdict"] == "flags":
        assert document["spec"] is None and not spec.exists()
        assert f"use it: tracelink profile {program} " + " ".join(f"--compile-flag={f}" for f in flags["flags"]) in done.stderr
    else:
        assert document["spec"] == str(spec) and spec.is_file()
        assert all(f"--compile-flag={f}" in done.stderr for f in flags["flags"]) == (flags["verdict"] == "tuning+flags")


def test_when_nothing_is_tuned_the_flag_baselines_are_timed_and_reported(packed, tmp_path):
    # Scalar vector tiles only: no candidate can beat IREE's default config of the layer's 256^3 matmul, so
    # no config is kept; tune still times the flag baselines against the profiled build and says what they do.
    base = fresh_copy(packed["default"].directory, tmp_path)
    config = tmp_path / "scalar.toml"
    config.write_text("[space]\ndistribution_m = [32]\ndistribution_n = [32]\nvector_m = [1]\nvector_n = [1]\nvector_k = [1]\n"
                      "[search]\nbatch_size = 2\n[measure]\nrepetitions = 3\n[select]\nvalidate_rounds = 0\nconfirm_rounds = 6\n")
    done = run_cli("tune", str(base), "--no-strategies", "--trials", "2", "--rounds", "4", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    document = validated(done.stdout)
    assert document["spec"] is None and not any(d["selected"] for d in document["dispatches"])
    whole = document["whole_program"]
    assert whole["tuned"] is False and set(whole["baselines"]) == {"ukernels", "data-tiling", "ukernels+data-tiling"}
    assert "IREE's flag baselines against the profiled build" in done.stderr
    for name, baseline in whole["baselines"].items():
        assert baseline["rounds"] == 4 and 0 < baseline["ci_low"] <= baseline["speedup"] <= baseline["ci_high"]
        assert f"flag baseline {name}: {baseline['verdict']}" in done.stderr
    # the advice follows the rounds' own numbers: the fastest baseline whose interval lies above 1, if any
    faster = {name: b["speedup"] for name, b in whole["baselines"].items() if b["ci_low"] > 1}
    assert whole["best"] == (max(faster, key=faster.get) if faster else None)
    assert ("use it: tracelink profile" in done.stderr) == bool(faster)
    assert json.loads((base / "tune" / "program_check.json").read_text()) == whole
    records = [json.loads(line) for line in (base / "tune" / "records.jsonl").read_text().splitlines()]
    assert [r["check"] for r in records if r["kind"] == "program_check"] == [whole]  # the file is its view


def test_data_tiling_composes_with_a_tuned_reduction_not_with_a_tuned_contraction(work, tmp_path):
    # Data tiling rewrites the matmul into an mmt4d op after the spec matched it: the matmul's config
    # cannot apply and the compile fails. The reduction's configured executable composes with the flag.
    flags = FLAG_BASELINES["data-tiling"]
    profile = load_profile(work["base"])
    base_flags = profile.manifest["compiler"]["flags"]
    matmul = Choice(work["dispatch"], work["dispatch"].default_config)
    with pytest.raises(TracelinkError, match="does not compile"):
        check_applied(work["program"], [*base_flags, *flags], write_tuning([matmul], tmp_path / "matmul"), [matmul],
                      tmp_path / "matmul_build", 300)
    program = tmp_path / "splat_conv.mlir"
    program.write_text(SPLAT_FILTER_CONV)
    reduction = load_dispatch(dumped_benchmark(program, tmp_path / "dump"))
    fields = {name: list(values) for name, values in reduction.default_config.items()}
    fields["vector_common_parallel"][0] = 16
    summed = Choice(reduction, fields)
    missed, _ = check_applied(program, [*TARGET, *flags], write_tuning([summed], tmp_path / "reduction"), [summed],
                              tmp_path / "reduction_build", 300)
    assert missed == []
    # so the composition with data tiling takes the reduction and leaves the contraction to the flag
    assert composable_with([matmul, summed], flags) == [summed]
    assert composable_with([matmul, summed], FLAG_BASELINES["ukernels"]) == [matmul, summed]


# A build with data tiling and ukernels, the strategy tune most often hands over on convolution models.
PACKED_FLAGS = ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"]


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> dict:
    """The layer profiled with data tiling and ukernels, and without (the default build)."""
    root = tmp_path_factory.mktemp("packed")
    program = root / "layer.mlir"
    program.write_text(LAYER)
    return {"program": program, "root": root,
            "packed": run_profile(program, root / "packed", repetitions=3, compile=CompileOptions(extra_flags=PACKED_FLAGS)),
            "default": run_profile(program, root / "default", repetitions=3)}


def test_a_data_tiled_build_costs_its_matmul_once_and_its_packs_as_traffic(packed):
    # Data tiling adds pack dispatches after dispatch creation, at the matmul's location. Matched by
    # location alone, the first pack took the matmul's region (and its FLOPs, read as 6x the compute
    # peak) and the matmul got none. Each call site keeps its own dispatch's costs: the FLOPs of the whole
    # program are the default build's, and a pack moves the views its executable binds.
    default = packed["default"].call_sites
    root_ops = packed["packed"].exports.set_index("export")["root_op"]  # as codegen configured them
    sites = packed["packed"].call_sites.assign(root_op=lambda table: table["export"].map(root_ops))
    assert sites["flops"].sum() == default["flops"].sum() > 2 * 256**3
    matmul = sites[sites["root_op"] == "linalg.mmt4d"]
    assert len(matmul) == 1 and matmul["flops"].iloc[0] >= 2 * 256**3
    packs = sites[sites["root_op"] == "linalg.pack"]
    # x, w and the bias, each read and written once in packed form (256 is a multiple of every inner tile: no padding)
    f32 = 4
    assert (packs["flops"] == 0).all() and sorted(packs["bytes"]) == [2 * 256 * f32, 2 * 256 * 256 * f32, 2 * 256 * 256 * f32]
    assert (sites["verdict"] != "").all() and not sites["lower_bound"].any(), sites[["export", "verdict", "lower_bound"]]


def test_a_data_tiled_matmul_is_tuned_with_its_packed_inner_tiles_whole(packed, tmp_path):
    # Its root is an mmt4d whose last three loops are the packed layout's inner tiles. Configs that split
    # them computed NaN or wrong values in IREE 3.13 (a search on a data-tiled build failed every
    # candidate's verification), so the space leaves them as the default has them, and its candidates verify.
    benchmark = next(path for path in dumped_benchmark(packed["program"], tmp_path / "dump", *PACKED_FLAGS).parent.glob("*_benchmark.mlir")
                     if "linalg.mmt4d" in path.read_text())
    dispatch = load_dispatch(benchmark)
    assert dispatch.root_op == "linalg.mmt4d" and dispatch.fixed_loops == {3, 4, 5}
    space = TileSpace(dispatch)
    assert not {knob.loop for knob in space.knobs} & dispatch.fixed_loops and len(space) > 4
    picks = np.linspace(0, len(space) - 1, 4).astype(int)
    pool = make_pool(2)
    try:
        measurer = Measurer(dispatch, tmp_path / "measure", MeasureOptions(repetitions=2), pool)
        assert measurer.measure_default().ok
        trials = measurer.measure([(i + 1, "test", space.knob_values(int(p)), space.config(int(p))) for i, p in enumerate(picks)])
    finally:
        pool.shutdown()
    assert [trial.verification for trial in trials] == ["ok"] * 4, [trial.error for trial in trials]
