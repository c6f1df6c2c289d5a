"""Compile stage: run the real `iree-compile` with debug locations and every dump tracelink reads.

One compiler invocation gives the deployable module, the program after each phase (the `hal` phase
holds every dispatch call site with its location and workgroup count) and the executable dumps
(sources, configured sources, binaries). Everything lands in `artifacts/`, with a manifest of flags,
tool versions and timings. The standalone benchmark dumps are written later, when a command needs
them (:mod:`tracelink.compile.benchmarks`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.atomic import make_directory, write_text_atomic
from tracelink.profile_dir.claim import ensure_inside
from tracelink.compile.program_text import check_program_text
from tracelink.compile.targets import TARGET_FLAGS, device_target, target_flags  # TARGET_FLAGS: llvm-cpu's, for callers
from tracelink.iree_tools import TUNING_SPEC_FLAG, compile_command, safe_threading
from tracelink.tools import ToolRun, compiler_version, open_files
from tracelink.profile_dir import files


PHASE_POLL_S = 0.02  # how often a reader waiting for a phase's dump looks again


@dataclass
class CompileOptions:
    """How to compile: the device and its target (CPU, or GPU chip and features), the input dialect and
    anything else the user passes."""

    target_cpu: str = "host"  # llvm-cpu only
    device: str = "local-task"  # the runtime device; it decides the backend (:mod:`tracelink.compile.targets`)
    target_chip: str | None = None  # GPU backends only
    target_features: str | None = None
    input_type: str | None = None  # None: iree-compile auto-detects
    tuning_spec: Path | None = None
    link_embedded: bool = True  # False builds system shared libraries (needed by the perf hook)
    extra_flags: list[str] = field(default_factory=list)
    timeout_s: float = 900.0

    @classmethod
    def from_record(cls, recorded: dict) -> CompileOptions:
        """The options as a manifest records them (``compiler.options``); keys it does not know are left out."""
        known = {option.name for option in fields(cls)}
        options = cls(**{key: value for key, value in recorded.items() if key in known})
        if options.tuning_spec:
            options.tuning_spec = Path(options.tuning_spec)
        return options


@dataclass
class CompileResult:
    """Where the compile stage put its outputs."""

    input_path: Path
    artifacts: Path
    vmfb: Path
    phases: Path
    executables: Path
    flags: list[str]
    seconds: float


def compile_flags(options: CompileOptions, artifacts: Path, dumps: bool = True) -> list[str]:
    """The iree-compile flags for a profiling build, dumps going under ``artifacts`` (none without ``dumps``:
    a build whose module alone is used, such as the one the hook reads push constants from)."""
    flags = target_flags(options.device, options.target_cpu, options.target_chip, options.target_features)
    if dumps:
        executables = artifacts / "executables"
        flags += [
            "--mlir-print-debuginfo",
            # Weights would be printed into every phase dump; constants IREE inlines into dispatches
            # (≤ 256 bytes) stay below this, so executable and benchmark dumps remain compilable.
            "--mlir-elide-elementsattrs-if-larger=4096",
            # The same for weights held as resources (torch's FX importer writes them so): unelided, every
            # phase dump repeated all of a model's weights.
            "--mlir-elide-resource-strings-if-larger=4096",
            f"--dump-compilation-phases-to={artifacts / 'phases'}",
            f"--iree-hal-dump-executable-sources-to={executables}",
            f"--iree-hal-dump-executable-configurations-to={executables}",
            f"--iree-hal-dump-executable-binaries-to={executables}",
        ]
        if device_target(options.device).is_gpu:  # the GPU code in MLIR (SPIR-V for Vulkan); llvm-cpu's would be large .ll/.o
            flags.append(f"--iree-hal-dump-executable-intermediates-to={executables}")
    if options.input_type:
        flags.append(f"--iree-input-type={options.input_type}")
    if options.tuning_spec is not None:
        flags.append(f"{TUNING_SPEC_FLAG}={Path(options.tuning_spec).resolve()}")
    if not options.link_embedded and not device_target(options.device).is_gpu:
        flags.append("--iree-llvmcpu-link-embedded=false")
    return flags + list(options.extra_flags)


def first_diagnostics(output: str, limit: int = 3) -> str:
    """The compiler's first error lines (``file:line:col: error: ...``), joined on one line."""
    errors = [line.strip() for line in output.splitlines() if ": error:" in line]
    chosen = errors[:limit] or [line.strip() for line in output.splitlines() if line.strip()][:limit]
    return " | ".join(chosen) or "no diagnostics printed"


class PendingCompile:
    """An ``iree-compile`` run started in the background; :meth:`finish` waits for its result.

    The caller checks the program text first (:func:`check_program_text`): iree-compile names files
    after the program's symbols.
    """

    def __init__(self, input_path: Path, artifacts: Path, options: CompileOptions, dumps: bool = True) -> None:
        self.input_path = Path(input_path).resolve()
        if not self.input_path.is_file():
            raise TracelinkError(f"{self.input_path}: input program not found")
        if options.tuning_spec is not None and not Path(options.tuning_spec).is_file():
            raise TracelinkError(f"{options.tuning_spec}: tuning spec not found")
        # iree-compile writes its dumps by name: their folders are made here, in the output directory, none a link
        for folder in (artifacts / "phases", artifacts / "executables") if dumps else (artifacts,):
            make_directory(folder, inside=artifacts.parent)
        self.artifacts = artifacts
        self.options = options
        self.flags = safe_threading(compile_flags(options, artifacts, dumps))
        self.vmfb = artifacts / files.VMFB
        self.started = time.perf_counter()
        command = compile_command(self.input_path, self.vmfb, self.flags)
        self.run = ToolRun(command, artifacts / "compile.log", f"{self.input_path}: iree-compile")
        self.ended = threading.Event()  # set once the compiler is waited for or stopped

    def wait_for_phase(self, phase: str) -> None:
        """Block until the dump of ``phase`` is whole: the compiler has closed it (it writes a dump at
        once, in a few milliseconds, then runs the next phase for up to seconds), or, where its open
        files cannot be read, it has written a later phase's dump (it writes them in order). Returns too
        once the compiler has ended, whether or not it wrote the dump (the reader then finds it, or says
        it is missing)."""
        phases = self.artifacts / "phases"
        while not self.ended.wait(PHASE_POLL_S):
            written = dumped_phases(phases)
            if phase not in written:
                continue
            if max(written.values()) > written[phase]:
                return
            dump = next(phases.glob(f"*.{written[phase]}.{phase}.mlir"), None)
            held = open_files(self.run.process.pid)
            if dump is not None and held is not None and str(dump.resolve()) not in held:
                return

    def finish(self) -> CompileResult:
        """Wait for the compiler; its log stays in ``artifacts/compile.log`` whether or not it succeeds."""
        try:
            self.run.wait(self.options.timeout_s, explain=first_diagnostics)
        finally:
            self.ended.set()
        for dump in (self.artifacts / "phases", self.artifacts / "executables"):
            for path in dump.rglob("*"):
                ensure_inside(self.artifacts, path)
        return CompileResult(
            input_path=self.input_path,
            artifacts=self.artifacts,
            vmfb=self.vmfb,
            phases=self.artifacts / "phases",
            executables=self.artifacts / "executables",
            flags=self.flags,
            seconds=time.perf_counter() - self.started,
        )


def dumped_phases(phases: Path) -> dict[str, int]:
    """Each phase dumped so far in ``phases`` and its place in the compiler's order (``<module>.<n>.<phase>.mlir``)."""
    written = {}
    for path in phases.glob("*.mlir"):
        parts = path.name.split(".")
        if len(parts) >= 4 and parts[-3].isdigit():
            written[parts[-2]] = int(parts[-3])
    return written


def compile_program(input_path: Path, artifacts: Path, options: CompileOptions, dumps: bool = True) -> CompileResult:
    """Compile ``input_path`` for its device's backend into ``artifacts``, with debug locations and all dumps
    unless ``dumps`` is False."""
    check_program_text(input_path)
    return PendingCompile(input_path, artifacts, options, dumps).finish()


def write_manifest(artifacts: Path, entries: dict) -> Path:
    """Merge ``entries`` into ``artifacts/manifest.json`` (written atomically) and return its path."""
    path = artifacts / files.MANIFEST
    manifest = json.loads(path.read_text()) if path.exists() else {}
    manifest.update(entries)
    return write_text_atomic(path, json.dumps(manifest, indent=2, default=str))


def compile_manifest_entries(result: CompileResult, options: CompileOptions) -> dict:
    """What the manifest records about compilation."""
    return {
        "input": str(result.input_path),
        "compiler": {"version": compiler_version(), "flags": result.flags, "options": asdict(options)},
        "timings_s": {"compile": round(result.seconds, 4)},
    }
