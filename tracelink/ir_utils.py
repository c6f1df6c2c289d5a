"""Small helpers over the MLIR Python bindings: parsing with clear errors, walking, attributes.

Below every stage: the compile stage checks the program's symbols with them, and every later stage reads IR.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.abc import MetaPathFinder
from pathlib import Path

from iree.compiler import ir

from tracelink.errors import TracelinkError, first_line

DIALECT_MODULES = "iree.compiler.dialects."


class MissingDialectModules(MetaPathFinder):
    """Remembers the dialect modules the MLIR bindings looked for in vain.

    For each op of a dialect without a Python module (``torch``, ``torch_c``, ...) the bindings try to
    import ``iree.compiler.dialects.<dialect>`` again, as they remember only the imports that succeed,
    which was most of the time of walking a torch program (docs/reference/numbers.md). Asked last, once every
    other finder has found nothing, this one marks the name missing (``None`` in ``sys.modules``), which
    ends the next import of it at once with the same ``ModuleNotFoundError``.
    """

    def find_spec(self, name, path=None, target=None):
        if name.startswith(DIALECT_MODULES):
            sys.modules[name] = None
        return None


if not any(isinstance(finder, MissingDialectModules) for finder in sys.meta_path):
    sys.meta_path.append(MissingDialectModules())


def parse_file(path: Path, context: ir.Context) -> ir.Module:
    """Parse an MLIR file; a parse error becomes one line naming the file and position."""
    try:
        return ir.Module.parseFile(str(path), context)
    except ir.MLIRError as error:
        diagnostics = getattr(error, "error_diagnostics", [])
        detail = "; ".join(f"{d.location}: {d.message}" for d in diagnostics[:2]) or first_line(error)
        raise TracelinkError(f"{path}: MLIR parse error: {detail}") from error


def new_context() -> ir.Context:
    """A context that parses IREE's dialects and inputs from any frontend (unknown ops allowed)."""
    context = ir.Context()
    context.allow_unregistered_dialects = True
    return context


def walk(op: ir.Operation) -> Iterator[ir.Operation]:
    """Every operation nested in ``op`` (pre-order, program order), not ``op`` itself."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                child = child.operation
                yield child
                yield from walk(child)


def top_level(module: ir.Module) -> Iterator[ir.Operation]:
    """The operations directly in the module body."""
    for op in module.body.operations:
        yield op.operation


def attr(op: ir.Operation, name: str) -> ir.Attribute | None:
    """An attribute of ``op`` or None."""
    return op.attributes[name] if name in op.attributes else None


def symbol_name(op: ir.Operation) -> str | None:
    """The ``sym_name`` of ``op`` as a plain string."""
    value = attr(op, "sym_name")
    return value.value if value is not None else None


def symbol_ref_leaf(value: ir.Attribute) -> str:
    """The last name of a symbol reference ``@a::@b::@c`` → ``c``."""
    return value.value if isinstance(value, ir.FlatSymbolRefAttr) else list(value.value)[-1]


def static_shape(value_type: ir.Type) -> tuple[int, ...] | None:
    """The shape of a ranked tensor/memref type, dynamic sizes as -1; None for other types."""
    if not isinstance(value_type, ir.ShapedType) or not value_type.has_rank:
        return None
    return tuple(-1 if value_type.is_dynamic_dim(i) else value_type.get_dim_size(i) for i in range(value_type.rank))


def int_constant(value: ir.Value) -> int | None:
    """The integer a value holds when an ``arith.constant`` defines it, else None."""
    owner = value.owner
    if not isinstance(owner, ir.Operation):
        owner = getattr(owner, "operation", None)
    if owner is None or owner.name != "arith.constant":
        return None
    constant = attr(owner, "value")
    return constant.value if isinstance(constant, ir.IntegerAttr) else None
