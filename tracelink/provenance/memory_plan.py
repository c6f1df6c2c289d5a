"""Where each dispatch's operands and results live, from the compiler's own packing (the ``stream`` phase).

In the ``stream`` phase dump the entry function allocates its memory with ``stream.resource.alloca``:
``!stream.resource<transient>`` slabs (IREE packs every intermediate of a call into one slab) and
``<external>`` resources (its results). Each ``stream.cmd.dispatch`` binds resources — the slab, an
imported argument (``stream.tensor.import``), a constant or parameter global — with an access
(``resource_accesses``: 1 read, 2 write, 3 both) and a byte range; inside the executable,
``stream.binding.subspan %binding[offset]`` says where in that range the tensor it reads or writes
starts, and its type gives the tensor's size. The offset is a constant, or an operand of the dispatch
when several dispatches share one executable. ``stream.cmd.fill`` and ``stream.cmd.copy`` write ranges
too (a padded tensor is zero-filled, then a dispatch writes its interior). Commands inside a
``stream.cmd.concurrent`` block run together. So every command knows which bytes of which allocation
it writes and reads, and when, which is what the memory attribution needs. The function's results are
``stream.tensor.export`` of (a subview of) an ``<external>`` allocation: each is placed in it.

In a program with dynamic shapes those sizes and offsets are host values computed from the arguments'
dims (``hal.buffer_view.dim``), and an executable receives an offset or a dim as push constants (the
dispatch's uniform operands): both are evaluated on the shapes the run gave the arguments
(:class:`~tracelink.provenance.runtime_sizes.RuntimeSizes`), so the plan has the run's sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from iree.compiler import ir

from tracelink.ir_utils import attr, int_constant, new_context, parse_file, symbol_name, symbol_ref_leaf, top_level, walk
from tracelink.provenance.runtime_sizes import RuntimeSizes

Shapes = list[tuple[int, ...] | None] | None

READ, WRITE = 1, 2  # bits of stream.cmd.dispatch's resource_accesses


@dataclass
class Alloca:
    """A ``stream.resource.alloca`` of the call: its lifetime (``transient`` or ``external``) and size."""

    index: int
    lifetime: str
    size: int | None  # None when a run-time size the run's shapes do not fix


@dataclass
class Access:
    """Bytes of one resource a dispatch reads or writes."""

    origin: str  # "alloca:<i>", "argument:<i>", "global:<name>" or "unknown"
    reads: bool
    writes: bool
    offset: int | None  # from the start of the resource
    length: int | None


@dataclass
class PlannedCommand:
    """One command of the call in program order: a ``stream.cmd.dispatch``, ``fill`` or ``copy``."""

    kind: str  # "dispatch", "fill" or "copy"
    export: str  # a dispatch's export, "" otherwise
    position: int  # the dispatch it runs with: its own, the first of its concurrent block, or the next one
    accesses: list[Access] = field(default_factory=list)


@dataclass
class PlannedResult:
    """One result of the function: the allocation holding it (``stream.tensor.export`` of a range of it)."""

    position: int  # in the function's results
    origin: str  # "alloca:<i>", or another origin when the result is not the call's allocation
    offset: int | None
    length: int | None
    type: str  # its tensor type in the run: 16x2048xf16


@dataclass
class StreamPlan:
    """The call's allocations and what each command touches; the sizes of the resident globals."""

    allocas: list[Alloca]
    commands: list[PlannedCommand]
    arguments: dict[int, int | None]  # argument position -> bytes imported (once, however often imported)
    resident: dict[str, tuple[str, int | None]]  # global -> ("parameter" or "constant", bytes)
    argument_types: dict[int, str] = field(default_factory=dict)  # argument position -> its tensor type in the run: 16x2048xf16
    results: list[PlannedResult] = field(default_factory=list)

    @property
    def dispatches(self) -> list[PlannedCommand]:
        return [command for command in self.commands if command.kind == "dispatch"]


def read_stream_plan(path: Path, entry: str, argument_shapes: Shapes = None) -> StreamPlan:
    """The plan of function ``entry`` (following its calls, e.g. into an ``$async`` body) in a stream dump,
    its run-time sizes evaluated on ``argument_shapes`` (the shapes the run gives the arguments)."""
    context = new_context()
    run = RuntimeSizes(argument_shapes)
    # the functions whose arguments are the entry's: itself and the ``$async`` body IREE's ABI wraps it in
    bodies = {entry, f"{entry}$async"}
    module = parse_file(path, context)
    functions = {symbol_name(op): op for op in top_level(module) if op.name in ("util.func", "func.func")}
    executables = {symbol_name(op): op for op in top_level(module) if op.name == "stream.executable"}
    plan = StreamPlan([], [], {}, resident_globals(module))
    origins: dict[ir.Value, str] = {}
    offsets: dict[ir.Value, int | None] = {}  # a subview's offset in the resource it views
    exported: dict[ir.Value, PlannedResult] = {}
    visited: set[str] = set()
    block_starts: dict[ir.Operation, int] = {}  # concurrent block -> the dispatch count when it began

    def position(op: ir.Operation) -> int:
        dispatched = len(plan.dispatches)
        parent = op.parent
        return block_starts.setdefault(parent, dispatched) if parent.name == "stream.cmd.concurrent" else dispatched

    def visit(name: str) -> None:
        if name in visited or name not in functions:
            return
        visited.add(name)
        for op in walk(functions[name]):
            if op.name == "stream.resource.alloca":
                result = op.results[0]
                lifetime = "transient" if "transient" in str(result.type) else "external"
                origins[result] = f"alloca:{len(plan.allocas)}"
                plan.allocas.append(Alloca(len(plan.allocas), lifetime, run.value(op.operands[0])))
            elif op.name == "stream.tensor.import" and name in bodies:
                argument = argument_index(op.operands[0])
                origins[op.results[0]] = f"argument:{argument}"
                if argument >= 0:
                    plan.arguments[argument] = run.value(op.operands[-1])
                    plan.argument_types[argument] = tensor_type(op, "result_encoding", run)
            elif op.name == "stream.tensor.export" and name in bodies:
                source = op.operands[0]
                exported[op.results[0]] = PlannedResult(-1, origin_of(source, origins), offsets.get(source, 0), run.value(op.operands[-1]),
                                                        tensor_type(op, "source_encoding", run))
            elif op.name == "util.return" and name in bodies:
                plan.results.extend(replace(exported[value], position=k) for k, value in enumerate(op.operands) if value in exported)
            elif op.name == "util.global.load":
                origins[op.results[0]] = f"global:{symbol_ref_leaf(attr(op, 'global'))}"
            elif op.name == "stream.cmd.execute":
                bind_execute_arguments(op, origins)
            elif op.name in ("stream.timepoint.await", "stream.resource.subview"):
                for result, source in zip(op.results, passed_resources(op)):
                    origins[result] = origin_of(source, origins)
                if op.name == "stream.resource.subview":  # operands: source, its size, offset, length
                    base, inner = offsets.get(op.operands[0], 0), run.value(op.operands[2])
                    offsets[op.results[0]] = None if base is None or inner is None else base + inner
            elif op.name == "stream.cmd.dispatch":
                plan.commands.append(planned_dispatch(op, origins, executables, context, position(op), run))
            elif op.name in ("stream.cmd.fill", "stream.cmd.copy"):
                plan.commands.append(planned_transfer(op, origins, position(op), run))
            elif op.name == "util.call":
                visit(symbol_ref_leaf(attr(op, "callee")))

    visit(entry)
    return plan


def argument_index(value: ir.Value) -> int:
    """The position of a function argument (``-1`` for a value that is not one)."""
    return value.arg_number if isinstance(value, ir.BlockArgument) else -1


def tensor_type(op: ir.Operation, encoding_name: str, run: RuntimeSizes) -> str:
    """An imported argument's or exported result's tensor type (its ``encoding_name`` attribute) with its
    dynamic dims (the op's operands between the view and the size) as the run had them: ``32x64xf32``; a
    dim the run does not fix stays ``?``."""
    encoding = attr(op, encoding_name)
    text = str(ir.TypeAttr(encoding).value) if encoding is not None else "tensor<?>"
    dims = iter(run.value(value) for value in list(op.operands)[1:-1])
    shape = text[text.find("<") + 1 : text.rfind(">")]
    return "x".join(str(next(dims, None) or "?") if part == "?" else part for part in shape.split("x"))


def origin_of(value: ir.Value, origins: dict[ir.Value, str]) -> str:
    return origins.get(value, "unknown")


def passed_resources(op: ir.Operation) -> list[ir.Value]:
    """The resource operands an await or subview hands on as its results, in order."""
    return [value for value in op.operands if str(value.type).startswith("!stream.resource")]


def bind_execute_arguments(op: ir.Operation, origins: dict[ir.Value, str]) -> None:
    """A ``stream.cmd.execute`` region's block arguments are its resource operands, in order."""
    resources = passed_resources(op)
    arguments = op.regions[0].blocks[0].arguments
    for argument, resource in zip(arguments, resources):
        origins[argument] = origin_of(resource, origins)


def planned_transfer(op: ir.Operation, origins: dict[ir.Value, str], at: int, run: RuntimeSizes) -> PlannedCommand:
    """A fill (operands: target, its size, offset, length, value) or a copy (source, its size, offset,
    target, its size, offset, length): the bytes it writes, and for a copy the bytes it reads."""
    operands = list(op.operands)
    if op.name == "stream.cmd.fill":
        target = Access(origin_of(operands[0], origins), False, True, run.value(operands[2]), run.value(operands[3]))
        return PlannedCommand("fill", "", at, [target])
    length = run.value(operands[6])
    source = Access(origin_of(operands[0], origins), True, False, run.value(operands[2]), length)
    target = Access(origin_of(operands[3], origins), False, True, run.value(operands[5]), length)
    return PlannedCommand("copy", "", at, [source, target])


def planned_dispatch(op: ir.Operation, origins: dict[ir.Value, str], executables: dict[str, ir.Operation],
                     context: ir.Context, at: int, run: RuntimeSizes) -> PlannedCommand:
    """What one ``stream.cmd.dispatch`` reads and writes: each binding's range, narrowed by the subspan inside."""
    segments = list(attr(op, "operandSegmentSizes"))
    operands = list(op.operands)
    starts = [sum(segments[:i]) for i in range(len(segments))]
    uniform = operands[starts[1] : starts[1] + segments[1]]
    count = segments[2]
    resources = operands[starts[2] : starts[2] + count]
    offsets = operands[starts[4] : starts[4] + count]
    lengths = operands[starts[5] : starts[5] + count]
    flags = [int(a.value) for a in attr(op, "resource_accesses")]
    path = list(attr(op, "entry_points")[0].value)  # @executable::@export
    export = path[-1]
    spans = subspans(executables.get(path[0]), export, [run.value(u) for u in uniform], context)
    dispatch = PlannedCommand("dispatch", export, at)
    for k, resource in enumerate(resources):
        base, length = run.value(offsets[k]), run.value(lengths[k])
        for inner, size in spans.get(k, [(0, length)]):
            if inner is None or size is None:  # where in the binding is known at run time only: all of it
                inner, size = 0, length
            offset = None if base is None else base + inner
            dispatch.accesses.append(Access(origin_of(resource, origins), bool(flags[k] & READ), bool(flags[k] & WRITE), offset, size))
    return dispatch


def subspans(executable: ir.Operation | None, export: str, uniform: list[int | None],
             context: ir.Context) -> dict[int, list[tuple[int | None, int | None]]]:
    """Binding position -> (offset, bytes) of each ``stream.binding.subspan`` of it in the export's function:
    an offset or a dynamic dim computed from the function's scalar arguments takes the dispatch's ``uniform``
    operands' values (None where unknown)."""
    if executable is None:
        return {}
    function = next((op for op in walk(executable) if op.name == "func.func" and symbol_name(op) == export), None)
    if function is None:
        return {}
    arguments = list(function.regions[0].blocks[0].arguments)
    bindings = [a for a in arguments if str(a.type) == "!stream.binding"]
    scalars = [a for a in arguments if str(a.type) != "!stream.binding"]
    run = RuntimeSizes().seeded({scalar: value for scalar, value in zip(scalars, uniform) if value is not None})
    found: dict[int, list[tuple[int | None, int | None]]] = {}
    for op in walk(function):
        if op.name != "stream.binding.subspan" or op.operands[0] not in bindings:
            continue
        dims = [run.value(dim) for dim in list(op.operands)[2:]]
        found.setdefault(bindings.index(op.operands[0]), []).append((run.value(op.operands[1]), tensor_bytes(op.results[0].type, context, dims)))
    return found


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The op defining ``value``; None for a block argument."""
    owner = value.owner
    return owner.operation if hasattr(owner, "operation") and not isinstance(owner, ir.Block) else None


def tensor_bytes(dispatch_tensor: ir.Type, context: ir.Context, dims: list[int | None] = ()) -> int | None:
    """Bytes of the tensor a ``!iree_tensor_ext.dispatch.tensor<access:tensor<...>>`` holds, its dynamic sizes
    ``dims`` in order; None when one is unknown.

    The bindings have no class for IREE's dispatch tensor type: the tensor type it wraps (after the access
    keyword) is handed to MLIR's own parser.
    """
    text = str(dispatch_tensor)
    if ":" not in text:
        return None
    with context:
        tensor = ir.Type.parse(text[text.index(":") + 1 : -1])
    if not isinstance(tensor, ir.ShapedType) or not hasattr(tensor.element_type, "width"):
        return None
    sizes = iter(dims)
    shape = [next(sizes, None) if tensor.is_dynamic_dim(i) else size for i, size in enumerate(tensor.shape)]
    if any(size is None for size in shape):
        return None
    return math.prod(shape) * max(1, math.ceil(tensor.element_type.width / 8))


def resident_globals(module: ir.Module) -> dict[str, tuple[str, int | None]]:
    """Resource globals held for the module's lifetime: parameters (loaded from an archive) and constants."""
    found: dict[str, tuple[str, int | None]] = {}
    # One parameter load (and the await after it) produces hundreds of globals: each op's results are
    # matched to their sizes and awaited resources once, not once per global.
    by_result: dict[ir.Operation, dict[ir.Value, object]] = {}

    def per_result(op: ir.Operation, read: Callable[[ir.Operation], dict[ir.Value, object]]) -> dict[ir.Value, object]:
        if op not in by_result:
            by_result[op] = read(op)
        return by_result[op]

    for op in walk(module.operation):
        if op.name != "util.global.store" or not str(op.operands[0].type).startswith("!stream.resource<constant>"):
            continue
        value = op.operands[0]
        source = defining_op(value)
        while source is not None and source.name == "stream.timepoint.await":  # the resource it waits for
            value = per_result(source, lambda await_op: dict(zip(await_op.results, passed_resources(await_op))))[value]
            source = defining_op(value)
        kind = "parameter" if source is not None and source.name == "stream.cmd.parameter.load" else "constant"
        size = None if source is None else per_result(source, resource_sizes).get(value)
        found[symbol_ref_leaf(attr(op, "global"))] = (kind, size)
    return found


def resource_sizes(source: ir.Operation) -> dict[ir.Value, int | None]:
    """The size of each resource ``source`` produces: result i's size is its i-th index operand (parameter
    loads and constant ops list their results' sizes as their index operands)."""
    sizes = [operand for operand in source.operands if str(operand.type) == "index"]
    resources = [result for result in source.results if str(result.type).startswith("!stream.resource")]
    return {resource: int_constant(size) for resource, size in zip(resources, sizes)}
