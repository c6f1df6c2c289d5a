"""A torch model's weights as an IREE parameter archive (``.irpa``) that the exported program refers to.

Embedded in the program, weights are MLIR text: two hex characters a byte in ``exported.mlir``, held
again by the compiler's context and copied into ``app.vmfb`` (a 110 M-parameter BERT wrote 871 MB of
MLIR and a 1.1 B-parameter decoder ran out of 24 GB before writing anything). Here each floating-point
parameter and buffer becomes a global initialised from a named parameter, as IREE's own torch tooling
(iree-turbine) writes them::

    util.global private @fc.weight = #stream.parameter.named<"model"::"fc.weight"> : tensor<4x8xf32>
    %w = util.global.load @fc.weight : tensor<4x8xf32>
    %0 = torch_c.from_builtin_tensor %w : tensor<4x8xf32> -> !torch.vtensor<[4,8],f32>

and its bytes go into the archive once, written from the tensors' own memory. The run passes
``--parameters=model=<archive>``. Integer and boolean buffers (position ids, masks) are small and stay
in the program, where the compiler folds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracelink.atomic import write_atomic

if TYPE_CHECKING:
    import torch

SCOPE = "model"  # the parameter scope the program names: --parameters=model=<archive>


class ParameterArchive:
    """The archive of a model's parameters, filled by the importer hooks of :meth:`hooks` while the
    program is imported, then written by :meth:`write`."""

    def __init__(self) -> None:
        import iree.runtime as rt

        self.index = rt.ParameterIndex()
        self.tensors: list[torch.Tensor] = []  # the archive reads their memory when it is written
        self.globals: dict[str, torch.Tensor] = {}  # each global's name → the weight it holds
        self.bytes = 0

    def hooks(self) -> Any:
        """The ``FxImporterHooks`` whose ``resolve_input`` loads each float parameter from the archive."""
        from iree.compiler.extras import fx_importer

        archive = self

        class Hooks(fx_importer.FxImporterHooks):
            def prepare_module(self, module_op: Any) -> None:
                self.module_op = module_op

            def resolve_input(self, gni: Any, value: Any, info: Any) -> Any:
                return archive.load(gni, self.module_op, value, info)

        return Hooks()

    def load(self, gni: Any, module_op: Any, value: Any, info: Any) -> Any:
        """The IR value of parameter ``value``: a load of its global, added with its bytes; None keeps the default."""
        import torch
        from iree.compiler import ir

        if info.mutable_producer_node_name is not None or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return None
        name = self.global_name(str(info.input_spec.target), value)
        tensor_type = ir.RankedTensorType.get(list(value.shape), gni._cc.dtype_to_type(value.dtype))
        if name not in self.globals:
            self.add(name, value, module_op, tensor_type)
        loaded = ir.Operation.create("util.global.load", results=[tensor_type], attributes={"global": ir.FlatSymbolRefAttr.get(name)})
        return ir.Operation.create("torch_c.from_builtin_tensor", results=[gni._cc.tensor_to_vtensor_type(value)], operands=[loaded.result]).result

    def global_name(self, name: str, value: torch.Tensor) -> str:
        """The global holding ``value``: ``name``, shared by the entry points of one program that use the same
        weight; another weight of the same name (a second model's) gets a numbered name."""
        candidate, number = name, 1
        while candidate in self.globals and not same_tensor(self.globals[candidate], value):
            number += 1
            candidate = f"{name}__{number}"
        return candidate

    def add(self, name: str, value: torch.Tensor, module_op: Any, tensor_type: Any) -> None:
        """Declare global ``name`` loaded from the archive, and add ``value``'s bytes to the archive."""
        import torch
        from iree.compiler import ir

        self.globals[name] = value
        with ir.InsertionPoint.at_block_begin(module_op.regions[0].blocks[0]):
            ir.Operation.create("util.global", attributes={
                "sym_name": ir.StringAttr.get(name),
                "sym_visibility": ir.StringAttr.get("private"),
                "type": ir.TypeAttr.get(tensor_type),
                "initial_value": ir.Attribute.parse(f'#stream.parameter.named<"{SCOPE}"::"{name}"> : {tensor_type}'),
            })
        data = value.detach().contiguous()
        self.tensors.append(data)
        # as one dimension: a 0-d tensor (a scalar constant the export lifted) has no byte view of its own
        self.index.add_buffer(name, data.reshape(-1).view(torch.uint8).numpy())
        self.bytes += data.numel() * data.element_size()

    def write(self, path: Path) -> Path | None:
        """Write the archive to ``path`` (atomically); None when the model has no float parameter."""
        if not self.tensors:
            return None
        write_atomic(path, lambda temporary: self.index.create_archive_file(str(temporary)))
        self.tensors.clear()
        self.globals.clear()
        return path


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are one weight: the same memory, shape, strides and type."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
