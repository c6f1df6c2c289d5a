"""Import an ``.onnx`` model into MLIR (torch dialect) with one location per ONNX node.

IREE's ``iree-import-onnx`` command drops locations; its Python API names each op after its node
(``loc("conv1")``). tracelink gives every node a location that says what it is and where it sits:
``loc("onnx.Conv:conv1/7x7_s2"("/models/m.onnx":7:1))`` — the op type and node name, and the node's
position in the graph (1-based, in the model's node order) as the line of the ``.onnx`` file, so the
tables and report list source ops in graph order. The imported module is written as text and
compiled like any other ``.mlir`` input.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import make_directory, write_text_atomic

if TYPE_CHECKING:  # onnx loads only when a model is imported: `tracelink profile` starts the compiler first
    import onnx

# torch-mlir's ONNX conversions start at recent opsets (e.g. no opset-9 Upsample or BatchNormalization
# pattern); older models are upgraded to this one, which every conversion the importer uses covers.
MIN_OPSET = 17
NODE_TOKEN = "tracelink.onnx.node.{}"
NODE_TOKEN_LOC = re.compile(r'loc\("tracelink\.onnx\.node\.(\d+)"\)')


def is_onnx(path: Path) -> bool:
    """Whether ``path`` names an ONNX model (by its suffix)."""
    return Path(path).suffix.lower() == ".onnx"


def mlir_string(text: str) -> str:
    """``text`` as an MLIR string literal: quotes, backslashes and control characters escaped."""
    escaped = "".join(f"\\{ord(c):02X}" if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)
    return f'"{escaped}"'


def load_model(path: Path) -> onnx.ModelProto:
    """The model as written, checked; a broken file is one error naming it."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except (DecodeError, onnx.checker.ValidationError, OSError, ValueError, RuntimeError) as error:
        raise TracelinkError(f"{path}: not a valid ONNX model ({first_line(error)})") from None
    return model


def upgraded(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """The model upgraded to :data:`MIN_OPSET` when older, with inferred shapes (the importer needs them)."""
    import onnx

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), MIN_OPSET)
    try:
        if opset < MIN_OPSET:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except (onnx.version_converter.ConvertError, onnx.shape_inference.InferenceError, RuntimeError, ValueError) as error:
        raise TracelinkError(f"{path}: cannot upgrade to opset {MIN_OPSET} or infer shapes ({first_line(error)})") from None


def drop_initializer_inputs(model: onnx.ModelProto) -> None:
    """Remove graph inputs that are initializers (old exporters list every weight as an input)."""
    weights = {tensor.name for tensor in model.graph.initializer}
    real = [value for value in model.graph.input if value.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(real)


def import_onnx(path: Path, output: Path) -> Path:
    """Import the model at ``path`` into ``output`` (MLIR text with node locations) and return ``output``."""
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer

    path = Path(path).resolve()
    model = load_model(path)
    # The importer names each op's location after its node: a unique token per node of the file (the
    # opset upgrade keeps node names), replaced below by the full location, as the bindings cannot set
    # an op's location after creation. Nodes the upgrade adds keep their own (bare) names.
    locations = [
        f'loc({mlir_string(f"onnx.{node.op_type}:{node.name or node.output[0]}")}({mlir_string(str(path))}:{index + 1}:1))'
        for index, node in enumerate(model.graph.node)
    ]
    for index, node in enumerate(model.graph.node):
        node.name = NODE_TOKEN.format(index)
    model = upgraded(model, path)
    drop_initializer_inputs(model)  # after the upgrade: IR version 3 requires initializers to be inputs
    try:
        with ir.Context() as context:
            info = onnx_importer.ModelInfo(model)
            module = info.create_module(context=context).operation
            onnx_importer.NodeImporter.define_function(info.main_graph, module).import_all()
            module.verify()
            text = module.get_asm(enable_debug_info=True)
    except (ir.MLIRError, onnx_importer.OnnxImportError, ValueError, KeyError) as error:
        raise TracelinkError(f"{path}: the ONNX importer failed ({first_line(error)})") from None
    make_directory(output.parent, inside=output.parent.parent)
    return write_text_atomic(output, NODE_TOKEN_LOC.sub(lambda match: locations[int(match.group(1))], text))
