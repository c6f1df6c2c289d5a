"""Several functions of one program in one profile: a prefill with a dynamic row count and a decode of
one row, both calling the same layer. One compile, each function profiled into functions/<name>/, the
top tables with a function column, and the layer's lines with each function's time side by side,
checked against each function's own HAL profile and benchmark report."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from lxml import html as lxml_html

from tracelink.collect.hal import read_records, wall_ns_per_call
from tracelink.profile_dir.profile import load_profile
from tracelink.report.json_output import SCHEMA_PATH

ROWS = 32  # the prefill's rows, a dynamic size only the run fixes
PROGRAM = """func.func private @layer(%x: tensor<?x64xf32>, %w: tensor<64x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty(%n) : tensor<?x64xf32>
  %filled = linalg.fill ins(%zero : f32) outs(%init : tensor<?x64xf32>) -> tensor<?x64xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%filled : tensor<?x64xf32>) -> tensor<?x64xf32>
  %r = tensor.empty(%n) : tensor<?x64xf32>
  %act = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<?x64xf32>) outs(%r : tensor<?x64xf32>) {
    ^bb0(%a: f32, %b: f32):
      %m = arith.maximumf %a, %zero : f32
      linalg.yield %m : f32
  } -> tensor<?x64xf32>
  return %act : tensor<?x64xf32>
}

func.func @prefill(%x: tensor<?x64xf32>, %w: tensor<64x64xf32>) -> tensor<?x64xf32> {
  %y = call @layer(%x, %w) : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %z = call @layer(%y, %w) : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  return %z : tensor<?x64xf32>
}

func.func @decode(%x: tensor<1x64xf32>, %w: tensor<64x64xf32>) -> tensor<1x64xf32> {
  %d = tensor.cast %x : tensor<1x64xf32> to tensor<?x64xf32>
  %y = call @layer(%d, %w) : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r = tensor.cast %y : tensor<?x64xf32> to tensor<1x64xf32>
  return %r : tensor<1x64xf32>
}
"""
MATMUL_LINE = 7
FUNCTIONS = {"prefill": [f"{ROWS}x64xf32=1", "64x64xf32=0.5"], "decode": ["1x64xf32=1", "64x64xf32=0.5"]}
TRACELINK = [sys.executable, "-m", "tracelink.commands.cli"]


def tracelink(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TRACELINK, *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("functions")
    (work / "two.mlir").write_text(PROGRAM)
    arguments = [argument for name, inputs in FUNCTIONS.items() for argument in ("--function", name, *(f"--input={i}" for i in inputs))]
    done = tracelink("profile", str(work / "two.mlir"), "-o", str(work / "out"), "--json", *arguments)
    assert done.returncode == 0, done.stderr
    return work / "out", done


def test_one_compile_and_each_function_a_whole_profile(profiled):
    out, _ = profiled
    assert json.loads((out / "artifacts" / "manifest.json").read_text())["functions"] == list(FUNCTIONS)
    for name in FUNCTIONS:
        directory = out / "functions" / name
        assert filecmp.cmp(out / "artifacts" / "app.vmfb", directory / "artifacts" / "app.vmfb", shallow=False)
        profile = load_profile(directory)
        assert profile.summary["function"] == name
        assert (directory / "report.html").is_file()


def test_call_sites_are_each_functions_own_hal_dispatches(profiled):
    out, _ = profiled
    table = pd.read_csv(out / "call_sites.csv")
    assert list(table.columns[:2]) == ["function", "call_site"]
    for name in FUNCTIONS:
        run = table[(table["function"] == name) & (table["phase"] == "run")]
        records = read_records(out / "functions" / name / "artifacts" / "run.jsonl")
        dispatched = [r["key"] for r in records if r.get("record_type") == "host_execution_event" and r.get("op") == "dispatch"]
        calls = json.loads((out / "functions" / name / "profile.json").read_text())
        iterations = calls["warmup"] + calls["repetitions"]
        assert len(dispatched) == len(run) * iterations
        assert sorted(set(dispatched)) == sorted(set(run["export"]))


def test_the_run_fixes_the_dynamic_rows(profiled):
    out, _ = profiled
    table = pd.read_csv(out / "call_sites.csv")
    run = table[table["phase"] == "run"].set_index(["function", "call_site"])
    # each call of the layer: its matmul and the ReLU fused into it
    assert (run.loc["prefill", "flops"] == 2 * ROWS * 64 * 64 + ROWS * 64).all()
    assert (run.loc["decode", "flops"] == 2 * 64 * 64 + 64).all()
    assert not run["lower_bound"].any()


def test_the_shared_line_gets_each_functions_time_side_by_side(profiled):
    out, _ = profiled
    summary = json.loads((out / "profile.json").read_text())
    line = next(row for row in summary["lines"] if row["line"] == MATMUL_LINE)
    for name in FUNCTIONS:
        profile = load_profile(out / "functions" / name)
        own = profile.source_lines.set_index("line").loc[MATMUL_LINE, "user_self_ns"] / profile.summary["iterations"]
        assert line[name] == pytest.approx(own) and own > 0
    # the prefill's layer runs twice on 32 rows, the decode's once on one
    assert line["prefill"] > line["decode"]


def test_each_functions_wall_time_comes_from_its_own_run(profiled):
    out, _ = profiled
    figures = {entry["function"]: entry for entry in json.loads((out / "profile.json").read_text())["functions"]}
    for name in FUNCTIONS:
        host = load_profile(out / "functions" / name).summary["host_time"]
        assert figures[name]["wall_ns_per_call"] == host["wall_ns_per_call"] > 0
        # the benchmark tool's own timer of that function's calls
        assert host["benchmark_ns_per_call"] == pytest.approx(wall_ns_per_call(out / "functions" / name / "artifacts"))


def test_printed_json_and_report_name_both(profiled):
    out, done = profiled
    document = json.loads(done.stdout)
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    assert [entry["summary"]["function"] for entry in document["functions"]] == list(FUNCTIONS)
    assert "2 functions, one compile" in done.stderr and "Source lines across functions" in done.stderr
    page = lxml_html.parse(str(out / "report.html"))
    links = page.xpath("//table[@id='function-table']//a/@href")
    assert links == [f"functions/{name}/report.html" for name in FUNCTIONS]
    assert all((out / link).is_file() for link in links)
    assert page.xpath("//table[@id='line-table']//th/text()") == ["line", *FUNCTIONS]


def test_the_top_is_not_one_profile(profiled):
    out, _ = profiled
    done = tracelink("report", str(out))
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "prefill, decode" in done.stderr and "functions/<function>" in done.stderr


@pytest.mark.parametrize("arguments, message", [
    (["--input=1x64xf32=1", "--function", "prefill", "--function", "decode"], "comes before the first --function"),
    (["--function", "decode", "--function", "decode"], "given twice"),
    (["--function", "prefill", "--function", "nope"], "no public function 'nope'"),
])
def test_bad_function_arguments_are_one_line(tmp_path, arguments, message):
    (tmp_path / "two.mlir").write_text(PROGRAM)
    done = tracelink("profile", str(tmp_path / "two.mlir"), "-o", str(tmp_path / "out"), *arguments)
    assert done.returncode != 0
    assert message in done.stderr and done.stderr.strip().count("\n") == 0
