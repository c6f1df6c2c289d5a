"""Per-op composition: im2col on only the convolutions it makes faster, by a rewrite of the program at
IREE's input level.

IREE 3.13 applies a strategy's flag to the whole program. Its im2col pass
(``iree-global-opt-convert-conv2d-to-img2col``, behind ``--iree-global-opt-use-im2col-for-convs``)
rewrites *named* convolution ops only: a convolution written as a ``linalg.generic`` is left alone, and
is lowered as the default build lowers the named op (IREE's global optimization generalizes every
convolution before codegen anyway). So the composition generalizes the convolutions im2col slows
(``linalg-generalize-named-ops``, run on each one alone) and the program is built with the winner's
flags unchanged: no call boundary, nothing un-fused.

Verified by compiling with IREE 3.13 (tests/test_compose.py): channels-last's pass and conv data tiling
rewrite generic convolutions too, so they cannot be composed this way. Outlining convolutions into
``util.func`` functions with a ``preprocessing_pipeline`` attribute and ``#util.inline.never`` does select
them, but on real-weight resnet50 its call boundaries cost what the composition gained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir, passmanager

from tracelink import TracelinkError
from tracelink.atomic import make_directory, remove_path, write_text_atomic
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.provenance.locations import positions_of
from tracelink.tools import run_checked, tool_path
from tracelink.tune.spec import DUMP_FLAG_PREFIXES

# The strategy a program can opt single convolutions out of (see the module's docstring).
PER_OP_LAYOUT = "im2col"
# Flags that would drop the weights from the input-level program (the profiled build has them, for its dumps).
ELIDING_FLAGS = ("--mlir-elide-",)
GENERALIZE = "builtin.module(func.func(linalg-generalize-named-ops))"


@dataclass(frozen=True)
class Composition:
    """A rewritten program: how many convolutions im2col takes, how many keep the default lowering."""

    program: Path
    converted: int  # named convolutions left for the im2col pass
    kept: int  # convolutions generalized: the default lowering


def is_convolution(op: ir.Operation) -> bool:
    """A named 2-D convolution, what the im2col pass converts (depthwise ones it leaves alone)."""
    return op.name.startswith("linalg.conv_2d_")


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
    command = [tool_path("iree-compile"), str(program), *kept, "--compile-to=input", "--mlir-print-debuginfo",
               "-o", str(output)]
    run_checked(command, timeout, program, "lowering it to the input level for per-op composition")
    return output


def compose(source: Path, output: Path, keeps_default: Callable[[ir.Operation], bool]) -> Composition:
    """Rewrite the input-level program ``source`` into ``output`` with every convolution for which
    ``keeps_default`` holds generalized, so that im2col leaves it to the default lowering."""
    context = new_context()
    module = parse_file(source, context)
    converted = kept = 0
    with context, ir.Location.unknown(context):
        for op in [op for op in walk(module.operation) if is_convolution(op)]:
            if keeps_default(op):
                generalize(op)
                kept += 1
            else:
                converted += 1
        try:
            module.operation.verify()
        except ir.MLIRError as error:
            raise TracelinkError(f"{source}: the per-op rewrite does not verify: {str(error).splitlines()[0]}") from None
        make_directory(output.parent)
        write_text_atomic(output, module.operation.get_asm(enable_debug_info=True))
    return Composition(output, converted, kept)


def generalize(op: ir.Operation) -> ir.Operation:
    """Replace a named linalg op by its ``linalg.generic`` form (same operands, results and location).

    MLIR's pass generalizes every named op of a function, so it runs on a copy of ``op`` alone in a
    scratch function, and the generic it makes is copied back in ``op``'s place."""
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
    passmanager.PassManager.parse(GENERALIZE).run(scratch.operation)
    generic = next(child.operation for child in block.operations)
    if generic.name != "linalg.generic":
        raise TracelinkError(f"{op.location}: {op.name} does not generalize (got {generic.name})")
    replacement = generic.clone(ip=ir.InsertionPoint(op))
    for index, value in enumerate(op.operands):
        replacement.operands[index] = value
    for old, new in zip(op.results, replacement.results):
        old.replace_all_uses_with(new)
    op.erase()
    return replacement
