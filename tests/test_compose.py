"""Per-op composition (tracelink.tune.compose), checked against IREE's own output: the phase dumps of
the composed program's build show which convolutions became im2col + matmul, and its results equal
the default build's on random inputs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO
from tracelink.compile.targets import TARGET_FLAGS
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.tune.compose import compose, input_program, is_convolution, source_lines
from tracelink.tune.spec import compile_variant
from tracelink.tune.strategy import Candidate, Option, SearchResult, composition_plan, outputs_agree, run_outputs

PROGRAM = REPO / "tests" / "data" / "two_convs.mlir"
FLAGS = [*TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host", "--mlir-print-debuginfo"]
FIRST, SECOND = 7, 15  # the two convolutions' lines in PROGRAM
IM2COL = "--iree-global-opt-use-im2col-for-convs"


def ops_by_line(phases: Path, phase: str) -> dict[int, list[str]]:
    """The names of the linalg ops of one phase dump at each line of PROGRAM."""
    found: dict[int, list[str]] = defaultdict(list)
    module = parse_file(next(phases.glob(f"*.{phase}.mlir")), new_context())
    for op in walk(module.operation):
        if op.name.startswith("linalg."):
            for file, line in source_lines(op):
                if Path(file).name == PROGRAM.name:
                    found[line].append(op.name)
    return found


def built(program: Path, workdir: Path, *flags: str) -> tuple[Path, Path]:
    """``program`` compiled with ``flags``: the module and its phase dumps' directory."""
    phases = workdir / "phases"
    vmfb = compile_variant(program, FLAGS, [*flags, "--mlir-print-debuginfo", f"--dump-compilation-phases-to={phases}"],
                           workdir, 300.0, "test")
    return vmfb, phases


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("compose")
    source = input_program(PROGRAM, FLAGS, where / "input", 300.0)
    composition = compose(source, where / "composed.mlir", "im2col", lambda op: (PROGRAM.name, FIRST) not in
                          {(Path(f).name, line) for f, line in source_lines(op)})
    rng = np.random.default_rng(7)
    inputs = []
    for name, shape in (("input", (1, 8, 18, 18)), ("first", (16, 8, 3, 3)), ("second", (16, 16, 3, 3))):
        np.save(where / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
        inputs.append(f"@{where / f'{name}.npy'}")
    return {"where": where, "composition": composition, "inputs": inputs,
            "default": built(PROGRAM, where / "default"), "global": built(PROGRAM, where / "global", IM2COL),
            "composed": built(composition.program, where / "composed")}


def test_only_the_chosen_convolution_becomes_im2col_and_matmul(builds):
    composition = builds["composition"]
    assert (composition.converted, composition.kept, composition.functions) == (1, 1, 1)
    # after preprocessing, where the function's pipeline runs: only the second is no convolution any more
    default = ops_by_line(builds["default"][1], "preprocessing")
    composed = ops_by_line(builds["composed"][1], "preprocessing")
    assert "linalg.conv_2d_nchw_fchw" in default[FIRST] and "linalg.conv_2d_nchw_fchw" in default[SECOND]
    assert "linalg.conv_2d_nchw_fchw" in composed[FIRST]
    assert not any(name.startswith("linalg.conv") for name in composed[SECOND])
    # into dispatch creation the second goes as the global flag makes it (an im2col copy and a matmul: one
    # op more than the direct convolution), the first as the default build has it
    default = ops_by_line(builds["default"][1], "global-optimization")
    everywhere = ops_by_line(builds["global"][1], "global-optimization")
    composed = ops_by_line(builds["composed"][1], "global-optimization")
    assert sorted(composed[SECOND]) == sorted(everywhere[SECOND]) and len(everywhere[SECOND]) > len(default[SECOND])
    assert sorted(composed[FIRST]) == sorted(default[FIRST]) and len(everywhere[FIRST]) > len(default[FIRST])
    assert "linalg.matmul" in composed[SECOND] and "linalg.matmul" not in composed[FIRST]


def test_the_composed_program_computes_what_the_default_build_computes(builds):
    def results(vmfb: Path, name: str) -> list[np.ndarray]:
        return run_outputs(vmfb, "main", builds["inputs"], [], 1, builds["where"] / name, 120.0)

    reference = results(builds["default"][0], "default_out")
    agree, why = outputs_agree(reference, results(builds["composed"][0], "composed_out"), 1e-5)
    assert agree, why
    assert np.abs(reference[0]).max() > 1  # random filters: a real result, not zeros


def test_the_rewritten_program_keeps_its_weights_locations_and_one_call_per_run(builds):
    text = builds["composition"].program.read_text()
    module = parse_file(builds["composition"].program, new_context())
    functions = [op for op in module.body.operations if op.operation.name == "util.func"]
    private = [f for f in functions if "preprocessing_pipeline" in f.attributes]
    assert len(private) == 1 and "inline.never" in str(private[0].attributes["inlining_policy"])
    assert "iree-global-opt-convert-conv2d-to-img2col" in str(private[0].attributes["preprocessing_pipeline"])
    assert [op.name for op in walk(module.operation) if op.name == "util.call"] == ["util.call"]
    convolutions = [op for op in walk(module.operation) if is_convolution(op)]
    assert {line for op in convolutions for _, line in source_lines(op)} == {FIRST, SECOND}
    assert "__elided__" not in text


def winner(name: str) -> Candidate:
    return Candidate(Option(name), status="faster", ratio=3.0, ci=[2.0, 4.0])


def rows(strategy: str, *ratios: tuple[int, float]) -> list[dict]:
    return [{"file": "m.onnx", "line": line, "op_kind": "onnx.Conv", "strategy": strategy, "base_ns": 1.0,
             "strategy_ns": 1.0 / ratio, "ratio": ratio} for line, ratio in ratios]


def test_the_plan_keeps_the_lines_the_winner_slowed_and_its_lowering_options():
    plan = composition_plan(winner("im2col+data-tiling+ukernels"),
                            rows("im2col+data-tiling+ukernels", (8, 0.5), (9, 3.0), (11, 0.95))
                            + rows("im2col", (10, 0.5)))
    assert plan is not None
    layout, rest, slowed = plan
    assert layout == "im2col" and [o.name for o in rest] == ["data-tiling", "ukernels"]
    assert slowed == {("m.onnx", 8)}


def test_nothing_is_composed_without_a_per_function_layout_or_a_slowed_line():
    assert composition_plan(winner("conv-data-tiling"), rows("conv-data-tiling", (8, 0.5))) is None
    assert composition_plan(winner("im2col+channels-last"), rows("im2col+channels-last", (8, 0.5))) is None
    assert composition_plan(winner("im2col"), rows("im2col", (8, 1.5))) is None
    assert composition_plan(winner("im2col"), rows("im2col+data-tiling", (8, 0.5))) is None


def test_a_winning_composition_is_handed_over_as_its_program():
    from tracelink.tune.session import Session

    composed = Candidate(Option("per-op im2col+data-tiling", ("--iree-opt-data-tiling",)), program=Path("p.mlir"))
    session = Session(SearchResult([composed], composed, []), tuned_profile=None)
    assert session.strategy_program() == Path("p.mlir") and session.apply_flags() == ["--iree-opt-data-tiling"]
    assert composed.entry()["program"] == "p.mlir"
