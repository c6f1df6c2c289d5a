"""Export a Python model and start compiling it, decomposing the ops IREE cannot lower until it can.

A torch op that ``iree-compile``'s input conversion cannot convert (``aten.squeeze.dims``,
``aten.upsample_bilinear2d.vec``) often has a decomposition in torch's own table (``torch._decomp``) into
ops it can. So once the compiler fails in its input conversion, the ops it left are read from the
program (:mod:`tracelink.compile.frontends.unlowered`), those torch decomposes are added to the export's
decompositions, and the model is exported and compiled again; until the input converts, or what is left
has no decomposition (an error naming the op and the user's line). Only the failed ops are decomposed:
the ops tracelink keeps whole (attention, linear, matmul, convolutions) stay whole. The decomposed
ops' nodes keep the stack of the op they replace, so their time stays on the user's line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tracelink.compile import PHASE_POLL_S, CompileOptions, PendingCompile, dumped_phases, write_manifest
from tracelink.compile.frontends import ExportedModel, PythonModel, export_model, is_torch_module
from tracelink.compile.program_text import check_program_text
from tracelink.compile.frames import LIBRARY_FRAMES
from tracelink.tools import reap, wait_for_exit

INPUT_PHASE = "input"  # the compiler's first phase, where it converts the torch dialect


def export_and_compile(model: PythonModel, artifacts: Path, options: CompileOptions, decompose: tuple[str, ...] = (),
                       frame_rules: tuple[str, ...] = LIBRARY_FRAMES) -> tuple[ExportedModel, PendingCompile]:
    """Export ``model`` into ``artifacts`` and start compiling it; a torch model's ops IREE cannot lower are
    decomposed and it is exported again (see the module's docstring). The manifest's ``export`` entry
    records each export. ``frame_rules`` say which line of a failing op is the model's."""
    from tracelink.compile.frontends.torch_export import KEPT_OPS
    from tracelink.compile.frontends.unlowered import decomposition_name, unconverted_ops, unlowered_error

    automatic: tuple[str, ...] = ()
    spent = 0.0
    while True:
        exported = export_model(model, artifacts, decompose, automatic)
        spent += exported.seconds
        exported.seconds = spent  # every attempt's export counts
        write_manifest(artifacts, {"export": exported.manifest_entry()})
        check_program_text(exported.program)
        pending = PendingCompile(exported.program, artifacts, options)
        if not is_torch_module(model.target) or input_converted(pending):
            return exported, pending
        failed = unconverted_ops(exported.program, artifacts / "lowering.log", frame_rules)
        if not failed:  # another failure: the compiler's own error says it
            return exported, pending
        reap(pending.run.process)
        names = (decomposition_name(op.name, KEPT_OPS) for op in failed)
        new = tuple(dict.fromkeys(name for name in names if name is not None and name not in (*decompose, *automatic)))
        if not new:
            raise unlowered_error(failed, model.origin, KEPT_OPS, automatic, pending.run.log)
        automatic += new


def input_converted(pending: PendingCompile) -> bool:
    """Wait until the compiler has converted its input (it dumped a phase after :data:`INPUT_PHASE`) or exited;
    False when it exited with an error."""
    phases = pending.artifacts / "phases"
    while True:
        written = dumped_phases(phases)
        if INPUT_PHASE in written and max(written.values()) > written[INPUT_PHASE]:
            return True
        try:
            return wait_for_exit(pending.run.process, PHASE_POLL_S) == 0
        except subprocess.TimeoutExpired:
            continue
