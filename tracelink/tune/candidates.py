"""Candidate programs: the dispatch's benchmark dump with another tile config and a verify entry point.

The benchmark dump is parsed with the MLIR Python bindings; the root op's ``lowering_config``
attribute is replaced by the candidate's, and the other ops' configs are dropped so the compiler
derives them from the root exactly as it does when a tuning spec sets only the root op's config.
The default candidate keeps the dump's configs untouched. Both get ``tracelink_run``
(see ``harness``), so one compiled module serves verification and timing, on the same seeded inputs.
"""

from __future__ import annotations

from pathlib import Path

from iree.compiler import ir

from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import make_directory, write_text_atomic
from tracelink.ir_utils import walk
from tracelink.tune.dispatch import config_text, describe, is_root
from tracelink.tune.harness import run_function_text


def set_root_config(module: ir.Module, fields: dict[str, list[int]]) -> ir.Operation:
    """Give the root op the config ``fields``; remove the configs of the ops fused with it."""
    root = next((op for op in walk(module.operation) if is_root(op)), None)
    if root is None:
        raise TracelinkError("the benchmark has no tunable root op")
    function = root.parent
    while function is not None and function.name != "func.func":
        function = function.parent
    for op in walk(function):
        if op != root and "lowering_config" in op.attributes:
            del op.attributes["lowering_config"]
    root.attributes["lowering_config"] = ir.Attribute.parse(config_text(fields), module.context)
    return root


def add_run_function(module: ir.Module, benchmark: Path) -> None:
    dispatch = describe(module, benchmark)
    with module.context, ir.Location.unknown():
        function = ir.Operation.parse(run_function_text(dispatch, dispatch.device_symbol))
    module.body.append(function)


def materialize(benchmark: Path, fields: dict[str, list[int]] | None, output: Path) -> Path:
    """Write the candidate program for config ``fields`` (None: the default config) to ``output``."""
    context = ir.Context()
    try:
        module = ir.Module.parseFile(str(benchmark), context)
    except ir.MLIRError as error:
        raise TracelinkError(f"{benchmark}: MLIR parse error: {first_line(error)}") from error
    add_run_function(module, Path(benchmark))
    if fields is not None:
        set_root_config(module, fields)
    if not module.operation.verify():
        raise TracelinkError(f"{benchmark}: candidate program does not verify")
    make_directory(output.parent)
    return write_text_atomic(output, str(module))
