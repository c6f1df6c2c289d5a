"""Which dispatch crashed the program: the crashed run repeated once under the perf hook.

IREE's tools say only that they died of a signal; a fault in a dispatch's generated code is an address
in memory IREE's loader mapped. The hook names the export whose workgroup call took the fault before the
process dies (native/hook.c). So the run is repeated with the same tool, device, inputs, parameters
and number of calls, under the hook, on the program built with system-library executables
(:func:`~tracelink.collect.hooked_build.hooked_module`, built again into ``artifacts/crash`` unless the
profile's own build is so). The records, the module and the tool's output stay there. llvm-cpu only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracelink.collect.hook import run_hooked
from tracelink.collect.hooked_build import hooked_module
from tracelink.compile import CompileOptions, CompileResult
from tracelink.errors import Crashed
from tracelink.iree_tools import benchmark_command
from tracelink.profile_dir import files

CRASH_DIR = "crash"


@dataclass(frozen=True)
class CrashRerun:
    """What the repeated run showed."""

    crashed: bool  # it crashed again
    export: str | None  # the dispatch whose workgroup call took the fault; None when the fault was elsewhere
    directory: Path  # its records, module and output


def rerun_under_hook(compiled: CompileResult, options: CompileOptions, entry: str, inputs: Sequence[str], parameters: Sequence[str],
                     iterations: int, artifacts: Path, timeout_s: float) -> CrashRerun:
    """Run ``entry`` of ``compiled`` ``iterations`` times under the hook on ``options.device``, as the crashed
    run did. Raises TracelinkError when the program cannot be rebuilt, or the run fails otherwise."""
    directory = artifacts / CRASH_DIR
    vmfb, _ = hooked_module(compiled, options, directory)
    command = benchmark_command(vmfb, entry, inputs, parameters, iterations, options.device)
    try:
        run_hooked(command, directory / "hook", timeout_s=timeout_s, log=directory / files.RUN_LOG)
    except Crashed as crash:
        return CrashRerun(True, crash.export, directory)
    return CrashRerun(False, None, directory)
