"""The executables' benchmark dumps of a profile, written when first needed (`tune`, `repro`).

A benchmark dump (``<module>_<executable>_<variant>_benchmark.mlir``) is the configured executable with
a wrapper function that dispatches it: a program of its own, which the tuner recompiles with other tile
configurations and ``repro`` hands over. `tracelink profile` does not ask the compiler for them: with
the debug locations every other dump needs, each wrapper op carries the fused locations of all of the
executable's call sites, so they were most of a big model's executable dumps and a noticeable part of
its compile (docs/reference/numbers.md). They are written later from the profile's own
``executable-sources`` phase dump, compiled on to ``executable-configurations`` with the profile's
compile options (the phase where IREE configures executables and dumps benchmarks): a fraction of a
second, and the same programs as the full compile dumps, locations aside
(``tests/test_benchmark_dumps.py`` checks this).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tracelink.atomic import make_directory, remove_path
from tracelink.compile import CompileOptions, compile_flags, dumped_phases
from tracelink.errors import TracelinkError
from tracelink.iree_tools import compile_command
from tracelink.tools import ToolRun
from tracelink.profile_dir import files

SUFFIX = "_benchmark.mlir"
SOURCES_PHASE = "executable-sources"  # the dump they are compiled from
DUMP_PHASE = "executable-configurations"  # the phase that writes them


def benchmark_dump_name(source_stem: str, variant: str) -> str:
    """The file IREE names a variant's benchmark dump: its executable's source dump's stem
    (``<module>_<executable>``), the variant's symbol, ``_benchmark.mlir``."""
    return f"{source_stem}_{variant}{SUFFIX}"


def ensure_benchmark_dumps(artifacts: Path, wanted: Iterable[object], timeout_s: float | None = None) -> None:
    """Write the benchmark dumps named in ``wanted`` (paths relative to ``artifacts``; an empty or missing
    name, as ``exports.csv`` reads for an export without one, is passed over) that are missing.

    Every executable's dump is written at once, into ``artifacts/executables``; the compiler writes into a
    new private folder first, and each dump is moved from there, so no link in the profile directory is
    followed. IREE writes none for an executable it cannot wrap; the caller finds that one missing.
    """
    if all((artifacts / name).is_file() for name in wanted if isinstance(name, str) and name):
        return
    options = recorded_options(artifacts)
    phases = artifacts / "phases"
    order = dumped_phases(phases).get(SOURCES_PHASE)
    source = next(phases.glob(f"*.{order}.{SOURCES_PHASE}.mlir"), None) if order is not None else None
    if source is None:
        raise TracelinkError(f"{phases}: no {SOURCES_PHASE} phase dump to write the benchmark dumps from")
    executables = make_directory(artifacts / "executables", inside=artifacts.parent)
    log = artifacts / "benchmarks.log"
    try:
        work = Path(tempfile.mkdtemp(prefix=".benchmarks.", dir=artifacts))
        try:
            command = compile_command(source, work / "configured.mlir", [*compile_flags(options, artifacts, dumps=False),
                                      f"--compile-from={SOURCES_PHASE}", f"--compile-to={DUMP_PHASE}", f"--iree-hal-dump-executable-benchmarks-to={work}"])
            ToolRun(command, log, f"{source}: iree-compile (benchmark dumps)").wait(timeout_s or options.timeout_s)
            for dump in work.glob(f"*{SUFFIX}"):
                os.replace(dump, executables / dump.name)  # a link at that name is replaced, not followed
        finally:
            remove_path(work, artifacts)
    except OSError as error:  # a full disk fails a write without naming the file
        raise TracelinkError(f"{error.filename or log}: cannot write the benchmark dumps ({error.strerror or error})") from None


def recorded_options(artifacts: Path) -> CompileOptions:
    """The compile options the profile's manifest records."""
    manifest = artifacts / files.MANIFEST
    try:
        recorded = json.loads(manifest.read_text())["compiler"]["options"]
        return CompileOptions.from_record(recorded)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise TracelinkError(f"{manifest}: no compile options recorded ({type(error).__name__}: {error})") from None
