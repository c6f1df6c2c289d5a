"""What `tracelink profile` runs and how; light to import, so the compiler can start before the rest loads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from tracelink.compile import CompileOptions, PendingCompile

COLLECTORS = ("hal", "tracy", "hook")
# Frames in files matching these are library code: the "user" view credits their time to the user's line calling them.
LIBRARY_GLOBS = ("*/site-packages/*", "*/dist-packages/*", "*/lib/python3*/*", "*/lib64/python3*/*", "<frozen *>")


@dataclass
class ProfileOptions:
    """What to run and how: everything `tracelink profile` takes besides the program and directory."""

    function: str | None = None
    inputs: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    repetitions: int = 10
    warmup: int = 1
    seed: int = 0
    timeout_s: float = 600.0
    collector: str = "hal"
    hook_events: list[str] = field(default_factory=list)  # perf_event counters for the hook collector
    # globs of files whose frames are library code (self time in the user view goes to their callers)
    library_frames: tuple[str, ...] = LIBRARY_GLOBS
    compile: CompileOptions = field(default_factory=CompileOptions)


def with_collector_requirements(options: ProfileOptions) -> ProfileOptions:
    """The options with what the collector needs of the build: the hook sees only system-library executables."""
    if options.collector == "hook":
        return replace(options, compile=replace(options.compile, link_embedded=False))
    return options


def start_compile(program: Path, out: Path, options: ProfileOptions) -> PendingCompile:
    """Start compiling ``program`` for a profile into ``out/artifacts`` (in the background)."""
    return PendingCompile(Path(program).resolve(), Path(out) / "artifacts", with_collector_requirements(options).compile)
