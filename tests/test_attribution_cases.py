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

# A softmax written out op by op: IREE raises max, subtract, exp, sum and divide into one linalg.softmax
# that keeps only the divide's location (the others are "absorbed" in the audit).
SOFTMAX = """
func.func @main(%x: tensor<64x512xf32>) -> tensor<64x512xf32> {
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %max = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [1] : (tensor<64x512xf32>, tensor<f32>) -> tensor<64xf32> loc("attn/softmax/max"("model.py":10:5))
  %maxb = stablehlo.broadcast_in_dim %max, dims = [0] : (tensor<64xf32>) -> tensor<64x512xf32> loc("attn/softmax/max_b"("model.py":11:5))
  %sub = stablehlo.subtract %x, %maxb : tensor<64x512xf32> loc("attn/softmax/sub"("model.py":12:5))
  %exp = stablehlo.exponential %sub : tensor<64x512xf32> loc("attn/softmax/exp"("model.py":13:5))
  %sum = stablehlo.reduce(%exp init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<64x512xf32>, tensor<f32>) -> tensor<64xf32> loc("attn/softmax/sum"("model.py":14:5))
  %sumb = stablehlo.broadcast_in_dim %sum, dims = [0] : (tensor<64xf32>) -> tensor<64x512xf32> loc("attn/softmax/sum_b"("model.py":15:5))
  %div = stablehlo.divide %exp, %sumb : tensor<64x512xf32> loc("attn/softmax/div"("model.py":16:5))
  return %div : tensor<64x512xf32>
}
"""


@pytest.fixture(scope="module")
def case_profiles(tmp_path_factory):
    base = tmp_path_factory.mktemp("cases")
    found = {}
    for name, text in {"fused": FUSED_MEMBERS, "cse": CSE_FILLS, "named": NAMED_MODULE_UNUSED_ARGUMENT, "stack": PYTHON_STACK, "softmax": SOFTMAX}.items():
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


def test_ops_absorbed_into_a_raised_softmax_share_its_time_by_their_own_flops(case_profiles):
    profile = case_profiles["softmax"]
    sites = profile.call_sites[profile.call_sites["phase"] == "run"]
    assert list(sites["root_op"]) == ["linalg.softmax"]  # one raised op, at the divide's location
    absorbed = {entry["loc"].split(" @ ")[0] for entry in profile.summary["audit"]["ops_without_dispatch"] if entry["reason"].startswith("absorbed")}
    assert {"attn/softmax/max", "attn/softmax/sub", "attn/softmax/exp", "attn/softmax/sum"} <= absorbed
    total = profile.events["duration_ns"].sum()
    shares = {line: line_row(profile, "model.py", line)["total_ns"] / total for line in (10, 12, 13, 14, 16)}
    # max, subtract, exp, sum and divide: one FLOP per element each before fusion, so a fifth each;
    # the divide's line no longer holds the others' cost
    for line, share in shares.items():
        assert share == pytest.approx(0.2, abs=0.01), (line, shares)
    lines = profile.source_lines
    for broadcast in (11, 15):  # data movement: no FLOPs, no part
        assert lines.loc[lines["file"].str.endswith("model.py") & (lines["line"] == broadcast), "total_ns"].sum() == 0
    assert lines["total_ns"].sum() == pytest.approx(total)
    roles = {d["role"] for _, _, d in profile.graph.edges(data=True) if d.get("kind") == "feeds"}
    assert "absorbed" in roles
    assert sites.iloc[0]["absorbed_ops"]

