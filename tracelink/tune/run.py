"""`tracelink tune`, end to end: pick the hot tunable dispatches of a profile, search each one's tile
configs, confirm the winners against the default, and write one tuning spec.

Every trial is appended to ``<profile>/tune/trials.csv`` as soon as it is measured, so an interrupted
run keeps its trials and ``resume=True`` continues from them. ``summary.csv`` holds one row per tuned
dispatch; the spec goes to ``<profile>/tune/spec.mlir`` unless another path is given.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from iree.compiler import ir
from rich.console import Console
from rich.markup import escape

from tracelink.errors import TracelinkError, first_line
from tracelink.profile_dir import Profile
from tracelink.atomic import make_directory, open_for_writing, write_atomic, write_text_atomic
from tracelink.tune.config import TuneConfig
from tracelink.tune.dispatch import Dispatch, config_fields, load_dispatch, spec_reaches
from tracelink.tune.diff import rerun, run_inputs, run_parameters
from tracelink.tune.model import History, history_path
from tracelink.tune.measure import Measurer, Timing, Trial, make_pool, progress_bar
from tracelink.tune.rounds import alternate, time_program
from tracelink.tune.stats import speedup_of, summarize
from tracelink.tune.space import TileSpace
from tracelink.tune.spec import Choice, Tuning, check_applied, compile_variant, signature, write_tuning
from tracelink.tune.schedule import TaskProgress, expected_gain, next_task, task_is_new
from tracelink.tune.tuners import Search, make_tuner

TRIAL_COLUMNS = list(Trial("", 0, "", {}, "", "ok").row())


@dataclass
class Target:
    """A dispatch function of the profile and whether it can be tuned."""

    export: str
    share: float
    dispatch: Dispatch | None = None
    reason: str = ""


@dataclass
class Outcome:
    """What tuning one dispatch found."""

    export: str
    share: float
    space_size: int = 0
    trials: int = 0
    failed: int = 0
    default_ms: float = math.nan
    best_ms: float = math.nan
    speedup: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    configuration: str = ""
    selected: bool = False
    # the dispatch's speedup inside the whole program (per-config check; NaN: not checked)
    program_speedup: float = math.nan
    program_ci_low: float = math.nan
    program_ci_high: float = math.nan
    shared_with: str = ""  # other dispatches (same root op, own executable) given this config, ';'-separated
    note: str = ""
    fields: dict = field(default_factory=dict, repr=False)
    dispatch: Dispatch | None = field(default=None, repr=False)

    def row(self) -> dict:
        return {k: v for k, v in vars(self).items() if k not in ("fields", "dispatch")}


def one_line(error: Exception) -> str:
    """An error as one line: tracelink's own message, or the exception's type and first line."""
    lines = str(error).strip().splitlines() or [""]
    return lines[0] if isinstance(error, TracelinkError) else f"{type(error).__name__}: {lines[0]}".rstrip(": ")


def examine(row, artifacts: Path) -> Target:
    """A dispatch of the exports table, loaded, or with the reason it cannot be tuned."""
    target = Target(str(row.export), float(row.share))
    try:
        if not target.share > 0:
            raise TracelinkError("no time in the timed run (an initializer-only dispatch); nothing to gain")
        if not isinstance(row.benchmark_file, str) or not row.benchmark_file:
            raise TracelinkError("no benchmark dump recorded")
        target.dispatch = load_dispatch(artifacts / row.benchmark_file)
        source = getattr(row, "source_file", None)
        if isinstance(source, str) and source and not spec_reaches(target.dispatch, artifacts / source):
            target.dispatch.delivery = "configuration"
    except Exception as error:  # any failure to read one dispatch skips it with one line, never a traceback
        target.dispatch, target.reason = None, one_line(error)
    return target


def run_shares(exports: pd.DataFrame, call_sites: pd.DataFrame) -> pd.Series:
    """Per export, its share of the dispatch time of the timed run's call sites.

    One executable serves all of its call sites, so their times add up. Call sites of the initializer
    phase run once at load: whatever a collector recorded of them is not run time, and an export only
    they use gets 0. A profile without call-site phases keeps the exports table's share."""
    if not {"export", "phase", "total_ns"} <= set(call_sites.columns):
        return exports.set_index("export")["share"]
    times = call_sites[call_sites["phase"] == "run"].groupby("export")["total_ns"].sum()
    total = float(times.sum())
    return pd.Series([float(times.get(export, 0.0)) / total if total else 0.0 for export in exports["export"]],
                     index=exports["export"])


def select_targets(exports: pd.DataFrame, call_sites: pd.DataFrame, artifacts: Path, top: int,
                   name: str | None) -> tuple[list[Target], list[Target], list[Target], float]:
    """(targets to tune, every tunable dispatch, dispatches skipped with the reason, share of timed
    dispatch time that is tunable).

    Dispatches are ranked by their share of the timed run (``run_shares``); every one is examined,
    hottest first, so the tunable share covers those beyond ``top`` too."""
    needed = {"export", "benchmark_file", "share"}
    if not needed <= set(exports.columns):
        raise TracelinkError(f"{artifacts.parent}/exports.csv: missing column(s) {', '.join(sorted(needed - set(exports.columns)))}")
    exports = exports.assign(share=run_shares(exports, call_sites).to_numpy())
    ranked = exports.sort_values("share", ascending=False, kind="stable")
    if name is not None:
        ranked = ranked[ranked["export"] == name]
        if ranked.empty:
            raise TracelinkError(f"{artifacts.parent}/exports.csv: no dispatch named '{name}' "
                                 f"(dispatches: {', '.join(exports['export'].astype(str))})")
    examined = [examine(row, artifacts) for row in ranked.itertuples()]
    tunable = [t for t in examined if t.dispatch is not None]
    skipped = [t for t in examined if t.dispatch is None]
    if not tunable:
        reasons = "; ".join(f"{t.export}: {t.reason}" for t in skipped[:3]) or "the profile has no dispatches"
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise TracelinkError(f"{artifacts.parent}: no tunable dispatch ({reasons}{more})")
    return tunable[:top], tunable, skipped, float(sum(t.share for t in tunable))


def write_table(frame: pd.DataFrame, path: Path) -> Path:
    """``frame`` as CSV at ``path``, atomically."""
    return write_atomic(path, lambda temporary: frame.to_csv(temporary, index=False))


class TrialLog:
    """trials.csv: one row per measured configuration, appended and flushed as trials finish."""

    def __init__(self, path: Path, resume: bool):
        self.path = path
        make_directory(path.parent)
        self.previous = read_trials(path) if resume and path.exists() else None
        if not resume or not path.exists():
            with open_for_writing(path, "w", newline="") as out:
                csv.DictWriter(out, TRIAL_COLUMNS).writeheader()

    def append(self, trials: list[Trial]) -> None:
        with open_for_writing(self.path, "a", newline="") as out:
            writer = csv.DictWriter(out, TRIAL_COLUMNS)
            for trial in trials:
                writer.writerow(trial.row())

    def earlier(self, export: str) -> pd.DataFrame:
        if self.previous is None or self.previous.empty:
            return pd.DataFrame(columns=TRIAL_COLUMNS)
        return self.previous[self.previous["dispatch"] == export]


def read_trials(path: Path) -> pd.DataFrame:
    """The trials of an earlier run; a last row cut by an interrupt is dropped (its trial runs again)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:  # appends must start on a fresh line
            handle.truncate(data.rfind(b"\n") + 1)
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise TracelinkError(f"{path}: corrupt trials table ({first_line(error)}); move it away to start afresh") from None
    if list(frame.columns) != TRIAL_COLUMNS:
        raise TracelinkError(f"{path}: not a trials table of this tracelink (columns differ); move it away to start afresh")
    return frame


def _resume(tuner, space: TileSpace, rows: pd.DataFrame) -> int:
    """Feed earlier trials of this dispatch to the tuner; returns the last trial number used."""
    last = 0
    names = [knob.name for knob in space.knobs]
    for row in rows.itertuples():
        last = max(last, int(row.trial))
        if row.tuner == "default":
            continue
        knobs = json.loads(row.knobs)
        index = space.index.get(tuple(knobs.get(name) for name in names))
        if index is not None:
            tuner.update([index], [float(row.gflops) if row.verification == "ok" else 0.0])
    return last


@dataclass
class Task:
    """One dispatch being searched: its measurer, tuner and search, advanced round by round."""

    target: Target
    outcome: Outcome
    space: TileSpace
    measurer: Measurer
    default: Trial
    earlier: pd.DataFrame  # this dispatch's trials of a resumed session
    search: Search
    resumed: int  # trials the tuner knew before this session
    trials: list[Trial] = field(default_factory=list)  # measured in this session
    progress: TaskProgress = field(default_factory=lambda: TaskProgress(0.0))
    failed: str = ""  # why its search broke off ("": it did not)

    def best_ms(self) -> float:
        """The best time so far, the default's included (from the best throughput: same flops)."""
        best = max(self.search.best, self.default.gflops)
        return self.default.runtime_ms * self.default.gflops / best if best > 0 else self.default.runtime_ms


def start_task(target: Target, config: TuneConfig, workdir: Path, log: TrialLog, pool, progress, console: Console,
               history: History | None) -> Task:
    """Measure the dispatch's default config and set up its tuner (fed with resumed trials) and search."""
    dispatch = target.dispatch
    outcome = Outcome(dispatch.export, target.share, dispatch=dispatch)
    space = TileSpace(dispatch, config.space)
    outcome.space_size = len(space)
    console.print(f"[bold]{escape(dispatch.export)}[/] ({target.share:.1%} of dispatch time): {escape(space.describe())}")
    measurer = Measurer(dispatch, workdir / dispatch.export, config.measure, pool, console)
    default = measurer.measure_default(progress)
    outcome.default_ms = default.runtime_ms
    earlier = log.earlier(dispatch.export)
    if not (earlier["tuner"] == "default").any():
        log.append([default])
    options = config.search
    prior = history.model(space, options.seed) if history is not None else None
    tuner = make_tuner(options.tuner, space, seed=options.seed, budget=options.n_trial, plan_size=options.batch_size,
                       prior=prior)
    counter = [_resume(tuner, space, earlier)]
    trials: list[Trial] = []

    def measure(indices: list[int]) -> list[float]:
        entries = []
        for index in indices:
            counter[0] += 1
            entries.append((counter[0], tuner.name, space.knob_values(index), space.config(index)))
        done = measurer.measure(entries, progress)
        log.append(done)
        trials.extend(done)
        return [trial.gflops if trial.ok else 0.0 for trial in done]

    search = Search(tuner, measure, options.batch_size, options.early_stopping or None)
    task = Task(target, outcome, space, measurer, default, earlier, search, len(tuner.xs), trials)
    task.progress = TaskProgress(target.share, [(search.trials, task.best_ms())])
    return task


def run_schedule(tasks: list[Task], budget: int, schedule_path: Path, deadline: float | None = None) -> None:
    """Spend ``budget`` trials (resumed ones included) on the tasks, one batch per round, each round to
    the task with the largest expected end-to-end gain (see ``schedule``); every round goes to
    ``schedule.csv``. A round is smaller than a batch when the budget per task is, so the warm-up
    reaches every task. A task whose measuring fails stops with the error noted, the others go on.
    No round starts after ``deadline`` (``time.monotonic()`` seconds; None: no time limit)."""
    rows = []
    progress = [task.progress for task in tasks]
    round_size = max(1, budget // max(len(tasks), 1))
    while (spent := sum(task.search.trials for task in tasks)) < budget:
        if deadline is not None and time.monotonic() > deadline:
            break
        chosen = next_task(progress)
        if chosen is None:
            break
        task = tasks[chosen]
        score = math.nan if task_is_new(task.progress) else expected_gain(task.progress)
        try:
            if spent + task.search.step(min(round_size, budget - spent)) >= budget:
                task.search.stopped = False  # the budget ran out in this round: no early stop
        except Exception as error:  # one dispatch failing to tune is a note, the others go on
            task.failed = one_line(error)
        task.progress.finished = bool(task.failed) or task.search.finished
        task.progress.history.append((task.search.trials, task.best_ms()))
        rows.append({"round": len(rows) + 1, "dispatch": task.outcome.export, "share": task.target.share,
                     "score": score, "trials": task.search.trials, "best_ms": task.best_ms()})
        write_table(pd.DataFrame(rows), schedule_path)


def finish_task(task: Task, config: TuneConfig, history: History | None) -> Outcome:
    """Record the search in ``history`` and the outcome; confirm the best configs against the default."""
    outcome, tuner, result = task.outcome, task.search.tuner, task.search.result()
    if history is not None:
        history.add(task.space, tuner.xs[task.resumed:], tuner.ys[task.resumed:])
    outcome.trials = result.trials
    outcome.failed = sum(1 for y in tuner.ys if y <= 0)
    if task.failed:
        outcome.note = task.failed
        return outcome
    good = sorted((t for t in task.trials if t.ok), key=lambda t: t.timing.median)
    good += _earlier_good(task.earlier, task.measurer, {t.configuration for t in good})
    good.sort(key=lambda t: t.timing.median)
    if not good:
        failures = {t.verification for t in task.trials}
        outcome.note = f"every candidate failed ({', '.join(sorted(failures)) or 'none measured'}; see trials.csv)"
        return outcome
    _confirm(outcome, task.measurer, task.default, good[: config.select.confirm_top], config)
    if result.stopped_early:
        outcome.note = (outcome.note + "; " if outcome.note else "") + f"stopped early after {result.trials} trials"
    return outcome


def begin(target: Target, config: TuneConfig, workdir: Path, log: TrialLog, pool, progress, console: Console,
          history: History | None) -> Task | Outcome:
    """``start_task``, or the outcome noting why the dispatch could not be started."""
    try:
        return start_task(target, config, workdir, log, pool, progress, console, history)
    except Exception as error:  # one dispatch failing to tune is a note, the others go on
        return Outcome(target.export, target.share, note=one_line(error))


def end(task: Task, config: TuneConfig, history: History | None) -> Outcome:
    """``finish_task``, or the outcome noting why confirming failed."""
    try:
        return finish_task(task, config, history)
    except Exception as error:  # one dispatch failing to tune is a note, the others go on
        return Outcome(task.target.export, task.target.share, note=one_line(error))


def _earlier_good(earlier: pd.DataFrame, measurer: Measurer, seen: set[str]) -> list[Trial]:
    """Verified trials of an earlier (resumed) session whose compiled candidate is still on disk."""
    found = []
    for row in earlier.itertuples():
        if row.tuner == "default" or row.verification != "ok" or row.configuration in seen:
            continue
        _, vmfb = measurer.paths(row.configuration)
        if vmfb.exists() and isinstance(row.samples_ms, str) and row.samples_ms:
            samples = [s / 1e3 for s in json.loads(row.samples_ms)]
            found.append(Trial(row.dispatch, int(row.trial), row.tuner, json.loads(row.knobs), row.configuration, "ok",
                               timing=Timing(samples), gflops=float(row.gflops), vmfb=vmfb))
    return found


def _confirm(outcome: Outcome, measurer: Measurer, default: Trial, best: list[Trial], config: TuneConfig) -> None:
    """Re-time the default and the best candidates interleaved; keep the best significant gain."""
    timings = measurer.retime([default.vmfb] + [t.vmfb for t in best], config.select.confirm_rounds)
    base = timings[0]
    outcome.default_ms = base.median * 1e3
    ranked = []
    for trial, timing in zip(best, timings[1:]):
        speedup, low, high = speedup_of(base.samples, timing.samples, config.select.confidence)
        ranked.append((speedup, low, high, trial, timing))
    speedup, low, high, trial, timing = max(ranked, key=lambda r: r[0])
    outcome.best_ms, outcome.speedup, outcome.ci_low, outcome.ci_high = timing.median * 1e3, speedup, low, high
    outcome.configuration = trial.configuration
    outcome.fields = measurer_fields(trial)
    outcome.selected = low > 1.0 and speedup >= config.select.min_speedup
    if not outcome.selected:
        outcome.note = (f"best config is not significantly faster than the default "
                        f"({speedup:.2f}x, {config.select.confidence:.0%} CI {low:.2f}-{high:.2f})")


def measurer_fields(trial: Trial) -> dict[str, list[int]]:
    """The lowering-config fields of a trial, read back from its configuration text."""
    return config_fields(ir.Attribute.parse(trial.configuration, ir.Context()))


# What a user would try first: IREE's whole-program options, timed next to the tuned build.
FLAG_BASELINES = {
    "ukernels": ["--iree-llvmcpu-enable-ukernels=all"],
    "data-tiling": ["--iree-opt-data-tiling"],
    "ukernels+data-tiling": ["--iree-llvmcpu-enable-ukernels=all", "--iree-opt-data-tiling"],
}


def build_baselines(profile: Profile, workdir: Path, timeout: float) -> dict[str, Path]:
    """The program compiled with each flag baseline; one that does not compile is left out."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    builds = {}
    for name, extra in FLAG_BASELINES.items():
        try:
            builds[name] = compile_variant(program, flags, extra, workdir / name, timeout, " ".join(extra))
        except TracelinkError:
            continue
    return builds


def check_in_program(profile: Profile, builds: dict[str, Path], rounds: int, console: Console,
                     base: Path | None = None) -> dict[str, dict]:
    """Each build of the whole program against ``base`` (default: the profiled build), all timed
    alternately for ``rounds`` rounds."""
    function, inputs, parameters = profile.summary["function"], run_inputs(profile), run_parameters(profile)
    calls = max(5, int(profile.summary.get("repetitions", 10)))
    runs = [lambda _, v=v: time_program(v, function, inputs, parameters, calls, 600.0)
            for v in (base or profile.artifacts / "app.vmfb", *builds.values())]
    with console.status(f"timing the program's builds ({', '.join(builds)}) against the "
                        f"{base.parent.name if base else 'profiled'} one, {rounds} alternating rounds"):
        base, *others = alternate(runs, rounds)
    return {name: summarize(base, times) for name, times in zip(builds, others)}


def best_baseline(baselines: dict[str, dict]) -> str | None:
    """The flag baseline with the largest speedup over the profiled build among those whose 95 % interval
    lies above 1; None when no baseline is significantly faster."""
    faster = {name: check for name, check in baselines.items() if check["ci_low"] > 1}
    return max(faster, key=lambda name: faster[name]["speedup"]) if faster else None


def composable_with(choices: list[Choice], flags: list[str]) -> list[Choice]:
    """The choices that can apply together with ``flags``. Data tiling turns contractions into ``mmt4d``
    ops after the tuning matched them, so a config tuned for the matmul would land on an op of another
    shape (IREE 3.13 then fails to build the dispatch's pass pipeline); those are left to the flags."""
    if "--iree-opt-data-tiling" not in flags:
        return choices
    return [choice for choice in choices if choice.dispatch.kind != "contraction"]


def compare_with_flags(profile: Profile, tuning: Tuning, choices: list[Choice], tuned: Path, name: str,
                       flags_build: Path, workdir: Path, config: TuneConfig, console: Console) -> tuple[dict, Tuning | None]:
    """The tuning against the flag baseline ``name``, which beat the profiled build: the program with
    the tuning and the flags, and with the tuning alone, each timed against the flags alone in
    alternating rounds. The verdict is the faster of the two when its 95 % interval over the flags
    lies above 1 (``tuning+flags`` or ``tuning``), else ``flags``: the flags are the better choice.

    With data tiling, the tuned contractions are left out of the composition (:func:`composable_with`);
    ``composed`` says how many configs went in, ``applied`` how many of those applied. Returns the
    comparison and the tuning that was composed with the flags (None: no composition was built)."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    extra = FLAG_BASELINES[name]
    builds = {"tuning": tuned}
    composable = composable_with(choices, extra)
    notes = [f"{len(choices) - len(composable)} tuned contraction(s) left to data tiling"] if len(composable) < len(choices) else []
    applied, composed_tuning = 0, None
    if composable:
        try:
            composed_tuning = tuning if len(composable) == len(choices) else write_tuning(composable, workdir / "composed_tuning")
            missed, composed = check_applied(program, [*flags, *extra], composed_tuning, composable, workdir / "composed",
                                             config.measure.compile_timeout_seconds)
            builds["tuning+flags"] = composed
            applied = len(composable) - len(missed)
        except TracelinkError as error:  # the tuning cannot be built with these flags: only the tuning alone competes
            notes.append(one_line(error))
            composed_tuning = None
    checks = check_in_program(profile, builds, config.select.program_rounds, console, base=flags_build)
    winners = {build: check for build, check in checks.items() if check["ci_low"] > 1}
    verdict = max(winners, key=lambda build: winners[build]["speedup"]) if winners else "flags"
    comparison = {"baseline": name, "flags": extra, "composed": len(composable), "applied": applied, "configs": len(choices),
                  "note": "; ".join(notes), "tuning+flags": checks.get("tuning+flags"), "tuning": checks["tuning"], "verdict": verdict}
    return comparison, composed_tuning


def dispatch_median(profile: Profile, exports: set[str]) -> float:
    """Median over iterations of the time (ns) the dispatches ``exports`` take in one call of the program."""
    events = profile.events.dropna(subset=["iteration"])
    times = events[events["export"].isin(exports)].groupby("iteration")["duration_ns"].sum()
    if times.empty:
        raise TracelinkError(f"{profile.directory}: the rerun recorded no dispatch of {', '.join(sorted(exports))}")
    return float(times.median())


def in_program_speedup(profile: Profile, vmfb: Path, exports: set[str], rounds: int, directory: Path) -> dict:
    """How much faster the dispatches ``exports`` run inside the program built as ``vmfb`` than in the
    profiled build: both run alternately under the HAL profiler (other dispatches around them, the
    program's device and threads), each round giving one median per build (see ``stats.summarize``)."""
    calls = max(5, int(profile.summary.get("repetitions", 10)))
    runs = [lambda number, v=v, n=n: dispatch_median(rerun(profile, directory / f"{n}_{number}", calls, 600.0, vmfb=v), exports)
            for v, n in ((None, "base"), (vmfb, "tuned"))]
    base, tuned = alternate(runs, rounds)
    return summarize(base, tuned)


def shared_choices(choices: list[Choice], tunable: list[Target]) -> list[Choice]:
    """Each tuned config again for the other dispatches with the same root op (same signature) in an
    executable of their own: IREE keeps executables apart when their fused ops differ (a residual add
    after one of a network's identical convolutions), and a configured executable is substituted by
    name. A spec matcher already reaches every such op, so this is for configured executables only."""
    taken = {id(c.dispatch) for c in choices}
    shared = []
    for choice in sorted(choices, key=lambda c: -c.speedup):
        if choice.dispatch.delivery != "configuration":
            continue
        key = signature(choice.dispatch)
        for target in tunable:
            if id(target.dispatch) not in taken and target.dispatch.delivery == "configuration" and signature(target.dispatch) == key:
                taken.add(id(target.dispatch))
                shared.append(Choice(target.dispatch, choice.fields, choice.speedup, owner=choice.dispatch))
    return shared


def validate_in_program(profile: Profile, choices: list[Choice], outcomes: list[Outcome], workdir: Path,
                        config: TuneConfig, console: Console, merged: Path) -> list[Choice]:
    """The choices whose dispatches are significantly faster inside the whole program; the others are
    dropped with a note. Each tuned config is built alone with the dispatches sharing it (the merged
    build ``merged`` serves when there is only one), so a config that wins in isolation but loses
    among the program's other dispatches is caught."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    groups: dict[int, list[Choice]] = {}
    for choice in choices:
        groups.setdefault(id(choice.owner or choice.dispatch), []).append(choice)
    kept = []
    for group in groups.values():
        tuned = group[0].owner or group[0].dispatch
        outcome = next(o for o in outcomes if o.dispatch is tuned)
        where = workdir / "validate" / tuned.export
        vmfb = merged
        if len(groups) > 1:
            _, vmfb = check_applied(program, flags, write_tuning(group, where), group, where / "build",
                                    config.measure.compile_timeout_seconds)
        exports = {c.dispatch.export for c in group}
        with console.status(f"timing {tuned.export} inside the program, {config.select.validate_rounds} alternating rounds"):
            check = in_program_speedup(profile, vmfb, exports, config.select.validate_rounds, where / "rounds")
        outcome.program_speedup, outcome.program_ci_low, outcome.program_ci_high = check["speedup"], check["ci_low"], check["ci_high"]
        if check["ci_low"] > 1:
            kept += group
        else:
            outcome.selected = False
            outcome.note = (f"{outcome.speedup:.2f}x alone, but {check['speedup']:.2f}x inside the program "
                            f"(95% CI {check['ci_low']:.2f}-{check['ci_high']:.2f}, {check['rounds']} rounds): not kept")
    return kept


def tune_profile(profile: Profile, config: TuneConfig, dispatch_name: str | None, resume: bool,
                 spec_path: Path | None, console: Console,
                 deadline: float | None = None) -> tuple[list[Outcome], Tuning | None, dict | None]:
    """Tune the profile's hottest tunable dispatches (no search round starts after ``deadline``, a
    ``time.monotonic()`` value).

    Returns the outcomes, the tuning handed over (None: no gain) and the in-program check (None: not run;
    when no config was kept, the flag baselines alone, see :func:`baselines_alone`)."""
    manifest = profile.manifest
    targets, tunable, skipped, tunable_share = select_targets(profile.exports, profile.call_sites, profile.artifacts, config.select.top, dispatch_name)
    for target in skipped:
        console.print(f"[dim]skipped {escape(target.export)} ({target.share:.1%}): {escape(target.reason)}[/]", soft_wrap=True)
    console.print(f"tunable: {tunable_share:.1%} of the timed dispatch time; tuning {len(targets)} dispatch(es) "
                  f"with {sum(t.share for t in targets):.1%}; skipped {len(skipped)} with "
                  f"{sum(t.share for t in skipped):.1%}", soft_wrap=True)
    workdir = profile.directory / "tune"
    used = set()
    for target in targets:
        used |= set(TileSpace.knob_names_of(target.dispatch))
    unused = sorted(set(config.space.values) - used)
    if unused:
        raise TracelinkError(f"{config.source}: [space] key(s) {', '.join(unused)} match no loop of the tuned dispatches")
    log = TrialLog(workdir / "trials.csv", resume)
    history = None
    if config.search.tuner == "xgb" and config.search.transfer:
        history = History(history_path(config.measure.device, config.measure.clock))
    pool = make_pool(config.measure.jobs)
    try:
        with progress_bar(console) as progress:
            started = [begin(target, config, workdir, log, pool, progress, console, history) for target in targets]
            tasks = [task for task in started if isinstance(task, Task)]
            run_schedule(tasks, config.search.n_trial * len(targets), workdir / "schedule.csv", deadline)
            if len(tasks) > 1:
                console.print("trials by expected end-to-end gain: " + ", ".join(
                    f"{escape(t.outcome.export)} {t.search.trials}" for t in tasks), soft_wrap=True)
            outcomes = [end(task, config, history) if isinstance(task, Task) else task for task in started]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # an interrupt does not wait for compiles in flight
        raise
    # Waiting for the idle workers: left running, they race the interpreter's exit, which then prints
    # a traceback from the pool's wake-up pipe.
    pool.shutdown(wait=True)
    write_table(pd.DataFrame([o.row() for o in outcomes]), workdir / "summary.csv")
    if not any(o.configuration for o in outcomes):
        notes = "; ".join(o.note if o.note.startswith(o.export) else f"{o.export}: {o.note}" for o in outcomes)
        if any(o.trials for o in outcomes):
            raise TracelinkError(f"{workdir / 'trials.csv'}: every candidate failed ({notes})")
        raise TracelinkError(notes)
    choices = [Choice(o.dispatch, o.fields, o.speedup) for o in outcomes if o.selected]
    if not choices:
        return outcomes, None, baselines_alone(profile, workdir, config, console)
    for choice in shared_choices(choices, tunable):
        choices.append(choice)
        owner = next(o for o in outcomes if o.dispatch is choice.owner)
        owner.shared_with = ";".join(filter(None, [owner.shared_with, choice.dispatch.export]))
    output = Path(spec_path) if spec_path else None  # the user's -o is written only once the spec is final
    tuning = write_tuning(choices, workdir)
    if not (config.select.check_spec and manifest.get("input")):
        return outcomes, deliver(tuning, output), None
    program, flags = Path(manifest["input"]), manifest.get("compiler", {}).get("flags", [])
    timeout = config.measure.compile_timeout_seconds
    missed, vmfb = check_applied(program, flags, tuning, choices, workdir / "spec_check", timeout)
    for choice in missed:
        for outcome in outcomes:
            if outcome.dispatch is choice.dispatch:
                outcome.selected = False
                outcome.note = "the tuned config did not apply to this dispatch when compiling the program"
            elif outcome.dispatch is choice.owner:
                outcome.shared_with = ";".join(e for e in outcome.shared_with.split(";") if e != choice.dispatch.export)
    unapplied = {id(c.dispatch) for c in missed}  # a config that missed its tuned dispatch is not shared either
    kept = [c for c in choices if id(c.dispatch) not in unapplied and id(c.owner) not in unapplied]
    write_table(pd.DataFrame([o.row() for o in outcomes]), workdir / "summary.csv")
    if not kept:
        tuning.remove()
        return outcomes, None, baselines_alone(profile, workdir, config, console)
    dropped = False
    if config.select.validate_rounds >= 2:
        validated = validate_in_program(profile, kept, outcomes, workdir, config, console, vmfb)
        write_table(pd.DataFrame([o.row() for o in outcomes]), workdir / "summary.csv")
        if not validated:
            tuning.remove()
            return outcomes, None, baselines_alone(profile, workdir, config, console)
        dropped = len(validated) < len(kept)
        kept = validated
    if missed or dropped:
        tuning = write_tuning(kept, workdir)
        missed, vmfb = check_applied(program, flags, tuning, kept, workdir / "spec_check", timeout)
    if config.select.program_rounds < 2:
        return outcomes, deliver(tuning, output), None
    baselines = build_baselines(profile, workdir / "baselines", timeout) if config.select.baselines else {}
    checks = check_in_program(profile, {"tuned": vmfb, **baselines}, config.select.program_rounds, console)
    check = {**checks.pop("tuned"), "tuned": True, "baselines": checks, "flags": None}
    best = best_baseline(checks)
    composed: Tuning | None = None
    if check["ci_low"] > 1 and best is not None:
        check["flags"], composed = compare_with_flags(profile, tuning, kept, vmfb, best, baselines[best], workdir, config, console)
    write_text_atomic(workdir / "program_check.json", json.dumps(check, indent=2))
    verdict = check["flags"]["verdict"] if check["flags"] else "tuning"
    if check["ci_low"] > 1 and verdict != "flags":
        if verdict == "tuning+flags":  # handed over with the flags it was checked with
            if composed is not tuning:  # only part of the tuning composes with the flags: hand over that part
                tuning.remove()
            tuning = Tuning(composed.spec, composed.configurations, check["flags"]["flags"])
        return outcomes, deliver(tuning, output), check
    tuning.remove()  # a tuning that does not speed the whole program up is not handed to the user
    return outcomes, None, check


def baselines_alone(profile: Profile, workdir: Path, config: TuneConfig, console: Console) -> dict | None:
    """When no config was kept: IREE's flag baselines timed against the profiled build, so that `tune` can
    say when a whole-program option does what tile configs could not (``best``: the fastest baseline whose
    95 % interval lies above 1, else None). None when the whole-program check or the baselines are off."""
    if config.select.program_rounds < 2 or not config.select.baselines or not profile.manifest.get("input"):
        return None
    baselines = build_baselines(profile, workdir / "baselines", config.measure.compile_timeout_seconds)
    if not baselines:
        return None
    checks = check_in_program(profile, baselines, config.select.program_rounds, console)
    best = best_baseline(checks)
    check = {"tuned": False, "baselines": checks, "best": best, "best_flags": FLAG_BASELINES[best] if best else None}
    write_text_atomic(workdir / "program_check.json", json.dumps(check, indent=2))
    return check


def deliver(tuning: Tuning, output: Path | None) -> Tuning:
    """The final tuning, its spec copied (atomically) to the user's ``-o`` path when one was given."""
    if output is None or tuning.spec is None:
        return tuning
    make_directory(output.parent)
    write_text_atomic(output, tuning.spec.read_text())
    return Tuning(output, tuning.configurations, tuning.extra_flags)
