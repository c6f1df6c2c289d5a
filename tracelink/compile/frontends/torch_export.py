"""Export a ``torch.nn.Module`` to MLIR (torch dialect) with its Python call stacks and module paths as locations.

``torch.export`` (strict, through TorchDynamo, which records the user's full Python stack of every op,
helper functions included; non-strict when Dynamo cannot capture the module) gives an FX graph whose
nodes carry a ``stack_trace`` and an ``nn_module_stack``. IREE's FX importer
(``iree.compiler.extras.fx_importer``) turns it into MLIR; its location of a node is replaced here by
``loc("encoder/layers.3/attention/linear"(callsite("forward"("model.py":41:15) at ...)))``: the module
path (dots become ``/``, a ModuleList index stays joined to its list: ``layers.3``) and the aten op's
name, wrapping the call stack innermost first. Frames of torch's own export machinery above the
module's ``forward`` are dropped. Weights go into a parameter archive beside the program
(:mod:`tracelink.compile.frontends.torch_parameters`).

The exported graph is lowered with torch's own core ATen decomposition table
(``torch.export.default_decompositions()``), except the ops IREE lowers better whole (:data:`KEPT_OPS`:
attention, which becomes one ``iree_linalg_ext.attention``; linear, matmul and convolutions, which keep
their names), plus the decompositions of the few core ATen ops torch-mlir cannot convert
(:data:`UNCONVERTED_CORE_OPS`). ``decompose`` names ops to decompose anyway (``--decompose``, or the
ops IREE could not lower, :mod:`tracelink.compile.frontends.lowering`).
"""

from __future__ import annotations

import contextlib
import io
import linecache
import logging
import re
import sys
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import write_text_atomic
from tracelink.compile.frames import is_library
from tracelink.compile.frontends.extras import require
from tracelink.compile.frontends.torch_parameters import ParameterArchive

if TYPE_CHECKING:
    import torch

PARAMETERS_NAME = "parameters.irpa"
# ATen ops kept whole where the core table would decompose them: IREE lowers each well as one op
# (by name: torch loads only when a model is exported).
# `eye` too: torch's decomposition makes a uint8 `arange` for small sizes, whose conversion crashes iree-compile 3.13
# (SIGSEGV; the gated delta rule's chunks in Qwen3.5, Kimi Linear), while IREE lowers `aten.eye` whole.
KEPT_OPS = ("scaled_dot_product_attention", "linear", "matmul", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
            "eye")
# Core ATen ops (the core table leaves them) that torch-mlir cannot convert: inference batch norm, as arithmetic.
UNCONVERTED_CORE_OPS = ("_native_batch_norm_legit_no_training", "_native_batch_norm_legit", "_native_batch_norm_legit_functional")
# torch.export's error for an output type it cannot flatten ("Found <class '...DynamicCache'> in output").
UNFLATTENED_OUTPUT = re.compile(r"Found <class '(?P<type>[^']+)'> in output")
# The stack run_decompositions gives the ops it makes from a higher-order op's body (a `torch.no_grad()` region of
# the forward, `wrap_with_set_grad_enabled`): the body's generated code, naming the node it made them from.
GRAPH_CODE_FRAME = re.compile(r'File "<eval_with_key>\.\d+", line \d+, in \w+\n\s*(?P<name>\w+)(?:, \w+)* = ')
# What torch.export's data-dependent errors put before the user's call that raised them.
RAISED_AT = "The following call raised this error:"
# One frame of a formatted Python traceback: its header, code line and optional caret line under the code.
FRAME = re.compile(r'^ *File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)\n(?P<code> *.*\n?)(?P<carets> *[~^]+ *\n?)?', re.MULTILINE)


@dataclass
class TorchExport:
    """What exporting a model gave: each entry point's tensor arguments and the weights' archive."""

    arrays: dict[str, list[np.ndarray]]
    parameters: Path | None = None  # the archive of its weights (scope ``model``), if it has any
    parameter_bytes: int = 0


def export_torch(entries: dict[str, tuple[torch.nn.Module, tuple]], output: Path, origin: str, decompose: tuple[str, ...] = ()) -> TorchExport:
    """Write each entry point (name → module, example arguments) exported at its arguments to ``output`` as a
    function of that name of one program (MLIR text with debug info), and the weights to ``parameters.irpa``
    beside it (a weight two entries share, once); return each entry's arguments and the archive."""
    require("torch")
    import torch
    from iree.compiler import ir
    from iree.compiler.extras import fx_importer

    programs = {name: exported_program(module, args, origin, decompose) for name, (module, args) in entries.items()}

    torch_dir = Path(torch.__file__).parent

    class LocatedContextCache(fx_importer.ContextCache):
        imported: torch.fx.Node | None = None  # the node being imported: the importer asks its location first

        def get_node_location(self, node: torch.fx.Node) -> ir.Location | None:
            self.imported = node
            return node_location(node, self._c, torch_dir)

    archive = ParameterArchive()
    importer = fx_importer.FxImporter(context=ir.Context(), hooks=archive.hooks())
    # The importer asks its context cache for every node's location; swap in the cache that builds ours.
    importer._cc = cache = LocatedContextCache(importer._c, py_attr_tracker=importer._py_attr_tracker)
    try:
        for name, program in programs.items():
            importer.import_program(program, func_name=name)
        cache.imported = None  # the verifier's failure is the whole module's, not the last node's
        importer.module.operation.verify()
    except (ir.MLIRError, NotImplementedError, ValueError, KeyError, RuntimeError) as error:
        # A verifier error's first line is only "Verification failed:"; its diagnostic follows.
        detail = " ".join(str(error).split())[:300]
        line = node_user_line(cache.imported, torch_dir) if cache.imported is not None else ""
        where = f", at {line}" if line else ""
        raise TracelinkError(f"{origin}: IREE's FX importer failed ({type(error).__name__}: {detail}){where}") from None
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, importer.module.operation.get_asm(enable_debug_info=True))
    parameters = archive.write(output.with_name(PARAMETERS_NAME))
    arrays = {name: [leaf.detach().cpu().numpy() for leaf in torch.utils._pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)]
              for name, (_, args) in entries.items()}
    return TorchExport(arrays, parameters, archive.bytes)


def exported_program(module: torch.nn.Module, args: tuple, origin: str, decompose: tuple[str, ...] = ()) -> Any:
    """``torch.export`` of ``module`` (strict: full Python stacks, else non-strict: stacks of module calls
    only), lowered by :func:`decomposition_table`."""
    import torch

    table = decomposition_table(decompose, origin)
    with warnings.catch_warnings(), torch_export_quiet():
        # torch's own deprecations inside export (pytree's LeafSpec, 2.13) say nothing about the user's model.
        warnings.simplefilter("ignore", FutureWarning)
        try:
            with leaked_graphs_dropped():
                program = torch.export.export(module, tuple(args), strict=True)
        except Exception:  # anything Dynamo cannot capture; the non-strict export traces by running the module
            program = None
        try:
            program = program or torch.export.export(module, tuple(args), strict=False)
            # Functional core ATen ops (an in-place `relu_` is not valid on the importer's value tensors).
            decomposed = program.run_decompositions(table)
            restore_stacks(decomposed, program)
            return decomposed
        except Exception as error:  # the user's module failed to trace: any exception type
            raise export_failure(error, origin) from None


def restore_stacks(decomposed: Any, exported: Any) -> None:
    """Give each node of ``decomposed`` whose stack is generated graph code (:data:`GRAPH_CODE_FRAME`) the stack of
    the node of ``exported`` that code line made, looked up in the higher-order ops' bodies first (whose code it is),
    then in the program's own graph."""
    import torch

    graphs = [module.graph for module in exported.graph_module.modules() if isinstance(module, torch.fx.GraphModule)]
    stacks: dict[str, str] = {}
    for graph in [*graphs[1:], *graphs[:1]]:
        for node in graph.nodes:
            if node.meta.get("stack_trace"):
                stacks.setdefault(node.name, node.meta["stack_trace"])
    for node in decomposed.graph.nodes:
        made_by = GRAPH_CODE_FRAME.search(node.meta.get("stack_trace") or "")
        if made_by and made_by["name"] in stacks:
            node.meta["stack_trace"] = stacks[made_by["name"]]


@contextlib.contextmanager
def torch_export_quiet() -> Iterator[None]:
    """Keep what torch logs and prints off stderr during the block: a failed export prints its
    partial graph (torch 2.13, unconditionally) and logs it again, where the user reads one error line."""
    logging.disable(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


# Dynamo installs each graph it compiles as a global of the frame it traced, to be removed with that frame's
# cache entry; a strict export makes no cache entry, so torch 2.13 keeps the graph, and with it the module's
# weights, in `torch._dynamo.functional_export` for good.
COMPILED_FUNCTION_PREFIX = "__compiled_fn_"


@contextlib.contextmanager
def leaked_graphs_dropped() -> Iterator[None]:
    """Remove the compiled-graph globals Dynamo installs in any module during the block (see
    :data:`COMPILED_FUNCTION_PREFIX`). Kept, they held a 1.1 B-parameter decoder's 4.2 GB of weights
    through the profile's run, where the benchmark tool, short of free memory, then loaded the same
    weights at a third of its speed."""
    before = {(id(namespace), name) for namespace, name in compiled_function_globals()}
    try:
        yield
    finally:
        for namespace, name in compiled_function_globals():
            if (id(namespace), name) not in before:
                namespace.pop(name, None)


def compiled_function_globals() -> list[tuple[dict, str]]:
    """(module namespace, name) of every compiled-graph global Dynamo has installed."""
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            found += [(namespace, name) for name in list(namespace) if isinstance(name, str) and name.startswith(COMPILED_FUNCTION_PREFIX)]
    return found


def decomposition_table(decompose: tuple[str, ...], origin: str) -> Any:
    """torch's core ATen table less :data:`KEPT_OPS`, with :data:`UNCONVERTED_CORE_OPS` and each of ``decompose``
    added: an ATen op (``squeeze``: all its overloads), one overload of it (``squeeze.dims``), or an op of another
    namespace (``transformers.grouped_mm_fallback``), each decomposed as :mod:`tracelink.compile.frontends.decompositions`
    finds it (torch's own tables first).

    An op of ``decompose`` that none decomposes is an error naming it.
    """
    import torch
    from torch._decomp import get_decompositions  # the table torch-mlir's own FX export path uses too

    from tracelink.compile.frontends.decompositions import decompositions, torch_op

    table = torch.export.default_decompositions()
    kept = set(KEPT_OPS) - {name.split(".")[0] for name in decompose}
    for op in [op for op in table.keys() if aten_name(op) in kept]:
        table.pop(op)
    in_core_table = {aten_name(op) for op in table.keys()} | set(KEPT_OPS)
    for name in decompose:
        op = torch_op(name)
        if op is None:  # not an op: '', 'a b', '__class__', 'squeeze.nothing', ...
            raise TracelinkError(f"{origin}: --decompose {name}: torch has no ATen op '{name}'")
        extra = decompositions(op)
        if not extra and name.split(".")[0] not in in_core_table:
            raise TracelinkError(f"{origin}: --decompose {name}: torch has no decomposition of aten.{name}")
        table.update(extra)
    table.update(get_decompositions([getattr(torch.ops.aten, name) for name in UNCONVERTED_CORE_OPS]))
    return table


def export_failure(error: Exception, origin: str) -> TracelinkError:
    """torch.export's failure as one line: the user's line it failed at (:func:`failing_line`), and what to do when
    a tensor's values decide the trace there or the model returns an object export cannot flatten.

    A Hugging Face model built with its default ``use_cache=True`` returns its key/value cache (a
    ``DynamicCache``). Registering transformers' pytree for it lets export trace the model, but then
    torch 2.13's decomposition fails on the constants the cache creates, so the way out is the user's.
    """
    detail = first_line(error)
    unflattened = UNFLATTENED_OUTPUT.search(detail)
    if unflattened is not None:
        kind = unflattened["type"].rsplit(".", 1)[-1]
        hint = "build the model with use_cache=False" if "Cache" in kind else "return its tensors"
        return TracelinkError(f"{origin}: torch.export cannot flatten the {kind} the model returns: {hint}, "
                              "or profile a wrapper module whose forward returns tensors")
    line, code = failing_line(error)
    where = f", at {line} ({code})" if code else f", at {line}" if line else ""
    data_dependent = "data-dependent" in detail
    hint = ("; a tensor's values decide control flow or a size there, which torch.export cannot trace: compute it "
            "from sizes, or state it with torch._check() before that line") if data_dependent and line else ""
    return TracelinkError(f"{origin}: torch.export failed ({type(error).__name__}: {detail}){where}{hint}")


def failing_line(error: BaseException) -> tuple[str, str]:
    """The ``file:line`` of the model's code where export failed and that line's code, ('', '') when none is known.

    A data-dependent failure names the call that raised it in its message (raised deep in torch's shape
    checks, its traceback ends in the caller's wrapper); otherwise it is the innermost frame of the
    traceback outside library code (:mod:`tracelink.compile.frames`).
    """
    _, raised_at, rest = str(error).partition(RAISED_AT)
    named = FRAME.search(rest) if raised_at else None
    if named is not None:
        return f"{named['file']}:{named['line']}", named["code"].strip()
    frames = [frame for frame in reversed(traceback.extract_tb(error.__traceback__))
              if not frame.filename.startswith("<") and not is_library(frame.filename)]
    if not frames:
        return "", ""
    return f"{frames[0].filename}:{frames[0].lineno}", (frames[0].line or "").strip()


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


def node_user_line(node: torch.fx.Node, torch_dir: Path) -> str:
    """``file:line (code)`` of the innermost frame of the model's code in an FX node's stack, '' without one."""
    frames = [(file, line) for file, line, _, _ in python_frames(node.meta.get("stack_trace") or "", torch_dir)
              if not file.startswith("<") and not is_library(file)]
    if not frames:
        return ""
    file, line = frames[0]
    return f"{file}:{line} ({linecache.getline(file, line).strip()})"


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
    return aten_name(node.target) or node.name


def aten_name(op: Any) -> str:
    """An op overload's name without namespace and overload (``aten.conv2d.default`` → ``conv2d``), else ''."""
    return getattr(getattr(op, "overloadpacket", None), "__name__", "")


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
