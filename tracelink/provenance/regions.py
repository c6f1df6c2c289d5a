"""Dispatch regions before deduplication: which source locations each dispatch call site computes.

IREE deduplicates identical executables, so a dumped executable shows only its first call site's
locations. The ``dispatch-creation`` phase still has every ``flow.dispatch.workgroups`` region inline,
each with the ops (and fused producers' scalar body ops) of its own call site. The ``flow`` phase has
the same dispatches, in the same order, naming the (deduplicated) export each one calls.

Cost estimate (the edges' ``weight``: the split of a dispatch's time where the machine's roofs are not
known): each structured op costs its
iteration-space size × (its body ops + 1): one share for reading and writing its operands, which goes
to the structured op's own location, and one per body op, which goes to that body op's own location
(that is where fused elementwise producers survive), or to the structured op's location when the body
op has none of its own. ``linalg.fill`` ops that are not the dispatch's root are *init* ops: CSE merges
identical fills across layers and keeps one op's location, so a fill says nothing about which layer's
work the dispatch does; they cost nothing and are kept apart from the producers. The iteration space
of a linalg op comes from its indexing maps (named ops included: convolutions count their window
loops); attention (two contractions around a softmax) counts the multiply-adds of both; for other ops
with two inputs it is sqrt(|lhs|·|rhs|·|out|); otherwise the largest operand's element count.

The same walk gives each dispatch's **cost model**: FLOPs are, per structured op, its iteration space
without the loops none of its inputs index (there the result is one value broadcast) × its arithmetic body ops (``arith``/``math`` ops that compute: a matmul's multiply and add count 2,
casts and constants 0; fills and data movement 0); bytes are the compulsory traffic, every tensor the
region reads (its operands) and writes (its results) once. Each location also gets its part of the
region's FLOPs and bytes (:attr:`DispatchRegion.traffic`), which the aggregation weighs at the
machine's roofs: a structured op's FLOPs go to the locations of its arithmetic body ops (a fused
producer computes there), its bytes, the tensors it loads from the dispatch's operands and its results
the dispatch stores, to its own location (an intermediate between two ops of one dispatch is not
memory traffic). Dynamic sizes take the values the profiled
run gave them (:mod:`tracelink.provenance.runtime_sizes`); one that stays unknown counts as 1 and makes
the cost a lower bound (``cost_exact`` false).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import linalg

from tracelink.ir_utils import attr, new_context, parse_file, static_shape, symbol_name, symbol_ref_leaf, top_level, walk
from tracelink.provenance.executable_workloads import ConstantsOfRun, DispatchConstants, ExportWorkloads, entry_constants, workload_seeds
from tracelink.provenance.locations import Normaliser, OpLocation
from tracelink.provenance.runtime_sizes import RuntimeSizes

STRUCTURED_PREFIXES = ("linalg.", "iree_linalg_ext.", "tensor.")
DESTINATION_STYLE = ("linalg.", "iree_linalg_ext.")  # their last operands are their results' inits
NOT_COMPUTE = ("tensor.empty", "tensor.dim", "linalg.yield", "iree_linalg_ext.yield", "tensor.yield")
INIT_OPS = ("linalg.fill",)
CODE_OPS = ("util.func", "func.func", "util.initializer")
INITIALIZER_PREFIX = "_initializer_"  # initializers have no name: _initializer_0, _initializer_1, ... in order
ARITHMETIC_PREFIXES = ("arith.", "math.")
# FLOPs per element of ops that carry no body: softmax along a dimension is a max, a subtract, an exp,
# a sum and a divide per element (each transcendental counted as one FLOP, as body ops are).
BODYLESS_FLOPS = {"linalg.softmax": 5}
ATTENTION = "iree_linalg_ext.attention"
# Per score of an attention op: its scale multiply and the softmax's max, subtract, exp and sum.
ATTENTION_SOFTMAX_FLOPS = 5
# Body ops that move or reinterpret a value without computing: not FLOPs.
NOT_ARITHMETIC = (
    "arith.constant", "arith.index_cast", "arith.index_castui", "arith.bitcast", "arith.extf", "arith.truncf", "arith.extsi",
    "arith.extui", "arith.trunci", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui",
)


@dataclass
class DispatchRegion:
    """One dispatch call site as formed by dispatch creation."""

    function: str
    ordinal: int
    location: OpLocation
    root_op: str
    costs: dict[OpLocation, float] = field(default_factory=dict)
    init: set[OpLocation] = field(default_factory=set)  # locations of init ops (fills), cost 0
    present: set[tuple[str, ...]] = field(default_factory=set)  # frames of every location member of every op in it
    export: str | None = None
    flops: float = 0.0  # arithmetic ops over every structured op's iteration space
    bytes: float = 0.0  # compulsory traffic: every operand and result tensor once
    cost_exact: bool = True  # False when a size the run did not fix counted as 1: FLOPs and bytes are lower bounds
    traffic: dict[OpLocation, list[float]] = field(default_factory=dict)  # location -> [FLOPs, bytes] of its ops' parts


def elements(shape: tuple[int, ...] | None) -> int:
    """Element count of a static shape, dynamic sizes counted as 1."""
    return math.prod(max(size, 1) for size in shape) if shape else 1


def indexing_maps(op: ir.Operation) -> list[ir.AffineMap] | None:
    """The indexing maps of a linalg op, or of an ``iree_linalg_ext`` op that carries them as a
    property (attention); None for other ops."""
    try:
        return [map_attr.value for map_attr in linalg.get_indexing_maps(op)]
    except (ValueError, TypeError, RuntimeError):  # not a linalg structured op
        maps = attr(op, "indexing_maps")
        if not isinstance(maps, ir.ArrayAttr):
            return None
        return [ir.AffineMapAttr(map_attr).value for map_attr in maps]


STATIC = RuntimeSizes()  # static sizes only: what a program says without a run


def loop_sizes(op: ir.Operation, run: RuntimeSizes = STATIC) -> dict[int, int] | None:
    """Loop bounds of a structured op (generic, named or attention) read off its operand shapes (as the
    run had them) through its indexing maps' plain dims; None for ops without indexing maps. Loops whose
    size is not known are left out."""
    maps = indexing_maps(op)
    if maps is None:
        return None
    sizes: dict[int, int] = {}
    for value, affine_map in zip(op.operands, maps):
        shape = run.shape(value)
        for result_index, expr in enumerate(affine_map.results):
            if shape and isinstance(expr, ir.AffineDimExpr) and shape[result_index] > 0:
                sizes[expr.position] = shape[result_index]
    return sizes


def attention_sizes(op: ir.Operation, sizes: dict[int, int]) -> tuple[int, int, int, int]:
    """An attention op's (scores, K1, N, outputs): its score matrix B×M×K2 (Q·Kᵀ), the dimension
    Q·Kᵀ contracts (K1), the one P·V produces (N) and its output's element count, from the maps of its
    operands Q, K, V (first three) and its result (last)."""
    maps = indexing_maps(op) or []
    query, key, value, output = ({expr.position for expr in maps[i].results if isinstance(expr, ir.AffineDimExpr)}
                                 for i in (0, 1, 2, -1))

    def size(dims: set[int]) -> int:
        return math.prod(sizes.get(dim, 1) for dim in dims)

    contracted = (query & key) - output
    return size((query | key) - contracted), size(contracted), size((value & output) - query), size(output)


def loops_known(op: ir.Operation, run: RuntimeSizes = STATIC) -> bool:
    """Whether every size an op's cost reads is known: all its loops (an op with indexing maps), else
    all its operand and result shapes."""
    maps = indexing_maps(op)
    if maps is not None:
        sizes = loop_sizes(op, run) or {}
        return all(dim in sizes for dim in range(maps[0].n_dims)) if maps else True
    shapes = [run.shape(value) for value in [*op.operands, *op.results]]
    return all(size >= 0 for shape in shapes if shape for size in shape)


def iteration_space(op: ir.Operation, run: RuntimeSizes = STATIC) -> float:
    """Estimated iteration-space size of a structured op (see the module docstring)."""
    shapes = [run.shape(value) for value in op.operands]
    sizes = loop_sizes(op, run)
    if sizes is not None and op.name == ATTENTION:  # two contractions around a softmax, not one loop nest
        scores, contracted, produced, _ = attention_sizes(op, sizes)
        return float(scores * (contracted + produced))
    if sizes is not None:
        return float(math.prod(sizes.values())) if sizes else 1.0
    result_shapes = [run.shape(r) for r in op.results] or shapes[-1:]
    tensor_inputs = [s for s in shapes[: len(shapes) - len(result_shapes)] if s]
    if len(tensor_inputs) >= 2 and result_shapes and result_shapes[0]:
        return math.sqrt(elements(tensor_inputs[0]) * elements(tensor_inputs[1]) * elements(result_shapes[0]))
    return float(max((elements(s) for s in shapes + result_shapes if s), default=1))


def body_ops(op: ir.Operation) -> list[ir.Operation]:
    """The scalar ops in a structured op's body, without its terminator."""
    return [child for child in walk(op) if not child.name.endswith("yield")]


def expr_dims(expr: ir.AffineExpr) -> set[int]:
    """The loops an indexing expression reads: ``d1 * 2 + d4`` → {1, 4}."""
    if isinstance(expr, ir.AffineDimExpr):
        return {expr.position}
    if isinstance(expr, ir.AffineBinaryExpr):
        return expr_dims(expr.lhs) | expr_dims(expr.rhs)
    return set()


def broadcast_loops(op: ir.Operation) -> set[int]:
    """Loops along which an op computes the same value again: those none of its inputs index, in an op
    whose body does not read its own indices (``linalg.index``). A convolution whose splat filter IREE
    folded into the body reads the input without the output-channel loop: every channel is one sum."""
    maps = indexing_maps(op)
    inputs = len(op.operands) - len(op.results)
    if maps is None or not op.results or any(child.name == "linalg.index" for child in walk(op)):
        return set()
    read = {dim for affine_map in maps[:inputs] for expr in affine_map.results for dim in expr_dims(expr)}
    return set(range(maps[-1].n_dims)) - read


def op_flops(op: ir.Operation, scalar_ops: list[ir.Operation], run: RuntimeSizes = STATIC, distinct: bool = True) -> float:
    """FLOPs of one structured op: the distinct points of its iteration space (without its broadcast
    loops, :func:`broadcast_loops`: a compiler may compute their one value once, and counting it again
    would put a well-compiled dispatch above the machine's peak; with ``distinct`` false, every point, as
    the code runs them) × its body's arithmetic per point; for
    ops with no body the scalar ops they stand for (``linalg.softmax``), and for attention its two
    contractions (2 FLOPs per multiply-add) plus the softmax per score and one divide per output element."""
    sizes = loop_sizes(op, run)
    if op.name == ATTENTION and sizes is not None:
        scores, contracted, produced, outputs = attention_sizes(op, sizes)
        return float(scores * (2 * contracted + ATTENTION_SOFTMAX_FLOPS + 2 * produced) + outputs)
    per_point = BODYLESS_FLOPS.get(op.name, 0) if not scalar_ops else arithmetic_ops(scalar_ops)
    repeated = math.prod(sizes.get(loop, 1) for loop in broadcast_loops(op)) if sizes and distinct else 1
    return iteration_space(op, run) / repeated * per_point


def arithmetic_ops(scalar_ops: list[ir.Operation]) -> int:
    """How many of a body's scalar ops are floating-point or integer arithmetic (FLOPs per iteration)."""
    return sum(map(is_arithmetic, scalar_ops))


def is_arithmetic(op: ir.Operation) -> bool:
    """Whether a scalar op is floating-point or integer arithmetic (a FLOP), not a cast or a constant."""
    return op.name.startswith(ARITHMETIC_PREFIXES) and op.name not in NOT_ARITHMETIC


def tensor_bytes(value_type: ir.Type, shape: tuple[int, ...] | None = None) -> tuple[float, bool]:
    """Size in bytes of a tensor type (of ``shape`` when given: the run's), and whether it is exact (every
    size known); (0, True) for non-tensors."""
    shape = static_shape(value_type) if shape is None else shape
    if shape is None:
        return 0.0, True
    element_type = ir.ShapedType(value_type).element_type
    bits = 64 if isinstance(element_type, ir.IndexType) else getattr(element_type, "width", 32)
    return elements(shape) * max(bits, 8) / 8, all(size >= 0 for size in shape)


def op_bytes(op: ir.Operation, computed: set[ir.Value], run: RuntimeSizes = STATIC) -> float:
    """Bytes one structured op moves across its dispatch's boundary, at the run's sizes: the input tensors
    no other op of the region ``computed`` (loaded from the dispatch's operands, or constants) and its
    results the dispatch stores (a destination-style op's inits are its results' storage, not inputs)."""
    inputs = list(op.operands)[: len(op.operands) - len(op.results)] if op.name.startswith(DESTINATION_STYLE) else list(op.operands)
    stored = [result for result in op.results if any(use.owner.name.endswith("dispatch.tensor.store") for use in result.uses)]
    return sum(tensor_bytes(value.type, run.shape(value))[0] for value in [*(v for v in inputs if v not in computed), *stored])


def compulsory_bytes(region_op: ir.Operation, run: RuntimeSizes = STATIC) -> tuple[float, bool]:
    """Bytes a dispatch region must read and write at least: each operand and result tensor once."""
    sizes = [tensor_bytes(value_type, shape) for value_type, shape in run.region_tensors(region_op)]
    return sum(size for size, _ in sizes), all(exact for _, exact in sizes)


def region_costs(region_op: ir.Operation, normalise: Normaliser, run: RuntimeSizes = STATIC) -> DispatchRegion:
    """One dispatch region's costs per source location, init ops and heaviest op at its own location."""
    own = normalise(region_op.location)
    region = DispatchRegion("", 0, own, "unknown")
    costs: dict[OpLocation, float] = defaultdict(float)
    heaviest = -1.0
    ops = structured_ops(region_op)
    computed = {result for op in ops for result in op.results}
    for op in ops:
        op_location = normalise(op.location)
        if op.name in INIT_OPS and op_location != own:
            region.init.add(op_location)
            continue
        space = iteration_space(op, run)
        scalar_ops = body_ops(op)
        region.flops += op_flops(op, scalar_ops, run)
        region.cost_exact &= loops_known(op, run)
        # one share for the op's own location (reading and writing its operands), one per body op
        located = [(scalar, found if (found := normalise(scalar.location)).known else op_location) for scalar in scalar_ops]
        for location in [op_location, *(location for _, location in located)]:
            costs[location] += space
        computing = [location for scalar, location in located if is_arithmetic(scalar)] or [op_location]
        executed = op_flops(op, scalar_ops, run, distinct=False)  # the split weighs the work the code does
        for location in computing:
            region.traffic.setdefault(location, [0.0, 0.0])[0] += executed / len(computing)
        region.traffic.setdefault(op_location, [0.0, 0.0])[1] += op_bytes(op, computed, run)
        weight = op_weight(op, run)
        if op_location == own and weight > heaviest:
            heaviest, region.root_op = weight, op.name
    region.costs = dict(costs)
    region.bytes, exact = compulsory_bytes(region_op, run)
    region.cost_exact &= exact
    region.present = {member.frames for op in walk(region_op) for member in normalise(op.location).members}
    return region


def op_weight(op: ir.Operation, run: RuntimeSizes = STATIC) -> float:
    """Estimated work of one structured op: its iteration space × (its body ops + 1)."""
    return iteration_space(op, run) * (len(body_ops(op)) + 1)


@dataclass
class MemberCosts:
    """Each source location member's own work in the program before fusion, by its frames."""

    work: dict[tuple[str, ...], float] = field(default_factory=dict)  # op_weight: operands and body ops
    flops: dict[tuple[str, ...], float] = field(default_factory=dict)  # arithmetic only (data movement counts 0)


def member_costs(
    input_phase: ir.Module, normalise: Normaliser, entry: str | None = None, argument_shapes: list[tuple[int, ...] | None] | None = None,
) -> MemberCosts:
    """Each source location member's own work and FLOPs in the program before fusion, by its frames.

    Read off the ``input`` phase (every op in linalg form, no fusion yet): each structured op's weight
    (:func:`op_weight`) and FLOPs (:func:`op_flops`) go to its location's members in equal parts.
    When the compiler later merges ops into one with a fused location, a member's part of that op is
    its own work, so an elementwise op merged into a convolution takes an elementwise op's part, not
    half; the FLOPs weigh ops a raised op absorbed (a softmax's max, exp and sum) against each other.
    Dynamic sizes of function ``entry`` take the run's ``argument_shapes`` (a size only data fixes counts 1).
    """
    costs = MemberCosts(defaultdict(float), defaultdict(float))
    for code_op in top_level(input_phase):
        run = RuntimeSizes(argument_shapes if code_op.name in CODE_OPS and symbol_name(code_op) == entry else None)
        for op in structured_ops(code_op):
            members = normalise(op.location).members
            weight, flops = op_weight(op, run), op_flops(op, body_ops(op), run)
            for member in members:
                costs.work[member.frames] += weight / len(members)
                costs.flops[member.frames] += flops / len(members)
    return MemberCosts(dict(costs.work), dict(costs.flops))


def structured_ops(region_op: ir.Operation) -> list[ir.Operation]:
    """Compute ops in a dispatch region, not descending into their own bodies."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> None:
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    if child.name.startswith(STRUCTURED_PREFIXES) and child.name not in NOT_COMPUTE:
                        found.append(child)
                    else:
                        visit(child)

    visit(region_op)
    return found


def read_regions(
    dispatch_creation: Path, flow: Path, normalise: Normaliser, context: ir.Context | None = None,
    entry: str | None = None, argument_shapes: list[tuple[int, ...] | None] | None = None,
    constants_of_run: ConstantsOfRun | None = None, executables: Path | None = None,
) -> list[DispatchRegion]:
    """Every dispatch region with its costs per location, and the export the flow phase gives it.

    ``argument_shapes`` are the shapes the run gives function ``entry``'s arguments: they fix the
    dynamic sizes of that function's dispatches (:mod:`tracelink.provenance.runtime_sizes`). When a
    size of one of them is still unknown, ``constants_of_run`` is called for the push constants of a
    run, and the regions they fix are costed again (:func:`with_run_constants`; ``executables``: the
    executable dumps, which say how constants become sizes).
    """
    context = context or new_context()
    # Keep each module referenced while its ops are used: the bindings free a module's ops with it.
    created = parse_file(dispatch_creation, context)
    exports = flow_exports(parse_file(flow, context))
    regions: list[DispatchRegion] = []
    region_ops: list[ir.Operation] = []
    blocks = code_blocks(created)
    entry = entry_body(entry, [name for name, _ in blocks])
    for code_name, code_op in blocks:
        run = RuntimeSizes(argument_shapes if code_name == entry else None)
        for ordinal, op in enumerate(op for op in walk(code_op) if op.name == "flow.dispatch.workgroups"):
            region = region_costs(op, normalise, run)
            region.function, region.ordinal, region.export = code_name, ordinal, exports.get((code_name, ordinal))
            regions.append(region)
            region_ops.append(op)
    unknown = any(not region.cost_exact for region in regions if region.function == entry)
    constants = constants_of_run() if unknown and constants_of_run is not None and executables is not None else None
    if constants:
        workloads = ExportWorkloads(executables, context)
        return with_run_constants(regions, region_ops, constants, workloads, normalise, RuntimeSizes(argument_shapes), entry)
    return regions


def entry_body(entry: str | None, functions: list[str]) -> str | None:
    """The function holding ``entry``'s dispatches: the ``$async`` body IREE's ABI wraps it in when there is
    one (a program imported from torch; its arguments are the entry's, then two fences), else ``entry``."""
    body = f"{entry}$async"
    return body if entry is not None and body in functions else entry


def flow_exports(outlined: ir.Module) -> dict[tuple[str, int], str]:
    """The export each dispatch of the flow phase calls, by (function, ordinal)."""
    exports: dict[tuple[str, int], str] = {}
    for code_name, code_op in code_blocks(outlined):
        dispatches = [op for op in walk(code_op) if op.name == "flow.dispatch"]
        for ordinal, op in enumerate(dispatches):
            exports[(code_name, ordinal)] = symbol_ref_leaf(attr(op, "entry_points")[0])
    return exports


def with_run_constants(
    regions: list[DispatchRegion], region_ops: list[ir.Operation], constants: DispatchConstants,
    workloads: ExportWorkloads, normalise: Normaliser, run: RuntimeSizes, entry: str | None,
) -> list[DispatchRegion]:
    """``regions`` with those of ``entry`` whose cost was not exact costed again on the workload their
    dispatch's push constants give (:mod:`tracelink.provenance.executable_workloads`)."""
    in_entry = [position for position, region in enumerate(regions) if region.function == entry]
    initializer_exports = [region.export for region in regions if region.function.startswith(INITIALIZER_PREFIX)]
    recorded = entry_constants(constants, [regions[position].export for position in in_entry], initializer_exports)
    costed = list(regions)
    for position, values in zip(in_entry, recorded):
        region = regions[position]
        if region.cost_exact or values is None or region.export is None:
            continue
        seeds = workload_seeds(region_ops[position], workloads.workload(region.export, values))
        again = region_costs(region_ops[position], normalise, run.seeded(seeds))
        again.function, again.ordinal, again.export = region.function, region.ordinal, region.export
        costed[position] = again
    return costed


def code_blocks(module: ir.Module) -> list[tuple[str, ir.Operation]]:
    """Functions and initializers with a name each (initializers numbered in order)."""
    blocks: list[tuple[str, ir.Operation]] = []
    initializers = 0
    for op in top_level(module):
        if op.name == "util.initializer":
            blocks.append((f"{INITIALIZER_PREFIX}{initializers}", op))
            initializers += 1
        elif op.name in CODE_OPS:
            blocks.append((symbol_name(op) or "?", op))
    return blocks
