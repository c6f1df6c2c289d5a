"""Per-op composition: a layout strategy (im2col, channels-last) applied only to the convolutions it
makes faster, by a rewrite of the program at IREE's input level.

IREE 3.13 applies a strategy's flag to the whole program. What it does offer per function is an
attribute-driven preprocessing pipeline: ``preprocessing_pipeline = #util.preprocessing_pipeline<"...">``
on a ``util.func`` runs those passes on that function only, and ``inlining_policy = #util.inline.never``
keeps the function from being inlined before preprocessing runs (without it the ABI phase inlines it
first). So the program is cut into runs of consecutive ops, each convolution starting a run that
also holds what feeds only it (its padding, its initial value) and what follows it up to the next
convolution (its bias, normalisation, activation: they fuse with it). Runs whose convolution takes the
strategy are outlined into private functions with the pipeline; the others stay where they were.
Constants are copied into the functions that use them, so constant evaluation still sees the weights
(packing them at compile time under data tiling) and no weight crosses a call.

Nothing fuses across a call: the cost of a run boundary is one more dispatch at most where an op and
its consumer end up on two sides of it, which the whole-program race of the composed build measures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from tracelink import TracelinkError
from tracelink.atomic import make_directory, remove_path, write_text_atomic
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.provenance.locations import positions_of
from tracelink.tools import run_checked, tool_path
from tracelink.tune.spec import DUMP_FLAG_PREFIXES

# Strategies with a pass IREE 3.13 runs from a function's preprocessing_pipeline attribute, verified by
# compiling with it: im2col's global flag runs iree-global-opt-convert-conv2d-to-img2col.
PER_FUNCTION_PASSES = {
    "im2col": "iree-global-opt-convert-conv2d-to-img2col",
    "channels-last": "iree-preprocessing-convert-conv-to-channels-last",
}
# Ops that may move into an outlined function: tensor computations only (the ABI's hal ops, fences and
# calls stay in the caller).
MOVABLE_DIALECTS = ("linalg", "tensor", "arith", "math")
# Flags that would drop the weights from the input-level program (the profiled build has them, for its dumps).
ELIDING_FLAGS = ("--mlir-elide-",)


@dataclass(frozen=True)
class Composition:
    """A rewritten program: which convolutions take the strategy, which stay as the default lowers them."""

    program: Path
    converted: int  # convolutions outlined with the strategy's pass
    kept: int  # convolutions left to the default lowering
    functions: int  # outlined functions (the calls the program makes more)


def is_convolution(op: ir.Operation) -> bool:
    return op.name.startswith(("linalg.conv_", "linalg.depthwise_conv_"))


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


def compose(source: Path, output: Path, strategy: str, takes_strategy: Callable[[ir.Operation], bool]) -> Composition:
    """Rewrite the input-level program ``source`` into ``output``: every convolution for which
    ``takes_strategy`` holds gets ``strategy``'s pass (:data:`PER_FUNCTION_PASSES`), the others do not."""
    pipeline = PER_FUNCTION_PASSES[strategy]
    context = new_context()
    module = parse_file(source, context)
    converted = kept = functions = 0
    with context, ir.Location.unknown(context):
        attributes = {"preprocessing_pipeline": ir.Attribute.parse(f'#util.preprocessing_pipeline<"{pipeline}">'),
                      "inlining_policy": ir.Attribute.parse("#util.inline.never")}
        for function in [op.operation for op in module.body.operations if op.operation.name == "util.func"]:
            body = function.regions[0].blocks[0] if function.regions[0].blocks else None
            if body is None:
                continue
            ops = [op.operation for op in body.operations][:-1]  # the terminator stays
            convolutions = [op for op in ops if is_convolution(op)]
            choice = {op: takes_strategy(op) for op in convolutions}
            converted += sum(choice.values())
            kept += len(choice) - sum(choice.values())
            for run in outlined_runs(ops, choice):
                outline(run, function, f"__tracelink_{strategy.replace('-', '_')}_{functions}", attributes)
                functions += 1
            for op in ops:  # constants now copied into every function that uses them
                if _is_constant(op) and not any(list(result.uses) for result in op.results):
                    op.erase()
        try:
            module.operation.verify()
        except ir.MLIRError as error:
            raise TracelinkError(f"{source}: the per-op rewrite does not verify: {str(error).splitlines()[0]}") from None
        make_directory(output.parent)
        write_text_atomic(output, module.operation.get_asm(enable_debug_info=True))
    return Composition(output, converted, kept, functions)


def _is_constant(op: ir.Operation) -> bool:
    return op.name == "arith.constant"


def _movable(op: ir.Operation) -> bool:
    return op.name.split(".", 1)[0] in MOVABLE_DIALECTS


def _top_level(op: ir.Operation, body_owner: ir.Operation) -> ir.Operation | None:
    """The ancestor of ``op`` directly in ``body_owner``'s body (None: ``op`` is not inside it)."""
    while op.parent is not None and op.parent != body_owner:
        op = op.parent
    return op if op.parent is not None else None


def _defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return owner.operation if isinstance(owner, ir.OpView) else owner if isinstance(owner, ir.Operation) else owner.owner


def outlined_runs(ops: list[ir.Operation], choice: dict[ir.Operation, bool]) -> list[list[ir.Operation]]:
    """The runs of consecutive ops to outline: each convolution with what feeds only it and what follows
    it up to the next convolution, where the convolution takes the strategy (``choice``). Constants are
    left in place (copied where used); ops that cannot move end a run."""
    function = ops[0].parent if ops else None
    label: dict[ir.Operation, bool] = dict(choice)
    # padding and initial values (computed from constants only: zeros, a broadcast bias) that feed only
    # convolutions of one kind go with them; an op computing on activations (a ReLU feeding the next
    # convolution) stays with the convolution before it, into whose dispatch it fuses
    initial: set[ir.Operation] = set()
    for op in ops:
        defining = [_defining_op(value) for value in op.operands]
        if op.name == "tensor.pad" or all(d in initial or (d != function and _is_constant(d)) for d in defining):
            initial.add(op)
    for op in reversed(ops):
        if op in label or op not in initial or _is_constant(op) or not _movable(op):
            continue
        users = {_top_level(use.owner.operation, function) for result in op.results for use in result.uses}
        kinds = {label.get(user) for user in users}
        if users and len(kinds) == 1 and None not in kinds:
            label[op] = kinds.pop()
    runs: list[list[ir.Operation]] = []
    current, outlining = [], False
    for op in ops:
        if _is_constant(op):
            continue
        if not _movable(op):
            outlining = False
        elif op in label:
            outlining = label[op]
        if outlining and _movable(op):
            current.append(op)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def outline(run: list[ir.Operation], function: ir.Operation, name: str, attributes: dict[str, ir.Attribute]) -> ir.Operation:
    """Move ``run`` (consecutive ops of ``function``'s body) into a new private util.func called in its place."""
    inside = set(run)
    arguments: list[ir.Value] = []
    constants: list[ir.Operation] = []
    for op in _with_nested(run):
        for value in op.operands:
            defining = _defining_op(value)
            top = _top_level(defining, function) if defining != function else None
            if top in inside:
                continue
            if top is not None and _is_constant(top):
                if top not in constants:
                    constants.append(top)
            elif value not in arguments:
                arguments.append(value)
    results = [result for op in run for result in op.results
               if any(_top_level(use.owner.operation, function) not in inside for use in result.uses)]
    following = _next(run[-1])
    location = run[0].location
    argument_types, result_types = [v.type for v in arguments], [v.type for v in results]
    callee = ir.Operation.create(
        "util.func", regions=1, loc=location, ip=ir.InsertionPoint(function),
        attributes={"sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("private"),
                    "function_type": ir.TypeAttr.get(ir.FunctionType.get(argument_types, result_types)), **attributes})
    block = callee.regions[0].blocks.append(*argument_types, arg_locs=[location] * len(argument_types))
    returned = ir.Operation.create("util.return", operands=results, loc=location, ip=ir.InsertionPoint(block))
    mapping: dict[ir.Value, ir.Value] = dict(zip(arguments, block.arguments))
    for constant in constants:
        mapping[constant.results[0]] = constant.clone(ip=ir.InsertionPoint(returned)).results[0]
    for op in run:
        op.move_before(returned)
    for op in _with_nested(run):
        for index, value in enumerate(op.operands):
            if value in mapping:
                op.operands[index] = mapping[value]
    call = ir.Operation.create("util.call", results=result_types, operands=arguments, loc=location,
                               attributes={"callee": ir.FlatSymbolRefAttr.get(name)}, ip=ir.InsertionPoint(following))
    for value, replacement in zip(results, call.results):
        for use in list(value.uses):
            owner = use.owner.operation
            if _top_level(owner, function) is not None:
                owner.operands[use.operand_number] = replacement
    return callee


def _with_nested(ops: Iterable[ir.Operation]) -> Iterable[ir.Operation]:
    for op in ops:
        yield op
        yield from walk(op)


def _next(op: ir.Operation) -> ir.Operation:
    block_ops = [o.operation for o in op.block.operations]
    return block_ops[block_ops.index(op) + 1]
