"""Per-op composition: a layout strategy on only the convolutions it makes faster, by a rewrite of the
program at IREE's input level.

IREE 3.13 applies a strategy's flag to the whole program. Two rewrites of single convolutions
(:data:`KEEP_DEFAULT`, :data:`IM2COL`, each a pass run on one op alone) let the per-line table choose
per op instead:

- **default lowering** under an im2col strategy: IREE's im2col pass
  (``iree-global-opt-convert-conv2d-to-img2col``, behind ``--iree-global-opt-use-im2col-for-convs``)
  rewrites *named* convolution ops only, so a convolution made a ``linalg.generic``
  (``linalg-generalize-named-ops``) is left to the default lowering (IREE's global optimization
  generalizes every convolution before codegen anyway);
- **im2col** under a strategy without it (conv data tiling, channels-last): IREE's own im2col pass,
  run on that convolution alone, makes it the im2col copy and matmul the im2col flag would have made,
  which the strategy's flags then lower as they lower any matmul.

The program is then built with that strategy's flags unchanged: no call boundary, nothing un-fused.

Verified by compiling with IREE 3.13 (tests/test_compose.py): channels-last's pass and conv data tiling
rewrite generic convolutions too, so a convolution cannot be kept out of them this way. Outlining
convolutions into ``util.func`` functions with a ``preprocessing_pipeline`` attribute and
``#util.inline.never`` does select them, but its call boundaries cost what the composition gained
(docs/reference/numbers.md). A preprocessing transform spec on the user's own program
(``--iree-preprocessing-transform-spec-filename``, convolutions matched by shape with
``transform.iree.match.cast_compatible_dag_from_root``) does not reach every case: generalizing the
convolutions kept off the im2col flag works under an im2col strategy, but under conv data tiling a
generalized convolution fails codegen (real-weight squeezenet: "exceeded stack allocation limit"), and
MLIR's ``transform.structured.convert_conv2d_to_img2col`` makes a flattened im2col whose
``floordiv``/``mod`` maps the CPU pipeline cannot tile ("tiling is not supported for the semi-affine
indexing map").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir, passmanager

from tracelink.errors import TracelinkError, first_line
from tracelink.aggregate.advice import HELPED
from tracelink.atomic import make_directory, remove_path, write_text_atomic
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.provenance.locations import positions_of
from tracelink.iree_tools import compile_command
from tracelink.tools import run_checked
from tracelink.tune.spec import DUMP_FLAG_PREFIXES
from tracelink.tune.strategy_space import Candidate, layouts

# Flags that would drop the weights from the input-level program (the profiled build has them, for its dumps).
ELIDING_FLAGS = ("--mlir-elide-",)
# The strategy whose layout the rewrites add or take away per op (a name of tracelink.tune.strategy_space.OPTIONS).
PER_OP_LAYOUT = "im2col"


def is_convolution(op: ir.Operation) -> bool:
    """A named 2-D convolution, what the im2col pass converts (depthwise ones it leaves alone)."""
    return op.name.startswith("linalg.conv_2d_")


@dataclass(frozen=True)
class Rewrite:
    """What a rewrite does to each chosen op of the kind it is for (``applies``): ``apply`` replaces the
    op in place, False when it leaves it as it is."""

    name: str  # as the candidate's reason says it
    apply: Callable[[ir.Operation], bool]
    applies: Callable[[ir.Operation], bool] = is_convolution


@dataclass(frozen=True)
class Composition:
    """A rewritten program: how many of the ops its rewrite is for were rewritten."""

    program: Path
    rewritten: int
    convolutions: int  # ops of the program the rewrite is for (named 2-D convolutions for the per-op ones)


def source_lines(op: ir.Operation) -> set[tuple[str, int]]:
    """The (file, line) pairs an op's location points at."""
    return {(p.file, p.line) for p in positions_of(op.location)}


def input_program(program: Path, flags: list[str], workdir: Path, timeout: float) -> Path:
    """``program`` lowered to IREE's input level (util.func on linalg, with its weights and locations):
    ``workdir/input.mlir``, the program the rewrite edits."""
    remove_path(workdir, workdir.parent)  # the compiler writes there: nothing of an earlier run is followed
    make_directory(workdir)
    output = workdir / "input.mlir"
    kept = [f for f in flags if not f.startswith((*DUMP_FLAG_PREFIXES, *ELIDING_FLAGS))]
    command = compile_command(program, output, [*kept, "--compile-to=input", "--mlir-print-debuginfo"])
    run_checked(command, timeout, program, "lowering it to the input level for per-op composition")
    return output


def compose(source: Path, output: Path, chosen: Callable[[ir.Operation], bool], rewrite: Rewrite,
            inside: Path) -> Composition:
    """Rewrite the input-level program ``source`` into ``output``: ``rewrite`` applied to every op of
    its kind for which ``chosen`` holds. No link below ``inside`` (the profile directory) is
    followed on the way to ``output``."""
    context = new_context()
    module = parse_file(source, context)
    convolutions = [op for op in walk(module.operation) if rewrite.applies(op)]
    with context, ir.Location.unknown(context):
        rewritten = sum(1 for op in convolutions if chosen(op) and rewrite.apply(op))
        try:
            module.operation.verify()
        except ir.MLIRError as error:
            raise TracelinkError(f"{source}: the per-op rewrite does not verify: {first_line(error)}") from None
        make_directory(output.parent, inside)
        write_text_atomic(output, module.operation.get_asm(enable_debug_info=True))
    return Composition(output, rewritten, len(convolutions))


def rewrite_alone(op: ir.Operation, pipeline: str) -> bool:
    """Replace ``op`` by what ``pipeline`` makes of it; False (``op`` left as it is) when the pipeline
    leaves it alone.

    The passes rewrite every op of a function they apply to, so they run on a copy of ``op`` alone in a
    scratch function, and the ops they make (with ``op``'s location) are copied back in ``op``'s place."""
    types = [value.type for value in op.operands]
    scratch = ir.Module.create()
    function = ir.Operation.create(
        "func.func", regions=1, ip=ir.InsertionPoint(scratch.body),
        attributes={"sym_name": ir.StringAttr.get("scratch"),
                    "function_type": ir.TypeAttr.get(ir.FunctionType.get(types, [r.type for r in op.results]))})
    block = function.regions[0].blocks.append(*types, arg_locs=[op.location] * len(types))
    alone = op.clone(ip=ir.InsertionPoint(block))
    for index, argument in enumerate(block.arguments):
        alone.operands[index] = argument
    ir.Operation.create("func.return", operands=list(alone.results), ip=ir.InsertionPoint(block))
    passmanager.PassManager.parse(pipeline).run(scratch.operation)
    *made, returned = [child.operation for child in block.operations]
    if any(child.name == op.name for child in made):
        return False
    # scratch values (the arguments, then each copied op's results) -> the values in op's function
    copies: list[tuple[ir.Value, ir.Value]] = list(zip(block.arguments, op.operands))

    def copy_of(value: ir.Value) -> ir.Value:
        return next(new for old, new in copies if old == value)

    for child in made:
        replacement = child.clone(ip=ir.InsertionPoint(op))
        for index, value in enumerate(child.operands):
            replacement.operands[index] = copy_of(value)
        copies += zip(child.results, replacement.results)
    for old, value in zip(op.results, returned.operands):
        old.replace_all_uses_with(copy_of(value))
    op.erase()
    return True


def pass_rewrite(name: str, pipeline: str) -> Rewrite:
    """A rewrite that runs a pass pipeline on each chosen convolution alone (:func:`rewrite_alone`)."""
    return Rewrite(name, lambda op: rewrite_alone(op, pipeline))


# a convolution left to the default lowering (im2col leaves generic ops alone)
KEEP_DEFAULT = pass_rewrite("the default lowering", "builtin.module(func.func(linalg-generalize-named-ops))")
# a convolution made im2col + matmul by IREE's own pass
IM2COL = pass_rewrite("im2col", "builtin.module(func.func(iree-global-opt-convert-conv2d-to-img2col))")


def composition_plans(winner: Candidate, candidates: list[Candidate],
                      per_line: list[dict]) -> list[tuple[Candidate, Rewrite, set[tuple[str, int]]]]:
    """The per-op compositions the per-line table calls for (:mod:`tracelink.tune.compose`): each a
    host strategy whose flags build it, the rewrite, and the source lines whose convolutions get it.

    - ``winner``, when its layout is im2col alone, keeps the default lowering where the table shows it
      clearly slower than the default;
    - ``winner`` and each other faster profiled strategy without im2col (conv data tiling,
      channels-last) take im2col where the table shows a strategy with im2col clearly faster than
      that host (both diffed against the same default build: their ratios compare).

    "Clearly" is as the advice calls a line helped (``HELPED``): a clear change, not the scatter of one
    diff. A host with im2col among other layouts composes neither way (channels-last and conv data
    tiling cannot be kept off single convolutions in IREE 3.13), nor does one that rewrites the program
    (:mod:`tracelink.tune.rewrites`: a composition starts from the profiled program)."""
    ratios: dict[str, dict[tuple[str, int, str], float]] = {}
    for row in per_line:
        ratios.setdefault(row["strategy"], {})[row["file"], int(row["line"]), row["op_kind"]] = row["ratio"]
    plans = []
    if layouts(winner.name) == [PER_OP_LAYOUT]:
        slowed = {(file, line) for (file, line, _), ratio in ratios.get(winner.name, {}).items() if ratio * HELPED <= 1}
        if slowed:
            plans.append((winner, KEEP_DEFAULT, slowed))
    with_im2col = [name for name in ratios if PER_OP_LAYOUT in (layouts(name) or [])]
    hosts = [winner, *(c for c in candidates if c is not winner and c.status == "faster" and c.name in ratios)]
    for host in hosts:
        own = layouts(host.name)
        if own is None or PER_OP_LAYOUT in own or host.option.rewrites or host.name not in ratios:
            continue
        faster = {(file, line) for name in with_im2col for (file, line, kind), ratio in ratios[name].items()
                  if ratio >= HELPED * ratios[host.name].get((file, line, kind), math.inf)}
        if faster:
            plans.append((host, IM2COL, faster))
    return plans
