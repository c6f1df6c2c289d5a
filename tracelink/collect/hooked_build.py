"""The profiled program as the perf hook can record it: built with system-library executables.

The hook sees only executables the runtime loads through ``dlsym`` (``--iree-llvmcpu-link-embedded=false``);
the default build embeds ELF that IREE's own loader maps, invisible to it. A run under the hook of a
profile's program (its sizes, :mod:`tracelink.collect.hook_sizes`; the dispatch that crashed it,
:mod:`tracelink.collect.crash_site`) takes the profile's own module when it was built so (``--collector
hook``), else the same program built again with the same options.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tracelink.compile import CompileOptions, CompileResult, compile_program

SYSTEM_LIBRARY_FLAG = "--iree-llvmcpu-link-embedded=false"


def hooked_module(compiled: CompileResult, options: CompileOptions, directory: Path) -> tuple[Path, bool]:
    """The module of ``compiled`` whose executables the hook records, and whether it had to be rebuilt
    (into ``directory``, without dumps: only its module is used)."""
    if SYSTEM_LIBRARY_FLAG in compiled.flags:
        return compiled.vmfb, False
    return compile_program(compiled.input_path, directory, replace(options, link_embedded=False), dumps=False).vmfb, True
