"""A model file is the user's script, and a torch model whose ops IREE cannot lower is decomposed until it can.

The model files are real: a `make()` that exits, a module-level `argparse`, small torch modules whose
ops IREE 3.13 cannot lower (`aten.squeeze.dims`, `aten._fft_c2c`) or converts wrongly (`aten.clamp` of integers), and `transformers` models built from tiny
configs that failed before: a SegFormer, whose bilinear upsampling head failed at `loc(unknown)` on a
`torch.constant.bool`, and a Gemma2 decoder with logit soft-capping, whose 0-d float buffer (its embedding's
scale) failed IREE's FX importer. Marker comments (`# SQUEEZE`) name the lines the checks expect.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

import tracelink
from tests.test_bad_input import error_line, run_cli
from tests.test_frameworks import iree_outputs, marked_lines
from tracelink.compile.frontends import export_model, load_entry
from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import Profile, load_profile

EXITS = textwrap.dedent('''
    import sys
    import torch


    def make():
        sys.exit(0)  # a guard that bails out


    def fails():
        sys.exit("no checkpoint given")
''')

ARGPARSE = textwrap.dedent('''
    import argparse
    import sys
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=8)
    ARGS = parser.parse_args()  # tracelink's own options would be unknown here
    SEEN = list(sys.argv)


    def make():
        assert sys.argv == SEEN
        return torch.nn.Linear(ARGS.width, 4).eval(), (torch.randn(2, ARGS.width),)
''')

OPS = textwrap.dedent('''
    import torch


    class Ops(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)


    def squeeze():
        return Ops(lambda x: torch.relu(x.sum(-1, keepdim=True).squeeze(-1)) * 2.0), (torch.randn(4, 8),)  # SQUEEZE


    def fft():
        return Ops(lambda x: torch.fft.fft(x.unsqueeze(0).to(torch.complex64), dim=2).real), (torch.randn(4, 8),)  # FFT


    def clamp():
        return Ops(lambda x: torch.clamp((x > 0).long().sum(-1), min=1.0) * 2.0), (torch.randn(4, 8),)  # CLAMP
''')

HF = textwrap.dedent('''
    import torch
    import transformers as T


    class Logits(torch.nn.Module):
        def __init__(self, model, key):
            super().__init__()
            self.model = model
            self.key = key

        def forward(self, x):
            return self.model(**{self.key: x}).logits


    def segformer():
        torch.manual_seed(0)
        config = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                                   decoder_hidden_size=32, num_labels=3, strides=[4, 2], patch_sizes=[7, 3], mlp_ratios=[2, 2])
        return Logits(T.SegformerForSemanticSegmentation(config).eval(), "pixel_values"), (torch.randn(1, 3, 32, 32),)


    def gemma2():
        torch.manual_seed(0)
        config = T.Gemma2Config(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=16, vocab_size=256, final_logit_softcapping=30.0, attn_logit_softcapping=50.0, use_cache=False)
        return Logits(T.Gemma2ForCausalLM(config).eval(), "input_ids"), (torch.randint(0, 256, (1, 8)),)
''')


DECODER = textwrap.dedent('''
    import torch
    import transformers as T


    def cache_tensors(cache):
        return tuple(tensor for layer in cache.layers for tensor in (layer.keys, layer.values))


    class Prefill(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            out = self.model(input_ids=ids, use_cache=True)
            return (out.logits, *cache_tensors(out.past_key_values))


    class Decode(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids, *past):
            cache = T.DynamicCache(config=self.model.config)
            for layer in range(len(past) // 2):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            positions = torch.arange(past[0].shape[2], past[0].shape[2] + ids.shape[1]).unsqueeze(0)
            return self.model(input_ids=ids, cache=cache, position_ids=positions, use_cache=True).logits


    def make():
        torch.manual_seed(0)
        config = T.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                               vocab_size=256, max_position_embeddings=64)
        model = T.LlamaForCausalLM(config).eval()
        ids = torch.randint(0, 256, (1, 8))
        with torch.no_grad():
            prefilled = Prefill(model)(ids)
        # the decode step's example arguments: the next token and the key/value cache prefill returns
        return {"prefill": (Prefill(model), (ids,)), "decode": (Decode(model), (prefilled[0][:, -1:].argmax(-1), *prefilled[1:]))}
''')


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("retry")
    for name, text in (("exits", EXITS), ("parses", ARGPARSE), ("ops", OPS), ("hf_retry", HF), ("hf_decoder", DECODER)):
        (folder / f"{name}.py").write_text(text)
    return folder


def torch_output(entry: str, profile: Profile) -> np.ndarray:
    """The model's own output on the inputs the profile ran with."""
    inputs = [torch.from_numpy(np.load(flag.removeprefix("@"))) for flag in profile.summary["inputs"]]
    with torch.no_grad():
        return load_entry(entry).target(*inputs).numpy()


def test_make_that_exits_is_one_error_line(files, tmp_path):
    line = error_line(run_cli("profile", f"{files / 'exits.py'}:make", "-o", str(tmp_path / "out")))
    assert f"{files / 'exits.py'}: make() exited (status 0) before returning a model" in line
    assert not (tmp_path / "out").exists()
    with pytest.raises(TracelinkError, match=r"exits.py: fails\(\) exited \(no checkpoint given\) before returning a model"):
        load_entry(f"{files / 'exits.py'}:fails")
    (files / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(TracelinkError, match=r"exits_on_import.py: importing it exited \(status 3\) before returning a model"):
        load_entry(str(files / "exits_on_import.py"))


def test_model_file_sees_its_own_path_as_argv(files):
    before = list(sys.argv)
    sys.argv = [*before, "-o", "out", "--repetitions", "3"]  # as `tracelink profile` has them
    try:
        loaded = load_entry(str(files / "parses.py"))
        assert sys.argv == [*before, "-o", "out", "--repetitions", "3"]  # restored after
    finally:
        sys.argv = before
    module = sys.modules["tracelink_model_parses"]
    assert module.SEEN == [str((files / "parses.py").resolve())]
    assert loaded.args[0].shape == (2, 8)


def test_unlowered_op_is_decomposed_and_keeps_the_users_line(files, tmp_path):
    out = tmp_path / "squeeze"
    done = run_cli("profile", f"{files / 'ops.py'}:squeeze", "-o", str(out), "--repetitions", "2", "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "export: IREE could not lower squeeze.dims whole; decomposed from torch's own tables" in done.stdout
    manifest = json.loads((out / "artifacts" / "manifest.json").read_text())["export"]
    assert manifest["decomposed"] == ["squeeze.dims"] and manifest["decomposed_automatically"] == ["squeeze.dims"]
    profile = load_profile(out)
    assert profile.summary["export"]["decomposed_automatically"] == ["squeeze.dims"]
    exported = (out / "artifacts" / "exported.mlir").read_text()
    assert "torch.aten.squeeze.dims" not in exported and "torch.aten.sum.dim_IntList" in exported  # only the failed op
    line = marked_lines(files / "ops.py")["SQUEEZE"]
    lines = profile.source_lines
    assert lines[(lines["file"] == str((files / "ops.py").resolve())) & (lines["line"] == line)]["inclusive_ns"].sum() > 0
    np.testing.assert_allclose(iree_outputs(profile)[0], torch_output(f"{files / 'ops.py'}:squeeze", profile), rtol=1e-5, atol=1e-6)
    # asked for (`--decompose squeeze.dims`, one overload), the same op is decomposed on request, not automatically
    requested = export_model(load_entry(f"{files / 'ops.py'}:squeeze"), tmp_path / "requested", ("squeeze.dims",))
    assert requested.manifest_entry()["decomposed"] == ["squeeze.dims"] and requested.manifest_entry()["decomposed_automatically"] == []
    assert "squeeze.dims" not in requested.program.read_text()


def test_error_names_the_op_that_failed_not_its_neighbour(files, tmp_path):
    """unsqueeze and the FFT share one position (the same expression's start): the op named is the one in the
    program that IREE left, aten._fft_c2c, which no torch table decomposes."""
    line = error_line(run_cli("profile", f"{files / 'ops.py'}:fft", "-o", str(tmp_path / "out")))
    number = marked_lines(files / "ops.py")["FFT"]
    assert "IREE cannot lower aten._fft_c2c (torch.operator)" in line and "unsqueeze" not in line
    assert f"from {(files / 'ops.py').resolve()}:{number}" in line
    assert f"torch has no decomposition of it: write {(files / 'ops.py').resolve()}:{number} with other ops" in line
    assert "compile.log" in line


def test_op_converted_wrongly_is_decomposed_at_its_line(files, tmp_path):
    """torch-mlir converts `clamp` of an integer tensor with a float bound as a float comparison on integers, which
    fails IREE's verifier at the line (TimesFM's masked mean): that op alone, named by the compiler's note on the
    failing op, is decomposed (not the comparison, sum and product on the same line, whose decompositions IREE cannot lower)."""
    out = tmp_path / "clamp"
    done = run_cli("profile", f"{files / 'ops.py'}:clamp", "-o", str(out), "--repetitions", "2", "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    profile = load_profile(out)
    assert profile.summary["export"]["decomposed_automatically"] == ["clamp"]
    line = marked_lines(files / "ops.py")["CLAMP"]
    lines = profile.source_lines
    assert lines[(lines["file"] == str((files / "ops.py").resolve())) & (lines["line"] == line)]["inclusive_ns"].sum() > 0
    np.testing.assert_allclose(iree_outputs(profile)[0], torch_output(f"{files / 'ops.py'}:clamp", profile))


def test_bilinear_head_failing_at_unknown_location_is_decomposed(files, tmp_path):
    out = tmp_path / "segformer"
    done = run_cli("profile", f"{files / 'hf_retry.py'}:segformer", "-o", str(out), "--repetitions", "2", "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    profile = load_profile(out)
    assert profile.summary["export"]["decomposed_automatically"] == ["upsample_bilinear2d.vec"]
    # the upsampling's ops keep the decode head's line
    ops = profile.source_ops
    head = ops[ops["name"].fillna("").str.startswith("model/decode_head/")]
    assert head["file"].str.endswith("modeling_segformer.py").all() and len(head)
    np.testing.assert_allclose(iree_outputs(profile)[0], torch_output(f"{files / 'hf_retry.py'}:segformer", profile), rtol=1e-3, atol=1e-4)


def test_softcapping_decoder_profiles(files, tmp_path):
    out = tmp_path / "gemma2"
    done = run_cli("profile", f"{files / 'hf_retry.py'}:gemma2", "-o", str(out), "--repetitions", "2", "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    profile = load_profile(out)
    np.testing.assert_allclose(iree_outputs(profile)[0], torch_output(f"{files / 'hf_retry.py'}:gemma2", profile), rtol=1e-3, atol=1e-3)
    assert profile.source_lines["file"].str.endswith("modeling_gemma2.py").any()


def test_prefill_and_decode_entry_points_profile_side_by_side(files, tmp_path):
    loaded = load_entry(str(files / "hf_decoder.py"))
    assert list(loaded.entries) == ["prefill", "decode"]
    profiles = tracelink.profile(loaded.entries, out=tmp_path / "llm", repetitions=2, console=Console(file=io.StringIO()))
    assert list(profiles.profiles) == ["prefill", "decode"]
    summary = json.loads((tmp_path / "llm" / "profile.json").read_text())
    assert [function["function"] for function in summary["functions"]] == ["prefill", "decode"]
    exported = (tmp_path / "llm" / "artifacts" / "exported.mlir").read_text()
    assert "func.func @prefill" in exported and "func.func @decode" in exported
    assert exported.count("util.global private @model.model.embed_tokens.weight ") == 1  # one copy of each weight, shared
    for name, (module, _) in loaded.entries.items():
        profile = profiles.profiles[name]
        assert profile.source_lines["file"].str.endswith("modeling_llama.py").any()
        inputs = [torch.from_numpy(np.load(flag.removeprefix("@"))) for flag in profile.summary["inputs"]]
        with torch.no_grad():
            expected = module(*inputs)
        expected = expected[0] if isinstance(expected, tuple) else expected
        np.testing.assert_allclose(iree_outputs(profile)[0], expected.numpy(), rtol=1e-3, atol=1e-4)
        # each entry point is raced against its own eager call
        (reference,) = profile.summary["references"]
        assert reference["status"] == "measured" and reference["outputs"]["agree"], reference
    assert len(profiles.profiles["decode"].summary["inputs"]) == 5  # the token and two layers' keys and values


def test_entry_points_must_be_named_pairs(tmp_path):
    with pytest.raises(TracelinkError, match=r"tracelink.profile\['decode'\] must return \(fn_or_module, example_args\)"):
        tracelink.profile({"decode": 42}, out=tmp_path / "never")
    with pytest.raises(TracelinkError, match=r"entry point 'a b' is not a name"):
        tracelink.profile({"a b": (torch.nn.Identity(), (torch.ones(2),))}, out=tmp_path / "never")
    with pytest.raises(TracelinkError, match=r"entry points are exported from torch modules only"):
        tracelink.profile({"double": (lambda x: x * 2, (np.ones(2),))}, out=tmp_path / "never")
    assert not (tmp_path / "never").exists()  # refused before the directory is claimed
