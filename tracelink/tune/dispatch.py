"""Read one dispatch's benchmark dump: its root op, loops, default tile config and buffer bindings.

The benchmark dump (``module_<exe>_embedded_elf_<arch>_benchmark.mlir``) is a complete program: the
configured executable plus a ``util.func`` marked ``iree.benchmark = "dispatch"`` that runs it on
uninitialized buffers, with the push constants and binding ranges of one of its call sites. Everything
the tuner needs about the dispatch is read from it with the MLIR Python bindings, including where each
binding's view starts when that offset comes from a push constant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import linalg

from tracelink.errors import TracelinkError, first_line
from tracelink.ir_utils import walk

# Lowering-config fields the tuner searches; any other field of the default is kept as it is.
TUNED_FIELDS = ("distribution", "vector_common_parallel", "vector_reduction")

# Matmuls over packed (data-tiled) operands: their last three loops are the inner tiles.
PACKED_MATMULS = ("linalg.mmt4d", "linalg.batch_mmt4d")

# numpy dtype and HAL element type of the MLIR element types a harness can feed.
ELEMENT_TYPES = {
    "f16": ("float16", "f16"),
    "bf16": (None, "bf16"),
    "f32": ("float32", "f32"),
    "f64": ("float64", "f64"),
    "i8": ("int8", "i8"),
    "i16": ("int16", "i16"),
    "i32": ("int32", "i32"),
    "i64": ("int64", "i64"),
}


@dataclass(frozen=True)
class Loop:
    """One loop of the root op's iteration space."""

    index: int  # d<index> in the indexing maps
    role: str  # knob suffix: m, n, k, b (contraction); batch, img0, oc, filter0, ic, depth (convolution); p0, r (reduction)
    kind: str  # "parallel" or "reduction"
    size: int


@dataclass(frozen=True)
class Binding:
    """One view of a buffer the dispatch reads or writes (a ``hal.interface.binding.subspan``).

    A binding used at several offsets has one entry per view, all with the same ``index``."""

    index: int
    shape: tuple[int, ...]
    element_type: str  # MLIR spelling: f32, i8, ...
    readonly: bool
    offset: int = 0  # bytes into the bound buffer where the dispatch's view starts
    range_bytes: int = 0  # length of the buffer range the benchmark binds (0: just the view)

    @property
    def byte_size(self) -> int:
        """Bytes of the dispatch's view (from ``offset``)."""
        count = 1
        for extent in self.shape:
            count *= extent
        return count * element_bytes(self.element_type)

    @property
    def buffer_size(self) -> int:
        """Bytes the bound buffer needs: the view and what precedes it, at least the benchmark's range."""
        return max(self.offset + self.byte_size, self.range_bytes)


@dataclass
class Dispatch:
    """What the tuner knows about one dispatch function."""

    benchmark: Path
    export: str
    executable: str
    variant: str
    root_op: str  # e.g. linalg.matmul
    kind: str  # "contraction", "convolution" or "reduction" (no spec matcher: delivered as a configuration)
    loops: list[Loop]
    indexing_maps: list[str]  # affine_map<...> of the root op (inputs then output)
    access: list[list[list[tuple[int, int]]]]  # operand -> result dim -> [(loop, coefficient)]
    operand_types: list[str]  # element types of the root op's inputs then output
    default_config: dict[str, list[int]]
    default_config_text: str
    translation_info: str
    bindings: list[Binding]  # in binding order; a binding used at several offsets appears once per view
    device_symbol: str  # the util.global holding the !hal.device
    constants: list[int] = field(default_factory=list)  # push constants the benchmark dispatches with
    match_dims: dict[str, list[int]] = field(default_factory=dict)  # for the spec's dims_equal
    native_vector_bytes: int = 64  # the target's native_vector_size: IREE's vector-size limit is 512 of these
    # How a tuned config reaches the program: "spec" (a tuning-spec matcher) or "configuration" (the
    # configured executable substituted with --iree-hal-substitute-executable-configuration).
    delivery: str = "spec"

    @property
    def flops(self) -> int:
        """Multiply-adds of the root op counted as two operations, over the loops its inputs index: along
        another loop the result is one value broadcast, which a good config computes once (counting it
        again would make that config look faster than the machine's peak)."""
        read = {loop for operand in self.access[:-1] for terms in operand for loop, _ in terms}
        total = 2
        for loop in self.loops:
            if loop.index in read:
                total *= loop.size
        return total

    @property
    def fixed_loops(self) -> set[int]:
        """Loops whose tiles a config must leave whole: the inner tile loops (M0, N0, K0) of a packed
        matmul. Their sizes are the data layout's, and IREE 3.13's mmt4d lowering (ukernel or not)
        computes wrong results or NaN when a config splits them (measured on a 256x384x512 matmul)."""
        if self.root_op in PACKED_MATMULS:
            return {loop.index for loop in self.loops[-3:]}
        return set()

    @property
    def buffers(self) -> list[Binding]:
        """The first view of each binding index, in order: one buffer per binding."""
        first: dict[int, Binding] = {}
        for binding in self.bindings:
            first.setdefault(binding.index, binding)
        return [first[i] for i in sorted(first)]

    def buffer_size(self, index: int) -> int:
        """Bytes binding ``index`` needs to cover all of its views."""
        return max(b.buffer_size for b in self.bindings if b.index == index)

    @property
    def shapes(self) -> str:
        return "x".join(str(loop.size) for loop in self.loops)


def element_bytes(element_type: str) -> int:
    digits = "".join(ch for ch in element_type if ch.isdigit())
    if not digits or int(digits) % 8:
        raise TracelinkError(f"element type {element_type} is not byte-sized")
    return int(digits) // 8


def config_fields(attribute: ir.Attribute) -> dict[str, list[int]]:
    """The fields of a ``#iree_cpu.lowering_config<a = [..], b = [..]>`` as lists of ints.

    The attribute has no Python accessors; its body has the syntax of a dictionary attribute, so it
    is re-parsed as one.
    """
    text = str(attribute)
    if not text.startswith("#iree_cpu.lowering_config<"):
        raise TracelinkError(f"unsupported lowering_config {text} (only #iree_cpu.lowering_config is tunable)")
    body = ir.Attribute.parse("{" + text[text.index("<") + 1 : text.rindex(">")] + "}", attribute.context)
    fields: dict[str, list[int]] = {}
    for named in ir.DictAttr(body):
        value = named.attr
        if isinstance(value, ir.ArrayAttr):
            fields[named.name] = [ir.IntegerAttr(item).value for item in ir.ArrayAttr(value)]
        else:
            fields[named.name] = list(ir.DenseI64ArrayAttr(value))
    return fields


def config_text(fields: dict[str, list[int]]) -> str:
    """The ``#iree_cpu.lowering_config<...>`` spelling of ``fields``."""
    body = ", ".join(f"{name} = [{', '.join(str(v) for v in values)}]" for name, values in fields.items())
    return f"#iree_cpu.lowering_config<{body}>"


# Ops that pass an integer through unchanged (casts, and range assumptions: result i is operand i).
PASS_THROUGH = ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi", "arith.trunci", "util.assume.int")


def _integer_value(value: ir.Value, constants: list[int]) -> int | None:
    """The integer ``value`` takes when the dispatch runs with push constants ``constants``, else None."""
    owner = value.owner
    owner = owner.operation if hasattr(owner, "operation") else owner
    if not isinstance(owner, ir.Operation):
        return None
    if owner.name == "arith.constant":
        return ir.IntegerAttr(owner.attributes["value"]).value
    if owner.name == "hal.interface.constant.load":
        ordinal = ir.IntegerAttr(owner.attributes["ordinal"]).value
        return constants[ordinal] if ordinal < len(constants) else None
    if owner.name in PASS_THROUGH:
        number = ir.OpResult(value).result_number if owner.name == "util.assume.int" else 0
        return _integer_value(owner.operands[number], constants)
    if owner.name in ("arith.addi", "arith.muli"):
        lhs, rhs = (_integer_value(operand, constants) for operand in owner.operands)
        if lhs is None or rhs is None:
            return None
        return lhs + rhs if owner.name == "arith.addi" else lhs * rhs
    return None


def benchmark_dispatch(function: ir.Operation) -> tuple[list[int], dict[int, int]]:
    """(push constants, binding index -> range length) of the dispatch in the benchmark function."""
    op = next((op for op in walk(function) if op.name == "hal.command_buffer.dispatch"), None)
    if op is None:
        return [], {}
    sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    # Segments: command buffer, executable, function, x, y, z, constants, buffers, offsets, lengths.
    start = sum(sizes[:6])
    constants = [_integer_value(v, []) for v in list(op.operands)[start : start + sizes[6]]]
    lengths_start = start + sizes[6] + sizes[7] + sizes[8]
    lengths = [_integer_value(v, []) for v in list(op.operands)[lengths_start : lengths_start + sizes[9]]]
    if any(c is None for c in constants):
        raise TracelinkError("the benchmark dispatches with push constants that are not constant; not tunable")
    return [int(c) for c in constants], {i: int(n) for i, n in enumerate(lengths) if n is not None}


def indexing_maps(op: ir.Operation) -> list[ir.Attribute]:
    """The indexing maps of a linalg op, also of named ops that do not print them (vecmat, matvec, convolutions)."""
    return list(linalg.get_indexing_maps(op))


def reduction_loops(op: ir.Operation) -> list[int]:
    """The loops of a linalg op its result does not index: the ones it reduces."""
    maps = [ir.AffineMapAttr(item).value for item in indexing_maps(op)]
    kept = {expr.position for expr in maps[-1].results if isinstance(expr, ir.AffineDimExpr)}
    return [loop for loop in range(maps[-1].n_dims) if loop not in kept]


def is_reduction(op: ir.Operation) -> bool:
    """A ``linalg.generic`` that reduces and is neither a contraction nor a convolution: a sum, a norm, or
    a convolution whose filter was a splat constant and folded into its body (a strided sum)."""
    return (op.name == "linalg.generic" and not (linalg.isa_contraction_op(op) or linalg.isa_convolution_op(op))
            and bool(reduction_loops(op)))


def is_root(op: ir.Operation) -> bool:
    """A contraction, convolution or reduction carrying the workgroup (``distribution``) tiling of its dispatch."""
    if "lowering_config" not in op.attributes:
        return False
    if not (linalg.isa_contraction_op(op) or linalg.isa_convolution_op(op) or is_reduction(op)):
        return False
    return "distribution" in config_fields(op.attributes["lowering_config"])


def _element_type(value: ir.Value) -> str:
    value_type = value.type
    if isinstance(value_type, ir.ShapedType):
        return str(value_type.element_type)
    return str(value_type)


def _linear_terms(expr: ir.AffineExpr, where: str) -> list[tuple[int, int]]:
    """``expr`` as a sum of coefficient * loop terms (constants dropped): d1 * 2 + d4 -> [(1, 2), (4, 1)]."""
    if isinstance(expr, ir.AffineDimExpr):
        return [(expr.position, 1)]
    if isinstance(expr, ir.AffineConstantExpr):
        return []
    if isinstance(expr, ir.AffineAddExpr):
        return _linear_terms(expr.lhs, where) + _linear_terms(expr.rhs, where)
    if isinstance(expr, ir.AffineMulExpr):
        for factor, other in ((expr.rhs, expr.lhs), (expr.lhs, expr.rhs)):
            if isinstance(factor, ir.AffineConstantExpr):
                return [(loop, coefficient * factor.value) for loop, coefficient in _linear_terms(other, where)]
    raise TracelinkError(f"{where}: indexing map expression {expr} is not linear; not tunable")


def _loop_sizes(op: ir.Operation, maps: list[ir.AffineMap]) -> list[int]:
    """Static loop bounds, read off the operand shapes through the indexing maps' plain dims."""
    sizes = [-1] * maps[0].n_dims
    for operand, amap in zip(op.operands, maps):
        shape = ir.ShapedType(operand.type)
        for position, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr) and not shape.is_dynamic_dim(position):
                sizes[expr.position] = shape.get_dim_size(position)
    if any(size < 0 for size in sizes):
        raise TracelinkError(f"root op {op.name} has dynamic loop bounds; only static shapes are tunable")
    return sizes


def _roles(op: ir.Operation) -> tuple[str, dict[int, tuple[str, str]], dict[str, list[int]]]:
    """(kind, loop -> (role, parallel/reduction), dims for the spec matcher) of a root op."""
    roles: dict[int, tuple[str, str]] = {}

    def name(base: str, members: list[int]) -> None:
        for i, loop in enumerate(members):
            role = base if len(members) == 1 else f"{base}{i}"
            roles[loop] = (role, groups_kind[base])

    if linalg.isa_contraction_op(op):
        dims = linalg.infer_contraction_dimensions(op)
        groups = {"b": list(dims.batch), "m": list(dims.m), "n": list(dims.n), "k": list(dims.k)}
        groups_kind = {"b": "parallel", "m": "parallel", "n": "parallel", "k": "reduction"}
        for base, members in groups.items():
            name(base, members)
        return "contraction", roles, groups
    if linalg.isa_convolution_op(op):
        dims = linalg.infer_convolution_dimensions(op)
        groups = {
            "batch": list(dims.batch),
            "img": list(dims.output_image),
            "oc": list(dims.output_channel),
            "filter": list(dims.filter_loop),
            "ic": list(dims.input_channel),
            "depth": list(dims.depth),
        }
        groups_kind = {
            "batch": "parallel",
            "img": "parallel",
            "oc": "parallel",
            "filter": "reduction",
            "ic": "reduction",
            "depth": "parallel",
        }
        for base, members in groups.items():
            name(base, members)
        groups["strides"] = list(dims.strides)
        groups["dilations"] = list(dims.dilations)
        return "convolution", roles, groups
    if is_reduction(op):
        reduced = reduction_loops(op)
        loops = ir.AffineMapAttr(indexing_maps(op)[-1]).value.n_dims
        groups = {"p": [loop for loop in range(loops) if loop not in reduced], "r": reduced}
        groups_kind = {"p": "parallel", "r": "reduction"}
        for base, members in groups.items():
            name(base, members)
        return "reduction", roles, groups
    raise TracelinkError(f"root op {op.name} is neither a contraction, a convolution nor a reduction")


def load_dispatch(benchmark: Path, context: ir.Context | None = None) -> Dispatch:
    """Read the dispatch in a benchmark dump. Raises TracelinkError when it is not tunable."""
    benchmark = Path(benchmark)
    if not benchmark.is_file():
        raise TracelinkError(f"{benchmark}: benchmark dump not found")
    context = context or ir.Context()
    try:
        module = ir.Module.parseFile(str(benchmark), context)
    except ir.MLIRError as error:
        raise TracelinkError(f"{benchmark}: MLIR parse error: {first_line(error)}") from error
    return describe(module, benchmark)


def describe(module: ir.Module, benchmark: Path) -> Dispatch:
    """What the tuner knows about the dispatch of a parsed benchmark dump; TracelinkError when not tunable."""
    found = _dump_ops(module)
    export, root = found.export, found.root
    if any(item is None for item in (export, found.executable, found.variant, found.bench_op, found.dispatch_func, found.device_symbol)):
        raise TracelinkError(f"{benchmark}: not a dispatch benchmark dump (no executable export or benchmark function)")
    if root is None:
        raise TracelinkError(f"{export} has no tunable root op (matmul, batch_matmul, convolution, contraction or reduction generic)")
    constants, ranges = benchmark_dispatch(found.bench_op)
    bindings = [_binding(op, constants, ranges, export) for op in found.subspans]
    kind, roles, match_dims = _roles(root)
    maps = [ir.AffineMapAttr(item).value for item in indexing_maps(root)]
    sizes = _loop_sizes(root, maps)
    loops = [Loop(i, roles[i][0], roles[i][1], sizes[i]) for i in range(len(sizes))]
    match_sizes = _match_sizes(match_dims, sizes)
    default_attr = root.attributes["lowering_config"]
    return Dispatch(
        benchmark=benchmark,
        export=export,
        executable=found.executable,
        variant=found.variant,
        root_op=root.name,
        kind=kind,
        loops=loops,
        indexing_maps=[str(item) for item in indexing_maps(root)],
        access=[[_linear_terms(expr, str(benchmark)) for expr in amap.results] for amap in maps],
        operand_types=[_element_type(value) for value in root.operands],
        default_config=config_fields(default_attr),
        default_config_text=str(default_attr),
        translation_info=str(found.dispatch_func.attributes["translation_info"]),
        bindings=sorted(bindings, key=lambda b: (b.index, b.offset)),
        device_symbol=found.device_symbol,
        constants=constants,
        match_dims=match_sizes,
        native_vector_bytes=found.native_vector_bytes,
        delivery="configuration" if kind == "reduction" else "spec",  # tuning specs match contractions and convolutions only
    )


@dataclass
class _DumpOps:
    """What :func:`describe` reads from a benchmark dump's ops: the first of each kind, every subspan."""

    executable: str | None = None
    variant: str | None = None
    export: str | None = None
    device_symbol: str | None = None
    native_vector_bytes: int = 64  # the widest x86 vectors, when the target does not say
    root: ir.Operation | None = None
    dispatch_func: ir.Operation | None = None
    bench_op: ir.Operation | None = None
    subspans: list[ir.Operation] = field(default_factory=list)


def _dump_ops(module: ir.Module) -> _DumpOps:
    """The executable, variant, export, device global, benchmark function, dispatch function, root op and subspans of a dump."""
    found = _DumpOps()
    for op in walk(module.operation):
        name = op.name
        if name == "hal.executable" and found.executable is None:
            found.executable = ir.StringAttr(op.attributes["sym_name"]).value
        elif name == "hal.executable.variant" and found.variant is None:
            found.variant = ir.StringAttr(op.attributes["sym_name"]).value
            vector_size = re.search(r"native_vector_size = (\d+)", str(op.attributes["target"]))
            found.native_vector_bytes = int(vector_size.group(1)) if vector_size else found.native_vector_bytes
        elif name == "hal.executable.export" and found.export is None:
            found.export = ir.StringAttr(op.attributes["sym_name"]).value
        elif name == "util.global" and found.device_symbol is None and str(ir.TypeAttr(op.attributes["type"]).value) == "!hal.device":
            found.device_symbol = ir.StringAttr(op.attributes["sym_name"]).value
        elif name == "util.func" and "iree.reflection" in op.attributes:
            reflection = ir.DictAttr(op.attributes["iree.reflection"])
            if "iree.benchmark" in reflection:
                found.bench_op = op
        elif name == "func.func" and "translation_info" in op.attributes:
            found.dispatch_func = op
        elif name == "hal.interface.binding.subspan":
            found.subspans.append(op)
        elif found.root is None and is_root(op):
            found.root = op
    return found


def _match_sizes(match_dims: dict[str, list[int]], sizes: list[int]) -> dict[str, list[int]]:
    """The sizes of each group of loops a spec matches on; strides and dilations as they are."""
    match_sizes = {group: [sizes[i] for i in members] for group, members in match_dims.items() if group not in ("strides", "dilations")}
    match_sizes.update({group: match_dims[group] for group in ("strides", "dilations") if group in match_dims})
    return match_sizes


def _binding(op: ir.Operation, constants: list[int], ranges: dict[int, int], export: str) -> Binding:
    """The view a subspan op opens, its offset evaluated with the benchmark's push constants."""
    index = ir.IntegerAttr(op.attributes["binding"]).value
    memref = ir.ShapedType(op.results[0].type)
    if not memref.has_static_shape:
        raise TracelinkError(f"{export}: binding {index} has a dynamic shape; not tunable")
    readonly = bool(ir.IntegerAttr(op.attributes["descriptor_flags"]).value & 1)
    offset = _integer_value(op.operands[0], constants) if len(op.operands) else 0
    if offset is None:
        raise TracelinkError(f"{export}: binding {index}'s offset is computed in a way tracelink cannot evaluate; not tunable")
    return Binding(index, tuple(memref.shape), str(memref.element_type), readonly, offset, ranges.get(index, 0))


def spec_reaches(dispatch: Dispatch, source: Path) -> bool:
    """Whether a tuning spec can configure the root op: the executable source has it in its configured form.

    A spec matches the executable before configuration. IREE then may rewrite the root op: a 2-D
    convolution whose unit batch loop was folded away gets it back (InsertBatchDimForBatchlessConv),
    and the new op does not carry the config the spec annotated, so the compiler fails or ignores it.
    Such a dispatch is configured by substituting its configured executable instead (``delivery``).
    """
    if not Path(source).is_file():
        return True
    module = ir.Module.parseFile(str(source), ir.Context())
    return any([str(item) for item in indexing_maps(op)] == dispatch.indexing_maps for op in walk(module.operation)
               if linalg.isa_contraction_op(op) or linalg.isa_convolution_op(op))
