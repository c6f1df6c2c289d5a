"""The framework's own run beside IREE's (--compare): real PyTorch eager on a BERT built from a tiny
config, real onnxruntime on an .onnx model, a reference that fails, and --compare's checks."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import jsonschema
import numpy as np
import onnx
import pandas as pd
import pytest
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console

import tracelink
from tests.test_bad_input import error_line, run_cli
from tracelink.collect.reference import chosen_references, parse_compare
from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import load_profile
from tracelink.report.json_output import SCHEMA_PATH, dump, profile_document
from tracelink.report.summary import print_summary, reference_headlines

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class Encoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).last_hidden_state


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=500)
    out = tmp_path_factory.mktemp("bert")
    tracelink.profile(Encoder(transformers.BertModel(config).eval()), torch.randint(0, 500, (1, 32)), out=out, repetitions=2)
    return load_profile(out)


def test_eager_is_raced_and_its_outputs_agree(bert):
    (record,) = bert.summary["references"]
    assert record["name"] == "eager" and record["status"] == "measured", record
    race = record["race"]
    assert race["rounds"] == 5 and race["base_ns"] > 0 and race["tuned_ns"] > 0
    assert race["ci_low"] <= race["speedup"] <= race["ci_high"]
    assert record["outputs"]["agree"], record["outputs"]
    assert record["threads"] >= 1
    assert "reference" in bert.summary["timings_s"]
    first = reference_headlines(bert.summary)[0]
    assert first.startswith("IREE ") and "PyTorch eager" in first and "95 % interval" in first


def test_eager_lines_are_the_models_and_cover_the_call(bert):
    lines = bert.reference_lines
    (record,) = bert.summary["references"]
    theirs = lines[lines["reference_ns"].notna()]
    # scaled to the unprofiled call: they sum to it
    assert abs(theirs["reference_ns"].sum() - record["ns_per_call"]) <= 0.15 * record["ns_per_call"]
    # the profiled call (its overhead included) takes longer than its share of ops says only through overhead
    assert record["profiled_ns_per_call"] > 0
    both = lines[lines["only_in"].fillna("") == ""]  # read back from the CSV, an empty cell is NaN
    assert not both.empty and both["file"].str.endswith("modeling_bert.py").all()
    # every IREE line with time is listed, with or without a reference time
    iree = bert.source_lines[bert.source_lines["user_self_ns"] > 0]
    assert set(zip(iree["file"], iree["line"].astype(int))) <= set(zip(lines["file"], lines["line"].astype(int)))
    assert (lines["iree_loses"] == (lines["ratio"] > 1.5)).all()
    components = bert.reference_components
    assert components is not None and "model/encoder/layer.0/attention" in set(components["component"])


def test_summary_opens_with_it_and_the_tables_carry_it(bert):
    console = Console(file=io.StringIO(), width=220, color_system=None)
    print_summary(bert, console)
    text = console.file.getvalue()
    assert text.splitlines()[0].startswith("IREE ") and "PyTorch eager" in text.splitlines()[0]
    assert text.count("IREE/ref.") >= 2  # the component table and the hottest lines
    assert "IREE / ref." in (bert.directory / "report.html").read_text()


def test_json_carries_the_reference(bert):
    document = json.loads(dump(profile_document(bert)))
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    assert document["references"][0]["name"] == "eager"
    assert document["reference_lines"] and {"iree_ns", "reference_ns", "ratio"} <= set(document["reference_lines"][0])


class FailsEagerly(torch.nn.Module):
    """Exports (TorchDynamo traces it) but raises when run eagerly."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            raise RuntimeError("eager refuses")
        return self.fc(x)


def test_a_failing_reference_is_one_line_and_the_profile_is_whole(tmp_path):
    tracelink.profile(FailsEagerly().eval(), torch.randn(4, 16), out=tmp_path, repetitions=1)
    profile = load_profile(tmp_path)
    (record,) = profile.summary["references"]
    assert record["status"] == "failed" and "eager refuses" in record["error"]
    (line,) = reference_headlines(profile.summary)
    assert "not compared" in line and "eager refuses" in line
    assert (tmp_path / "report.html").exists() and not profile.source_lines.empty


def small_onnx(path: Path) -> Path:
    """A convolution, its activation, a pooling and a classifier, with random weights, as an .onnx file."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w", (16, 3, 3, 3)), ("fc_w", (10, 16)), ("fc_b", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu1"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)  # as onnxruntime 1.31 reads
    return path


def test_onnxruntime_per_node(tmp_path):
    model = small_onnx(tmp_path / "small.onnx")
    done = run_cli("profile", str(model), "-o", str(tmp_path / "out"), "--repetitions", "1", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(done.stdout)
    (record,) = document["references"]
    assert record["name"] == "onnxruntime" and record["status"] == "measured", record
    assert record["outputs"]["agree"], record["outputs"]
    lines = pd.read_csv(tmp_path / "out" / "reference_lines.csv", keep_default_na=False, na_values=[""])
    # every node onnxruntime ran is at its place in the model, the key IREE's dispatches have
    assert (lines["file"] == str(model.resolve())).all() and lines["line"].between(1, 5).all()
    assert not lines[lines["only_in"].isna()].empty
    assert 1 in set(lines.loc[lines["reference_ns"].notna(), "line"])  # the convolution


def test_compare_choices():
    assert parse_compare("none") == ("none",)
    assert parse_compare("eager,inductor") == ("eager", "inductor")
    with pytest.raises(TracelinkError, match="unknown reference 'tvm'"):
        parse_compare("eager,tvm")
    assert chosen_references(("default",), "torch", "m.py:make") == ("eager",)
    assert chosen_references(("default",), None, "app.mlir") == ()
    assert chosen_references(("none",), "onnx", "m.onnx") == ()
    with pytest.raises(TracelinkError, match="--compare xla applies to a JAX function; this is a PyTorch model"):
        chosen_references(("xla",), "torch", "m.py:make")


def test_compare_on_mlir_is_one_error_line(tmp_path):
    line = error_line(run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(tmp_path / "out"), "--compare", "eager"))
    assert "--compare eager applies to a PyTorch model" in line and "mlp.mlir" in line
    assert not (tmp_path / "out").exists()
    line = error_line(run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(tmp_path / "out"), "--compare", "bogus"))
    assert "unknown reference 'bogus'" in line


def test_jax_jit_per_line(tmp_path):
    model = EXAMPLES / "jax_mlp.py"
    done = run_cli("profile", f"{model}:make", "-o", str(tmp_path), "--repetitions", "1", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = json.loads(done.stdout)["references"]
    assert record["name"] == "xla" and record["status"] == "measured", record
    assert record["outputs"]["agree"], record["outputs"]
    assert record["per_line"] == "ops" and record["profiled_ns_per_call"] > 0
    lines = load_profile(tmp_path).reference_lines
    theirs = lines[lines["reference_ns"].notna()]
    # XLA's thunks, through their ops' stacks, land on the model's own lines, the lines IREE's dispatches have
    assert (theirs["file"] == str(model)).all() and lines["only_in"].isna().all()
    assert abs(theirs["reference_ns"].sum() - record["ns_per_call"]) <= 0.15 * record["ns_per_call"]
    # the two hidden layers' matmuls (lines 23 and 24: 64x256x512 and 64x512x512) are most of the call
    hidden = theirs.loc[theirs["line"].isin([23, 24]), "reference_ns"].sum()
    assert hidden >= 0.7 * theirs["reference_ns"].sum(), theirs
    assert theirs.set_index("line")["reference_ns"][24] > theirs.set_index("line")["reference_ns"][25]


def convolved(x, w):
    features = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.tanh(features)


def test_jax_convolutions_land_on_their_lines(tmp_path):
    """XLA's convolution thunks carry their op's source line, as its dots do (a Flax CNN's Conv layers)."""
    from tracelink.collect.reference.jax_jit import JaxRunner

    runner = JaxRunner(convolved, (jnp.ones((2, 32, 32, 16)), jnp.ones((3, 3, 16, 32)) * 0.01), tmp_path / "xla")
    runner.call()
    samples, _ = runner.profile(3)
    line = convolved.__code__.co_firstlineno + 1
    timed = samples.groupby("stack")["self_ns"].sum()
    assert timed.idxmax() == f"{Path(__file__).resolve()}:{line}", timed
    assert set(samples.loc[samples["stack"].str.endswith(f":{line}"), "op"]) == {"conv_general_dilated"}


def scanned_layers(weights, x):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    return jax.lax.scan(layer, x, weights)[0]


def test_jax_loop_body_is_counted_once(tmp_path):
    from tracelink.collect.reference.jax_jit import JaxRunner

    runner = JaxRunner(scanned_layers, (jnp.ones((6, 128, 128)) * 0.01, jnp.ones((32, 128))), tmp_path / "reference" / "xla")
    runner.call()
    samples, profiled_ns = runner.profile(3)
    here = f"{Path(__file__).resolve()}:"
    # the loop's thunk holds its body's: only the body's ops are counted, at the body's lines (and XLA's
    # own copies, which no line made, at none)
    stacks = samples.loc[samples["stack"] != "", "stack"]
    assert stacks.str.startswith(here).all() and not stacks.str.contains("/tracelink/").any()
    assert set(samples["op"]) >= {"dot_general", "tanh"}
    assert samples["self_ns"].sum() <= profiled_ns
    assert list((tmp_path / "reference" / "xla" / "xla_trace").rglob("*.trace.json.gz"))
