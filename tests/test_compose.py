"""Per-op composition (tracelink.tune.compose), checked against IREE's own output: the phase dumps of
the composed programs' builds show which convolutions became im2col + matmul, their dispatches which
stayed convolutions, and their results equal the default build's on random inputs. Both rewrites: one
convolution kept on the default lowering under the im2col flag, and one convolution made im2col under
conv data tiling's flags."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO
from tracelink.errors import TracelinkError
from tracelink.compile.targets import TARGET_FLAGS
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.tune.compose import IM2COL, KEEP_DEFAULT, compose, composition_plans, input_program, source_lines
from tracelink.tune.spec import compile_variant
from tracelink.collect.outputs import outputs_agree, run_outputs
from tracelink.tune.strategy import SearchResult
from tracelink.tune.strategy_space import OPTIONS, Candidate, Option, option_flags

PROGRAM = REPO / "tests" / "data" / "two_convs.mlir"
FLAGS = [*TARGET_FLAGS, "--iree-llvmcpu-target-cpu=host", "--mlir-print-debuginfo"]
FIRST, SECOND = 7, 15  # the two convolutions' lines in PROGRAM
IM2COL_FLAG = "--iree-global-opt-use-im2col-for-convs"
CONV_DATA_TILING = option_flags(next(option for option in OPTIONS if option.name == "conv-data-tiling"))


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

    def first(op) -> bool:
        return (PROGRAM.name, FIRST) in {(Path(f).name, line) for f, line in source_lines(op)}

    composition = compose(source, where / "composed.mlir", first, KEEP_DEFAULT, where)
    with_im2col = compose(source, where / "with_im2col.mlir", first, IM2COL, where)
    rng = np.random.default_rng(7)
    inputs = []
    for name, shape in (("input", (1, 8, 18, 18)), ("first", (16, 8, 3, 3)), ("second", (16, 16, 3, 3))):
        np.save(where / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
        inputs.append(f"@{where / f'{name}.npy'}")
    return {"where": where, "source": source, "first": first, "composition": composition, "with_im2col": with_im2col, "inputs": inputs,
            "default": built(PROGRAM, where / "default"), "global": built(PROGRAM, where / "global", IM2COL_FLAG),
            "composed": built(composition.program, where / "composed", IM2COL_FLAG),
            "conv_data_tiling": built(PROGRAM, where / "conv_data_tiling", *CONV_DATA_TILING),
            "composed_im2col": built(with_im2col.program, where / "composed_im2col", *CONV_DATA_TILING)}


def exports(phases: Path) -> list[str]:
    """The dispatch names of a build, from its executable-sources phase."""
    module = parse_file(next(phases.glob("*.executable-sources.mlir")), new_context())
    return sorted(op.attributes["sym_name"].value.split("_dispatch_")[-1].split("_", 1)[-1]
                  for op in walk(module.operation) if op.name == "hal.executable.export")


def test_im2col_takes_only_the_convolution_not_kept(builds):
    composition = builds["composition"]
    assert (composition.rewritten, composition.convolutions) == (1, 2)
    # into dispatch creation (after global optimization, where im2col runs) the first convolution goes
    # as the default build has it, the second as the global flag makes it: an im2col copy and a matmul
    default = ops_by_line(builds["default"][1], "global-optimization")
    everywhere = ops_by_line(builds["global"][1], "global-optimization")
    composed = ops_by_line(builds["composed"][1], "global-optimization")
    assert sorted(composed[FIRST]) == sorted(default[FIRST]) and "linalg.matmul" in everywhere[FIRST]
    assert sorted(composed[SECOND]) == sorted(everywhere[SECOND]) and "linalg.matmul" in composed[SECOND]
    assert "linalg.matmul" not in composed[FIRST] and "linalg.matmul" not in default[SECOND]
    # the dispatches: the default's first convolution, the global flag's im2col and matmul of the second
    assert exports(builds["default"][1]) == ["conv_16x14x14x16x3x3_f32", "conv_16x16x16x8x3x3_f32"]
    assert exports(builds["global"][1]) == ["generic_16x3x3x14x14_f32", "generic_8x3x3x16x16_f32",
                                            "matmul_16x196x144_f32", "matmul_16x256x72_f32"]
    assert exports(builds["composed"][1]) == ["conv_16x16x16x8x3x3_f32", "generic_16x3x3x14x14_f32",
                                              "matmul_16x196x144_f32"]


def test_im2col_takes_only_the_chosen_convolution_under_conv_data_tiling(builds):
    assert (builds["with_im2col"].rewritten, builds["with_im2col"].convolutions) == (1, 2)
    whole = ops_by_line(builds["conv_data_tiling"][1], "global-optimization")
    composed = ops_by_line(builds["composed_im2col"][1], "global-optimization")
    assert "linalg.matmul" in composed[FIRST] and "linalg.matmul" not in composed[SECOND]
    assert not any("linalg.matmul" in names for names in whole.values())
    # conv data tiling's dispatches for the second convolution, an im2col copy and a matmul (its filter
    # encoded for data tiling) for the first
    assert [n for n in exports(builds["conv_data_tiling"][1]) if n.startswith("conv_")] == \
        ["conv_16x14x14x16x3x3_f32", "conv_16x16x16x8x3x3_f32"]
    assert exports(builds["composed_im2col"][1]) == [
        "conv_16x14x14x16x3x3_f32", "encoding_0_encode_16x72xf32_to_16x72xf32",
        "encoding_1_encode_16x16x3x3xf32_to_16x16x3x3xf32", "generic_8x3x3x16x16_f32", "matmul_16x256x72_f32"]


@pytest.mark.parametrize("composed", ["composed", "composed_im2col"])
def test_the_composed_program_computes_what_the_default_build_computes(builds, composed):
    def results(vmfb: Path, name: str) -> list[np.ndarray]:
        return run_outputs(vmfb, "main", builds["inputs"], [], 1, builds["where"] / name, 120.0)

    reference = results(builds["default"][0], "default_out")
    agree, why = outputs_agree(reference, results(builds[composed][0], f"{composed}_out"), 1e-5)
    assert agree, why
    assert np.abs(reference[0]).max() > 1  # random filters: a real result, not zeros


def test_the_rewritten_program_keeps_its_weights_locations_and_ops(builds):
    module = parse_file(builds["composition"].program, new_context())
    linalg = [op for op in walk(module.operation) if op.name.startswith("linalg.") and op.name != "linalg.yield"]
    lines = {name: {line for op in linalg if op.name == name for _, line in source_lines(op)}
             for name in ("linalg.conv_2d_nchw_fchw", "linalg.generic")}
    assert FIRST not in lines["linalg.conv_2d_nchw_fchw"] and SECOND in lines["linalg.conv_2d_nchw_fchw"]
    assert FIRST in lines["linalg.generic"]  # the kept convolution, generalized where it was
    assert not any(op.name == "util.call" for op in walk(module.operation))
    assert "__elided__" not in builds["composition"].program.read_text()


def strategy(name: str) -> Candidate:
    return Candidate(Option(name), status="faster", ratio=3.0, ci=[2.0, 4.0])


def rows(name: str, *ratios: tuple[int, float]) -> list[dict]:
    return [{"file": "m.onnx", "line": line, "op_kind": "onnx.Conv", "strategy": name, "base_ns": 1.0,
             "strategy_ns": 1.0 / ratio, "ratio": ratio} for line, ratio in ratios]


def plans(winner: str, table: list[dict], *others: str) -> list[tuple[str, str, set[int]]]:
    """composition_plans with ``winner`` and ``others`` faster, as (host, rewrite, lines)."""
    won = strategy(winner)
    found = composition_plans(won, [won, *map(strategy, others)], table)
    return [(host.name, rewrite.name, {line for _, line in lines}) for host, rewrite, lines in found]


def test_the_plan_keeps_the_lines_the_winner_clearly_slowed():
    table = rows("im2col+data-tiling+ukernels", (8, 0.5), (9, 3.0), (11, 0.95)) + rows("im2col", (10, 0.5))
    assert plans("im2col+data-tiling+ukernels", table) == [("im2col+data-tiling+ukernels", KEEP_DEFAULT.name, {8})]


def test_the_plan_takes_im2col_where_an_im2col_strategy_was_clearly_faster_than_the_host():
    # line 8: im2col+data-tiling 1.6x the host; line 9: 1.1x (scatter); line 10: measured only with
    # im2col; line 11: by a strategy without im2col
    table = (rows("conv-data-tiling", (8, 5.0), (9, 5.0), (11, 5.0)) + rows("im2col+data-tiling", (8, 8.0), (9, 5.5), (10, 9.0))
             + rows("data-tiling", (11, 9.0)))
    assert plans("conv-data-tiling", table) == [("conv-data-tiling", IM2COL.name, {8})]
    # the same host when the im2col strategy won: both ways are tried, each on its own lines
    table += rows("im2col+data-tiling", (12, 0.5))
    assert plans("im2col+data-tiling", table, "conv-data-tiling", "data-tiling") == [
        ("im2col+data-tiling", KEEP_DEFAULT.name, {12}), ("conv-data-tiling", IM2COL.name, {8})]  # data-tiling:
    # no line measured with both it and an im2col strategy
    assert plans("channels-last+data-tiling", rows("channels-last+data-tiling", (8, 2.0)) + rows("im2col", (8, 3.0))) \
        == [("channels-last+data-tiling", IM2COL.name, {8})]


def test_nothing_is_composed_without_a_composable_layout_or_a_clear_line():
    assert plans("conv-data-tiling", rows("conv-data-tiling", (8, 0.5))) == []
    assert plans("conv-data-tiling", rows("conv-data-tiling", (8, 5.0)) + rows("im2col", (8, 5.5))) == []
    assert plans("im2col+channels-last", rows("im2col+channels-last", (8, 0.5))) == []
    assert plans("conv-data-tiling+im2col", rows("conv-data-tiling+im2col", (8, 0.5)) + rows("im2col", (8, 9.0))) == []
    assert plans("im2col", rows("im2col", (8, 1.5))) == []
    assert plans("im2col", rows("im2col+data-tiling", (8, 0.5))) == []
    assert plans("fast-math", rows("fast-math", (8, 0.5)) + rows("im2col", (8, 9.0))) == []
    # a strategy that is not faster, or not profiled, hosts nothing
    assert plans("im2col", rows("im2col", (8, 9.0)) + rows("conv-data-tiling", (8, 5.0))) == []


def test_a_winning_composition_is_handed_over_as_its_program():
    from tracelink.tune.session import Session

    flags = (IM2COL_FLAG, "--iree-opt-data-tiling")
    composed = Candidate(Option("per-op im2col+data-tiling", flags), program=Path("p.mlir"))
    session = Session(SearchResult([composed], composed, []), tuned_profile=None)
    assert session.strategy_program() == Path("p.mlir") and session.apply_flags() == list(flags)
    assert composed.entry()["program"] == "p.mlir"


def test_the_profiles_cover_both_sides_of_im2col_first():
    from tracelink.tune.strategy import profile_order

    def timed(name: str, ratio: float, status: str = "faster") -> Candidate:
        return Candidate(Option(name), status=status, ratio=ratio, ci=[ratio - 0.1, ratio + 0.1])

    candidates = [timed("im2col+data-tiling", 4.1), timed("im2col+data-tiling+ukernels", 4.0),
                  timed("channels-last+data-tiling", 2.5), timed("conv-data-tiling", 1.6), timed("ukernels", 1.0, "not faster")]
    result = SearchResult(candidates, candidates[0], [])
    assert [c.name for c in profile_order(result)] == ["im2col+data-tiling", "channels-last+data-tiling",
                                                       "im2col+data-tiling+ukernels", "conv-data-tiling"]
    result.winner = candidates[3]  # the winner always comes first
    assert [c.name for c in profile_order(result)][:2] == ["conv-data-tiling", "im2col+data-tiling"]


def test_a_link_planted_where_the_composition_is_written_is_refused(builds, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (builds["where"] / "planted").symlink_to(victim)
    with pytest.raises(TracelinkError, match=r"planted: is a symbolic link"):
        compose(builds["source"], builds["where"] / "planted" / "program.mlir", builds["first"], IM2COL, builds["where"])
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]
