"""One small program per attribution defect found on real models, each profiled for real."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_profile

FUSED_MEMBERS = """
func.func @main(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %r = arith.addf %a, %b : tensor<256x256xf32> loc(fused["net.py":10:5, "net.py":20:5])
  return %r : tensor<256x256xf32>
}
"""

# Two layers whose zero-fills are identical: CSE keeps one fill with layer 1's location.
CSE_FILLS = """
func.func @main(%x: tensor<64x64xf32>, %w1: tensor<64x64xf32>, %w2: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<64x64xf32> loc("layer1.init"("net.py":1:1))
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64x64xf32>) -> tensor<64x64xf32> loc("layer1.init"("net.py":1:1))
  %m1 = linalg.matmul ins(%x, %w1 : tensor<64x64xf32>, tensor<64x64xf32>) outs(%f1 : tensor<64x64xf32>) -> tensor<64x64xf32> loc("layer1.fc"("net.py":2:1))
  %e2 = tensor.empty() : tensor<64x64xf32> loc("layer2.init"("net.py":3:1))
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<64x64xf32>) -> tensor<64x64xf32> loc("layer2.init"("net.py":3:1))
  %m2 = linalg.matmul ins(%m1, %w2 : tensor<64x64xf32>, tensor<64x64xf32>) outs(%f2 : tensor<64x64xf32>) -> tensor<64x64xf32> loc("layer2.fc"("net.py":4:1))
  return %m2 : tensor<64x64xf32>
}
"""

NAMED_MODULE_UNUSED_ARGUMENT = """
module @mymodel {
  func.func @main(%a: tensor<4xf32>, %unused: tensor<1xi64>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = arith.addf %a, %b : tensor<4xf32>
    %1 = arith.mulf %0, %b : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}
"""

# An op written in a library (site-packages) called from the user's line, like torch.nn or flax.
PYTHON_STACK = """
func.func @main(%a: tensor<128x128xf32>, %b: tensor<128x128xf32>) -> tensor<128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x128xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x128xf32>) -> tensor<128x128xf32>
  %m = linalg.matmul ins(%a, %b : tensor<128x128xf32>, tensor<128x128xf32>) outs(%f : tensor<128x128xf32>) -> tensor<128x128xf32> loc(callsite("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py":125:15 at callsite("/home/u/model.py":30:12 at "/home/u/train.py":7:3)))
  return %m : tensor<128x128xf32>
}
"""


@pytest.fixture(scope="module")
def case_profiles(tmp_path_factory):
    base = tmp_path_factory.mktemp("cases")
    found = {}
    for name, text in {"fused": FUSED_MEMBERS, "cse": CSE_FILLS, "named": NAMED_MODULE_UNUSED_ARGUMENT, "stack": PYTHON_STACK}.items():
        program = base / f"{name}.mlir"
        program.write_text(text)
        found[name] = run_profile(program, base / name, repetitions=3)
    return found


def line_row(profile, file_suffix: str, line: int):
    lines = profile.source_lines
    rows = lines[lines["file"].str.endswith(file_suffix) & (lines["line"] == line)]
    assert len(rows) == 1, (file_suffix, line)
    return rows.iloc[0]


def test_fused_location_members_split_the_time_instead_of_each_taking_all(case_profiles):
    profile = case_profiles["fused"]
    total = profile.events["duration_ns"].sum()
    first, second = line_row(profile, "net.py", 10), line_row(profile, "net.py", 20)
    assert first["total_ns"] == pytest.approx(total / 2) and second["total_ns"] == pytest.approx(total / 2)
    assert profile.source_lines["total_ns"].sum() == pytest.approx(total)
    assert len(profile.source_ops[profile.source_ops["in_input"]]) >= 1
    assert not profile.source_ops["label"].duplicated().any()


def test_cse_merged_fill_is_an_init_op_never_a_producer_of_another_layer(case_profiles):
    profile = case_profiles["cse"]
    graph = profile.graph
    roles = {(graph.nodes[s]["name"], graph.nodes[t]["index"]): d["role"] for s, t, d in graph.edges(data=True) if d.get("kind") == "feeds"}
    fc2_site = next(index for (name, index), role in roles.items() if name == "layer2.fc" and role == "root")
    assert roles.get(("layer1.init", fc2_site)) in (None, "init")
    assert "producer" not in {role for (name, _), role in roles.items() if name.endswith(".init")}
    assert all(d["weight"] == 0 for _, _, d in graph.edges(data=True) if d.get("role") == "init")
    assert not [entry for entry in profile.summary["audit"]["ops_split"] if "init" in entry["loc"]]


def test_named_module_keeps_export_information_and_unused_argument_is_an_input(case_profiles):
    profile = case_profiles["named"]
    export = profile.exports.iloc[0]
    assert export["executable"] and export["root_op"] == "linalg.generic"
    assert export["benchmark_file"].startswith("executables/mymodel_") and export["source_file"]
    inputs = profile.summary["inputs"]
    assert len(inputs) == 3  # %unused too: the runtime expects every argument
    assert profile.summary["iterations"] == 3


def test_python_stack_self_time_on_the_library_line_user_view_on_the_calling_line(case_profiles):
    profile = case_profiles["stack"]
    matmul = profile.call_sites.loc[profile.call_sites["root_op"] == "linalg.matmul", "total_ns"].sum()
    library, user, caller = line_row(profile, "linear.py", 125), line_row(profile, "model.py", 30), line_row(profile, "train.py", 7)
    assert library["library"] and not user["library"]
    assert library["total_ns"] == pytest.approx(matmul, rel=1e-6)  # self: the innermost frame
    assert user["total_ns"] == 0 and user["user_self_ns"] == pytest.approx(matmul, rel=1e-6)  # user view: the user's calling line
    assert library["user_self_ns"] == 0 and caller["user_self_ns"] == 0
    for row in (library, user, caller):  # inclusive: every frame of the stack
        assert row["inclusive_ns"] == pytest.approx(matmul, rel=1e-6)
    frames = json.loads(profile.graph.nodes[profile.source_ops.iloc[0]["op"]]["frames"])
    assert len(frames) == 3
