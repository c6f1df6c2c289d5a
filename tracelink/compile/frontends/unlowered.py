"""Which ops of an exported torch program IREE cannot lower, read from the program itself.

When ``iree-compile`` fails to convert the torch dialect, its diagnostic names one op at one position,
and neither is enough: several ops share a position when one source line makes them (``squeeze`` then
``unsqueeze`` of the same call), an op torch-mlir does not know is only ``torch.operator``, and when the
op that failed is a constant (``torch.constant.bool`` at ``loc(unknown)``) the culprit is the op
consuming it, which the conversion left as it was. So the ops are found in the program with the MLIR
bindings: its ``torch.operator`` ops (named by their ``name``: ``torch.aten.squeeze.dims``), else the
compute ops still in the torch dialect when the input conversion, run again alone, failed
(``--mlir-print-ir-after-failure``). An op's location's first frame outside library code is the user's line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelink.atomic import write_text_atomic
from tracelink.errors import TracelinkError
from tracelink.compile.frames import LIBRARY_FRAMES, user_frame
from tracelink.compile.frontends.decompositions import decomposition_name
from tracelink.iree_tools import compile_command
from tracelink.tools import run_tool

# The heading iree-compile prints before each program it dumps after a failed pass.
DUMP_HEADING = "// -----// IR Dump After "
# torch-dialect ops that hold operands of others: left unconverted only because their users were.
OPERAND_OPS = ("torch.constant.", "torch.prim.ListConstruct", "torch.prim.TupleConstruct", "torch.vtensor.literal")
# Dialects of an exported program before its conversion: an op of any other is one the conversion made.
UNCONVERTED_DIALECTS = ("torch.", "torch_c.", "func.", "util.", "builtin.")
DIAGNOSE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class UnloweredOp:
    """An op IREE could not convert: its torch name (``aten.squeeze.dims``), the op as the program spells it
    (``torch.operator``, ``torch.aten.erfinv``) and the user's ``file:line`` it came from ('' when unknown)."""

    name: str
    spelled: str
    line: str


def unconverted_ops(program: Path, log: Path, frame_rules: tuple[str, ...] = LIBRARY_FRAMES) -> list[UnloweredOp]:
    """The ops of exported ``program`` IREE cannot lower, in program order, each once by name and line; [] when
    none is found. What the diagnosing compiler printed goes to ``log``.

    An op torch-mlir does not know is a ``torch.operator``, which no conversion accepts: those of the
    program are the answer. Otherwise the input conversion is run again, alone, printing the program as
    it stood when it failed, and the compute ops it left in the torch dialect are the answer, provided
    it converted some (a failure before the conversion leaves every op, and says nothing of which).
    """
    from tracelink.ir_utils import new_context, parse_file, walk

    with new_context() as context:
        unknown = [op for op in walk(parse_file(program, context).operation) if op.name == "torch.operator"]
        if unknown:
            return distinct(unknown, frame_rules)
        module = failed_conversion(program, log, context)
        if module is None:
            return []
        ops = list(walk(module.operation))
        if not any(not op.name.startswith(UNCONVERTED_DIALECTS) for op in ops):
            return []
        return distinct([op for op in ops if op.name.startswith("torch.") and not op.name.startswith(OPERAND_OPS)], frame_rules)


def failed_conversion(program: Path, log: Path, context: Any) -> Any:
    """``program`` as it stood when its input conversion failed (iree-compile alone, printing it), or None when
    the conversion succeeds or the printed program cannot be read back."""
    from iree.compiler import ir

    command = compile_command(program, "-", ["--compile-to=input", "--mlir-print-debuginfo", "--mlir-print-ir-after-failure",
                                             "--mlir-elide-elementsattrs-if-larger=16", "--mlir-elide-resource-strings-if-larger=16"])
    done = run_tool(command, DIAGNOSE_TIMEOUT_S)
    write_text_atomic(log, " ".join(command) + "\n\n" + done.stderr)
    if done.returncode == 0 or DUMP_HEADING not in done.stderr:
        return None
    try:
        return ir.Module.parse(done.stderr.rsplit(DUMP_HEADING, 1)[1].split("\n", 1)[-1], context)
    except ir.MLIRError:
        return None


def distinct(ops: list[Any], frame_rules: tuple[str, ...]) -> list[UnloweredOp]:
    """``ops`` as :class:`UnloweredOp`, each name and line once, in program order."""
    found: dict[tuple[str, str], UnloweredOp] = {}
    for op in ops:
        unlowered = UnloweredOp(torch_name(op), op.name, user_line(op.location, frame_rules))
        found.setdefault((unlowered.name, unlowered.line), unlowered)
    return list(found.values())


def torch_name(op: Any) -> str:
    """The torch op an op of the torch dialect stands for: ``aten.squeeze.dims`` for
    ``torch.operator "torch.aten.squeeze.dims"``, ``aten.erfinv`` for ``torch.aten.erfinv``."""
    from iree.compiler import ir

    if op.name == "torch.operator" and "name" in op.attributes and isinstance(op.attributes["name"], ir.StringAttr):
        return op.attributes["name"].value.removeprefix("torch.")
    return op.name.removeprefix("torch.")


def user_line(location: Any, frame_rules: tuple[str, ...]) -> str:
    """``file:line`` of a location's first frame outside library code (:mod:`tracelink.compile.frames`), else ''."""
    frames = file_frames(location)
    if not frames:
        return ""
    file, line = frames[user_frame([file for file, _ in frames], frame_rules)]
    return f"{file}:{line}"


def file_frames(location: Any) -> list[tuple[str, int]]:
    """Every ``(file, line)`` of a location, innermost first, through names and call sites."""
    from iree.compiler import ir

    frames: list[tuple[str, int]] = []
    pending = [location]
    while pending:
        current = pending.pop()
        if isinstance(current, ir.FileLineColLoc):
            frames.append((current.filename, current.start_line))
        elif isinstance(current, ir.NameLoc):
            pending.append(current.child_loc)
        elif isinstance(current, ir.CallSiteLoc):
            pending.extend([current.caller, current.callee])
    return frames


def unlowered_error(failed: list[UnloweredOp], origin: str, kept: tuple[str, ...], decomposed: tuple[str, ...], log: Path) -> TracelinkError:
    """One line naming the first op IREE cannot lower, its line and what to try (``kept``: ops tracelink keeps
    whole, which ``--decompose`` can still decompose), how many others failed too and which ops were
    ``decomposed`` automatically on the way."""
    first = failed[0]
    where = f", from {first.line}" if first.line else ""
    packet = first.name.split(".")[1] if first.name.startswith("aten.") else ""
    rewrite = f": write {first.line} with other ops" if first.line else ""
    if packet in kept:
        hint = f"tracelink keeps it whole: try --decompose {packet}"
    elif decomposition_name(first.name, ()) is not None:  # decomposed already, and its parts failed
        hint = f"its decomposition does not lower either{rewrite}"
    else:
        hint = f"torch has no decomposition of it{rewrite}"
    others = f"; {len(failed) - 1} more op(s) failed too" if len(failed) > 1 else ""
    after = f" (decomposed first, as IREE could not lower them: {', '.join(decomposed)})" if decomposed else ""
    return TracelinkError(f"{origin}: IREE cannot lower {first.name} ({first.spelled}){where}{after}; {hint}{others} (log: {log})")
