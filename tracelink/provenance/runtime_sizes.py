"""Dynamic sizes as the profiled run had them: the host program's index values, and each dispatch's push constants.

A dispatch of a program with dynamic shapes gets its sizes at run time as push constants. The HAL
profile does not record them (its ireeperf-jsonl records, schema 15, hold a dispatch's workgroup
count and its function's constant *count*, not the values), and a workgroup count only bounds a size
(it is the size divided by a tile, rounded up). Two sources fix them:

- the run's input shapes: ``hal.buffer_view.dim`` of an argument of the profiled function, through
  the host program's index arithmetic (``arith``, ``affine.apply``/``min``/``max``) into a dispatch
  region's operands, and inside the region through its loads, slices, empty tensors and the outputs of
  the ops that write them;
- the push constants themselves, recorded by the perf hook in a run (llvm-cpu): evaluated through the
  executable's ``hal.interface.constant.load`` ops into its workload ordinals
  (:mod:`tracelink.provenance.executable_workloads`), which seed the region's workload operands
  (:meth:`RuntimeSizes.seeded`). A size that depends on tensor *data* (a value loaded from a tensor)
  is known only this way.

A size neither gives (no hook run: another device) stays unknown, and the cost that uses it is a lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from iree.compiler import ir

from tracelink.ir_utils import attr, static_shape

UNKNOWN = -1


def _trunc_div(a: int, b: int) -> int:
    """Division rounding toward zero, as ``arith.divsi`` does."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


BINARY: dict[str, Callable[[int, int], int]] = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
    "arith.divsi": _trunc_div, "arith.divui": lambda a, b: a // b, "arith.floordivsi": lambda a, b: a // b,
    "arith.ceildivsi": lambda a, b: -(-a // b), "arith.ceildivui": lambda a, b: -(-a // b),
    "arith.remsi": lambda a, b: a - b * _trunc_div(a, b), "arith.remui": lambda a, b: a % b,
    "arith.maxsi": max, "arith.maxui": max, "arith.minsi": min, "arith.minui": min,
    # a 64-bit size arrives as two 32-bit push constants: low | high << 32
    "arith.shli": lambda a, b: a << b, "arith.shrui": lambda a, b: a >> b, "arith.ori": lambda a, b: a | b,
    "arith.andi": lambda a, b: a & b,
}
DIVIDING = ("divsi", "divui", "floordivsi", "ceildivsi", "ceildivui", "remsi", "remui")
# Ops whose result i is their operand i's value (casts, and IREE's markers around a size).
PASS_THROUGH = (
    "arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci",
    "iree_tensor_ext.dispatch.workload.ordinal", "util.assume.int", "flow.dispatch.workload.ordinal",
    # torch's arange length, ceil((end - start) / step), computed in floats from an integer size: no float
    # op that makes a fraction (divf) is evaluated, so every float here holds an integer and these keep it
    "arith.sitofp", "arith.uitofp", "math.ceil", "math.floor", "arith.fptosi", "arith.fptoui",
)
# Ops whose results are written into their last operands (destination style): a result has its init's shape.
DESTINATION_PREFIXES = ("linalg.", "iree_linalg_ext.")


def segments(op: ir.Operation) -> list[int] | None:
    """The operand segment sizes of an op with variadic operand groups, or None."""
    sizes = attr(op, "operandSegmentSizes")
    return list(ir.DenseI32ArrayAttr(sizes)) if sizes is not None else None


def affine_value(expr: ir.AffineExpr, operands: list[int | None], dims: int) -> int | None:
    """An affine expression evaluated on its dims' and symbols' values (None when one is unknown)."""
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value
    if isinstance(expr, ir.AffineDimExpr):
        return operands[expr.position]
    if isinstance(expr, ir.AffineSymbolExpr):
        return operands[dims + expr.position]
    if isinstance(expr, ir.AffineBinaryExpr):
        left, right = affine_value(expr.lhs, operands, dims), affine_value(expr.rhs, operands, dims)
        if left is None or right is None:
            return None
        if isinstance(expr, ir.AffineAddExpr):
            return left + right
        if isinstance(expr, ir.AffineMulExpr):
            return left * right
        if right == 0:
            return None
        if isinstance(expr, ir.AffineModExpr):
            return left % right
        if isinstance(expr, ir.AffineFloorDivExpr):
            return left // right
        if isinstance(expr, ir.AffineCeilDivExpr):
            return -(-left // right)
    return None


class RuntimeSizes:
    """Index values and tensor shapes of one function, from the shapes of its arguments at run time.

    ``argument_shapes[i]`` is the shape the run gave argument ``i`` (None when unknown: a function other
    than the profiled one, or an input given without a shape). Without any, only static sizes are known.
    ``constants`` are a dispatch's push constants, read by ``hal.interface.constant.load`` (in an executable).
    """

    def __init__(self, argument_shapes: list[tuple[int, ...] | None] | None = None, constants: Sequence[int] = ()) -> None:
        self.argument_shapes = argument_shapes or []
        self.constants = constants
        self.values: dict[ir.Value, int | None] = {}

    def seeded(self, values: dict[ir.Value, int]) -> RuntimeSizes:
        """The same run with some values known (a region's workload, from its push constants), every
        other value computed again from them."""
        run = RuntimeSizes(self.argument_shapes, self.constants)
        run.values.update(values)
        return run

    def value(self, value: ir.Value) -> int | None:
        """The integer an index (or integer) value held in the run, or None when it is not known."""
        if value not in self.values:
            self.values[value] = None  # a cycle (a loop-carried value) stays unknown
            self.values[value] = self._compute(value)
        return self.values[value]

    def _compute(self, value: ir.Value) -> int | None:
        if isinstance(value, ir.BlockArgument):
            return self._block_argument(value)
        op = ir.OpResult(value).owner
        op = op.operation if not isinstance(op, ir.Operation) else op
        name = op.name
        if name == "arith.constant":
            constant = attr(op, "value")
            return constant.value if isinstance(constant, ir.IntegerAttr) else None
        if name == "hal.interface.constant.load":
            ordinal = attr(op, "ordinal")
            return self.constants[ordinal.value] if isinstance(ordinal, ir.IntegerAttr) and ordinal.value < len(self.constants) else None
        if name == "hal.buffer_view.dim":
            view = op.operands[0]
            shape = self._argument_shape(view) if isinstance(view, ir.BlockArgument) else None
            index = attr(op, "index")
            return shape[index.value] if shape is not None and isinstance(index, ir.IntegerAttr) and index.value < len(shape) else None
        if name in BINARY:
            left, right = self.value(op.operands[0]), self.value(op.operands[1])
            if left is None or right is None or (right == 0 and name.endswith(DIVIDING)):
                return None
            return BINARY[name](left, right)
        if name == "util.align":  # the stream plan rounds a size up to an alignment
            size, alignment = self.value(op.operands[0]), self.value(op.operands[1])
            return None if size is None or not alignment else -(-size // alignment) * alignment
        if name in PASS_THROUGH:
            number = ir.OpResult(value).result_number
            return self.value(op.operands[number]) if number < len(op.operands) else None
        if name in ("affine.apply", "affine.min", "affine.max"):
            affine_map = ir.AffineMapAttr(attr(op, "map")).value
            operands = [self.value(operand) for operand in op.operands]
            results = [affine_value(expr, operands, affine_map.n_dims) for expr in affine_map.results]
            if not results or any(result is None for result in results):
                return None
            return {"affine.apply": results[0], "affine.min": min(results), "affine.max": max(results)}[name]
        if name == "tensor.dim":
            index = self.value(op.operands[1])
            shape = self.shape(op.operands[0])
            return shape[index] if shape is not None and index is not None and 0 <= index < len(shape) and shape[index] >= 0 else None
        return None

    def _argument_shape(self, view: ir.BlockArgument) -> tuple[int, ...] | None:
        """The run's shape of a function argument (only the function's own entry block's arguments)."""
        owner = view.owner.owner
        if owner is None or owner.name not in ("util.func", "func.func"):
            return None
        number = view.arg_number
        return self.argument_shapes[number] if number < len(self.argument_shapes) else None

    def _block_argument(self, value: ir.BlockArgument) -> int | None:
        """An index argument of a dispatch region is the host value passed for it."""
        region_op = value.owner.owner
        if region_op is None or region_op.name != "flow.dispatch.workgroups":
            return None
        counts = segments(region_op)
        workload = counts[0] if counts else 0
        arguments = counts[1] if counts else len(region_op.operands) - workload
        return self.value(region_op.operands[workload + value.arg_number]) if value.arg_number < arguments else None

    def shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """The run's shape of a tensor value, unknown sizes as -1; None for non-tensors."""
        shape = static_shape(value.type)
        if shape is None or all(size >= 0 for size in shape):
            return shape
        dynamic = self._dynamic_sizes(value, shape)
        if dynamic is None or len(dynamic) != shape.count(UNKNOWN):
            return shape
        sizes = iter(dynamic)
        return tuple(next(sizes) if size < 0 else size for size in shape)

    def _dynamic_sizes(self, value: ir.Value, shape: tuple[int, ...]) -> list[int] | None:
        """The dynamic sizes of a tensor value in order (-1 where unknown), from the op that makes it."""
        if isinstance(value, ir.BlockArgument):  # a tensor argument of the profiled function (the input phase)
            given = self._argument_shape(value)
            if given is None or len(given) != len(shape):
                return None
            return [size for size, wanted in zip(given, shape) if wanted < 0]
        result = ir.OpResult(value)
        op = result.owner
        op = op.operation if not isinstance(op, ir.Operation) else op
        name = op.name

        def known(values: list[ir.Value]) -> list[int]:
            return [UNKNOWN if (v := self.value(operand)) is None else v for operand in values]

        if name == "tensor.empty":
            return known(list(op.operands))
        if attr(op, "static_sizes") is not None:  # dispatch.tensor.load, tensor.extract_slice: [..., offsets, sizes, strides]
            counts = segments(op)
            if not counts or len(counts) < 3:
                return None
            start = sum(counts[:-2])
            return known(list(op.operands)[start:start + counts[-2]])
        if name == "tensor.expand_shape":
            return known(list(op.operands)[1:])
        if name == "tensor.cast":
            source = self.shape(op.operands[0])
            return [size for size, wanted in zip(source, shape) if wanted < 0] if source is not None and len(source) == len(shape) else None
        if name == "tensor.collapse_shape":
            source = self.shape(op.operands[0])
            groups = attr(op, "reassociation")
            if source is None or not isinstance(groups, ir.ArrayAttr):
                return None
            sizes = [[source[ir.IntegerAttr(i).value] for i in ir.ArrayAttr(group)] for group in groups]
            collapsed = [UNKNOWN if any(s < 0 for s in group) else math.prod(group) for group in sizes]
            return [size for size, wanted in zip(collapsed, shape) if wanted < 0] if len(collapsed) == len(shape) else None
        if name.startswith(DESTINATION_PREFIXES) and len(op.results) <= len(op.operands):
            init = op.operands[len(op.operands) - len(op.results) + result.result_number]
            init_shape = self.shape(init)
            if init_shape is None or len(init_shape) != len(shape):
                return None
            return [size for size, wanted in zip(init_shape, shape) if wanted < 0]
        return None

    def region_tensors(self, region_op: ir.Operation) -> list[tuple[ir.Type, tuple[int, ...]]]:
        """The tensors a ``flow.dispatch.workgroups`` reads (its arguments) and writes (its results),
        each with its run's shape: their dynamic sizes are the op's argument and result dims, in order."""
        counts = segments(region_op)
        operands = list(region_op.operands)
        if not counts or len(counts) < 4:
            return [(value.type, self.shape(value) or ()) for value in [*operands, *region_op.results] if static_shape(value.type) is not None]
        workload, arguments, argument_dims, result_dims = counts[:4]
        values = operands[workload:workload + arguments]
        dims = operands[workload + arguments:workload + arguments + argument_dims + result_dims]
        sizes = iter([UNKNOWN if (v := self.value(dim)) is None else v for dim in dims])
        tensors = []
        for value in [*values, *region_op.results]:
            shape = static_shape(value.type)
            if shape is not None:
                tensors.append((value.type, tuple(next(sizes, UNKNOWN) if size < 0 else size for size in shape)))
        return tensors
