"""Export a Python model and start compiling it, decomposing the ops IREE cannot lower until it can.

A torch op that ``iree-compile``'s input conversion cannot convert (``aten.squeeze.dims``,
``aten.upsample_bilinear2d.vec``) often has a decomposition in torch's own table (``torch._decomp``) into
ops it can. So once the compiler fails in its input conversion, the ops it left are read from the
program (:mod:`tracelink.compile.frontends.unlowered`), those torch decomposes are added to the export's
decompositions, and the model is exported and compiled again; until the input converts, or what is left
has no decomposition (an error naming the op and the user's line). Only the failed ops are decomposed:
the ops tracelink keeps whole (attention, linear, matmul, convolutions) stay whole. The decomposed
ops' nodes keep the stack of the op they replace, so their time stays on the user's line. Each op's
decomposition comes from :mod:`tracelink.compile.frontends.decompositions` (torch's tables first).

An op the input conversion converts wrongly fails IREE's verifier instead, there or once global optimization
folds its shapes (a float comparison on integers, a divisor of the wrong shape): the compiler's note on the
failing op carries the torch op's location, and that op is decomposed once the same way; when none
decomposes, the error names it, the compiler's message and the user's line.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tracelink.compile import PHASE_POLL_S, CompileOptions, PendingCompile, dumped_phases, write_manifest
from tracelink.compile.frontends import ExportedModel, PythonModel, export_model, is_torch_module
from tracelink.compile.program_text import check_program_text
from tracelink.compile.frames import LIBRARY_FRAMES
from tracelink.errors import TracelinkError
from tracelink.tools import reap, wait_for_exit

INPUT_PHASE = "input"  # the compiler's first phase, where it converts the torch dialect
# The last phase whose failure is a torch op converted wrongly: IREE's verifier finds some only once global
# optimization folds their shapes (an avg_pool2d's divisor one element too wide). It ends a few seconds after the input.
CONVERTED_PHASE = "global-optimization"
# The compiler's first error: "file:line:col: error: message".
DIAGNOSTIC = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):\d+: error: (?P<message>.*)$", re.MULTILINE)
# The compiler's note on the op that failed, up to its location's name: 'see current operation: %1 = "arith.cmpf"(...) ... loc("model/clamp"'.
CURRENT_OP = re.compile(r'note: see current operation: .*? loc\("(?P<name>[^"]*)"', re.DOTALL)  # an op with regions spans lines


@dataclass(frozen=True)
class FailedLine:
    """A source line the compiler's first error is at, up to :data:`CONVERTED_PHASE`, and the torch ops it came from."""

    line: str  # ``file:line``
    message: str  # the compiler's error
    ops: tuple[str, ...]  # the ops' torch names (``aten.clamp``), in program order, each once


def export_and_compile(model: PythonModel, artifacts: Path, options: CompileOptions, decompose: tuple[str, ...] = (),
                       frame_rules: tuple[str, ...] = LIBRARY_FRAMES) -> tuple[ExportedModel, PendingCompile]:
    """Export ``model`` into ``artifacts`` and start compiling it; a torch model's ops IREE cannot lower are
    decomposed and it is exported again (see the module's docstring). The manifest's ``export`` entry
    records each export. ``frame_rules`` say which line of a failing op is the model's."""
    from tracelink.compile.frontends.decompositions import decomposition_name
    from tracelink.compile.frontends.torch_export import KEPT_OPS
    from tracelink.compile.frontends.unlowered import unconverted_ops, unlowered_error

    automatic: tuple[str, ...] = ()
    lines_tried: set[str] = set()
    spent = 0.0
    while True:
        exported = export_model(model, artifacts, decompose, automatic)
        spent += exported.seconds
        exported.seconds = spent  # every attempt's export counts
        write_manifest(artifacts, {"export": exported.manifest_entry()})
        check_program_text(exported.program)
        pending = PendingCompile(exported.program, artifacts, options)
        if not is_torch_module(model.target) or passed(pending, CONVERTED_PHASE):
            return exported, pending
        input_failed = not passed(pending, INPUT_PHASE)  # the compiler has exited: this does not wait
        failed = unconverted_ops(exported.program, artifacts / "lowering.log", frame_rules) if input_failed else []
        # an op converted wrongly fails IREE's verifier at its line: the ops made there are decomposed once
        at_line = None if failed else failed_line(exported.program, pending.run.output())
        if not failed and at_line is None:  # another failure: the compiler's own error says it
            return exported, pending
        reap(pending.run.process)
        names = (decomposition_name(name, KEPT_OPS) for name in (at_line.ops if at_line else [op.name for op in failed]))
        new = tuple(dict.fromkeys(name for name in names if name is not None and name not in (*decompose, *automatic)))
        if at_line is not None and (at_line.line in lines_tried or not new):
            raise failed_line_error(at_line, model.origin, at_line.line in lines_tried, pending.run.log)
        if not new:
            raise unlowered_error(failed, model.origin, KEPT_OPS, automatic, pending.run.log)
        if at_line is not None:
            lines_tried.add(at_line.line)
        automatic += new


def failed_line(program: Path, output: str) -> FailedLine | None:
    """Where the compiler's first error in ``output`` is and the torch ops of ``program`` it came from, or None when
    it names no line or no op.

    The compiler's note on the op that failed (``see current operation: ... loc("encoder/clamp"(...))``) carries the
    location of the torch op it was converted from, named as the export names it (module path and op); the ops of
    ``program`` (read with the MLIR bindings) with that name and the error's line as their innermost frame are the
    ones converted wrongly, not their neighbours on the line.
    """
    from iree.compiler import ir

    from tracelink.compile.frontends.unlowered import OPERAND_OPS, file_frames, torch_name
    from tracelink.ir_utils import new_context, parse_file, walk

    diagnostic, current = DIAGNOSTIC.search(output), CURRENT_OP.search(output)
    if diagnostic is None or current is None:
        return None
    where = (diagnostic["file"], int(diagnostic["line"]))
    with new_context() as context:
        ops = [torch_name(op) for op in walk(parse_file(program, context).operation)
               if isinstance(op.location, ir.NameLoc) and op.location.name_str == current["name"] and not op.name.startswith(OPERAND_OPS)
               and file_frames(op.location)[:1] == [where]]
    if not ops:
        return None
    return FailedLine(f"{where[0]}:{where[1]}", diagnostic["message"].strip(), tuple(dict.fromkeys(ops)))


def failed_line_error(failed: FailedLine, origin: str, decomposed: bool, log: Path) -> TracelinkError:
    """One line naming the ops IREE converted wrongly at a line, the compiler's error and what to try."""
    ops = ", ".join(failed.ops)
    if decomposed:
        hint = f"they failed again once decomposed: write {failed.line} with other ops"
    else:
        hint = f"torch has no decomposition of them: write {failed.line} with other ops"
    return TracelinkError(f"{origin}: IREE converted {ops} wrongly, from {failed.line} (iree-compile: {failed.message}); {hint} (log: {log})")


def passed(pending: PendingCompile, phase: str) -> bool:
    """Wait until the compiler has passed ``phase`` (it dumped a later phase) or exited; False when it exited with an
    error before."""
    phases = pending.artifacts / "phases"
    while True:
        written = dumped_phases(phases)
        if phase in written and max(written.values()) > written[phase]:
            return True
        try:
            return wait_for_exit(pending.run.process, PHASE_POLL_S) == 0
        except subprocess.TimeoutExpired:
            continue
