"""Each dispatch's push constants in one call of the profiled function: a short run under the perf hook.

A dispatch of a program with dynamic shapes gets its sizes as push constants, and the cost model
needs them; the run's input shapes give most of them through the host program's arithmetic, but a
size computed from tensor *data* (or through host code the evaluator does not follow) is known only
in the run. The hook records every dispatch's push constants (:mod:`tracelink.collect.hook_records`).

:class:`HookedSizes` is what the provenance stage calls when a size is still unknown after the static
evaluation (:func:`tracelink.provenance.regions.read_regions`): it runs the function once with
``iree-run-module`` on ``local-sync`` (dispatches one at a time, in program order) under the hook, on a
build whose executables are system libraries (:func:`~tracelink.collect.hooked_build.hooked_module`, built
again into ``artifacts/sizes`` when the profile's own is not). llvm-cpu only: on a GPU no hook runs and
the sizes stay unknown. A failed run leaves them unknown too, and says why (:attr:`HookedSizes.summary`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tracelink.collect.hook import run_hooked
from tracelink.collect.hooked_build import hooked_module
from tracelink.compile import CompileOptions, CompileResult
from tracelink.compile.targets import device_target
from tracelink.errors import TracelinkError, first_line
from tracelink.iree_tools import run_module_command
from tracelink.provenance.executable_workloads import DispatchConstants
from tracelink.profile_dir import files

SIZES_DIR = "sizes"


class HookedSizes:
    """The push constants of one call of ``entry`` (a :data:`~tracelink.provenance.executable_workloads.ConstantsOfRun`).

    ``compiled`` gives the profile's build when the constants are first needed: the provenance stage may
    start while the compiler still runs, and then it waits for the build.
    """

    def __init__(
        self, compiled: Callable[[], CompileResult], options: CompileOptions, entry: str, inputs: Sequence[str],
        parameters: Sequence[str], artifacts: Path, timeout_s: float,
    ) -> None:
        self.compiled, self.options, self.entry = compiled, options, entry
        self.inputs, self.parameters = list(inputs), list(parameters)
        self.directory, self.timeout_s = artifacts / SIZES_DIR, timeout_s
        self.summary: dict = {}  # what profile.json says of the run: its seconds, a rebuild, a failure

    def __call__(self) -> DispatchConstants | None:
        if device_target(self.options.device).is_gpu:
            return None
        started = time.perf_counter()
        try:
            return self._constants()
        except TracelinkError as error:
            self.summary["failure"] = first_line(error)
            return None
        finally:
            self.summary["seconds"] = round(time.perf_counter() - started, 3)

    def _constants(self) -> DispatchConstants:
        compiled = self.compiled()  # waits for the compiler: not part of a rebuild's time
        started = time.perf_counter()
        vmfb, rebuilt = hooked_module(compiled, self.options, self.directory)
        if rebuilt:
            self.summary["rebuild_seconds"] = round(time.perf_counter() - started, 3)
        command = run_module_command(vmfb, self.entry, self.inputs, self.parameters, device="local-sync")
        hooked = run_hooked(command, self.directory / "hook", timeout_s=self.timeout_s, log=self.directory / files.RUN_LOG)
        constants: dict[str, list[tuple[int, ...]]] = {}
        for export, values in zip(hooked.events["export"], hooked.constants):
            if isinstance(export, str):
                constants.setdefault(export, []).append(values or ())
        return constants
