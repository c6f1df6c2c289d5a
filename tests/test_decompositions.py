"""tracelink's own decompositions of the ops no torch table decomposes, against torch's eager ops on real values,
and a `transformers` mixture-of-experts block (Mixtral's, from a tiny config), whose router counts tokens per expert
with `torch.histc` and whose experts run `transformers`' own grouped-matmul op, profiled through them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.test_bad_input import run_cli
from tests.test_frameworks import iree_outputs
from tracelink.compile.frontends import decompositions as own
from tracelink.compile.frontends.decompositions import decomposition_name, decompositions, torch_op
from tracelink.compile.frontends.torch_export import KEPT_OPS
from tracelink.profile_dir.profile import load_profile

HISTC_CASES = [
    # (values, bins, min, max)
    (torch.tensor([0.0, 1, 1, 3, 3, 3]), 4, 0, 3),  # a router's expert ids: the largest equals max, last bin
    (torch.tensor([-2.0, 0, 0.5, 2, 2.5, 9]), 4, 0, 2),  # values below min and above max count nowhere
    (torch.tensor([1.5, 2.5, 4.0, 2.0]), 3, 0, 0),  # min == max given: the values' own extremes
    (torch.tensor([2.0, 2.0, 2.0]), 5, 0, 0),  # ... all equal: widened by one either side
    (torch.tensor([3.0, 7.0]), 2, 5, 5),  # min == max given, not zero: the values' extremes as well
    (torch.tensor([[0.1, 0.2], [0.3, 0.999]]), 10, 0, 1),  # any shape, flattened
]


@pytest.mark.parametrize(("values", "bins", "low", "high"), HISTC_CASES)
def test_histc_counts_as_torch_does(values, bins, low, high):
    assert torch.equal(own.histc(values, bins, low, high), torch.histc(values, bins, low, high))


def test_histc_on_random_values_and_edges():
    generator = torch.Generator().manual_seed(0)
    values = torch.cat([torch.randn(500, generator=generator) * 3, torch.linspace(-1, 1, 41)])
    for bins, low, high in ((7, -1, 1), (16, -3.5, 2.25), (1, 0, 0), (3, -10, 10)):
        assert torch.equal(own.histc(values, bins, low, high), torch.histc(values, bins, low, high)), (bins, low, high)


CUMULATIVE_CASES = [
    torch.tensor([[3.0, 1, 3, 2, 5, 5], [0, -1, 0, 4, 4, 1]]),  # ties: the last index
    torch.tensor([1.0, float("nan"), 2, float("nan"), 0]),  # a NaN stays, at the last NaN's index
    torch.tensor([[-1, 4, 4, 2], [7, -1, 3, 8], [7, 7, 0, 0]]),  # integers (grounding-dino's token indices)
    torch.tensor([True, False, True, False]),
    torch.tensor(2.5),  # 0-d
]


@pytest.mark.parametrize("values", CUMULATIVE_CASES)
@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_and_cummin_as_torch_does(values, name):
    for dim in range(-values.dim(), max(values.dim(), 1)):
        got, expected = getattr(own, name)(values, dim), getattr(torch, name)(values, dim)
        torch.testing.assert_close(got[0], expected.values, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(got[1], expected.indices), (name, dim)


def test_grouped_mm_as_transformers_kernel_does():
    from transformers.integrations.moe import _grouped_mm_fallback

    generator = torch.Generator().manual_seed(0)
    rows, weight = torch.randn(9, 5, generator=generator), torch.randn(4, 5, 3, generator=generator)
    # an empty group, a group of one and rows past the last offset (left zero)
    for offsets in ([2, 2, 3, 7], [0, 0, 9, 9], [9, 9, 9, 9], [0, 0, 0, 0]):
        offs = torch.tensor(offsets, dtype=torch.int32)
        torch.testing.assert_close(own.grouped_mm(rows, weight, offs), _grouped_mm_fallback(rows, weight, offs))


POOLS = [
    # (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    ([2, 1], [2, 1], [0, 0], True, True, None),  # Funnel's pooling: ceil mode, which IREE converted wrongly
    ([3, 2], [], [0, 0], False, True, None),  # PP-OCR's head: windows that leave the last row out
    ([3, 3], [2, 2], [1, 1], True, True, None),  # a partial last window beside the padding
    ([3, 3], [2, 2], [1, 1], True, False, None),  # ... counting the input only
    ([2, 2], [1, 1], [1, 0], False, False, 3),  # a divisor given
    ([3, 2], [3, 2], [1, 1], True, True, None),
]


@pytest.mark.parametrize(("kernel", "stride", "padding", "ceil_mode", "count_include_pad", "divisor"), POOLS)
def test_avg_pool2d_as_torch_does(kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    values = torch.randn(2, 3, 7, 10, generator=torch.Generator().manual_seed(0))
    for shaped in (values, values[0]):  # with and without a batch
        args = (shaped, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
        torch.testing.assert_close(own.avg_pool2d(*args), torch.ops.aten.avg_pool2d(*args))


def test_unsorted_topk_is_the_sorted_one_and_a_sorted_one_stays():
    values = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    got, expected = own.topk(values, 2, -1, True, False), torch.topk(values, 2, -1, True, True)
    assert torch.equal(got[0], expected.values) and torch.equal(got[1], expected.indices)
    unsorted = torch.topk(values, 2, -1, True, False)  # eager's own answer: the same elements
    assert torch.equal(unsorted.indices.sort(-1).values, got[1].sort(-1).values)
    assert own.topk(values, 2, -1, True, True) is NotImplemented
    exported = torch.export.export(Router(), (values,)).run_decompositions({torch.ops.aten.topk.default: own.topk})
    calls = [node.args for node in exported.graph.nodes if node.target == torch.ops.aten.topk.default]
    assert len(calls) == 1 and calls[0][4:] in ((), (True,))  # sorted: the default, left out, or given


class Router(torch.nn.Module):
    """A DeepSeek-style router's unsorted top-k."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(scores, 2, dim=-1, sorted=False)


def test_each_op_comes_from_the_first_table_that_decomposes_it():
    import transformers.integrations.moe  # noqa: F401  (registers transformers' custom op)
    from torch._decomp import get_decompositions
    from torch._inductor.decomposition import decompositions as inductor

    squeeze = torch.ops.aten.squeeze.dims
    assert decompositions(squeeze) == get_decompositions([squeeze])  # torch._decomp first
    empty_permuted = torch.ops.aten.empty_permuted.default
    assert not get_decompositions([empty_permuted]) and decompositions(empty_permuted) == {empty_permuted: inductor[empty_permuted]}
    assert decompositions(torch.ops.aten.histc.default) == {torch.ops.aten.histc.default: own.histc}
    assert decomposition_name("aten.histc", KEPT_OPS) == "histc" and decomposition_name("aten.empty_permuted", KEPT_OPS) == "empty_permuted"
    assert decomposition_name("transformers.grouped_mm_fallback", KEPT_OPS) == "transformers.grouped_mm_fallback"
    assert decomposition_name("aten.linear", KEPT_OPS) is None and decomposition_name("aten._fft_c2c", KEPT_OPS) is None
    assert torch_op("transformers.no_such_op") is None and torch_op("no_such_namespace.op") is None


MOE = textwrap.dedent('''
    import torch
    import transformers as T
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock


    def make():
        torch.manual_seed(0)
        config = T.MixtralConfig(hidden_size=32, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                 experts_implementation="grouped_mm")  # a full model's default, set here as a model sets it
        block = MixtralSparseMoeBlock(config).eval()
        for parameter in block.parameters():  # the experts' weights are left uninitialized outside a model's post_init
            torch.nn.init.normal_(parameter, std=0.1)
        return block, (torch.randn(1, 8, 32),)
''')


def test_moe_block_profiles_through_histc_and_grouped_matmul(tmp_path):
    """Mixtral's sparse mixture-of-experts block, as the model builds it: its router's histc, transformers' grouped
    matmul and the empty_permuted of its inverse permutation, decomposed in one round."""
    (tmp_path / "hf_moe.py").write_text(MOE)
    out = tmp_path / "moe"
    done = run_cli("profile", f"{tmp_path / 'hf_moe.py'}:make", "-o", str(out), "--repetitions", "2", "--compare", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "export: IREE could not lower histc, transformers.grouped_mm_fallback, empty_permuted whole" in done.stdout
    assert "torch.operator" not in (out / "artifacts" / "exported.mlir").read_text()
    profile = load_profile(out)
    assert profile.summary["export"]["decomposed_automatically"] == ["histc", "transformers.grouped_mm_fallback", "empty_permuted"]
    # the histogram's ops keep the line of the `torch.histc` call they replace, and the block's own file holds time
    at_histc = ops_at(out / "artifacts" / "exported.mlir", *histc_line())
    assert at_histc and "aten.histc" not in at_histc and "aten.sum.dim_IntList" in at_histc, at_histc
    lines = profile.source_lines
    assert lines[lines["file"].str.endswith("modeling_mixtral.py")]["inclusive_ns"].sum() > 0
    from tracelink.compile.frontends import load_entry

    inputs = [torch.from_numpy(np.load(flag.removeprefix("@"))) for flag in profile.summary["inputs"]]
    with torch.no_grad():
        expected = load_entry(f"{tmp_path / 'hf_moe.py'}:make").target(*inputs).numpy()
    np.testing.assert_allclose(iree_outputs(profile)[0], expected, rtol=1e-4, atol=1e-5)


def histc_line() -> tuple[str, int]:
    """The file and line of the `torch.histc` call in `transformers`' grouped-matmul experts."""
    import transformers.integrations.moe as moe

    path = Path(moe.__file__)
    return str(path), next(number for number, line in enumerate(path.read_text().splitlines(), 1) if "= torch.histc(" in line)


def ops_at(program: Path, file: str, line: int) -> list[str]:
    """The torch ops of ``program`` with ``file:line`` in their location's stack."""
    from tracelink.compile.frontends.unlowered import file_frames, torch_name
    from tracelink.ir_utils import new_context, parse_file, walk

    with new_context() as context:
        return [torch_name(op) for op in walk(parse_file(program, context).operation)
                if op.name.startswith("torch.aten.") and (file, line) in file_frames(op.location)]
