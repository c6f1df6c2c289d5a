"""Hand tuned configs to the compiler: one transform-dialect tuning spec (``--iree-codegen-tuning-spec-path``),
and configured executables for the dispatches a spec cannot reach.

For each chosen config the spec has a matcher that recognises the root op by what it computes —
contraction or convolution, element types, indexing maps and loop sizes — and yields a
``#iree_codegen.compilation_info`` (the tuned lowering config with the dispatch's pipeline); the
entry point ``@__kernel_config`` applies every matcher with one ``transform.foreach_match``. Because
matching is by computation, every dispatch of the program with the same root op gets the config.

A root op that IREE rewrites after the spec ran (``Dispatch.delivery == "configuration"``) gets its
config through ``--iree-hal-substitute-executable-configurations-from``: the dispatch's configured
executable, with the tuned config on its root op, is written to ``configurations/<executable>.mlir``
and replaces that executable after configuration. The substitution is by executable name, so it holds
for this program as compiled with these flags, and serves every call site of the executable.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir

from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import make_directory, remove_path, write_text_atomic
from tracelink.iree_tools import TUNING_SPEC_FLAG, compile_command
from tracelink.tools import compiler_failure, run_tool
from tracelink.ir_utils import walk
from tracelink.tune.candidates import set_root_config
from tracelink.tune.dispatch import Dispatch, config_fields, config_text, indexing_maps, is_root
from tracelink.profile_dir import files

# Flags of the profiling build that only dump or annotate; they are dropped when checking a spec.
DUMP_FLAG_PREFIXES = (
    "--dump-compilation-phases-to",
    "--iree-hal-dump-executable-",
    TUNING_SPEC_FLAG,
    "--iree-hal-substitute-executable-",
    "--mlir-print-debuginfo",
    "--compile-to",
    "-o",
)

SUBSTITUTE_FLAG = "--iree-hal-substitute-executable-configurations-from"
# The first words of every spec tracelink writes: `tune -o` replaces such a file, never another one.
SPEC_HEADER = "// Tuning spec written by `tracelink tune`"
PARAM = "!transform.param<i64>"
CONTRACTION_GROUPS = ("b", "m", "n", "k")
CONVOLUTION_GROUPS = ("batch", "img", "oc", "filter", "ic", "depth", "strides", "dilations")


@dataclass
class Choice:
    """A tuned config for one dispatch, with its measured gain."""

    dispatch: Dispatch
    fields: dict[str, list[int]]
    speedup: float = 1.0
    owner: Dispatch | None = None  # the tuned dispatch whose config this one shares (None: tuned itself)

    @property
    def compilation_info(self) -> str:
        return (
            f"#iree_codegen.compilation_info<lowering_config = {config_text(self.fields)}, "
            f"translation_info = {self.dispatch.translation_info}>"
        )


def _symbol(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in text)


def signature(dispatch: Dispatch) -> tuple:
    """What a matcher tests: two dispatches with the same signature get the same config."""
    return (dispatch.kind, tuple(dispatch.operand_types), tuple(dispatch.indexing_maps),
            tuple((k, tuple(v)) for k, v in sorted(dispatch.match_dims.items())))


def matcher(choice: Choice, name: str) -> str:
    dispatch = choice.dispatch
    types = dispatch.operand_types
    maps = ", ".join(dispatch.indexing_maps)
    if dispatch.kind == "contraction":
        groups, op = CONTRACTION_GROUPS, "transform.iree.match.contraction"
    elif dispatch.kind == "convolution":
        groups, op = CONVOLUTION_GROUPS, "transform.iree.match.convolution"
    else:
        raise TracelinkError(f"{dispatch.export}: no tuning-spec matcher for a {dispatch.kind} root op")
    results = ", ".join(f"%{group}" for group in groups)
    lines = [
        f"  transform.named_sequence @{name}(%op: !transform.any_op {{transform.readonly}}) "
        "-> (!transform.any_op, !transform.any_param) {",
        f"    {results} = {op} %op, lhs_type = {types[0]}, rhs_type = {types[1]}, output_type = {types[-1]}, "
        f"indexing_maps = [{maps}] : !transform.any_op -> {PARAM}",
    ]
    for group in groups:
        sizes = ", ".join(str(size) for size in dispatch.match_dims.get(group, []))
        lines.append(f"    transform.iree.match.dims_equal %{group}, [{sizes}] : {PARAM}")
    lines += [
        f"    %config = transform.param.constant {choice.compilation_info} -> !transform.any_param",
        "    transform.yield %op, %config : !transform.any_op, !transform.any_param",
        "  }",
    ]
    return "\n".join(lines)


def spec_text(choices: list[Choice]) -> str:
    """The merged spec; of several choices for the same root op, the one with the largest gain is kept."""
    if not choices:
        raise TracelinkError("no tuned configuration to write into a tuning spec")
    kept: dict[tuple, Choice] = {}
    for choice in choices:
        key = signature(choice.dispatch)
        if key not in kept or choice.speedup > kept[key].speedup:
            kept[key] = choice
    names = [f"match_{_symbol(choice.dispatch.export)}" for choice in kept.values()]
    body = [
        f"{SPEC_HEADER}: pass it to iree-compile with",
        "// --iree-codegen-tuning-spec-path=<this file>, or to `tracelink profile --tuning-spec`.",
        "module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {",
        "  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly}, "
        "%config: !transform.any_param {transform.readonly}) {",
        '    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param',
        "    transform.yield",
        "  }",
    ]
    for choice, name in zip(kept.values(), names):
        body.append(f"  // {choice.dispatch.export}: {choice.speedup:.2f}x over the default config")
        body.append(matcher(choice, name))
    pairs = ", ".join(f"@{name} -> @apply_op_config" for name in names)
    body += [
        "  transform.named_sequence @__kernel_config(%root: !transform.any_op {transform.consumed}) "
        "-> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {",
        f"    %updated = transform.foreach_match in %root {pairs} : (!transform.any_op) -> !transform.any_op",
        "    transform.yield %updated : !transform.any_op",
        "  }",
        "}",
    ]
    return "\n".join(body) + "\n"


def write_spec(choices: list[Choice], path: Path) -> Path:
    """Write the spec after checking that it parses and verifies."""
    text = spec_text(choices)
    try:
        ir.Module.parse(text, ir.Context())
    except ir.MLIRError as error:
        raise TracelinkError(f"{path}: generated tuning spec is invalid: {first_line(error)}") from error
    make_directory(path.parent)
    return write_text_atomic(path, text)


def write_configurations(choices: list[Choice], directory: Path) -> Path:
    """Write ``<executable>.mlir`` for each choice: its configured executable with the tuned root config.

    Of several choices for one executable, the one with the largest gain is kept."""
    kept: dict[str, Choice] = {}
    for choice in choices:
        name = choice.dispatch.executable
        if name not in kept or choice.speedup > kept[name].speedup:
            kept[name] = choice
    make_directory(directory)
    for name, choice in kept.items():
        module = ir.Module.parseFile(str(choice.dispatch.benchmark), ir.Context())
        set_root_config(module, choice.fields)
        executable = next(op for op in walk(module.operation) if op.name == "hal.executable")
        if not executable.verify():
            raise TracelinkError(f"{choice.dispatch.benchmark}: the executable with the tuned config does not verify")
        write_text_atomic(directory / f"{name}.mlir", str(executable) + "\n")
    return directory


@dataclass
class Tuning:
    """What `tune` hands over: a tuning spec, a directory of configured executables, or both."""

    spec: Path | None = None
    configurations: Path | None = None
    extra_flags: list[str] = field(default_factory=list)  # flags it was checked with and needs (a flag baseline)

    def flags(self) -> list[str]:
        """The iree-compile flags that apply it."""
        flags = list(self.extra_flags)
        if self.spec is not None:
            flags.append(f"{TUNING_SPEC_FLAG}={self.spec.resolve()}")
        if self.configurations is not None:
            flags.append(f"{SUBSTITUTE_FLAG}={self.configurations.resolve()}")
        return flags

    def remove(self) -> None:
        for path in (self.spec, self.configurations):
            if path is not None:
                remove_path(path, path.parent)


def write_tuning(choices: list[Choice], workdir: Path) -> Tuning:
    """``workdir/spec.mlir`` for the choices a spec reaches, ``workdir/configurations/`` for the others.

    What an earlier tune wrote there is removed first, so nothing stale is applied with the new result."""
    Tuning(workdir / "spec.mlir", workdir / "configurations").remove()
    by_spec = [c for c in choices if c.dispatch.delivery == "spec"]
    substituted = [c for c in choices if c.dispatch.delivery != "spec"]
    return Tuning(write_spec(by_spec, workdir / "spec.mlir") if by_spec else None,
                  write_configurations(substituted, workdir / "configurations") if substituted else None)


def configured_roots(module: ir.Module) -> list[tuple[list[str], dict[str, list[int]]]]:
    """(indexing maps, lowering-config fields) of every configured root op in a compiled program."""
    roots = []
    for op in walk(module.operation):
        if is_root(op):
            maps = [str(item) for item in indexing_maps(op)]
            roots.append((maps, config_fields(op.attributes["lowering_config"])))
    return roots


def compile_variant(program: Path, flags: list[str], extra: list[str], workdir: Path, timeout: float, what: str) -> Path:
    """Compile ``program`` with the profiled build's flags (without its dumps) and ``extra``: ``workdir/app.vmfb``.

    The command and the compiler's messages go to ``workdir/compile.log``; ``what`` names the variant in errors."""
    remove_path(workdir, workdir.parent)  # dumps of an earlier build must not be read as this one's
    make_directory(workdir)
    vmfb = workdir / files.VMFB
    kept = [flag for flag in flags if not flag.startswith(DUMP_FLAG_PREFIXES)]
    command = compile_command(program, vmfb, [*kept, *extra])
    try:
        done = run_tool(command, timeout)
    except subprocess.TimeoutExpired as error:
        raise TracelinkError(f"{program}: compiling with {what} took over {timeout:g} s") from error
    log = workdir / "compile.log"
    write_text_atomic(log, shlex.join(command) + "\n\n" + done.stderr)  # the command as a shell runs it again
    if done.returncode != 0:
        raise TracelinkError(f"{what}: the program {program} does not compile with it: "
                             f"{compiler_failure(done.stderr, done.returncode)} (see {log})")
    return vmfb


def check_applied(program: Path, flags: list[str], tuning: Tuning, choices: list[Choice], workdir: Path,
                  timeout: float) -> tuple[list[Choice], Path]:
    """Compile ``program`` with the tuning; return the choices not applied and the compiled program.

    A choice counts as applied when some root op of the dumped executables has its indexing maps and
    exactly its config: the configured dump shows what a spec set, the benchmark dump (written after
    substitution) what a substituted executable brought. The program (``workdir/app.vmfb``) is what the
    in-program checks time against the profiled build.
    """
    dump = workdir / "configured"
    vmfb = compile_variant(program, flags, [*tuning.flags(), f"--iree-hal-dump-executable-configurations-to={dump}",
                                            f"--iree-hal-dump-executable-benchmarks-to={dump}"],
                           workdir, timeout, str(tuning.spec or tuning.configurations))
    dumps = sorted(dump.glob("configured_*.mlir")) + sorted(dump.glob("*_benchmark.mlir"))
    roots = [root for path in dumps for root in configured_roots(ir.Module.parseFile(str(path), ir.Context()))]
    return [c for c in choices if (c.dispatch.indexing_maps, c.fields) not in roots], vmfb
