"""`tracelink tune`: argument parsing and printing only (the work is in tune/session and below)."""

from __future__ import annotations

import argparse
import math
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tracelink.errors import TracelinkError
from tracelink.profile_dir.claim import locked, refuse_foreign_file
from tracelink.profile_dir import files

if TYPE_CHECKING:  # run.py pulls in the compiler bindings; the CLI imports it only when tuning
    from rich.console import Console

    from tracelink.profile_dir.profile import Profile
    from tracelink.tune.anchor import Anchor
    from tracelink.tune.config import TuneConfig
    from tracelink.tune.remote import RayWork
    from tracelink.tune.session import Session
    from tracelink.tune.targets import Outcome

TUNER_NAMES = ("xgb", "random", "grid")


def register(subparsers: argparse._SubParsersAction) -> None:
    tune = subparsers.add_parser(
        "tune",
        help="search IREE's lowering strategies, then tile configs of the hottest dispatches",
        description="First search IREE's whole-program lowering strategies (im2col, channels-last, data tiling, "
        "ukernels, conv data tiling, transpose propagation and their combinations): each is compiled, its "
        "outputs checked against the default build's and timed against it in alternating rounds "
        "(<profile>/tune/strategies.json, with what each faster strategy did to every source line). Then "
        "search tile configurations (workgroup, vector and reduction tile sizes) of the hottest tunable "
        "dispatches of the winning strategy's build, verify and time each candidate against the default "
        "config, and write one transform-dialect tuning spec with the configs that are significantly faster.",
    )
    tune.add_argument("profile", type=Path, help="profile directory written by 'tracelink profile'")
    which = tune.add_mutually_exclusive_group()
    which.add_argument("--top", type=int, help="tune the K hottest tunable dispatches (default 3)")
    which.add_argument("--dispatch", help="tune only this dispatch function (export name)")
    tune.add_argument("--trials", type=int, help="trials per dispatch on average, allocated round by round by expected end-to-end gain (default 32)")
    tune.add_argument("--tuner", choices=TUNER_NAMES, help="search strategy (default xgb)")
    tune.add_argument("--config", type=Path, help="TOML file with [space], [search], [measure], [select] tables")
    tune.add_argument("--resume", action="store_true", help="continue from <profile>/tune/records.jsonl, the record of what was measured")
    tune.add_argument("-o", "--output", type=Path, help="tuning spec to write (default <profile>/tune/spec.mlir)")
    tune.add_argument("--rounds", type=int, help="alternating rounds of the final whole-program check (default 10; "
                      "0: skip it and the per-config in-program check)")
    tune.add_argument("--budget", type=_duration, help="wall-clock time for the whole search, e.g. 20m, 900s, 1h "
                      "(default 20m; a number alone is minutes); what was measured when it runs out is kept")
    tune.add_argument("--no-strategies", action="store_true", help="skip the strategy search: tile configs of the "
                      "profiled build only")
    tune.add_argument("--json", action="store_true", help="print one JSON document on stdout (the text goes to stderr)")
    ray = tune.add_mutually_exclusive_group()
    ray.add_argument("--ray", action="store_true", help="build and race the strategies and the tile candidates on a local Ray "
                     "runtime started for this tune (loopback only; stopped at the end)")
    ray.add_argument("--ray-address", metavar="ADDRESS", help="build and race the strategies and the tile candidates on this Ray cluster "
                     "(auto, host:port or ray://host:port); every node needs the driver's tracelink, IREE and CPU")
    tune.add_argument("--ray-temp-dir", type=Path, help="the local Ray runtime's files and spilled objects "
                      "(default <profile>/tune/ray)")
    tune.add_argument("--ray-cpus", type=int, help="CPUs of the local Ray runtime (default: all)")
    tune.set_defaults(handler=run_tune)


def _duration(text: str) -> float:
    """Seconds of a --budget value: a number with s, m or h (minutes when no unit is given)."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}
    unit = text[-1:].lower() if text[-1:].lower() in scale else "m"
    try:
        value = float(text[:-1] if text[-1:].lower() in scale else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 20m, 900s, 1h)") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"the budget must be a positive duration, got {text!r}")
    return value * scale[unit]


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise TracelinkError(f"{flag} must be at least 1, got {value}")


def run_tune(args: argparse.Namespace) -> int:
    # Imported here, not at the top: xgboost and the tuner stay out of every other command's start-up.
    from tracelink.profile_dir.tune_record import TRIALS_FILE
    from tracelink.textsafe import TerminalConsole

    config = _config(args)
    console = TerminalConsole(stderr=True, highlight=False)
    profile, session = _tune(args, config, console)
    out = TerminalConsole(highlight=False, stderr=args.json)
    if session.strategies is not None:
        _print_strategies(out, session.strategies)
    _print_outcomes(out, session.outcomes)
    if session.tile_note:
        out.print(session.tile_note, markup=False, soft_wrap=True)
    trials = session.tuned_profile.directory / TRIALS_FILE
    # What the user profiled (an .onnx or model.py:make), which the lines below profile again, not its
    # import; a per-op composition that won is a rewritten program of its own
    program = profiled_program(profile, session.strategy_program())
    _print_verdict(out, profile, session, program, trials)
    command = apply_command(profile, session)
    if command is not None:  # runs as printed, from any directory, and builds what was raced
        out.print(f"apply it: {shlex.join(command)}", markup=False, soft_wrap=True)
    repros = print_anchor(out, profile, session.anchor, handed=command is not None) if session.anchor else {}
    if args.json:
        from tracelink.report.json_output import dump, tune_document

        document = tune_document(session.outcomes, session.tuning.spec if session.tuning else None, session.check, trials)
        document["strategies"] = session.strategies.document() if session.strategies else None
        document["apply"] = ({"program": str(program), "flags": session.apply_flags(), "vmfb": str(session.handed_build()),
                              "command": command} if command else None)
        document["reference"] = {**session.anchor.record(), "repros": repros} if session.anchor else None
        print(dump(document))
    return 0


def _config(args: argparse.Namespace) -> TuneConfig:
    """The tune configuration: the ``--config`` file, overridden by the command line's options."""
    from tracelink.tune.config import load_config
    from tracelink.tune.spec import SPEC_HEADER

    _positive(args.top, "--top")
    _positive(args.trials, "--trials")
    config = load_config(args.config)
    if args.top is not None:
        config.select.top = args.top
    if args.dispatch is not None:
        config.select.top = 1
    if args.trials is not None:
        config.search.n_trial = args.trials
    if args.tuner is not None:
        config.search.tuner = args.tuner
    if args.rounds is not None:
        if args.rounds < 0:
            raise TracelinkError(f"--rounds must be 0 or more, got {args.rounds}")
        config.select.program_rounds = args.rounds
        if args.rounds == 0:
            config.select.validate_rounds = 0
    if args.budget is not None:
        config.budget_s = args.budget
    if args.no_strategies:
        config.strategy.enabled = False
    if args.output is not None:
        refuse_foreign_file(args.output, SPEC_HEADER)  # before the search: its result would replace the file
    return config


def _tune(args: argparse.Namespace, config: TuneConfig, console: Console) -> tuple[Profile, Session]:
    """Load the profile and run the whole tune session on it, under the profile's lock."""
    from tracelink.profile_dir.tune_record import RECORDS_FILE
    from tracelink.profile_dir.profile import load_profile
    from tracelink.tune.session import tune_session

    try:
        with locked(args.profile, trees=("tune",)):  # tune/ is written all over: no link (or hard link) anywhere in it
            profile = load_profile(args.profile)
            if (backend := profile.summary.get("target", {}).get("backend", "llvm-cpu")) != "llvm-cpu":
                raise TracelinkError(f"{args.profile}: this profile ran {backend} code; tracelink tune supports llvm-cpu only for now")
            with _ray_work(args) as work:
                return profile, tune_session(profile, config, args.dispatch, args.resume, args.output, console,
                                             _profile_builder(profile, console), work)
    except KeyboardInterrupt:
        console.print(f"interrupted: what was measured is kept in {args.profile / RECORDS_FILE} "
                      "(continue with --resume)", markup=False)
        raise


@contextmanager
def _ray_work(args: argparse.Namespace) -> Iterator[RayWork | None]:
    """The Ray runtime of ``--ray`` / ``--ray-address`` for both searches' builds and races (None: in this process)."""
    if args.ray_address is None and not args.ray:
        if args.ray_temp_dir is not None or args.ray_cpus is not None:
            raise TracelinkError("--ray-temp-dir and --ray-cpus need --ray")
        yield None
        return
    from tracelink.tune.cluster import Cluster, RayOptions
    from tracelink.tune.remote import RayWork

    _positive(args.ray_cpus, "--ray-cpus")
    options = RayOptions(args.ray_address, args.ray_temp_dir, args.ray_cpus)
    with Cluster(options, args.profile / files.TUNE / "ray") as cluster:
        yield RayWork(cluster)


def _print_outcomes(out: Console, outcomes: list[Outcome]) -> None:
    """One line per tuned dispatch: its best config against the default, and what became of it."""
    from rich.markup import escape

    for o in outcomes:
        line = f"[bold]{escape(o.export)}[/] ({o.share:.1%} of dispatch time): "
        if math.isnan(o.speedup):
            line += f"{o.trials} trials, {o.failed} failed"
        else:
            line += (f"{_ms(o.default_ms)} -> {_ms(o.best_ms)} ms, {o.speedup:.2f}x (95% CI {o.ci_low:.2f}-{o.ci_high:.2f}); "
                     f"{o.trials} of {o.space_size} configs tried, {o.failed} failed; "
                     f"{'' if o.selected else 'not '}{_where_kept(o)}")
        out.print(line)
        if o.shared_with:
            others = o.shared_with.split(";")
            out.print(f"  the same config for {len(others)} more dispatch(es) with this root op: {', '.join(others)}",
                      markup=False)
        if not math.isnan(o.program_speedup):
            out.print(f"  inside the program: {o.program_speedup:.2f}x (95% CI {o.program_ci_low:.2f}-{o.program_ci_high:.2f})")
        if o.note:
            out.print(f"  {o.note}", markup=False)


def _print_verdict(out: Console, profile: Profile, session: Session, program: Path, trials: Path) -> None:
    """The whole-program check of the tuning and what was handed over (or why nothing was)."""
    tuning, check, outcomes = session.tuning, session.check, session.outcomes
    strategy = session.strategies.winner.name if session.strategies and session.strategies.winner else None
    against = f"the {strategy} build" if strategy else "the default"
    if check is not None and check["tuned"]:
        out.print(f"whole program with the tuning over {against}: {check['verdict']}, {check['speedup']:.2f}x "
                  f"(95% CI {_interval(check) or 'none'}, {check['rounds']} alternating rounds)")
        _print_baselines(out, check["baselines"])
        if check["flags"]:
            _print_flag_comparison(out, check["flags"])
        if check["load_warning"]:
            out.print(f"warning: {check['load_warning']}")
    if check is not None and not check["tuned"]:  # nothing was kept: what the flag baselines alone do
        out.print(f"no configuration was significantly faster than {against}; no spec written (trials: {trials})",
                  markup=False, soft_wrap=True)
        if check["baselines"]:
            out.print("IREE's flag baselines against the profiled build:", markup=False)
        _print_baselines(out, check["baselines"])
        warning = next((b["load_warning"] for b in check["baselines"].values() if b["load_warning"]), None)
        if warning:
            out.print(f"warning: {warning}")
        if check["best"]:
            out.print(f"the flag baseline {check['best']} is faster; use it: "
                      f"{shlex.join(profile_command(profile, program, check['best_flags']))}", markup=False, soft_wrap=True)
    elif tuning is None and check is not None and check["flags"] and check["flags"]["verdict"] == "flags":
        out.print(f"the flag baseline {check['flags']['baseline']} is the better choice; no spec written (trials: "
                  f"{trials})", markup=False, soft_wrap=True)
        out.print(f"use it: {shlex.join(profile_command(profile, program, check['flags']['flags']))}",
                  markup=False, soft_wrap=True)
    elif tuning is None and check is not None:
        out.print(f"the tuning does not make the whole program significantly faster than {against}; no spec written "
                  f"(trials: {trials})", markup=False, soft_wrap=True)
    elif tuning is None and outcomes:
        out.print(f"no configuration was significantly faster than {against}; no spec written (trials: {trials})",
                  markup=False, soft_wrap=True)
    elif tuning is not None:
        if tuning.spec is not None:
            out.print(f"tuning spec: {tuning.spec}  (trials: {trials})", markup=False)
        if tuning.configurations is not None:
            out.print(f"configured executables: {tuning.configurations}  (trials: {trials})", markup=False)


def print_anchor(out: Console, profile: Profile, anchor: Anchor, handed: bool) -> dict[str, str]:
    """The last lines: the build handed over against IREE's default and the framework's reference, its
    lines against the reference, and a repro folder for each line where it still loses by more than
    1.5x; the repros written, by line."""
    import pandas as pd
    from rich.markup import escape
    from rich.table import Table

    from tracelink.aggregate.reference import LOSS_RATIO
    from tracelink.report.fmt import ns

    if anchor.error is not None:
        out.print(f"{anchor.label}: not raced ({anchor.error}); tune's result stands", markup=False, soft_wrap=True)
        return {}
    found = anchor.comparisons()
    default = found["default_vs_reference"]
    out.print(f"against {anchor.label} ({default['rounds']} alternating rounds, {anchor.threads} threads each): "
              f"IREE's default {ns(default['tuned_ns'])}, "
              + (f"the build handed over {ns(found['handed_vs_default']['tuned_ns'])}, " if handed else "")
              + f"{anchor.label} {ns(default['base_ns'])} per call", markup=False, soft_wrap=True)
    if handed:
        out.print(f"  the build handed over: {found['handed_vs_default']['speedup']:.2f}x IREE's default "
                  f"(95% CI {_interval(found['handed_vs_default']) or 'none'}); "
                  f"{_against(found['handed_vs_reference'], anchor.label)}", markup=False, soft_wrap=True)
    else:
        out.print(f"  IREE's default, handed over as it is: {_against(default, anchor.label)}", markup=False, soft_wrap=True)
    warning = next((row["load_warning"] for row in found.values() if row["load_warning"]), None)
    if warning:
        out.print(f"  warning: {warning}", markup=False)
    if anchor.lines.empty:
        out.print(f"  {anchor.label} names no source line per op here: no per-line table", markup=False)
        return {}
    table = Table(title=f"hottest lines: IREE before and after tune, and {anchor.label} (per call)")
    for column in ("line", "IREE before", "IREE after", anchor.label, "after/ref."):
        table.add_column(column, justify="left" if column == "line" else "right")
    for row in anchor.lines.head(10).itertuples():
        ratio = "IREE only" if row.only_in == "iree" else ("ref. only" if row.only_in == "reference" else
                                                           "" if pd.isna(row.after_ratio) else f"{row.after_ratio:.2g}x")
        table.add_row(escape(f"{Path(row.file).name}:{row.line}") if row.file else "(outside the model's lines)",
                      ns(row.before_ns), ns(row.after_ns), ns(row.reference_ns), ratio + (" !" if row.after_loses else ""))
    out.print(table)
    repros = losing_line_repros(profile, anchor)
    if repros:
        out.print(f"still slower than {anchor.label} by more than {LOSS_RATIO:g}x on {len(anchor.losing_lines())} line(s); what "
                  "tune's strategies measured there, and a repro of its hottest dispatch to attach to an IREE issue:",
                  markup=False, soft_wrap=True)
        for row in anchor.losing_lines().itertuples():
            measured = f"{row.measured}, none enough" if row.measured else "no strategy's per-line table has it (no profiled strategy timed its ops apart)"
            out.print(f"  {row.file}:{row.line}: {measured}; {repros.get(f'{row.file}:{row.line}', 'no repro (beyond the first lines)')}",
                      markup=False, soft_wrap=True)
    return repros


def _against(row: dict, label: str) -> str:
    """An IREE build against the reference: how many times faster or slower, with the interval."""
    interval = f" (95% CI {_interval(row)})" if _interval(row) else ""
    if row["speedup"] >= 1:
        return f"{row['speedup']:.2f}x faster than {label}{interval}"
    low, high = row["ci_low"], row["ci_high"]
    inverted = "" if math.isnan(low) else f" (95% CI {1 / high:.2f}-{1 / low:.2f})"
    return f"{1 / row['speedup']:.2f}x slower than {label}{inverted}"


REPRO_LINES = 5  # repros written for the lines the handed build loses most on


def losing_line_repros(profile: Profile, anchor: Anchor) -> dict[str, str]:
    """A `tracelink repro` folder for the hottest dispatch of each line the handed build still loses on
    (at most :data:`REPRO_LINES`), in the handed build's profile; by line."""
    from tracelink.atomic import make_directory
    from tracelink.commands.repro import find_call_site, write_repro
    from tracelink.profile_dir.profile import load_profile

    losing = anchor.losing_lines()
    if losing.empty:
        return {}
    after = load_profile(anchor.after) if anchor.after != profile.directory else profile
    repros = {}
    for row in losing.head(REPRO_LINES).itertuples():
        line = f"{row.file}:{row.line}"
        try:
            site = find_call_site(after, line)
            folder = make_directory(profile.directory / files.TUNE_REFERENCE_DIR / "repro" / f"call_site_{site}", inside=profile.directory)
            repros[line] = str(write_repro(after, site, folder))
        except TracelinkError as error:
            repros[line] = f"no repro ({error})"
    return repros


def apply_command(profile: Profile, session) -> list[str] | None:
    """The ``tracelink profile`` command line (argv) of the build `tune` hands over for ``profile`` (the
    profile given to `tune`): the winning strategy's program and flags and the tuning found on them,
    run as the profile ran; None when the default build is best."""
    if session.tuning is None and (session.strategies is None or session.strategies.winner is None):
        return None
    return profile_command(profile, profiled_program(profile, session.strategy_program()), session.apply_flags())


def profiled_program(profile: Profile, composed: Path | None = None) -> Path:
    """The program the handed-over build compiles, as an absolute path: ``composed`` (a per-op
    composition that won), else the file the user profiled (an .onnx, a .mlir, ``/path/model.py:make``),
    else, for a model that has no file (profiled from Python), the MLIR it was exported to."""
    if composed is not None:
        return Path(os.path.abspath(composed))
    model = str(profile.summary.get("model") or "")
    file, colon, name = model.rpartition(":") if ":" in Path(model).name else (model, "", "")
    if file and Path(file).is_file():
        return Path(os.path.abspath(file) + colon + name)
    return Path(os.path.abspath(profile.summary.get("program") or profile.manifest.get("input", "program.mlir")))


def profile_command(profile: Profile, program: Path, flags: list[str]) -> list[str]:
    """``tracelink profile`` as a command line (argv) that builds and runs ``program`` as `tune` built and
    ran it for ``profile``: the profile's compile options (its own ``--compile-flag`` values first, less
    the dumps and the tuning spec, which no build `tune` races keeps), then ``flags`` (a tuning spec as
    ``--tuning-spec``), and the profile's function, inputs, parameters, repetitions, warm-up, collector,
    device and source options. Every path is absolute, so it runs from any directory."""
    from tracelink.compile.frontends import is_python_entry
    from tracelink.iree_tools import TUNING_SPEC_FLAG
    from tracelink.compare.diff import run_inputs, run_parameters
    from tracelink.tune.spec import DUMP_FLAG_PREFIXES

    options = profile.manifest.get("compiler", {}).get("options", {})
    summary = profile.summary
    command = ["tracelink", "profile", str(program)]
    own = [flag for flag in options.get("extra_flags", []) if not flag.startswith(DUMP_FLAG_PREFIXES)]
    for flag in [*own, *flags]:
        if flag.startswith(f"{TUNING_SPEC_FLAG}="):
            command += ["--tuning-spec", os.path.abspath(flag.split("=", 1)[1])]
        else:  # --compile-flag=... keeps argparse from reading the iree flag as an option of its own
            command.append(f"--compile-flag={flag}")
    export = profile.manifest.get("export", {})
    exported_again = is_python_entry(program)  # the model is exported again, its weights' archive with it
    if exported_again:
        command += [f"--decompose={op}" for op in export.get("decomposed", [])]
    command.append(f"--function={summary['function']}")
    command += [f"--input={_absolute_input(value)}" for value in run_inputs(profile)]
    command += [f"--parameters={_absolute_parameters(value)}" for value in run_parameters(profile)
                if not (exported_again and value in export.get("parameters", []))]
    command += [f"--repetitions={int(summary.get('repetitions', 10))}", f"--warmup={int(summary.get('warmup', 1))}"]
    device = options.get("device") or summary.get("target", {}).get("device") or "local-task"
    if device != "local-task":
        command.append(f"--device={device}")
    for flag, key in (("--target-cpu", "target_cpu"), ("--target-chip", "target_chip"),
                      ("--target-features", "target_features"), ("--iree-input-type", "input_type")):
        if options.get(key) and not (key == "target_cpu" and options[key] == "host"):
            command.append(f"{flag}={options[key]}")
    if not options.get("link_embedded", True) and summary.get("collector") != "hook":
        command.append("--compile-flag=--iree-llvmcpu-link-embedded=false")  # recorded without the hook collector
    if summary.get("collector") and summary["collector"] != _default_collector(device):
        command.append(f"--collector={summary['collector']}")
    if options.get("timeout_s") and float(options["timeout_s"]) != 600.0:
        command.append(f"--timeout={float(options['timeout_s']):g}")
    command += [f"--source-map={old}={os.path.abspath(new)}" for old, new in summary.get("source_map", [])]
    if summary.get("embed_sources") is False:
        command.append("--no-sources")
    return command


def _default_collector(device: str) -> str:
    from tracelink.pipeline.options import default_collector

    try:
        return default_collector(device)
    except TracelinkError:  # a device this tracelink does not know: name the recorded collector
        return ""


def _absolute_input(value: str) -> str:
    """An ``--input`` value with its file (``@path`` or ``SHAPE=@path``) made absolute."""
    if value.startswith("@"):
        return "@" + os.path.abspath(value[1:])
    head, at, path = value.partition("=@")
    return f"{head}=@{os.path.abspath(path)}" if at else value


def _absolute_parameters(value: str) -> str:
    """A ``--parameters [SCOPE=]FILE`` value with its file made absolute."""
    scope, equals, path = value.partition("=")
    return f"{scope}={os.path.abspath(path)}" if equals else os.path.abspath(value)


def _print_strategies(out, result) -> None:
    """The strategy table (one line per candidate), the winner and the lines each faster strategy changed most."""
    from rich.table import Table

    from tracelink.tune.strategy_space import UNCONFIRMED

    table = Table(title="lowering strategies against the default build (outputs checked, alternating rounds)")
    for column in ("strategy", "status", "speedup", "95% CI", "why"):
        table.add_column(column, justify="right" if column in ("speedup", "95% CI") else "left")
    for entry in sorted(result.document()["strategies"], key=lambda e: -(e["ratio"] or 0)):
        ci = entry["ci"]
        table.add_row(entry["name"], entry["status"], f"{entry['ratio']:.2f}x" if entry["ratio"] else "",
                      f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "", entry["reason"])
    out.print(table)
    if all(c.status == "not run" for c in result.candidates):
        out.print("no strategy was measured (the --budget ran out first)", markup=False)
    elif result.winner is None:
        earlier = [c.name for c in result.candidates if c.reason.startswith(UNCONFIRMED)]
        out.print("no strategy was significantly faster than the default build in the final race; the tile search runs on it"
                  + (f" ({', '.join(earlier)} read faster in an earlier, shorter race: rerun with more rounds on a quieter "
                     "machine to settle it)" if earlier else ""), markup=False, soft_wrap=True)
    else:
        out.print(f"winning strategy: {result.winner.name}, {result.winner.reason}", markup=False, soft_wrap=True)
    for name in result.profiles:
        rows = sorted((r for r in result.per_line if r["strategy"] == name), key=lambda r: -r["base_ns"])[:5]
        if rows:
            out.print(f"  {name}, the hottest lines of the default build: " + "; ".join(
                f"{Path(r['file']).name}:{r['line']} {r['op_kind']} {r['ratio']:.2f}x" for r in rows),
                markup=False, soft_wrap=True)


def _profile_builder(base, console):
    """Profile the base profile's program (the file the user gave) again with extra flags into a directory,
    with the base's function, inputs, repetitions and compile options: how each faster strategy gets
    its own profile for the per-line table and the tile search."""
    def build(flags: list[str], directory: Path, program: Path | None = None) -> Path:
        from tracelink.atomic import remove_path

        from tracelink.compile import CompileOptions
        from tracelink.pipeline.options import ProfileOptions
        from tracelink.pipeline import profile as run_pipeline
        from tracelink.profile_dir.profile import load_profile
        from tracelink.compare.diff import run_inputs, run_parameters

        compile_options = CompileOptions.from_record(base.manifest.get("compiler", {}).get("options", {}))
        compile_options.extra_flags = [*compile_options.extra_flags, *flags]
        summary = base.summary
        options = ProfileOptions(function=summary["function"], inputs=run_inputs(base), parameters=run_parameters(base),
                                 repetitions=int(summary.get("repetitions", 10)), warmup=int(summary.get("warmup", 1)),
                                 collector="hal", compile=compile_options, force=True,
                                 compare=("none",))  # a strategy's profile needs no framework reference: the base has it
        if directory.exists() and program is None:
            try:  # a profile of an earlier (resumed) session built with these flags serves again
                earlier = load_profile(directory)
                if earlier.manifest.get("compiler", {}).get("options", {}).get("extra_flags") == compile_options.extra_flags:
                    return directory
            except TracelinkError:
                pass
            remove_path(directory, base.directory)
        # the file the user gave (an .onnx: imported again, so its node locations match the base's); a
        # Python model (model.py:make) is profiled again from the MLIR it was exported to
        model = Path(str(summary.get("model") or ""))
        if program is None:
            program = model if model.is_file() else Path(summary["program"])
        elif directory.exists():
            remove_path(directory, base.directory)
        run_pipeline(program, directory, options, console)
        return directory

    return build


def _print_baselines(out, baselines: dict) -> None:
    """Each flag baseline's end-to-end speedup over the profiled build."""
    for name, baseline in baselines.items():
        out.print(f"  flag baseline {name}: {baseline['verdict']}, {baseline['speedup']:.2f}x "
                  f"(95% CI {_interval(baseline) or 'none'})")


def _print_flag_comparison(out, flags: dict) -> None:
    """The tuning against the best flag baseline: both end-to-end numbers and the verdict."""
    out.print(f"against the best flag baseline {flags['baseline']} ({' '.join(flags['flags'])}), over the flags alone:",
              markup=False, soft_wrap=True)
    for build in ("tuning+flags", "tuning"):
        row = flags[build]
        if row is None:
            out.print(f"  {build}: not built ({flags['note'] or 'no tuned config composes with the flags'})", markup=False)
        else:
            out.print(f"  {build}: {row['verdict']}, {row['speedup']:.2f}x (95% CI {_interval(row) or 'none'}, "
                      f"{row['rounds']} alternating rounds)", markup=False)
    if flags["tuning+flags"] is not None:
        left = f" ({flags['note']})" if flags["note"] else ""
        out.print(f"  {flags['applied']} of {flags['composed']} composed config(s) applied with the flags, of "
                  f"{flags['configs']} tuned{left}", markup=False)
    chosen = {"tuning+flags": "the tuning with the flags", "tuning": "the tuning alone", "flags": "the flags alone"}
    out.print(f"  verdict: {flags['verdict']} ({chosen[flags['verdict']]} is the better choice)")


def _where_kept(outcome: Outcome) -> str:
    """Where a kept config goes: the tuning spec, or the configured executables substituted at compile time."""
    by_configuration = outcome.dispatch is not None and outcome.dispatch.delivery == "configuration"
    return "in the configured executables" if by_configuration else "in the spec"


def _ms(value: float) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.3f}"


def _interval(row: dict) -> str:
    return "" if math.isnan(row["ci_low"]) else f"{row['ci_low']:.2f}-{row['ci_high']:.2f}"
