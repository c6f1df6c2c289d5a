"""Whole-program rewrites of a strategy (``Option.rewrites`` of :mod:`tracelink.tune.strategy_space`):
ops IREE 3.13 lowers poorly, rewritten at IREE's input level into ops it lowers well, with the MLIR
Python bindings and the machinery of the per-op compositions (:func:`tracelink.tune.compose.compose`).

**conv1d-as-conv2d**: every 1-D convolution (``linalg.conv_1d_ncw_fcw`` and the NWC and depthwise forms)
becomes the 2-D op on a height-1 view: ``tensor.expand_shape`` of its input, filter and init, the 2-D
op with strides and dilations ``[1, s]``, ``tensor.collapse_shape`` of its result. IREE's im2col
pass and data tiling convert 2-D convolutions only, so a 1-D convolution is otherwise lowered as a
direct convolution loop nest (measured in docs/reference/tuning.md). Every op made carries the 1-D op's
location, so the profile of the rewritten program keeps the user's lines. A grouped 1-D convolution
of PyTorch reaches IREE's input level as a 2-D op already (``linalg.conv_2d_ngchw_gfchw`` on a width-1
view), so it is not among these.

**patches-as-matmul**: a patch embedding (an NCHW 2-D convolution whose strides equal its kernel and
whose windows tile the input, as a ViT's) becomes the matmul it is: the input reshaped and transposed
into one row per patch (N·Ho·Wo × C·Kh·Kw), times the flattened, transposed filter, the result
transposed back to NCHW, so data tiling and ukernels take it as any matmul.

**grouped-conv-as-matmul**: a grouped 2-D convolution (``linalg.conv_2d_ngchw_gfchw`` or ``_fgchw``: what
PyTorch's ``groups > 1`` convolutions, 1-D ones on a width-1 view included, reach IREE's input level as)
becomes a batch matmul, one batch per group: the group's flattened filter (G × F × C·Kh·Kw) times its
windows copied out (a ``linalg.generic`` reading the input at ``ho·s + kh·d``, one column per output
position: G × C·Kh·Kw × N·Ho·Wo), the result moved back to NGFHW (the image dimension to the front). The
output positions are innermost, as in IREE's own im2col: data tiling packs the windows 16 positions to a
tile, and the copy then reads and writes runs of positions (with one row per position, its window copy
took 1.8x as long: docs/reference/tuning.md). IREE's im2col pass and conv data tiling leave grouped
convolutions to a direct loop nest, as they do 1-D ones.

**attention-as-matmuls**: an attention op (``iree_linalg_ext.attention`` with one batch dimension, its
score region the identity) becomes what it computes, unfused: the scores as a batch matmul of the
queries and the transposed keys, scaled and masked by a ``linalg.generic`` (a boolean mask's false
positions at -inf, a float mask added), a ``linalg.softmax`` over the keys, and a batch matmul of the
probabilities and the values. Data tiling then packs both matmuls as any batch matmul, where IREE's
attention dispatch, or its online form decomposed (``decompose-attention``), computes the scores a tile
of keys at a time with running maxima and sums. The scores are held whole (batch × queries × keys), which
for a ViT's or an encoder's few hundred tokens is a few hundred KiB.

**materialized-conv-inputs**: a convolution whose input is computed (not an argument or a constant, seen
through reshapes) reads it through an ``iree_tensor_ext.compute_barrier.start``, so IREE's dispatch
creation does not fuse the input's producers into the convolution's dispatches. That barrier lives only
until the dispatches are formed. A ``util.optimization_barrier`` keeps them apart too, but it lives on to
the stream level, where it ends an execution region: the call was submitted in one piece per barrier,
the host waiting for each (on the audio encoder, 7 submissions and about 10 ms per call with no dispatch
running). With im2col and data tiling, IREE fuses an elementwise producer (Wav2Vec2's layer norm and
GELU) into the copy that gathers the windows and packs them into the matmul's tiles: the producer is
computed again for each window an element falls in, inside a copy that writes tile by tile
(``map_store``), and that dispatch ran at about 2 GFLOP/s. Kept apart,
the producer is computed once where it is (its own elementwise or reduction dispatch) and the window copy
is a copy (docs/reference/tuning.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from tracelink.errors import TracelinkError
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.provenance.build import phase_dump
from tracelink.tune.compose import Composition, Rewrite, compose, input_program
from tracelink.tune.strategy_space import directory_name


@dataclass(frozen=True)
class Form:
    """How one 1-D convolution op becomes its 2-D op: the 2-D op's builder and where the unit height
    goes in the input, the filter and the output (the position of the new dimension)."""

    build: Callable[..., ir.Value]
    unit: tuple[int, int, int]


FORMS: dict[str, Form] = {
    "linalg.conv_1d_ncw_fcw": Form(linalg.conv_2d_nchw_fchw, (2, 2, 2)),
    "linalg.conv_1d_nwc_wcf": Form(linalg.conv_2d_nhwc_hwcf, (1, 0, 1)),
    "linalg.depthwise_conv_1d_ncw_cw": Form(linalg.depthwise_conv_2d_nchw_chw, (2, 1, 2)),
    "linalg.depthwise_conv_1d_nwc_wc": Form(linalg.depthwise_conv_2d_nhwc_hwc, (1, 0, 1)),
    "linalg.depthwise_conv_1d_nwc_wcm": Form(linalg.depthwise_conv_2d_nhwc_hwcm, (1, 0, 1)),
}


def is_conv1d(op: ir.Operation) -> bool:
    """A 1-D convolution this rewrite turns 2-D."""
    return op.name in FORMS


def regrouped(value: ir.Value, shape: list[int], groups: list[list[int]]) -> ir.Value:
    """``value`` (a static tensor) reshaped to ``shape`` by a ``tensor.expand_shape`` (more dimensions) or
    a ``tensor.collapse_shape`` (fewer); ``groups``: the larger rank's dimensions of each of the smaller's."""
    source = ir.RankedTensorType(value.type)
    result = ir.RankedTensorType.get(shape, source.element_type)
    if len(shape) > source.rank:
        return tensor.expand_shape(result, value, groups, [], shape)
    return tensor.collapse_shape(result, value, groups)


def unit_groups(rank: int, position: int) -> list[list[int]]:
    """The groups of a unit dimension inserted at ``position`` into ``rank`` dimensions: grouped with the
    dimension it precedes."""
    groups = [[i] if i < position else [i + 1] for i in range(rank)]
    groups[position] = [position, position + 1]
    return groups


def with_unit(value: ir.Value, position: int) -> ir.Value:
    """``value`` with a unit dimension inserted at ``position``."""
    shape = list(ir.RankedTensorType(value.type).shape)
    return regrouped(value, [*shape[:position], 1, *shape[position:]], unit_groups(len(shape), position))


def without_unit(value: ir.Value, position: int) -> ir.Value:
    """The inverse of :func:`with_unit`: the unit dimension at ``position`` collapsed away."""
    shape = list(ir.RankedTensorType(value.type).shape)
    collapsed = [*shape[:position], *shape[position + 1:]]
    return regrouped(value, collapsed, unit_groups(len(collapsed), position))


def transposed(value: ir.Value, permutation: list[int]) -> ir.Value:
    """``value`` with its dimensions permuted (``linalg.transpose`` into a ``tensor.empty``)."""
    source = ir.RankedTensorType(value.type)
    init = tensor.empty([source.shape[i] for i in permutation], source.element_type)
    return linalg.transpose(value, outs=[init], permutation=permutation).results[0]


def ints(op: ir.Operation, name: str) -> list[int]:
    return [int(v) for v in ir.DenseIntElementsAttr(op.attributes[name])]


def as_conv2d(op: ir.Operation) -> bool:
    """Replace the 1-D convolution ``op`` by its 2-D op on height-1 views (its location on every op
    made); False (left alone) when a shape is dynamic."""
    form = FORMS[op.name]
    operands = list(op.operands)
    if len(operands) != 3 or not all(ir.RankedTensorType(v.type).has_static_shape for v in operands):
        return False
    strides, dilations = ints(op, "strides"), ints(op, "dilations")
    with op.location, ir.InsertionPoint(op):
        source, filters, init = (with_unit(value, at) for value, at in zip(operands, form.unit))
        made = form.build(source, filters, outs=[init], strides=[1, *strides], dilations=[1, *dilations])
        op.results[0].replace_all_uses_with(without_unit(made, form.unit[2]))
    op.erase()
    return True


def is_patch_embedding(op: ir.Operation) -> bool:
    """An NCHW 2-D convolution whose windows tile its input exactly (strides equal to the kernel, no
    dilation, the input a whole number of windows): a ViT's patch embedding. A 1×1 kernel is not a patch:
    pointwise convolutions are left to the layout options, which take them everywhere in a convnet."""
    if op.name != "linalg.conv_2d_nchw_fchw" or len(op.operands) != 3:
        return False
    source, filters = (ir.RankedTensorType(value.type) for value in list(op.operands)[:2])
    if not (source.has_static_shape and filters.has_static_shape):
        return False
    kernel = list(filters.shape[2:])
    return (ints(op, "strides") == kernel != [1, 1] and ints(op, "dilations") == [1, 1]
            and all(size % k == 0 for size, k in zip(source.shape[2:], kernel)))


def patches_as_matmul(op: ir.Operation) -> bool:
    """Replace the patch embedding ``op`` by a matmul of its patches (N·Ho·Wo × C·Kh·Kw, a reshape and a
    transpose of its input) with its flattened filter, transposed back to NCHW (every op made at its
    location)."""
    source, filters, init = op.operands
    n, c, h, w = ir.RankedTensorType(source.type).shape
    f, _, kh, kw = ir.RankedTensorType(filters.type).shape
    ho, wo = h // kh, w // kw
    with op.location, ir.InsertionPoint(op):
        windows = transposed(regrouped(source, [n, c, ho, kh, wo, kw], [[0], [1], [2, 3], [4, 5]]), [0, 2, 4, 1, 3, 5])
        patches = regrouped(windows, [n * ho * wo, c * kh * kw], [[0, 1, 2], [3, 4, 5]])
        weights = transposed(regrouped(filters, [f, c * kh * kw], [[0], [1, 2, 3]]), [1, 0])
        rows = regrouped(transposed(init, [0, 2, 3, 1]), [n * ho * wo, f], [[0, 1, 2], [3]])
        product = linalg.matmul(patches, weights, outs=[rows])
        result = transposed(regrouped(product, [n, ho, wo, f], [[0, 1, 2], [3]]), [0, 3, 1, 2])
        op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


# a grouped convolution's filter layout: the permutation that makes it G × F × C × Kh × Kw
GROUPED_FILTERS = {"linalg.conv_2d_ngchw_gfchw": [0, 1, 2, 3, 4], "linalg.conv_2d_ngchw_fgchw": [1, 0, 2, 3, 4]}


def is_grouped_convolution(op: ir.Operation) -> bool:
    """A grouped 2-D convolution with static shapes."""
    return (op.name in GROUPED_FILTERS and len(op.operands) == 3
            and all(ir.RankedTensorType(value.type).has_static_shape for value in op.operands))


def grouped_as_batch_matmul(op: ir.Operation) -> bool:
    """Replace the grouped convolution ``op`` by a batch matmul over its groups of its filter and its
    windows (copied out by a ``linalg.generic``, output positions innermost; every op made at its location)."""
    source, filters, init = op.operands
    n, g, c, _, _ = ir.RankedTensorType(source.type).shape
    _, _, f, ho, wo = ir.RankedTensorType(init.type).shape
    (sh, sw), (dh, dw) = ints(op, "strides"), ints(op, "dilations")
    with op.location, ir.InsertionPoint(op):
        grouped_filters = transposed(filters, GROUPED_FILTERS[op.name]) if op.name != "linalg.conv_2d_ngchw_gfchw" else filters
        kh, kw = ir.RankedTensorType(grouped_filters.type).shape[3:]
        d = [ir.AffineExpr.get_dim(i) for i in range(7)]  # g, c, kh, kw, n, ho, wo
        window_of = ir.AffineMap.get(7, 0, [d[4], d[0], d[1], d[5] * sh + d[2] * dh, d[6] * sw + d[3] * dw])
        empty = tensor.empty([g, c, kh, kw, n, ho, wo], ir.RankedTensorType(source.type).element_type)

        @linalg.generic([source], [empty], [window_of, ir.AffineMap.get_identity(7)], [linalg.IteratorType.parallel] * 7)
        def windows(value: ir.Value, _: ir.Value) -> ir.Value:
            return value

        columns = regrouped(windows, [g, c * kh * kw, n * ho * wo], [[0], [1, 2, 3], [4, 5, 6]])
        weights = regrouped(grouped_filters, [g, f, c * kh * kw], [[0], [1], [2, 3, 4]])
        outputs = regrouped(transposed(init, [1, 2, 0, 3, 4]), [g, f, n * ho * wo], [[0], [1], [2, 3, 4]])
        product = linalg.batch_matmul(weights, columns, outs=[outputs])
        result = transposed(regrouped(product, [g, f, n, ho, wo], [[0], [1], [2, 3, 4]]), [2, 0, 1, 3, 4])
        op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


def is_plain_attention(op: ir.Operation) -> bool:
    """An attention op in the one form :func:`attention_as_matmuls` rewrites: queries (b, m, k1), keys (b, n, k1),
    values (b, n, k2), a scalar scale, an optional mask (b, m, n), the output (b, m, k2), static shapes, and a
    region that yields the score as it is."""
    if op.name != "iree_linalg_ext.attention" or len(op.operands) not in (5, 6) or len(op.results) != 1:
        return False
    maps = [[dim.position if isinstance(dim := expr.maybe_downcast(), ir.AffineDimExpr) else -1
             for expr in ir.AffineMapAttr(attribute).value.results] for attribute in op.attributes["indexing_maps"]]
    if any(-1 in positions for positions in maps) or any(len(positions) != 3 for positions in maps[:3]):
        return False
    (b, m, k1), (_, n, _), (_, _, k2) = maps[:3]
    expected = [[b, m, k1], [b, n, k1], [b, n, k2], [], *([[b, m, n]] if len(maps) == 6 else []), [b, m, k2]]
    body = op.regions[0].blocks[0]
    yields_score = len(body.operations) == 1 and list(body.operations[0].operands) == [body.arguments[0]]
    static = all(ir.RankedTensorType(value.type).has_static_shape for value in op.operands if isinstance(value.type, ir.RankedTensorType))
    return maps == expected and len({b, m, n, k1, k2}) == 5 and yields_score and static


def zeros(shape: list[int], element: ir.Type) -> ir.Value:
    """A zero-filled tensor: the accumulator of a matmul made here."""
    return linalg.fill(arith.constant(element, 0.0), outs=[tensor.empty(shape, element)])


def attention_as_matmuls(op: ir.Operation) -> bool:
    """Replace the attention ``op`` by a batch matmul of its queries and transposed keys, a scale-and-mask
    ``linalg.generic``, a ``linalg.softmax`` over the keys and a batch matmul with its values (every op made at
    its location)."""
    query, key, value, scale, *rest = op.operands
    mask = rest[0] if len(rest) == 2 else None
    batch, queries, _ = ir.RankedTensorType(query.type).shape
    keys, value_head = ir.RankedTensorType(value.type).shape[1:]
    element = ir.RankedTensorType(op.results[0].type).element_type
    identity = ir.AffineMap.get_identity(3)
    with op.location, ir.InsertionPoint(op):
        scores = linalg.batch_matmul(query, transposed(key, [0, 2, 1]), outs=[zeros([batch, queries, keys], element)])
        masked = [scores, mask] if mask is not None else [scores]

        @linalg.generic(masked, [tensor.empty([batch, queries, keys], element)], [identity] * (len(masked) + 1),
                        [linalg.IteratorType.parallel] * 3)
        def scaled(score: ir.Value, *more: ir.Value) -> ir.Value:
            result = arith.mulf(score, scale)
            if mask is None:
                return result
            if isinstance(more[0].type, ir.IntegerType):
                return arith.select(more[0], result, arith.constant(element, float("-inf")))
            return arith.addf(result, more[0])

        probabilities = linalg.softmax([scores.type], scaled, tensor.empty([batch, queries, keys], element), 2)
        result = linalg.batch_matmul(probabilities, value, outs=[zeros([batch, queries, value_head], element)])
        op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


SHAPE_ONLY = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.cast", "tensor.pad")
BARRIER = "iree_tensor_ext.compute_barrier.start"  # removed by IREE once dispatches are formed


COMPUTING = ("linalg.", "iree_linalg_ext.")  # the ops dispatch creation fuses; an import, a global, a barrier are not


def has_computed_input(op: ir.Operation) -> bool:
    """A named convolution whose input, followed up through reshapes and padding, is computed by a
    structured op (not the program's input, a weight, or behind a barrier already)."""
    if not op.name.startswith(("linalg.conv_", "linalg.depthwise_conv_")) or not op.operands:
        return False
    producer = producer_of(op.operands[0])
    while producer is not None and producer.name in SHAPE_ONLY:
        producer = producer_of(producer.operands[0])
    return producer is not None and producer.name.startswith(COMPUTING)


def producer_of(value: ir.Value) -> ir.Operation | None:
    """The op that defines ``value``; None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def materialized_input(op: ir.Operation) -> bool:
    """Make the convolution ``op`` read its input through a compute barrier (at its location)."""
    value = op.operands[0]
    shape = ir.RankedTensorType(value.type).shape
    with op.location, ir.InsertionPoint(op):
        sizes = [tensor.dim(value, arith.constant(ir.IndexType.get(), i)) for i, size in enumerate(shape)
                 if ir.ShapedType.is_dynamic_size(size)]  # the barrier carries its dynamic sizes
        barrier = ir.Operation.create(BARRIER, results=[value.type], operands=[value, *sizes])
    op.operands[0] = barrier.result
    return True


CONV1D_AS_CONV2D = Rewrite("conv1d-as-conv2d", as_conv2d, is_conv1d)
PATCHES_AS_MATMUL = Rewrite("patches-as-matmul", patches_as_matmul, is_patch_embedding)
GROUPED_CONV_AS_MATMUL = Rewrite("grouped-conv-as-matmul", grouped_as_batch_matmul, is_grouped_convolution)
ATTENTION_AS_MATMULS = Rewrite("attention-as-matmuls", attention_as_matmuls, is_plain_attention)
MATERIALIZED_CONV_INPUTS = Rewrite("materialized-conv-inputs", materialized_input, has_computed_input)
# the rewrites a strategy's Option names
PROGRAM_REWRITES: dict[str, Rewrite] = {rewrite.name: rewrite for rewrite in (CONV1D_AS_CONV2D, PATCHES_AS_MATMUL, GROUPED_CONV_AS_MATMUL,
                                                                                          ATTENTION_AS_MATMULS, MATERIALIZED_CONV_INPUTS)}


def rewrite_program(source: Path, names: tuple[str, ...], output: Path, inside: Path) -> list[Composition]:
    """The input-level program ``source`` with the rewrites ``names`` applied to every op of their kind,
    one after another, into ``output``; what each rewrote. No link below ``inside`` is followed."""
    done: list[Composition] = []
    for name in names:
        done.append(compose(done[-1].program if done else source, output, lambda op: True, PROGRAM_REWRITES[name], inside))
    return done


def rewrites_found(phases: Path) -> set[str]:
    """The names of the rewrites with an op to rewrite in a profiled build's input-level program (its
    ``input`` phase dump under ``phases``; none without one)."""
    try:
        module = parse_file(phase_dump(phases, "input"), new_context())
    except TracelinkError:
        return set()
    ops = list(walk(module.operation))
    return {name for name, rewrite in PROGRAM_REWRITES.items() if any(rewrite.applies(op) for op in ops)}


def rewritten_program(program: Path, flags: list[str], names: tuple[str, ...], workdir: Path, timeout: float,
                      inside: Path) -> Path:
    """``program`` (compiled with ``flags``) lowered to IREE's input level and rewritten by ``names``:
    ``workdir/<names>/program.mlir``, what a strategy with those rewrites compiles and hands over."""
    source = input_program(program, flags, workdir / "input", timeout)
    output = workdir / directory_name("+".join(names)) / "program.mlir"
    rewrite_program(source, names, output, inside)
    return output
