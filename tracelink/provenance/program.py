"""The input program: its functions and the source locations of its ops.

Source ops are keyed by normalised location: several input ops written at one location (e.g. the
``tensor.empty``, ``linalg.fill`` and ``linalg.matmul`` of one layer) are one source op to the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir

from tracelink.provenance.ir_utils import attr, new_context, parse_file, symbol_name, top_level, walk
from tracelink.provenance.locations import SourceLocation, normalise

FUNCTION_OPS = ("func.func", "util.func")
# Ops that produce tensors without computing them: never dispatches of their own.
NON_COMPUTE_SUFFIXES = ("constant", "literal", ".empty", ".splat")
COMPUTE_DIALECTS = ("linalg", "iree_linalg_ext", "stablehlo", "mhlo", "tosa", "torch", "onnx", "tensor", "arith", "math")


@dataclass
class InputOp:
    """One op of the input program."""

    op_name: str
    location: SourceLocation
    function: str
    compute: bool


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


def is_compute_op(op: ir.Operation) -> bool:
    """Whether an input op computes tensor values (and so should end up in some dispatch)."""
    dialect = op.name.split(".", 1)[0]
    if dialect not in COMPUTE_DIALECTS or op.name.endswith(NON_COMPUTE_SUFFIXES):
        return False
    if dialect == "torch":
        return op.name.startswith(("torch.aten.", "torch.prims."))
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
    enclosing = frozenset(f.location for f in functions)
    for top in top_level(module):
        if top.name not in FUNCTION_OPS:
            continue
        function = symbol_name(top) or "?"
        for op in walk(top):
            dialects.add(op.name.split(".", 1)[0])
            ops.append(InputOp(op.name, normalise(op.location, enclosing), function, is_compute_op(op)))
    return InputProgram(Path(path), functions, ops, sorted(dialects))
