"""What `tracelink profile` runs and how; light to import, so the compiler can start before the rest loads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.collect.reference import DEFAULT as DEFAULT_COMPARE, Subject, subject_of
from tracelink.compile import CompileOptions, PendingCompile
from tracelink.compile.frontends import ExportedModel, PythonModel, entry_parts, is_python_entry, is_torch_module, load_entry
from tracelink.compile.frontends.lowering import export_and_compile
from tracelink.compile.onnx_import import import_onnx, is_onnx
from tracelink.compile.targets import device_target, target_flags
from tracelink.compile.frames import LIBRARY_FRAMES
from tracelink.profile_dir.claim import OutputClaim, claim_output
from tracelink.compile.program_text import check_program_text
from tracelink.profile_dir import files

COLLECTORS = ("hal", "tracy", "hook")


def default_collector(device: str) -> str:
    """The collector ``tracelink profile`` uses on ``device`` when none is named: on a GPU, the one with its device time."""
    target = device_target(device)
    return target.timed_by if target.is_gpu else "hal"


@dataclass(frozen=True)
class FunctionRun:
    """One function of a profile of several: its name, its ``--input`` values and its own archives."""

    name: str
    inputs: tuple[str, ...] = ()
    parameters: tuple[str, ...] = ()


@dataclass
class ProfileOptions:
    """What to run and how: everything `tracelink profile` takes besides the program and directory."""

    function: str | None = None
    # Two or more: each is profiled into functions/<name>/ of the one directory, after one compile.
    functions: tuple[FunctionRun, ...] = ()
    inputs: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    repetitions: int = 10
    warmup: int = 1
    seed: int = 0
    timeout_s: float = 600.0
    collector: str = "hal"
    hook_events: list[str] = field(default_factory=list)  # perf_event counters for the hook collector
    # frame rules (:mod:`tracelink.compile.frames`): library code's self time in the user view goes to the line calling it
    library_frames: tuple[str, ...] = LIBRARY_FRAMES
    decompose: tuple[str, ...] = ()  # ATen ops a PyTorch model's export decomposes (kept whole by default)
    export: dict | None = None  # a Python model's export as the manifest records it (profile.json's ``export``)
    compile: CompileOptions = field(default_factory=CompileOptions)
    force: bool = False  # write into a non-empty directory that is not a tracelink profile
    source_roots: list[Path] = field(default_factory=list)  # besides the program's directory and the cwd
    source_map: list[tuple[str, Path]] = field(default_factory=list)  # (recorded prefix, local directory)
    embed_sources: bool = True  # False: the report embeds no source file
    # fix the dynamic sizes the inputs' shapes leave unknown with one call under the hook (llvm-cpu; a
    # rebuild as system libraries first when the build embeds its executables)
    hooked_sizes: bool = True
    # the framework's own runs beside IREE's (``--compare``: :mod:`tracelink.collect.reference`)
    compare: tuple[str, ...] = (DEFAULT_COMPARE,)
    reference: Subject | None = None  # what they run, set from the model once it is loaded


def for_function(options: ProfileOptions, run: FunctionRun) -> ProfileOptions:
    """The options of one function of a profile of several: its inputs, and the shared archives then its own."""
    return replace(options, function=run.name, functions=(), inputs=list(run.inputs), parameters=[*options.parameters, *run.parameters])


def with_exported_model(options: ProfileOptions, exported: ExportedModel) -> ProfileOptions:
    """The options of a Python model's run: its example inputs (unless ``--input`` was given), its weights'
    archive, its sources and what its export did; with several entry points, one function run each."""
    return replace(
        options,
        inputs=list(options.inputs) or exported.inputs,
        parameters=[*exported.parameters, *options.parameters],
        source_roots=[*options.source_roots, *exported.source_dirs],
        export=exported.manifest_entry(),
        # several entry points: each a function of the program, profiled side by side on its own example inputs
        functions=tuple(FunctionRun(name, tuple(inputs)) for name, inputs in exported.functions.items()) or options.functions,
    )


def with_collector_requirements(options: ProfileOptions) -> ProfileOptions:
    """The options with what the collector needs of the build: the hook sees only system-library executables
    (of llvm-cpu: on a GPU device it has nothing to hook)."""
    device = device_target(options.compile.device)
    if device.is_gpu and options.collector != device.timed_by:
        raise TracelinkError(f"--device {device.device} gives per-dispatch device time to --collector {device.timed_by} only "
                             f"(IREE 3.13: {device.why_timed_by})")
    if options.collector == "hook":
        return replace(options, compile=replace(options.compile, link_embedded=False))
    return options


@dataclass
class StartedProfile:
    """A claimed profile directory and the compile running into it."""

    claim: OutputClaim
    compile: PendingCompile
    exported: ExportedModel | None = None  # the Python model exported into the program, with its inputs
    reference: Subject | None = None  # the model the framework's own runs run (``--compare``)

    def stop(self) -> None:
        """Kill the compiler if it still runs and unlock the directory (idempotent)."""
        self.compile.run.kill()
        self.compile.ended.set()  # a reader waiting for a phase's dump stops waiting
        self.claim.release()


def files_read(program: Path, options: ProfileOptions) -> tuple[Path, ...]:
    """The files a profile run reads: program, tuning spec, ``@file`` inputs, parameter archives."""
    paths = [Path(program)]
    if options.compile.tuning_spec is not None:
        paths.append(Path(options.compile.tuning_spec))
    inputs = [*options.inputs, *(value for run in options.functions for value in run.inputs)]
    parameters = [*options.parameters, *(value for run in options.functions for value in run.parameters)]
    paths += [Path(value.split("@", 1)[1]) for value in inputs if "@" in value]
    paths += [Path(value.split("=", 1)[-1]) for value in parameters]
    return tuple(paths)


IRPA_MAGIC = b"IRPA"  # iree/io/formats/irpa: every IREE parameter archive starts with it


def check_parameters(values: list[str]) -> None:
    """Each ``--parameters [SCOPE=]FILE``: a readable file, and an ``.irpa`` one an IREE parameter archive.

    The runtime's own error for a damaged archive ("IRPA file magic missing or invalid") names no file.
    """
    for value in values:
        path = Path(value.split("=", 1)[-1])
        try:
            with path.open("rb") as archive:
                head = archive.read(len(IRPA_MAGIC))
        except OSError as error:
            raise TracelinkError(f"{path}: parameter archive unreadable ({error.strerror})") from None
        if path.suffix == ".irpa" and head != IRPA_MAGIC:
            raise TracelinkError(f"{path}: not an IREE parameter archive (it does not start with {IRPA_MAGIC.decode()}); --parameters {value}")


def start_compile(program: Path | PythonModel, out: Path, options: ProfileOptions) -> StartedProfile:
    """Check ``program``, claim ``out`` and start compiling into ``out/artifacts`` (in the background).

    An ``.onnx`` model is imported first into ``out/artifacts/imported.mlir``, which is compiled and
    profiled in its place. A Python model (``model.py:make``, or a :class:`PythonModel`) is loaded
    before ``out`` is touched, then exported into ``out/artifacts/exported.mlir``.
    """
    if isinstance(program, PythonModel) or is_python_entry(program):
        model = program if isinstance(program, PythonModel) else load_entry(program)
        framework = "torch" if is_torch_module(model.target) else "jax"
        subject = subject_of(model.target, model.args, framework, options.compare, model.origin, model.entries)
        started = start_python_compile(model, Path(out), options)
        started.reference = subject
        return started
    program = Path(program).resolve()
    if not program.is_file():
        raise TracelinkError(f"{program}: input program not found")
    subject = subject_of(program, (), "onnx" if is_onnx(program) else None, options.compare, str(program))
    if not is_onnx(program):
        check_program_text(program)
    check_parameters([*options.parameters, *(value for run in options.functions for value in run.parameters)])
    # a device and collector that do not go together, or a GPU target missing its chip, fail before anything is written
    with_collector_requirements(options)
    target_flags(options.compile.device, options.compile.target_cpu, options.compile.target_chip, options.compile.target_features)
    claim = claim_output(Path(out), options.force, files_read(program, options))
    try:
        artifacts = Path(out) / files.ARTIFACTS
        if is_onnx(program):
            program = import_onnx(program, artifacts / "imported.mlir").resolve()
            check_program_text(program)
        return StartedProfile(claim, PendingCompile(program, artifacts, with_collector_requirements(options).compile), reference=subject)
    except BaseException:
        claim.release()
        raise


def start_python_compile(model: PythonModel, out: Path, options: ProfileOptions) -> StartedProfile:
    """Claim ``out``, export ``model`` into it and start compiling the exported program."""
    if options.functions:  # a Python model's functions are its entry points
        raise TracelinkError(f"{model.origin}: several --function need an MLIR or ONNX program with those functions; "
                             "a Python model names its entry points itself (make() returning {\"prefill\": (fn, args), ...})")
    claim = claim_output(out, options.force, files_read(Path(entry_parts(model.origin)[0]), options))
    try:
        compile_options = with_collector_requirements(options).compile
        exported, pending = export_and_compile(model, out / files.ARTIFACTS, compile_options, options.decompose, options.library_frames)
        return StartedProfile(claim, pending, exported)
    except BaseException:
        claim.release()
        raise
