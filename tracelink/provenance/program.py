"""The input program: its functions and the source locations of its ops.

Source ops are keyed by normalised location: several input ops written at one location (e.g. the
``tensor.empty``, ``linalg.fill`` and ``linalg.matmul`` of one layer) are one source op to the user.
Each op also records which ops consume its results, so the audit can tell an op whose computation was
absorbed into a consumer's dispatch from one the compiler folded away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir

from tracelink.ir_utils import attr, new_context, parse_file, symbol_name, top_level, walk
from tracelink.provenance.locations import Normaliser, OpLocation

FUNCTION_OPS = ("func.func", "util.func")
# Ops that produce tensors without computing them: never dispatches of their own.
NON_COMPUTE_SUFFIXES = ("constant", "literal", ".empty", ".splat")
COMPUTE_DIALECTS = ("linalg", "iree_linalg_ext", "stablehlo", "mhlo", "tosa", "torch", "onnx", "tensor", "arith", "math")


@dataclass
class InputOp:
    """One op of the input program."""

    op_name: str  # for ONNX operators imported as ``torch.operator``, their op type (``onnx.Conv``)
    location: OpLocation
    function: str
    compute: bool
    users: list[int] = field(default_factory=list)  # indices (in ``InputProgram.ops``) of ops using its results
    producers: list[int] = field(default_factory=list)  # indices of the ops defining its operands (-1: an argument)


@dataclass
class InputFunction:
    name: str
    public: bool
    location: str


@dataclass
class InputProgram:
    """What tracelink knows of the user's program before compiling it."""

    path: Path
    functions: list[InputFunction]
    ops: list[InputOp]
    dialects: list[str] = field(default_factory=list)

    @property
    def enclosing_locations(self) -> frozenset[str]:
        """Locations of the functions: IREE wraps every op location in one of these."""
        return frozenset(f.location for f in self.functions)

    def public_functions(self) -> list[str]:
        return [f.name for f in self.functions if f.public]


def op_kind(op: ir.Operation) -> str:
    """The op's name, or for an ONNX operator imported as ``torch.operator "onnx.Conv"``, that op type."""
    if op.name == "torch.operator" and "name" in op.attributes:
        return str(op.attributes["name"].value)
    return op.name


def is_compute_op(op: ir.Operation, kind: str) -> bool:
    """Whether an input op computes tensor values (and so should end up in some dispatch)."""
    dialect = op.name.split(".", 1)[0]
    if dialect not in COMPUTE_DIALECTS or kind.endswith(NON_COMPUTE_SUFFIXES):
        return False
    if dialect == "torch":
        return kind.startswith(("torch.aten.", "torch.prims.", "onnx."))
    return any(isinstance(result.type, ir.ShapedType) for result in op.results)


def read_input_program(path: Path, context: ir.Context | None = None) -> InputProgram:
    """Parse the user's program and record every op with its normalised location."""
    context = context or new_context()
    module = parse_file(path, context)
    functions: list[InputFunction] = []
    ops: list[InputOp] = []
    dialects: set[str] = set()
    for top in top_level(module):
        if top.name not in FUNCTION_OPS:
            continue
        name = symbol_name(top) or "?"
        visibility = attr(top, "sym_visibility")
        public = visibility is None or visibility.value == "public"
        functions.append(InputFunction(name, public, str(top.location)))
    normalise = Normaliser(frozenset(f.location for f in functions))
    index_of: dict[ir.Operation, int] = {}
    for top in top_level(module):
        if top.name not in FUNCTION_OPS:
            continue
        function = symbol_name(top) or "?"
        for op in walk(top):
            dialects.add(op.name.split(".", 1)[0])
            index_of[op] = len(ops)
            kind = op_kind(op)
            ops.append(InputOp(kind, normalise(op.location), function, is_compute_op(op, kind)))
            for operand in op.operands:
                producer = operand.owner
                producer = producer.operation if isinstance(producer, ir.OpView) else producer
                defined = index_of.get(producer, -1) if isinstance(producer, ir.Operation) else -1
                ops[-1].producers.append(defined)
                if defined >= 0:
                    ops[defined].users.append(index_of[op])
    return InputProgram(Path(path), functions, ops, sorted(dialects))
