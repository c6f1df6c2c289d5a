"""Compile stage: run the real `iree-compile` with debug locations and every dump tracelink reads.

One compiler invocation gives the deployable module, the program after each phase (the `hal` phase
holds every dispatch call site with its location and workgroup count) and the executable dumps
(sources, configured sources, standalone benchmarks, binaries). Everything lands in `artifacts/`,
with a manifest of flags, tool versions and timings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tracelink import TracelinkError
from tracelink.atomic import write_text_atomic

TARGET_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
)


@dataclass
class CompileOptions:
    """How to compile: the target CPU, the input dialect and anything else the user passes."""

    target_cpu: str = "host"
    input_type: str | None = None  # None: iree-compile auto-detects
    tuning_spec: Path | None = None
    link_embedded: bool = True  # False builds system shared libraries (needed by the perf hook)
    extra_flags: list[str] = field(default_factory=list)
    timeout_s: float = 900.0


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

    def phase_file(self, phase: str) -> Path:
        """The dump of one compilation phase, e.g. ``phase_file("hal")``."""
        matches = sorted(self.phases.glob(f"*.{phase}.mlir"))
        if not matches:
            raise TracelinkError(f"{self.phases}: the compiler wrote no '{phase}' phase dump")
        return matches[0]


def tool_path(name: str) -> str:
    """Path of an IREE command-line tool installed beside the running Python (the venv's bin/)."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        raise TracelinkError(f"{name} not found: install iree-base-compiler and iree-base-runtime 3.13.0")
    return found


def compiler_version() -> str:
    """The version line `iree-compile --version` prints (e.g. 'IREE (https://iree.dev): ...')."""
    out = subprocess.run([tool_path("iree-compile"), "--version"], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return " ".join(lines[:2])


def compile_flags(options: CompileOptions, artifacts: Path) -> list[str]:
    """The iree-compile flags for a profiling build, dumps going under ``artifacts``."""
    executables = artifacts / "executables"
    flags = [
        *TARGET_FLAGS,
        f"--iree-llvmcpu-target-cpu={options.target_cpu}",
        "--mlir-print-debuginfo",
        # Weights would be printed into every phase dump; constants IREE inlines into dispatches
        # (≤ 256 bytes) stay below this, so executable and benchmark dumps remain compilable.
        "--mlir-elide-elementsattrs-if-larger=4096",
        f"--dump-compilation-phases-to={artifacts / 'phases'}",
        f"--iree-hal-dump-executable-sources-to={executables}",
        f"--iree-hal-dump-executable-configurations-to={executables}",
        f"--iree-hal-dump-executable-benchmarks-to={executables}",
        f"--iree-hal-dump-executable-binaries-to={executables}",
    ]
    if options.input_type:
        flags.append(f"--iree-input-type={options.input_type}")
    if options.tuning_spec is not None:
        flags.append(f"--iree-codegen-tuning-spec-path={Path(options.tuning_spec).resolve()}")
    if not options.link_embedded:
        flags.append("--iree-llvmcpu-link-embedded=false")
    return flags + list(options.extra_flags)


def first_diagnostics(stderr: str, limit: int = 3) -> str:
    """The compiler's first error lines (``file:line:col: error: ...``), joined on one line."""
    errors = [line.strip() for line in stderr.splitlines() if ": error:" in line]
    chosen = errors[:limit] or [line.strip() for line in stderr.splitlines() if line.strip()][:limit]
    return " | ".join(chosen) or "no diagnostics printed"


def compile_program(input_path: Path, artifacts: Path, options: CompileOptions) -> CompileResult:
    """Compile ``input_path`` for llvm-cpu with debug locations and all dumps into ``artifacts``.

    The compiler log is kept in ``artifacts/compile.log`` whether or not compilation succeeds.
    """
    input_path = Path(input_path).resolve()
    if not input_path.is_file():
        raise TracelinkError(f"{input_path}: input program not found")
    if options.tuning_spec is not None and not Path(options.tuning_spec).is_file():
        raise TracelinkError(f"{options.tuning_spec}: tuning spec not found")
    artifacts.mkdir(parents=True, exist_ok=True)
    vmfb = artifacts / "app.vmfb"
    flags = compile_flags(options, artifacts)
    command = [tool_path("iree-compile"), str(input_path), "-o", str(vmfb), *flags]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=options.timeout_s, check=False)
    except subprocess.TimeoutExpired as error:
        raise TracelinkError(f"{input_path}: iree-compile did not finish within {options.timeout_s:g} s") from error
    seconds = time.perf_counter() - started
    (artifacts / "compile.log").write_text(" ".join(command) + "\n\n" + done.stdout + done.stderr)
    if done.returncode != 0:
        raise TracelinkError(
            f"{input_path}: iree-compile failed (exit {done.returncode}): {first_diagnostics(done.stderr)}"
            f" (full log: {artifacts / 'compile.log'})"
        )
    return CompileResult(
        input_path=input_path,
        artifacts=artifacts,
        vmfb=vmfb,
        phases=artifacts / "phases",
        executables=artifacts / "executables",
        flags=flags,
        seconds=seconds,
    )


def write_manifest(artifacts: Path, entries: dict) -> Path:
    """Merge ``entries`` into ``artifacts/manifest.json`` (written atomically) and return its path."""
    path = artifacts / "manifest.json"
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
