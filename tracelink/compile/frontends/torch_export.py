"""Export a ``torch.nn.Module`` to MLIR (torch dialect) with its Python call stacks and module paths as locations.

``torch.export`` (strict, through TorchDynamo, which records the user's full Python stack of every op,
helper functions included; non-strict when Dynamo cannot capture the module) gives an FX graph whose
nodes carry a ``stack_trace`` and an ``nn_module_stack``. IREE's FX importer
(``iree.compiler.extras.fx_importer``) turns it into MLIR; its location of a node is replaced here by
``loc("encoder/layers.3/attention/linear"(callsite("forward"("model.py":41:15) at ...)))``: the module
path (dots become ``/``, a ModuleList index stays joined to its list: ``layers.3``) and the aten op's
name, wrapping the call stack innermost first. Frames of torch's own export machinery above the
module's ``forward`` are dropped. Weights are embedded in the program as constants.
"""

from __future__ import annotations

import linecache
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracelink import TracelinkError
from tracelink.atomic import write_text_atomic
from tracelink.compile.frontends.extras import require
from tracelink.compile.onnx_import import first_line

if TYPE_CHECKING:
    import torch

# Ops torch-mlir cannot convert, decomposed before import (by name: torch loads only when a model is exported).
DECOMPOSED_OPS = ("_native_batch_norm_legit_no_training", "_native_batch_norm_legit", "_native_batch_norm_legit_functional")
# One frame of a formatted Python traceback: its header, code line and optional caret line under the code.
FRAME = re.compile(r'^ *File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)\n(?P<code> *.*\n?)(?P<carets> *[~^]+ *\n?)?', re.MULTILINE)


def export_torch(module: torch.nn.Module, args: tuple, output: Path, origin: str) -> list[np.ndarray]:
    """Write ``module`` exported at ``args`` to ``output`` (MLIR text with debug info); return its tensor arguments."""
    require("torch")
    import torch
    from iree.compiler import ir
    from iree.compiler.extras import fx_importer

    program = exported_program(module, args, origin)

    class LocatedContextCache(fx_importer.ContextCache):
        def get_node_location(self, node: torch.fx.Node) -> ir.Location | None:
            return node_location(node, self._c, Path(torch.__file__).parent)

    importer = fx_importer.FxImporter(context=ir.Context())
    # The importer asks its context cache for every node's location; swap in the cache that builds ours.
    importer._cc = LocatedContextCache(importer._c, py_attr_tracker=importer._py_attr_tracker)
    try:
        importer.import_program(program, func_name="main")
        importer.module.operation.verify()
    except (ir.MLIRError, NotImplementedError, ValueError, KeyError, RuntimeError) as error:
        # A verifier error's first line is only "Verification failed:"; its diagnostic follows.
        detail = " ".join(str(error).split())[:300]
        raise TracelinkError(f"{origin}: IREE's FX importer failed ({type(error).__name__}: {detail})") from None
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, importer.module.operation.get_asm(enable_debug_info=True))
    leaves = torch.utils._pytree.tree_leaves(args)
    return [leaf.detach().cpu().numpy() for leaf in leaves if isinstance(leaf, torch.Tensor)]


def exported_program(module: torch.nn.Module, args: tuple, origin: str) -> Any:
    """``torch.export`` of ``module``: strict (full Python stacks), else non-strict (stacks of module calls only)."""
    import torch
    from torch._decomp import get_decompositions  # the table torch-mlir's own FX export path uses too

    with warnings.catch_warnings():
        # torch's own deprecations inside export (pytree's LeafSpec, 2.13) say nothing about the user's model.
        warnings.simplefilter("ignore", FutureWarning)
        try:
            program = torch.export.export(module, tuple(args), strict=True)
        except Exception:  # anything Dynamo cannot capture; the non-strict export traces by running the module
            program = None
        try:
            program = program or torch.export.export(module, tuple(args), strict=False)
            # Functional ops only (an in-place `relu_` is not valid on the importer's value tensors), and
            # inference batch norm as arithmetic (IREE has no conversion of it); every other op keeps its name.
            return program.run_decompositions(get_decompositions([getattr(torch.ops.aten, name) for name in DECOMPOSED_OPS]))
        except Exception as error:  # the user's module failed to trace: any exception type
            raise TracelinkError(f"{origin}: torch.export failed ({type(error).__name__}: {first_line(error)})") from None


def node_location(node: torch.fx.Node, context: Any, torch_dir: Path) -> Any:
    """The location of one FX node: its module path and op name around its Python stack.

    A placeholder (an argument or weight) is unknown: the importer gives the function the first
    location it gets, and a function's location is dropped from its ops' stacks, so the first op's own
    location must not be it. Another node without a stack is None: the importer keeps the previous one.
    """
    from iree.compiler import ir

    if node.op == "placeholder":
        return ir.Location.unknown(context=context)
    stack = python_frames(node.meta.get("stack_trace") or "", torch_dir)
    module_stack = node.meta.get("nn_module_stack")
    if not stack and not module_stack:
        return None
    frames = [
        ir.Location.name(function, childLoc=ir.Location.file(file, line, col, context=context), context=context)
        for file, line, col, function in stack
    ]
    if not frames:
        child = ir.Location.unknown(context=context)
    elif len(frames) == 1:
        child = frames[0]
    else:
        child = ir.Location.callsite(frames[0], frames[1:], context=context)
    return ir.Location.name(scoped_name(module_stack, op_name(node)), childLoc=child, context=context)


def python_frames(stack_trace: str, torch_dir: Path) -> list[tuple[str, int, int, str]]:
    """``(file, line, column, function)`` of each frame of a formatted traceback, innermost first.

    The outermost frames inside torch (the export machinery that called the module) are dropped; torch
    frames below the user's code (``torch/nn/modules/conv.py``) stay, as library frames. The column is
    where the caret line under the code points (0-based, like JAX's), else 0.
    """
    frames = []
    for match in FRAME.finditer(stack_trace):
        file, line = match["file"], int(match["line"])
        frames.append((file, line, caret_column(file, line, match["code"], match["carets"]), match["function"].strip()))
    while frames and Path(frames[0][0]).is_relative_to(torch_dir):
        frames.pop(0)
    return frames[::-1]


def caret_column(file: str, line: int, code: str, carets: str | None) -> int:
    """The 0-based column the carets under a traceback's code line point at, else 0.

    The traceback shows the code line dedented (and re-indented by its own prefix): the carets' offset
    into it plus the source line's own indentation is the column in the file.
    """
    if not carets:
        return 0
    source = linecache.getline(file, line)
    offset = (len(carets) - len(carets.lstrip(" "))) - (len(code) - len(code.lstrip(" ")))
    return max(0, offset) + len(source) - len(source.lstrip())


def op_name(node: torch.fx.Node) -> str:
    """The aten op's name without its overload (``aten.conv2d.default`` → ``conv2d``), else the node's name."""
    packet = getattr(node.target, "overloadpacket", None)
    return getattr(packet, "__name__", None) or node.name


def scoped_name(module_stack: dict | None, op: str) -> str:
    """``op`` under the innermost module's path: ``encoder.layers.3.attention`` → ``encoder/layers.3/attention/op``."""
    path = list(module_stack.values())[-1][0] if module_stack else ""
    parts: list[str] = []
    for segment in filter(None, path.split(".")):
        if segment.isdigit() and parts:  # a ModuleList/Sequential index belongs to its list
            parts[-1] += f".{segment}"
        else:
            parts.append(segment)
    return "/".join([*parts, op])
