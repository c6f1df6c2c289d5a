"""`.onnx` input: the shared ONNX models import, profile end to end and keep every node's name and op type."""

from __future__ import annotations

import math
import re

import pytest

from tests.conftest import WORKLOADS, run_profile
from tests.test_bad_input import error_line, run_cli
from tests.test_pprof import read_pprof
from tracelink.aggregate import attribution
from tracelink.profile_dir.profile import Profile

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


# Ops that do a few operations per element: their time is bounded by moving their tensors.
ELEMENTWISE = ("Relu", "Sum", "Add", "Mul", "BatchNormalization")
# A bandwidth far below any machine's (its measured peak is 20-30 GB/s here): an elementwise op
# credited more than its tensors take to move at this rate was credited someone else's work.
SLOW_BYTES_PER_NS = 1.0  # 1 GB/s


def test_elementwise_ops_merged_into_convolutions_are_credited_their_own_work(onnx_profile):
    """ONNX shape inference (not tracelink) sizes each elementwise node's tensors; the time tracelink
    credits the node per iteration stays below streaming them at 1 GB/s, even where IREE fused the
    node's location into a convolution's (the ReLU feeding a strided 1×1 conv on ResNet-50)."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(onnx_profile.summary["model"]))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*model.graph.value_info, *model.graph.output]}
    nodes = {f"onnx.{node.op_type}:{node.name or node.output[0]}": node for node in model.graph.node}
    checked = 0
    for row in onnx_profile.source_ops.itertuples():
        node = nodes.get(row.name)
        if node is None or node.op_type not in ELEMENTWISE or row.total_ns == 0:
            continue
        moved = 4 * sum(math.prod(shapes[name]) for name in [*node.input[:2], node.output[0]] if shapes.get(name))
        assert row.median_ns <= moved / SLOW_BYTES_PER_NS, (row.name, row.median_ns, moved)
        checked += 1
    assert checked > 20


def test_convolution_gets_most_of_a_dispatch_whose_location_it_shares(onnx_profile):
    """Where the dispatch's root location fuses a Conv with elementwise nodes, the Conv takes ≥ 90 % of
    what they share (pooling and LRN nodes merged the same way do real work and are left out). An
    elementwise node whose own work runs in another dispatch (the ReLU before a strided 1×1 conv on
    ResNet-50) takes none of it."""
    graph = onnx_profile.graph
    shared = 0
    for site, ops in attribution(graph).groupby("call_site"):
        roots = ops[ops["role"] == "root"]
        kinds = roots["op"].map(lambda op: graph.nodes[op]["name"].split(":")[0].removeprefix("onnx."))
        elementwise = roots.loc[kinds.isin(ELEMENTWISE), "fraction"].sum()
        merged = "fused)" in graph.nodes[f"cs:{site}"]["loc"]  # the dispatch's location is the compiler's merged one
        if (kinds == "Conv").any() and (elementwise > 0 or merged):
            conv = roots.loc[kinds == "Conv", "fraction"].sum()
            assert conv >= 0.9 * (conv + elementwise), (site, list(zip(kinds, roots["fraction"])))
            shared += 1
    if "resnet50" in onnx_profile.summary["model"]:
        assert shared >= 4  # the strided blocks' 1×1 convolutions
