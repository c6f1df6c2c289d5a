"""Where an op's decomposition comes from: torch's own tables first, then the few tracelink carries.

torch's tables are tried in turn: its global table (``torch._decomp``, the one ``torch.export`` and
torch-mlir use), then inductor's (``torch._inductor.decomposition``, which has ops the first leaves:
``aten.empty_permuted`` as ``empty`` and ``permute``). For the ops no torch table decomposes and that
IREE cannot lower, tracelink carries its own decompositions, written with plain torch ops (the functions
below, each checked against torch's eager op in ``tests/test_decompositions.py``):

- ``aten.histc``: the token count per expert of every mixture-of-experts router on ``transformers``'
  grouped-matmul path (``integrations/moe.py``);
- ``aten.cummax``, ``aten.cummin``: a running maximum or minimum (Grounding DINO's special-token spans);
- ``transformers.grouped_mm_fallback``: ``transformers``' own custom op for those routers' expert
  matmuls, opaque to export, whose Python kernel loops over data-dependent offsets;
- ``aten.avg_pool2d``: IREE converts it with a divisor of the wrong shape in ceil mode, or when the
  windows do not tile the input (Funnel's pooling, PP-OCR's head), which its verifier finds in global
  optimization;
- ``aten.topk`` unsorted (DeepSeek-style routers' ``sorted=False``), which IREE does not lower: as the sorted one.

Each is used only for an op that failed (or that ``--decompose`` names), never as a whole table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def torch_op(name: str) -> Any:
    """The op ``name`` names: an ATen packet (``squeeze``) or overload (``squeeze.dims``), else an op of another
    namespace (``transformers.grouped_mm_fallback``, one registered by a library the model imported) or its
    overload; None when there is none."""
    import torch

    namespace, dot, rest = name.partition(".")
    return op_in(torch.ops.aten, name) or (op_in(getattr(torch.ops, namespace), rest) if dot and namespace.isidentifier() else None)


def op_in(namespace: Any, name: str) -> Any:
    """The op packet ``name`` (or its overload ``packet.overload``) of an op namespace (``torch.ops.aten``), else None."""
    import torch

    packet_name, dot, overload = name.partition(".")
    packet = getattr(namespace, packet_name, None) if packet_name.isidentifier() else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None
    if not dot:
        return packet
    return getattr(packet, overload) if overload in packet.overloads() else None


def decompositions(op: Any) -> dict[Any, Callable]:
    """The decomposition of each overload of ``op`` (a packet or one overload), from the first table that has any:
    ``torch._decomp``, inductor's, then tracelink's own (:data:`OWN`); {} when none has one."""
    from torch._decomp import get_decompositions

    found = get_decompositions([op])
    if found:
        return found
    from torch._inductor.decomposition import decompositions as inductor  # imported only for an op torch._decomp leaves

    found = {overload: function for overload, function in inductor.items() if overload in overloads(op)}
    if found:
        return found
    return {overload: function for overload, function in own_table().items() if overload in overloads(op)}


def overloads(op: Any) -> set[Any]:
    """The overloads ``op`` stands for: itself, or each overload of a packet."""
    import torch

    if isinstance(op, torch._ops.OpOverloadPacket):
        return {getattr(op, name) for name in op.overloads()}
    return {op}


def decomposition_name(name: str, kept: tuple[str, ...]) -> str | None:
    """How ``--decompose`` names the op a program names ``name`` (``aten.squeeze.dims`` → ``squeeze.dims``,
    ``aten.histc`` → ``histc``, ``transformers.grouped_mm_fallback`` as it is) when a table above decomposes it
    and it is not one of ``kept``; else None."""
    short = name.removeprefix("aten.")
    op = torch_op(short)
    if op is None or short.split(".")[0] in kept:
        return None
    default = getattr(op, "default", None)
    if default is not None:  # a name without its overload: the program's op is the default one
        op = default
    return short if decompositions(op) else None


def own_table() -> dict[Any, Callable]:
    """tracelink's own decompositions (:data:`OWN`), keyed by the overloads registered now (a library's custom op
    only once the library has registered it)."""
    table = {}
    for name, function in OWN.items():
        op = torch_op(name)
        if op is not None:
            table[op] = function
    return table


def histc(input: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    """``torch.histc`` with plain ops: each value's bin by linear interpolation between the edges, as torch's CPU
    kernel computes it; a value equal to the upper edge counts in the last bin, one outside the edges (or NaN) in
    none; ``min == max`` takes the values' own extremes, and extremes that are equal widen by one either side."""
    import torch

    values = input.flatten()
    low, high = histc_edges(values, min, max)
    inside = (values >= low) & (values <= high)
    # (value - low) * bins / (high - low), in the input's type as torch's kernel has it; the upper edge is the last bin's
    position = ((values - low) * bins / (high - low)).to(torch.int64).clamp(0, bins - 1)
    hits = (position.unsqueeze(1) == torch.arange(bins, device=input.device)) & inside.unsqueeze(1)
    return hits.sum(0).to(input.dtype)


def histc_edges(values: torch.Tensor, low: float, high: float) -> tuple[Any, Any]:
    """The outer edges ``torch.histc`` bins between: ``low`` and ``high``, or the values' extremes when they are
    equal (as tensors, since they depend on the data), widened by one either side when those are equal too."""
    import torch

    if low != high:
        return low, high
    if values.numel() == 0:
        return low - 1, high + 1
    smallest, largest = values.min(), values.max()
    same = smallest == largest
    return torch.where(same, smallest - 1, smallest), torch.where(same, largest + 1, largest)


def cummax(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.cummax`` with plain ops (see :func:`running_extreme`)."""
    return running_extreme(input, dim, largest=True)


def cummin(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.cummin`` with plain ops (see :func:`running_extreme`)."""
    return running_extreme(input, dim, largest=False)


def running_extreme(input: torch.Tensor, dim: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The running maximum (``largest``) or minimum along ``dim`` and its index, as ``torch.cummax`` and
    ``torch.cummin`` give them: of equal values the last index, and a NaN, once met, stays (at the last NaN's index).

    Each position reduces over the positions up to it (a lower-triangular mask), which is quadratic in the
    dimension's length: the dimensions these ops run along in models are short (a sequence of tokens)."""
    import torch

    if input.dtype == torch.bool:  # no neutral value of its own: as bytes
        extreme, last = running_extreme(input.to(torch.uint8), dim, largest)
        return extreme.to(torch.bool), last
    if input.dim() == 0:
        return input.clone(), torch.zeros((), dtype=torch.int64, device=input.device)
    values = input.movedim(dim, -1).unsqueeze(-2)  # [..., 1, j]
    index = torch.arange(values.shape[-1], device=input.device)
    earlier = index.unsqueeze(0) <= index.unsqueeze(1)  # [i, j]: position j is at or before i
    candidates = torch.where(earlier, values, neutral_value(input.dtype, largest))
    extreme = candidates.amax(-1) if largest else candidates.amin(-1)  # a NaN propagates
    # (no squeeze: IREE cannot lower aten.squeeze.dims, which would take another round of decomposing)
    same = values == extreme.unsqueeze(-1)
    if input.dtype.is_floating_point:  # a NaN equals nothing, but is where a NaN extreme came from
        same = same | (values.isnan() & extreme.isnan().unsqueeze(-1))
    last = torch.where(earlier & same, index, -1).amax(-1)
    return extreme.movedim(-1, dim), last.movedim(-1, dim)


def neutral_value(dtype: torch.dtype, largest: bool) -> float | int:
    """The value no running maximum (``largest``) or minimum of ``dtype`` can be beyond."""
    import torch

    if dtype.is_floating_point:
        return -float("inf") if largest else float("inf")
    info = torch.iinfo(dtype)
    return info.min if largest else info.max


def grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``transformers.grouped_mm_fallback`` with plain ops: row ``s`` of ``input`` times the weight of its group
    (rows ``offs[g-1]`` up to ``offs[g]`` are group ``g``); rows past the last offset stay zero, as the kernel
    leaves them. Each row gathers its group's weight, as ``transformers``' own batched-matmul experts do."""
    import torch

    groups = weight.shape[0]
    rows = torch.arange(input.shape[0], device=input.device)
    group = (offs.to(torch.int64).unsqueeze(0) <= rows.unsqueeze(1)).sum(1)  # how many groups end at or before the row
    product = torch.bmm(input.unsqueeze(1), weight[group.clamp(max=groups - 1)]).flatten(1)  # not squeeze: see running_extreme
    return torch.where((group < groups).unsqueeze(1), product, torch.zeros_like(product))


def avg_pool2d(input: torch.Tensor, kernel_size: list[int], stride: list[int] = (), padding: list[int] = (0,), ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> torch.Tensor:
    """``torch.nn.functional.avg_pool2d`` with plain ops: each window's sum as a convolution of each plane with a
    kernel of ones, divided as torch's kernel divides it (the window within the padding when ``count_include_pad``,
    within the input otherwise, or ``divisor_override``); ceil mode's last, partial windows read zeros past the edge."""
    import torch

    kernel, step, pad = pair(kernel_size), pair(stride or kernel_size), pair(padding)
    *batch, height, width = input.shape
    sizes = [pooled_size(size, kernel[i], step[i], pad[i], ceil_mode) for i, size in enumerate((height, width))]
    beyond = [max(0, (sizes[i] - 1) * step[i] + kernel[i] - size - 2 * pad[i]) for i, size in enumerate((height, width))]
    ones = torch.ones(1, 1, *kernel, dtype=input.dtype, device=input.device)
    # the rows and columns the windows cover, no more: IREE 3.13 also fails a convolution whose windows leave some out
    covered = [(sizes[i] - 1) * step[i] + kernel[i] for i in range(2)]

    def window_sums(planes: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(planes[..., :covered[0], :covered[1]], ones, stride=step)

    sums = window_sums(torch.nn.functional.pad(input.reshape(-1, 1, height, width), (pad[1], pad[1] + beyond[1], pad[0], pad[0] + beyond[0])))
    if divisor_override:
        counted: Any = divisor_override
    else:
        inside = torch.ones(1, 1, height, width, dtype=input.dtype, device=input.device)
        if count_include_pad:
            inside = torch.nn.functional.pad(inside, (pad[1], pad[1], pad[0], pad[0]), value=1.0)
            margins = (0, beyond[1], 0, beyond[0])
        else:
            margins = (pad[1], pad[1] + beyond[1], pad[0], pad[0] + beyond[0])
        counted = window_sums(torch.nn.functional.pad(inside, margins))
    return (sums / counted).reshape(*batch, *sizes)


def pair(value: Any) -> tuple[int, int]:
    """A pooling parameter as (height, width): one value for both, or two."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return (values[0], values[-1])


def pooled_size(size: int, kernel: int, step: int, pad: int, ceil_mode: bool) -> int:
    """The output length of pooling ``size`` elements, as torch computes it: in ceil mode a last window must start
    inside the input or its left padding."""
    count = (size + 2 * pad - kernel + (step - 1 if ceil_mode else 0)) // step + 1
    if ceil_mode and (count - 1) * step >= size + pad:
        count -= 1
    return count


def topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """``torch.topk`` unsorted as the sorted one, which is one of its valid answers (torch leaves the order unsaid):
    IREE lowers only a sorted top-k. A sorted one is left as it is (``NotImplemented``: export keeps the op)."""
    import torch

    if sorted:
        return NotImplemented
    return torch.ops.aten.topk.default(input, k, dim, largest, True)


# tracelink's own decompositions, by the op's name as --decompose takes it: only ops no torch table decomposes.
OWN: dict[str, Callable] = {
    "histc.default": histc,
    "cummax.default": cummax,
    "cummin.default": cummin,
    "transformers.grouped_mm_fallback.default": grouped_mm,
    "avg_pool2d.default": avg_pool2d,
    "topk.default": topk,
}
