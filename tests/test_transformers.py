"""Hugging Face `transformers` models as users bring them: built from configs (random weights, no download),
profiled from `model.py:name` through the real `tracelink` command.

Decoders (GPT-2 with its padding mask, Llama with grouped-query attention), an encoder (BERT), a ViT and
a convnet (ResNet) export with torch's own decomposition tables; the hottest line of each is the model's
code in its `transformers/models/...` file, not the user's one-line wrapper, in the summary, `--json` and
the report alike. Ops IREE cannot lower, once torch's decompositions are tried, are one error line naming
the op and the model line.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch

from tests.test_bad_input import TRACELINK, error_line, run_cli
from tests.test_frameworks import iree_outputs
from tracelink.compile.frontends import load_entry
from tracelink.compile.frames import LIBRARY_FRAMES, is_library
from tracelink.profile_dir.profile import load_profile
from tracelink.report.assemble import build_model
from tracelink.report.hot_lines import hottest_lines
from tracelink.report.json_output import SCHEMA_PATH


MODELS = textwrap.dedent('''
    import torch
    import transformers as T

    print("model file imported")  # stdout of the user's code: must stay out of --json's document


    class Wrapper(torch.nn.Module):
        """The user's one-line wrapper: the model's lines, not this one, hold the time."""

        def __init__(self, model, **kwargs):
            super().__init__()
            self.model = model

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state  # WRAPPER


    class Pixels(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, pixels):
            return self.model(pixel_values=pixels).last_hidden_state  # PIXELS


    def tokens():
        print("making inputs")
        ids = torch.randint(0, 256, (1, 24))
        mask = torch.ones(1, 24, dtype=torch.int64)
        mask[0, :3] = 0  # left padding: the decoders' mask code runs
        return ids, mask


    def gpt2():
        torch.manual_seed(0)
        config = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0)
        return Wrapper(T.GPT2Model(config).eval()), tokens()


    def llama():
        torch.manual_seed(0)
        config = T.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
        return Wrapper(T.LlamaModel(config).eval()), tokens()


    def bert():
        torch.manual_seed(0)
        config = T.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=256)
        return Wrapper(T.BertModel(config).eval()), tokens()


    def vit():
        torch.manual_seed(0)
        config = T.ViTConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32, patch_size=8)
        return Pixels(T.ViTModel(config).eval()), (torch.randn(1, 3, 32, 32),)


    def resnet():
        torch.manual_seed(0)
        config = T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
        return Pixels(T.ResNetModel(config).eval()), (torch.randn(1, 3, 32, 32),)


    def gpt2_with_cache():
        torch.manual_seed(0)
        config = T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0)
        return T.GPT2LMHeadModel(config).eval(), (torch.randint(0, 256, (1, 8)),)
''')

UNLOWERED = textwrap.dedent('''
    import torch


    class Ops(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)


    def mode():
        return Ops(lambda x: torch.mode(x, 1).values), (torch.randn(4, 8),)  # MODE


    def erfinv():
        return Ops(lambda x: torch.special.erfinv(x * 0.1)), (torch.randn(4, 8),)  # ERFINV
''')


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hf") / "hf_models.py"
    path.write_text(MODELS)
    return path


@pytest.fixture(scope="module")
def profiled(models) -> dict:
    """Each model profiled once with --json: (completed process, profile directory)."""
    runs = {}
    for name in ("gpt2", "llama", "bert", "vit", "resnet"):
        out = models.parent / f"out_{name}"
        done = subprocess.run([*TRACELINK, "profile", f"{models}:{name}", "-o", str(out), "--repetitions", "3", "--json",
                               "--compare", "none"],
                              capture_output=True, text=True, timeout=600)
        runs[name] = (done, out)
    return runs


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "vit", "resnet"])
def test_hottest_line_is_the_models_own_code(profiled, name):
    done, out = profiled[name]
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(done.stdout)  # the model's prints went to stderr: stdout is the document alone
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    if name in ("gpt2", "llama", "bert"):
        assert "model file imported" in done.stderr and "making inputs" in done.stderr
    first = document["hottest_lines"][0]
    assert f"/transformers/models/{name}/modeling_{name}.py" in first["file"], first
    assert not first["library"]
    profile = load_profile(out)
    assert profile.summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    # the user's wrapper line gets no self time: all of it went to the model's lines
    wrapper = profile.source_lines[profile.source_lines["file"].str.endswith("hf_models.py")]
    assert wrapper["user_self_ns"].sum() == 0
    # --json, the summary's table and the report give the same lines, in the same order
    json_lines = [(line["file"], line["line"]) for line in document["hottest_lines"][:3]]
    report = build_model(profile)
    report_lines = [(report.files[same[0].file].path, same[0].number) for same in hottest_lines(report, 3)]
    assert report_lines[0] == json_lines[0]
    assert set(report_lines) <= {(line["file"], line["line"]) for line in document["hottest_lines"]}
    assert f"modeling_{name}.py:{first['line']}" in done.stderr  # the summary printed (to stderr with --json)
    # what holds the memory peak is named by the same lines: the model's, not torch's or transformers' helpers
    held = profile.memory_lines[(profile.memory_lines["bytes_at_peak"] > 0) & (profile.memory_lines["file"].fillna("") != "")]
    assert len(held) and not any(is_library(file) for file in held["file"]), list(held["file"])
    # the components and op kinds ride along in --json
    assert document["components"][0]["component"] == "model" and document["components"][0]["inclusive_share"] > 0.9
    assert any(kind["kind"].startswith("torch.aten.") for kind in document["op_kinds"])


def torch_output(models: Path, name: str) -> np.ndarray:
    loaded = load_entry(f"{models}:{name}")
    with torch.no_grad():
        return loaded.target(*loaded.args).numpy()


def test_attention_is_kept_whole_and_computes_what_torch_does(profiled, models):
    for name in ("gpt2", "llama", "bert", "vit"):
        _, out = profiled[name]
        exported = (out / "artifacts" / "exported.mlir").read_text()
        assert exported.count("torch.aten.scaled_dot_product_attention") == 2  # one per layer, not decomposed
    for name in ("bert", "vit", "resnet"):
        np.testing.assert_allclose(iree_outputs(load_profile(profiled[name][1]))[0], torch_output(models, name), rtol=1e-3, atol=1e-4)


def test_left_padded_decoder_needs_attention_decomposed(profiled, models, tmp_path):
    """IREE 3.13's attention op gives NaN for a query row whose keys are all masked (a left-padded
    decoder's padding rows), where torch's attention gives zeros; the NaN then spreads through the next
    layer's keys and values. torch's own decomposition of attention computes what torch does."""
    kept = iree_outputs(load_profile(profiled["gpt2"][1]))[0]
    assert np.isnan(kept[0, :3]).all()  # the three padding rows
    out = tmp_path / "gpt2_decomposed"
    done = run_cli("profile", f"{models}:gpt2", "-o", str(out), "--repetitions", "2", "--decompose", "scaled_dot_product_attention",
                   "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    exported = (out / "artifacts" / "exported.mlir").read_text()
    assert "scaled_dot_product_attention" not in exported and "torch.aten._softmax" in exported
    manifest = json.loads((out / "artifacts" / "manifest.json").read_text())
    assert manifest["export"]["decomposed"] == ["scaled_dot_product_attention"]
    np.testing.assert_allclose(iree_outputs(load_profile(out))[0], torch_output(models, "gpt2"), rtol=1e-3, atol=1e-4)


def test_attention_time_lands_on_the_models_line(profiled):
    _, out = profiled["vit"]
    profile = load_profile(out)
    attention = profile.source_ops[profile.source_ops["op_kinds"].str.contains("scaled_dot_product_attention")]
    assert len(attention) == 2 and (attention["total_ns"] > 0).all()
    lines = profile.source_lines
    holding = lines[(lines["user_self_ns"] > 0) & lines["ops"].map(lambda ops: bool(set(ops.split(";")) & set(attention["op"])))]
    # on the ViT's line calling the attention function, not in transformers' sdpa helper
    assert len(holding) and holding["file"].str.endswith("transformers/models/vit/modeling_vit.py").all()


def test_library_frames_rule_still_overrides(models, tmp_path):
    out = tmp_path / "bert_library"
    done = run_cli("profile", f"{models}:bert", "-o", str(out), "--repetitions", "2", "--json", "--library-frames", "*/transformers/models/*",
                   "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    first = json.loads(done.stdout)["hottest_lines"][0]
    marks = {line.split("# ")[-1]: number for number, line in enumerate(MODELS.splitlines(), 1) if "# " in line}
    assert (Path(first["file"]).name, first["line"], first["self_share"]) == ("hf_models.py", marks["WRAPPER"], pytest.approx(1.0))


def test_returned_cache_is_one_line_with_the_way_out(models, tmp_path):
    done = run_cli("profile", f"{models}:gpt2_with_cache", "-o", str(tmp_path / "out"))
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and last.startswith("tracelink: error:")
    assert "cannot flatten the DynamicCache" in last and "use_cache=False" in last


def test_unlowered_op_names_the_op_and_the_model_line(tmp_path):
    model = tmp_path / "unlowered.py"
    model.write_text(UNLOWERED)
    marks = {line.split("# ")[-1]: number for number, line in enumerate(UNLOWERED.splitlines(), 1) if "# " in line}
    # an op no table decomposes, torch's or tracelink's own
    line = error_line(run_cli("profile", f"{model}:mode", "-o", str(tmp_path / "a")))
    assert "IREE cannot lower aten.mode" in line and f"from {model.resolve()}:{marks['MODE']}" in line
    assert "torch has no decomposition of it" in line and "compile.log" in line
    # erfinv is decomposed on its own; what it decomposes into is the op named
    line = error_line(run_cli("profile", f"{model}:erfinv", "-o", str(tmp_path / "b")))
    assert "IREE cannot lower prims.erf_inv" in line and f"unlowered.py:{marks['ERFINV']}" in line
    assert "decomposed first, as IREE could not lower them: erfinv" in line
    line = error_line(run_cli("profile", f"{model}:erfinv", "-o", str(tmp_path / "c"), "--decompose", "no_such_op"))
    assert "--decompose no_such_op: torch has no ATen op 'no_such_op'" in line
    line = error_line(run_cli("profile", f"{model}:erfinv", "-o", str(tmp_path / "d"), "--decompose", "__class__"))
    assert "--decompose __class__: torch has no ATen op '__class__'" in line


def test_frame_rules_last_match_wins():
    packages = "/venv/lib/python3.11/site-packages"
    assert is_library(f"{packages}/torch/nn/modules/linear.py")
    assert is_library(f"{packages}/transformers/masking_utils.py")
    assert not is_library(f"{packages}/transformers/models/llama/modeling_llama.py")
    assert not is_library(f"{packages}/diffusers/models/unets/unet_2d.py")
    assert is_library(f"{packages}/transformers/models/llama/modeling_llama.py", (*LIBRARY_FRAMES, "*/llama/*"))
    assert not is_library(f"{packages}/mymodels/net.py", (*LIBRARY_FRAMES, "!*/mymodels/*"))
    assert not is_library("/home/me/model.py")


def test_weights_are_in_one_parameter_archive(profiled, models):
    _, out = profiled["bert"]
    artifacts = out / "artifacts"
    export = json.loads((artifacts / "manifest.json").read_text())["export"]
    archive = artifacts / "parameters.irpa"
    assert export["parameters"] == [f"model={archive.resolve()}"]
    exported = (artifacts / "exported.mlir").read_text()
    state = load_entry(f"{models}:bert").target.state_dict()
    # every float weight the model uses is a global naming its parameter, none is printed into the program
    used = {name: tensor for name, tensor in state.items() if f'"model"::"{name}"' in exported}
    assert "model.encoder.layer.1.attention.self.query.weight" in used and "model.pooler.dense.weight" not in used  # unused: not exported
    assert exported.count('#stream.parameter.named<"model"::') == len(used)
    assert "_torch.float32" not in exported  # no float tensor embedded (integer buffers, position ids, stay)
    assert export["parameter_bytes"] == sum(tensor.numel() * tensor.element_size() for tensor in used.values())
    assert archive.read_bytes()[:4] == b"IRPA" and archive.stat().st_size >= export["parameter_bytes"]
    # the run read them from the archive (the benchmark tool's command line)
    assert f"--parameters=model={archive.resolve()}" in (artifacts / "run.log").read_text().splitlines()[0]
