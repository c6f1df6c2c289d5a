"""The program rewrites of tracelink.tune.rewrites and their strategies, with the real iree-compile and
runtime. conv1d-as-conv2d: the rewritten program verifies and compiles, computes what the original computes (every 1-D
form IREE's importers produce, strided and dilated), keeps the user's locations on every op it makes,
and lets IREE's im2col reach the convolutions (the global-optimization phase dump shows their matmuls);
tests/test_tune_reference.py tunes a PyTorch audio front end with it.
patches-as-matmul: a patch embedding becomes a matmul at its line, computing what it computed, and a
convolution that does not tile its input is left alone. grouped-conv-as-matmul: both grouped forms
(strided and dilated) become a batch matmul at their lines, computing what they computed.
attention-as-matmuls: attention with a boolean mask, a float mask and none becomes two batch matmuls around
a softmax at its line, computing what it computed; attention whose score region changes the score is
left alone."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tests.conftest import REPO
from tracelink.collect.outputs import outputs_agree, run_outputs
from tracelink.compile.targets import TARGET_FLAGS
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.tune.compose import Composition, composition_plans, input_program, source_lines
from tracelink.tune.rewrites import BARRIER, FORMS, is_patch_embedding, producer_of, rewrite_program, rewrites_found
from tracelink.tune.spec import compile_variant
from tracelink.tune.strategy_space import OPTIONS, Candidate, Option, build_key, combinations, combine, option_flags

PROGRAM = REPO / "tests" / "data" / "conv1d.mlir"
PATCHES = REPO / "tests" / "data" / "patch_embedding.mlir"
GROUPED = REPO / "tests" / "data" / "grouped_conv.mlir"
ATTENTION = REPO / "tests" / "data" / "attention.mlir"
FLAGS = [*TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host", "--mlir-print-debuginfo"]
# the 1-D convolutions' lines in PROGRAM, with the 2-D op each becomes and its strides and dilations
CONVOLUTIONS = {12: ("linalg.conv_2d_nchw_fchw", [1, 2], [1, 1]), 17: ("linalg.conv_2d_nhwc_hwcf", [1, 1], [1, 1]),
                22: ("linalg.depthwise_conv_2d_nchw_chw", [1, 1], [1, 2])}
STRATEGY = next(option for option in OPTIONS if option.name == "conv1d-as-conv2d")
LOWERING = [option for option in OPTIONS if option.name in ("data-tiling", "ukernels")]
SHAPES = [(1, 4, 64), (8, 4, 5), (8,), (3, 8, 8), (8, 3)]


def lines_of(op, name: str = PROGRAM.name) -> set[int]:
    return {line for file, line in source_lines(op) if Path(file).name == name}


def linalg_by_line(program: Path, name: str = PROGRAM.name) -> tuple[ir.Module, dict[int, list]]:
    """The parsed program and its ops by the line of ``name`` they carry; hold the module while using the
    ops (an op of a freed module is a dangling pointer)."""
    module = parse_file(program, new_context())
    found: dict[int, list] = defaultdict(list)
    for op in walk(module.operation):
        for line in lines_of(op, name):
            found[line].append(op)
    return module, found


def random_inputs(where: Path, shapes: list[tuple[int, ...]], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    for index, shape in enumerate(shapes):
        np.save(where / f"in{index}.npy", rng.standard_normal(shape).astype(np.float32))
    return [f"@{where / f'in{index}.npy'}" for index in range(len(shapes))]


def same_results(program: Path, rewritten: Path, flags: list[str], inputs: list[str], where: Path, outputs: int = 1) -> np.ndarray:
    """Both programs built (the rewritten one with ``flags``) and run on ``inputs``: the original's first result,
    all ``outputs`` of its results asserted equal to the rewritten one's."""
    original = compile_variant(program, FLAGS, [], where / "original", 300.0, "original")
    built = compile_variant(rewritten, FLAGS, flags, where / "rewritten", 300.0, "rewritten")
    reference = run_outputs(original, "main", inputs, [], outputs, where / "original_out", 120.0)
    agree, why = outputs_agree(reference, run_outputs(built, "main", inputs, [], outputs, where / "rewritten_out", 120.0), 1e-5)
    assert agree, why
    assert np.abs(reference[0]).max() > 1  # random inputs: a real result, not zeros
    return reference[0]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("conv1d")
    source = input_program(PROGRAM, FLAGS, where / "input", 300.0)
    [done] = rewrite_program(source, ("conv1d-as-conv2d",), where / "rewritten" / "program.mlir", where)
    return {"where": where, "source": source, "done": done, "inputs": random_inputs(where, SHAPES, 3)}


def test_every_1d_form_becomes_its_2d_op_at_its_own_line(rewritten):
    done: Composition = rewritten["done"]
    assert (done.rewritten, done.convolutions) == (3, 3)
    module, by_line = linalg_by_line(done.program)
    assert not any(op.name in FORMS for ops in by_line.values() for op in ops)
    for line, (name, strides, dilations) in CONVOLUTIONS.items():
        names = [op.name for op in by_line[line]]
        # the input, filter and init viewed with a unit dimension, the 2-D op, its result collapsed back
        assert names == ["tensor.expand_shape"] * 3 + [name, "tensor.collapse_shape"], (line, names)
        [made] = [op for op in by_line[line] if op.name == name]
        assert [int(v) for v in made.attributes["strides"]] == strides
        assert [int(v) for v in made.attributes["dilations"]] == dilations
    assert not any(op.name.startswith("linalg.") and op.name not in ("linalg.yield",) and not lines_of(op)
                   for op in walk(parse_file(done.program, new_context()).operation))


@pytest.mark.parametrize("strategy", [(), ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all")])
def test_the_rewritten_program_computes_what_the_original_computes(rewritten, strategy, tmp_path):
    result = same_results(PROGRAM, rewritten["done"].program, [*option_flags(STRATEGY), *strategy], rewritten["inputs"], tmp_path)
    assert result.shape == (1, 8, 24)


def test_im2col_reaches_the_rewritten_convolutions_only(rewritten):
    """The im2col flag turns the NCHW and NHWC 2-D ops into matmuls; on the 1-D ones it does nothing (nor
    on depthwise or dilated convolutions: IREE's im2col leaves them to the default lowering)."""
    def matmul_lines(program: Path, name: str) -> set[int]:
        phases = rewritten["where"] / name / "phases"
        compile_variant(program, FLAGS, [*option_flags(STRATEGY), "--mlir-print-debuginfo", f"--dump-compilation-phases-to={phases}"],
                        rewritten["where"] / name, 300.0, name)
        module = parse_file(next(phases.glob("*.global-optimization.mlir")), new_context())
        return {line for op in walk(module.operation) if op.name == "linalg.matmul" for line in lines_of(op)}

    assert matmul_lines(PROGRAM, "original_im2col") == set()
    # (a matmul's location also names the function's line)
    assert matmul_lines(rewritten["done"].program, "rewritten_im2col") & set(CONVOLUTIONS) == {12, 17}


def test_a_rewrite_is_searched_where_the_profiled_program_has_its_op(rewritten, tmp_path):
    # materialized-conv-inputs: where a convolution reads a value computed in the program (in each, the second)
    materialized = "materialized-conv-inputs"
    for program, found in ((PROGRAM, {"conv1d-as-conv2d", materialized}), (PATCHES, {"patches-as-matmul", materialized}),
                           (GROUPED, {"grouped-conv-as-matmul", materialized}), (REPO / "tests" / "data" / "two_convs.mlir", {materialized})):
        phases = tmp_path / program.stem
        compile_variant(program, FLAGS, [f"--dump-compilation-phases-to={phases}"], tmp_path / f"{program.stem}_build",
                        300.0, program.stem)
        assert rewrites_found(phases) == found
    assert rewrites_found(tmp_path / "nowhere") == set()


def test_the_rewrite_is_one_build_with_its_flags_and_combines_like_a_layout():
    im2col = next(option for option in OPTIONS if option.name == "im2col")
    assert option_flags(STRATEGY) == option_flags(im2col) and build_key(STRATEGY) != build_key(im2col)
    combined = combine([STRATEGY, *LOWERING])
    assert combined.rewrites == ("conv1d-as-conv2d",) and build_key(combined) != build_key(combine([im2col, *LOWERING]))
    singles = [Candidate(option) for option in (STRATEGY, im2col, *LOWERING)]
    built = combinations(singles[:2], singles)
    names = [option.name for option in built]
    assert names[:3] == ["conv1d-as-conv2d+data-tiling+ukernels", "conv1d-as-conv2d+data-tiling", "conv1d-as-conv2d+ukernels"]
    assert "im2col+data-tiling+ukernels" in names and "conv1d-as-conv2d+im2col" in names  # the same flags, not the same build
    assert all(option.rewrites == ("conv1d-as-conv2d",) for option in built if option.name.startswith("conv1d"))


def test_a_computed_convolution_input_is_read_through_a_barrier_computing_what_it_computed(rewritten, tmp_path):
    """The transposes feeding PROGRAM's second and third convolutions get a barrier each, at their
    convolution's line (the first reads the program's input), and the program computes the same."""
    [done] = rewrite_program(rewritten["done"].program, ("materialized-conv-inputs",), tmp_path / "materialized" / "program.mlir", tmp_path)
    assert (done.rewritten, done.convolutions) == (2, 2)
    module = parse_file(done.program, new_context())  # held: its ops live as long as it does
    ops = list(walk(module.operation))
    barriers = [op for op in ops if op.name == BARRIER]
    assert sorted(line for op in barriers for line in lines_of(op) if line in CONVOLUTIONS) == [17, 22]
    convolutions = [op for op in ops if op.name.startswith(("linalg.conv_", "linalg.depthwise_conv_"))]
    assert [producer_of(op.operands[0]).name for op in convolutions] == ["tensor.expand_shape", BARRIER, BARRIER]
    layout = [*option_flags(STRATEGY), "--iree-opt-data-tiling"]
    assert same_results(PROGRAM, done.program, layout, rewritten["inputs"], tmp_path).shape == (1, 8, 24)


def test_a_materialized_input_stays_out_of_the_window_copy(tmp_path):
    """With im2col and data tiling, IREE fuses the ReLU between two_convs.mlir's convolutions into the copy
    that gathers the second one's windows into its matmul's tiles (a set_encoding dispatch), where it is
    computed for each window; read through the barrier, it stays in the first convolution's dispatch. The
    call is still one submission: the barrier is gone before the stream level, where a host wait would
    split it (as ``util.optimization_barrier`` did)."""
    program = REPO / "tests" / "data" / "two_convs.mlir"
    source = input_program(program, FLAGS, tmp_path / "input", 300.0)
    [done] = rewrite_program(source, ("materialized-conv-inputs",), tmp_path / "materialized" / "program.mlir", tmp_path)
    assert (done.rewritten, done.convolutions) == (1, 1)  # the first convolution reads the program's input

    def built(program: Path, name: str) -> tuple[dict[str, int], int]:
        """The ReLUs (arith.maximumf) in the window-copy dispatches and in the matmul dispatches, by the
        flow phase dump; and the host waits (hal.fence.await) in the call, by the hal phase dump."""
        phases = tmp_path / name / "phases"
        compile_variant(program, FLAGS, ["--iree-global-opt-use-im2col-for-convs", "--iree-opt-data-tiling",
                                         f"--dump-compilation-phases-to={phases}"], tmp_path / name, 300.0, name)
        flow = parse_file(next(phases.glob("*.flow.mlir")), new_context())
        found = {"window copy": 0, "matmul": 0}
        for executable in (op for op in walk(flow.operation) if op.name == "flow.executable"):
            inside = [op.name for op in walk(executable)]
            kind = "matmul" if "linalg.matmul" in inside else "window copy" if "iree_encoding.set_encoding" in inside else None
            if kind is not None:
                found[kind] += inside.count("arith.maximumf")
        hal = parse_file(next(phases.glob("*.hal.mlir")), new_context())
        calls = [op for op in walk(hal.operation) if op.name == "util.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main"]
        assert len(calls) == 1
        return found, [op.name for op in walk(calls[0])].count("hal.fence.await")

    assert built(source, "fused_build") == ({"window copy": 1, "matmul": 0}, 1)  # the wait for the call's end
    assert built(done.program, "materialized_build") == ({"window copy": 0, "matmul": 1}, 1)
    inputs = random_inputs(tmp_path, [(1, 8, 18, 18), (16, 8, 3, 3), (16, 16, 3, 3)], 5)
    same_results(program, done.program, ["--iree-global-opt-use-im2col-for-convs", "--iree-opt-data-tiling"], inputs, tmp_path)


def test_a_barrier_on_a_dynamic_input_carries_its_size(tmp_path):
    """dynamic_conv.mlir's convolution reads a ReLU of a batch the run chooses: the barrier carries that
    size (IREE's verifier asks for it), and the program builds and computes the same for two batch sizes."""
    program = REPO / "tests" / "data" / "dynamic_conv.mlir"
    source = input_program(program, FLAGS, tmp_path / "input", 300.0)
    [done] = rewrite_program(source, ("materialized-conv-inputs",), tmp_path / "materialized" / "program.mlir", tmp_path)
    assert (done.rewritten, done.convolutions) == (1, 1)
    module = parse_file(done.program, new_context())
    [barrier] = [op for op in walk(module.operation) if op.name == BARRIER]
    assert [producer_of(value).name for value in barrier.operands[1:]] == ["tensor.dim"]
    for batch in (1, 3):
        inputs = random_inputs(tmp_path, [(batch, 8, 18, 18), (16, 8, 3, 3)], batch)
        same_results(program, done.program, ["--iree-global-opt-use-im2col-for-convs", "--iree-opt-data-tiling"], inputs,
                     tmp_path / f"batch{batch}")


def test_materialized_inputs_are_a_lowering_combined_with_each_surviving_layout():
    options = {option.name: option for option in OPTIONS}
    singles = [Candidate(options[name]) for name in ("conv1d-as-conv2d", "data-tiling", "materialized-conv-inputs")]
    built = {option.name: option for option in combinations(singles[:1], singles)}
    assert built["conv1d-as-conv2d+data-tiling+materialized-conv-inputs"].rewrites == ("conv1d-as-conv2d", "materialized-conv-inputs")
    assert set(built) == {"conv1d-as-conv2d+data-tiling+materialized-conv-inputs", "conv1d-as-conv2d+data-tiling",
                          "conv1d-as-conv2d+materialized-conv-inputs"}


def test_a_rewriting_strategy_hosts_no_per_op_composition():
    host = Candidate(combine([STRATEGY, *LOWERING]), status="faster", ratio=5.0, ci=[4.0, 6.0])
    table = [{"file": "m.py", "line": 8, "op_kind": "torch.aten.conv1d", "strategy": name, "base_ns": 1.0,
              "strategy_ns": 1.0 / ratio, "ratio": ratio} for name, ratio in ((host.name, 2.0), ("im2col", 9.0))]
    assert composition_plans(host, [host], table) == []
    plain = Candidate(Option("conv-data-tiling"), status="faster", ratio=5.0, ci=[4.0, 6.0])
    assert composition_plans(plain, [plain], [{**row, "strategy": plain.name} if row["strategy"] == host.name else row
                                              for row in table]) != []


def test_a_patch_embedding_becomes_a_matmul_computing_what_it_computed(tmp_path):
    source = input_program(PATCHES, FLAGS, tmp_path / "input", 300.0)
    [done] = rewrite_program(source, ("patches-as-matmul",), tmp_path / "rewritten" / "program.mlir", tmp_path)
    assert (done.rewritten, done.convolutions) == (1, 1)  # the stride-1 convolution is not a patch embedding
    module, by_line = linalg_by_line(done.program, PATCHES.name)
    assert [op.name for op in by_line[11] if op.name.startswith("linalg.")] == \
        ["linalg.transpose"] * 3 + ["linalg.matmul", "linalg.transpose"]
    assert [op.name for op in by_line[14] if op.name.startswith("linalg.")] == ["linalg.conv_2d_nchw_fchw"]
    inputs = random_inputs(tmp_path, [(1, 3, 32, 32), (16, 3, 4, 4), (16,), (8, 16, 2, 2)], 5)
    for flags in ([], ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"]):
        assert same_results(PATCHES, done.program, flags, inputs, tmp_path / str(len(flags))).shape == (1, 8, 7, 7)


def test_the_patch_rewrite_is_tried_with_each_surviving_layout():
    options = {option.name: option for option in OPTIONS}
    singles = [Candidate(options[name]) for name in ("decompose-attention", "data-tiling", "patches-as-matmul", "ukernels")]
    names = [option.name for option in combinations(singles[:2], singles)]
    assert "decompose-attention+data-tiling+patches-as-matmul" in names and "decompose-attention+data-tiling" in names
    built = next(option for option in combinations(singles[:2], singles) if option.name == "decompose-attention+data-tiling+patches-as-matmul")
    assert built.rewrites == ("patches-as-matmul",) and "--iree-opt-data-tiling" in option_flags(built)


def test_only_convolutions_that_tile_their_input_with_patches_are_patch_embeddings():
    def convolution(image: int, kernel: int, stride: int) -> bool:
        x, w = f"tensor<1x3x{image}x{image}xf32>", f"tensor<8x3x{kernel}x{kernel}xf32>"
        o = f"tensor<1x8x{(image - kernel) // stride + 1}x{(image - kernel) // stride + 1}xf32>"
        text = f"""func.func @f(%x: {x}, %w: {w}, %o: {o}) -> {o} {{
          %r = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : tensor<2xi64>, strides = dense<{stride}> : tensor<2xi64>}}
               ins(%x, %w : {x}, {w}) outs(%o : {o}) -> {o}
          return %r : {o}
        }}"""
        module = ir.Module.parse(text, new_context())
        return is_patch_embedding(next(op for op in walk(module.operation) if op.name == "linalg.conv_2d_nchw_fchw"))

    assert convolution(32, 4, 4)
    assert not convolution(30, 4, 4)  # the last patch would be cut off
    assert not convolution(32, 1, 1)  # pointwise
    assert not convolution(32, 4, 2)  # overlapping windows


def test_grouped_convolutions_become_batch_matmuls_computing_what_they_computed(tmp_path):
    source = input_program(GROUPED, FLAGS, tmp_path / "input", 300.0)
    [done] = rewrite_program(source, ("grouped-conv-as-matmul",), tmp_path / "rewritten" / "program.mlir", tmp_path)
    assert (done.rewritten, done.convolutions) == (2, 2)
    module, by_line = linalg_by_line(done.program, GROUPED.name)
    made = ["linalg.generic", "linalg.transpose", "linalg.batch_matmul", "linalg.transpose"]
    assert [op.name for op in by_line[7] if op.name.startswith("linalg.") and op.name != "linalg.yield"] == made
    # filter times windows, output positions innermost: 4 groups of 3 filters, 3 channels x 8 taps, 13 positions
    [matmul] = [op for op in by_line[7] if op.name == "linalg.batch_matmul"]
    assert [str(value.type) for value in matmul.operands] == ["tensor<4x3x24xf32>", "tensor<4x24x13xf32>", "tensor<4x3x13xf32>"]
    # the fgchw filter is transposed to gfchw first
    assert [op.name for op in by_line[14] if op.name.startswith("linalg.") and op.name != "linalg.yield"] == ["linalg.transpose", *made]
    inputs = random_inputs(tmp_path, [(1, 4, 3, 1, 40), (4, 3, 3, 1, 8), (5, 4, 3, 3, 3)], 7)
    for flags in ([], ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"]):
        assert same_results(GROUPED, done.program, flags, inputs, tmp_path / str(len(flags))).shape == (1, 4, 5, 1, 9)


def test_attention_becomes_batch_matmuls_around_a_softmax_computing_what_it_computed(tmp_path):
    source = input_program(ATTENTION, FLAGS, tmp_path / "input", 300.0)
    [done] = rewrite_program(source, ("attention-as-matmuls",), tmp_path / "rewritten" / "program.mlir", tmp_path)
    assert (done.rewritten, done.convolutions) == (3, 3)  # the attention whose region scales the score is not its form
    module, by_line = linalg_by_line(done.program, ATTENTION.name)
    made = ["linalg.transpose", "linalg.fill", "linalg.batch_matmul", "linalg.generic", "linalg.softmax", "linalg.fill",
            "linalg.batch_matmul"]
    for line in (22, 26, 30):  # masked by booleans, by floats, not masked
        assert [op.name for op in by_line[line] if op.name.startswith("linalg.") and op.name != "linalg.yield"] == made
    assert [op.name for op in by_line[34] if op.name.startswith("iree_linalg_ext.")] == ["iree_linalg_ext.attention"]
    inputs = random_inputs(tmp_path, [(2, 10, 8), (2, 12, 8), (2, 12, 6), (2, 10, 12)], 11)
    for flags in ([], ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"]):
        assert same_results(ATTENTION, done.program, flags, inputs, tmp_path / str(len(flags)), outputs=4).shape == (2, 10, 6)


def test_attention_as_matmuls_is_a_layout_combined_with_the_lowerings():
    options = {option.name: option for option in OPTIONS}
    singles = [Candidate(options[name]) for name in ("attention-as-matmuls", "data-tiling", "patches-as-matmul")]
    built = {option.name: option for option in combinations(singles[:1], singles)}
    assert built["attention-as-matmuls+data-tiling+patches-as-matmul"].rewrites == ("attention-as-matmuls", "patches-as-matmul")
