"""The `tracelink profile` command.

It starts ``iree-compile`` before importing the pipeline (pandas, networkx, the report, ~0.6 s) and
rich, so those imports overlap with the compiler instead of delaying it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
from pathlib import Path
from types import ModuleType

from tracelink.compile import CompileOptions
from tracelink.compile.targets import DEVICES
from tracelink.commands.arguments import add_source_arguments, at_least, positive_float
from tracelink.compile.frames import LIBRARY_FRAMES
from tracelink.errors import TracelinkError
from tracelink.collect.reference import DEFAULT as DEFAULT_COMPARE, parse_compare
from tracelink.pipeline.options import COLLECTORS, FunctionRun, ProfileOptions, default_collector, start_compile


class StartFunction(argparse.Action):
    """``--function NAME``: the ``--input`` and ``--parameters`` after it belong to it."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        namespace.function_groups = [*(namespace.function_groups or []), {"name": value, "input": [], "parameters": []}]


class ToCurrentFunction(argparse.Action):
    """``--input`` / ``--parameters``: to the last ``--function`` given, or to all before the first."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        groups = namespace.function_groups
        if groups:
            groups[-1][self.dest].append(value)
        else:
            setattr(namespace, self.dest, [*getattr(namespace, self.dest), value])


def function_runs(args: argparse.Namespace) -> tuple[str | None, list[str], list[str], tuple[FunctionRun, ...]]:
    """(function, inputs, parameters, functions) of the options: one function as before, or two or more
    each with its own inputs (an ``--input`` before the first ``--function`` belongs to none of them)."""
    groups = args.function_groups or []
    if len(groups) <= 1:
        group = groups[0] if groups else {"name": None, "input": [], "parameters": []}
        return group["name"], [*args.input, *group["input"]], [*args.parameters, *group["parameters"]], ()
    if args.input:
        raise TracelinkError(f"--input {args.input[0]} comes before the first --function; with several functions, "
                             "give each one's --input after its --function")
    names = [group["name"] for group in groups]
    if len(set(names)) < len(names):
        raise TracelinkError(f"--function {next(n for n in names if names.count(n) > 1)} is given twice")
    return None, [], list(args.parameters), tuple(FunctionRun(g["name"], tuple(g["input"]), tuple(g["parameters"])) for g in groups)


def options_from_args(args: argparse.Namespace) -> ProfileOptions:
    function, inputs, parameters, functions = function_runs(args)
    return ProfileOptions(
        function=function,
        functions=functions,
        inputs=inputs,
        parameters=parameters,
        repetitions=args.repetitions,
        warmup=args.warmup,
        seed=args.seed,
        timeout_s=args.timeout,
        collector=args.collector or default_collector(args.device),
        hook_events=[e for e in args.events.split(",") if e] if args.events else [],
        library_frames=(*LIBRARY_FRAMES, *args.library_frames),
        decompose=tuple(args.decompose),
        force=args.force,
        source_roots=args.source_root,
        source_map=args.source_map,
        embed_sources=not args.no_sources,
        hooked_sizes=not args.no_hooked_sizes,
        compare=parse_compare(args.compare),
        compile=CompileOptions(
            target_cpu=args.target_cpu,
            device=args.device,
            target_chip=args.target_chip,
            target_features=args.target_features,
            input_type=args.iree_input_type,
            tuning_spec=args.tuning_spec,
            extra_flags=args.compile_flag,
            timeout_s=args.timeout,
        ),
    )


def imported_beside_the_compiler(*names: str) -> tuple[ModuleType, ...]:
    """The modules ``tracelink.<name>``, imported with the cyclic garbage collector off, then frozen.

    They make many objects that live as long as the process: the collector's passes over them found
    nothing to free, beside a compiler that wants both cores.
    """
    gc.disable()
    try:
        return tuple(importlib.import_module(f"tracelink.{name}") for name in names)
    finally:
        gc.freeze()
        gc.enable()


def run_profile_command(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    pending = start_compile(args.program, args.output, options)
    tables: list[str] = []  # one function's summary tables, rendered while its report is built
    try:
        # these load while the compiler runs
        pipeline, summary, output, textsafe = imported_beside_the_compiler("pipeline", "report.summary", "report.json_output", "textsafe")
        # Strings as Python objects: the tables hold hundreds to thousands of rows, where pyarrow's cost per
        # call dominated (docs/reference/numbers.md). The same tables, report
        # and trace; events.parquet's strings are arrow `string` rather than `large_string`.
        importlib.import_module("pandas").set_option("mode.string_storage", "python")
        # With --json the tables go to stderr and stdout holds only the document.
        console = summary.summary_console(stderr=args.json)

        def render_tables(profile) -> None:
            # a failure here is met again below, when the tables are printed once the profile and its report are written
            with contextlib.suppress(Exception):
                tables.append(summary.rendered_tables(profile, console))

        result = pipeline.profile(args.program, args.output, options, textsafe.TerminalConsole(stderr=True), pending=pending,
                                   aggregated=None if options.functions else render_tables)
    finally:
        pending.stop()
    several = isinstance(result, importlib.import_module("tracelink.profile_dir.functions").FunctionProfiles)
    if several:
        summary.print_function_profiles(result, console)
    else:
        summary.print_summary(result, console, tables=tables[0] if tables else None)
    if args.json:
        print(output.dump(output.functions_document(result) if several else output.profile_document(result)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("profile", help="compile, run and profile a program; map time to source lines")
    parser.add_argument("program", type=Path, help="the application in MLIR (linalg, StableHLO, TOSA, torch), an ONNX model (.onnx), "
                        "or a Python model as model.py:make, where make() returns (jax_fn_or_torch_module, example_args)")
    parser.add_argument("-o", "--output", type=Path, default=Path("out"), help="profile directory (default: out/)")
    parser.add_argument("--function", action=StartFunction, dest="function_groups", default=None,
                        help="function to run (default: the only or first public one); repeat it to profile several in one "
                             "directory after one compile, each followed by its own --input values")
    parser.add_argument("--input", action=ToCurrentFunction, default=[],
                        help="an input value, iree-run-module syntax (repeat per argument); after a --function, that function's")
    parser.add_argument("--parameters", action=ToCurrentFunction, default=[],
                        help="parameter archive, e.g. model=weights.irpa; before the first --function for all, after one for it alone")
    parser.add_argument("--repetitions", type=at_least(1, int), default=10, help="measured calls of the function (default 10)")
    parser.add_argument("--warmup", type=at_least(0, int), default=1, help="calls before measuring (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated inputs")
    parser.add_argument("--collector", choices=COLLECTORS,
                        help="hal: IREE's HAL profiler (default; on vulkan its device timestamps); tracy: a Tracy capture (default on cuda and hip: their GPU zones); "
                             "hook: the perf hook (per workgroup, llvm-cpu)")
    parser.add_argument("--events", help="perf_event counters for --collector hook, e.g. task-clock,page-faults")
    parser.add_argument("--library-frames", action="append", default=[], metavar="GLOB",
                        help="files whose frames are library code, for the user view of self time; '!GLOB' marks files as the model's own code "
                             "(repeatable; the last matching rule wins; by default installed packages and the stdlib are library code, "
                             "the model definitions they ship, such as transformers/models, are the model's)")
    parser.add_argument("--decompose", action="append", default=[], metavar="OP",
                        help="a PyTorch model's ATen op (or one overload of it: squeeze.dims) to decompose with torch's own decomposition, "
                             "e.g. scaled_dot_product_attention (repeatable; attention, linear, matmul and convolutions are kept whole by "
                             "default; ops IREE cannot lower are decomposed without it)")
    parser.add_argument("--device", choices=DEVICES, default="local-task",
                        help="device to run on (default local-task); it decides the compile target: llvm-cpu, vulkan-spirv, cuda or rocm (hip)")
    parser.add_argument("--target-cpu", default="host", help="--iree-llvmcpu-target-cpu, for local-task and local-sync (default host)")
    parser.add_argument("--target-chip", help="GPU architecture for --device vulkan/cuda/hip, e.g. sm_80, gfx942, rdna3 (needed for hip)")
    parser.add_argument("--target-features", help="GPU target features (--iree-cuda/rocm/vulkan-target-features)")
    parser.add_argument("--iree-input-type", help="input dialect (default: auto-detected by iree-compile)")
    parser.add_argument("--tuning-spec", type=Path, help="a transform-dialect tuning spec (from 'tracelink tune')")
    parser.add_argument("--compile-flag", action="append", default=[], help="extra iree-compile flag (repeatable)")
    parser.add_argument("--timeout", type=positive_float, default=600.0, help="seconds each tool may take (default 600)")
    parser.add_argument("--force", action="store_true", help="write into a non-empty directory that is not a tracelink profile")
    parser.add_argument("--no-hooked-sizes", action="store_true",
                        help="leave dynamic sizes the inputs' shapes do not fix unknown (their costs lower bounds) instead of "
                             "reading them from one call under the perf hook, which first rebuilds an embedded build")
    parser.add_argument("--compare", default=DEFAULT_COMPARE, metavar="NAMES",
                        help="the framework's own runs raced beside IREE's build and compared per line: none, or a comma-separated "
                             "list of eager, inductor (PyTorch), xla (JAX) and onnxruntime (.onnx); default: eager for a PyTorch model, "
                             "xla for a JAX function, onnxruntime for an .onnx model, none for MLIR")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout (the tables go to stderr)")
    add_source_arguments(parser)
    parser.set_defaults(handler=run_profile_command)
