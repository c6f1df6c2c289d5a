"""`.onnx` input: the shared ONNX models import, profile end to end and keep every node's name and op type."""

from __future__ import annotations

import re

import pytest

from tests.conftest import WORKLOADS, run_profile
from tests.test_bad_input import error_line, run_cli
from tests.test_pprof import read_pprof
from tracelink.profile_dir import Profile

NODE_NAME = re.compile(r"^onnx\.(\w+):.+$")


@pytest.fixture(scope="module", params=["light_inception_v1", "light_resnet50"])
def onnx_profile(request, tmp_path_factory) -> Profile:
    out = tmp_path_factory.mktemp(request.param)
    return run_profile(WORKLOADS / f"{request.param}.onnx", out, repetitions=2, warmup=0)


def test_onnx_model_profiles_with_node_names(onnx_profile):
    summary = onnx_profile.summary
    assert summary["model"].endswith(".onnx")
    assert summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    imported = onnx_profile.artifacts / "imported.mlir"
    assert summary["program"] == str(imported.resolve())
    # Old-style model: every weight is also a graph input, but only the image is an argument.
    header = next(line for line in imported.read_text().splitlines() if "func.func @" in line)
    assert header.count("%arg") == 1 and "[1,3,224,224],f32" in header
    hot = onnx_profile.source_ops[onnx_profile.source_ops["total_ns"] > 0]
    assert len(hot) > 20
    for row in hot.itertuples():
        match = NODE_NAME.match(row.name)
        assert match, row.label
        assert f"onnx.{match.group(1)}" in row.op_kinds.split(", "), row.label
        assert row.file.endswith(".onnx") and row.line >= 1  # the node's position in the graph
    pprof = read_pprof(onnx_profile.directory / "profile.pb.gz")
    assert sum(sample.value[0] for sample in pprof.sample) == int(onnx_profile.events["duration_ns"].sum())


def test_onnx_graph_positions_follow_node_order(onnx_profile):
    import onnx

    model = onnx.load(onnx_profile.summary["model"])
    ops = onnx_profile.source_ops
    for row in ops[ops["total_ns"] > 0].itertuples():
        node = model.graph.node[int(row.line) - 1]
        assert row.name == f"onnx.{node.op_type}:{node.name or node.output[0]}"


def test_broken_onnx_is_one_line_error(tmp_path):
    model = tmp_path / "broken.onnx"
    model.write_bytes((WORKLOADS / "light_resnet50.onnx").read_bytes()[:5000])
    line = error_line(run_cli("profile", str(model), "-o", str(tmp_path / "out")))
    assert "broken.onnx" in line and "not a valid ONNX model" in line
