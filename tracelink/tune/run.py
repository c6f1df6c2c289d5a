"""`tracelink tune`, end to end: pick the hot tunable dispatches of a profile, search each one's tile
configs, confirm the winners against the default, and write one tuning spec.

Every trial is appended to the record log (``<profile>/tune/records.jsonl``, :mod:`.trial_log`) as soon
as it is measured, so an interrupted run keeps its trials and ``resume=True`` continues from them. ``summary.csv`` holds one row per tuned
dispatch; the spec goes to ``<profile>/tune/spec.mlir`` unless another path is given.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from iree.compiler import ir
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from tracelink.errors import TracelinkError
from tracelink.profile_dir import Profile
from tracelink.atomic import make_directory, write_text_atomic
from tracelink.tune.config import TuneConfig
from tracelink.tune.dispatch import config_fields
from tracelink.tune.model import History, history_path
from tracelink.tune.measure import Measurer, Timing, Trial, make_pool, progress_bar
from tracelink.tune.program_check import (baselines_alone, best_baseline, build_baselines, check_in_program,
                                          compare_with_flags, validate_in_program)
from tracelink.aggregate.speedup import speedup_of
from tracelink.tune.space import TileSpace
from tracelink.tune.spec import Choice, Tuning, check_applied, signature, write_tuning
from tracelink.tune.schedule import TaskProgress, expected_gain, next_task, task_is_new
from tracelink.tune.targets import Outcome, Target, one_line, select_targets
from tracelink.tune.trial_log import TrialLog, write_table
from tracelink.tune.tuners import Search, make_tuner







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


TrialCallback = Callable[[list[Trial]], None]


@dataclass
class TileLoop:
    """What the searches of one `tune` share: the configuration, where candidates are built (the
    directory, the compile pool), the progress display, the cost model's history of earlier dispatches,
    and the callbacks every measured batch of trials goes to as it is measured (as autotvm's
    ``callbacks``: the trial log)."""

    config: TuneConfig
    workdir: Path
    pool: ProcessPoolExecutor
    console: Console
    progress: Progress
    history: History | None
    callbacks: list[TrialCallback] = field(default_factory=list)

    def measured(self, trials: list[Trial]) -> None:
        for callback in self.callbacks:
            callback(trials)


def start_task(target: Target, loop: TileLoop, earlier: pd.DataFrame) -> Task:
    """Measure the dispatch's default config and set up its tuner (fed with ``earlier``, the trials of a
    resumed session) and search."""
    dispatch, config, progress = target.dispatch, loop.config, loop.progress
    outcome = Outcome(dispatch.export, target.share, dispatch=dispatch)
    space = TileSpace(dispatch, config.space)
    outcome.space_size = len(space)
    loop.console.print(f"[bold]{escape(dispatch.export)}[/] ({target.share:.1%} of dispatch time): {escape(space.describe())}")
    measurer = Measurer(dispatch, loop.workdir / dispatch.export, config.measure, loop.pool, loop.console)
    default = measurer.measure_default(progress)
    outcome.default_ms = default.runtime_ms
    if not (earlier["tuner"] == "default").any():
        loop.measured([default])
    options = config.search
    prior = loop.history.model(space, options.seed) if loop.history is not None else None
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
        loop.measured(done)
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


def begin(target: Target, loop: TileLoop, earlier: pd.DataFrame) -> Task | Outcome:
    """``start_task``, or the outcome noting why the dispatch could not be started."""
    try:
        return start_task(target, loop, earlier)
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




def tune_profile(profile: Profile, config: TuneConfig, dispatch_name: str | None, resume: bool,
                 spec_path: Path | None, console: Console,
                 deadline: float | None = None) -> tuple[list[Outcome], Tuning | None, dict | None]:
    """Tune the profile's hottest tunable dispatches (no search round starts after ``deadline``, a
    ``time.monotonic()`` value).

    Returns the outcomes, the tuning handed over (None: no gain) and the in-program check (None: not run;
    when no config was kept, the flag baselines alone, see :func:`baselines_alone`)."""
    targets, tunable = announce_targets(profile, config, dispatch_name, console)
    workdir = profile.directory / "tune"
    outcomes = search_tiles(targets, config, workdir, resume, console, deadline)
    try:
        return select_tuning(profile, outcomes, tunable, config, workdir, spec_path, console)
    finally:  # one row per dispatch, as far as the checks got (an error or an interrupt included)
        write_table(pd.DataFrame([o.row() for o in outcomes]), workdir / "summary.csv")


def announce_targets(profile: Profile, config: TuneConfig, dispatch_name: str | None,
                     console: Console) -> tuple[list[Target], list[Target]]:
    """The dispatches to tune and every tunable one, with what is skipped and why printed; a ``[space]``
    key that matches no loop of them is an error (a typo would otherwise search the default range)."""
    targets, tunable, skipped, tunable_share = select_targets(profile.exports, profile.call_sites, profile.artifacts,
                                                              config.select.top, dispatch_name)
    for target in skipped:
        console.print(f"[dim]skipped {escape(target.export)} ({target.share:.1%}): {escape(target.reason)}[/]", soft_wrap=True)
    console.print(f"tunable: {tunable_share:.1%} of the timed dispatch time; tuning {len(targets)} dispatch(es) "
                  f"with {sum(t.share for t in targets):.1%}; skipped {len(skipped)} with "
                  f"{sum(t.share for t in skipped):.1%}", soft_wrap=True)
    used = set()
    for target in targets:
        used |= set(TileSpace.knob_names_of(target.dispatch))
    unused = sorted(set(config.space.values) - used)
    if unused:
        raise TracelinkError(f"{config.source}: [space] key(s) {', '.join(unused)} match no loop of the tuned dispatches")
    return targets, tunable


def search_tiles(targets: list[Target], config: TuneConfig, workdir: Path, resume: bool, console: Console,
                 deadline: float | None) -> list[Outcome]:
    """Search every target's tile configs (trials scheduled by expected gain) and confirm each one's best."""
    log = TrialLog(workdir.parent, resume)  # the profile directory: workdir is its tune/
    history = None
    if config.search.tuner == "xgb" and config.search.transfer:
        history = History(history_path(config.measure.device, config.measure.clock))
    pool = make_pool(config.measure.jobs)
    try:
        with progress_bar(console) as progress:
            loop = TileLoop(config, workdir, pool, console, progress, history, [log.append])
            started = [begin(target, loop, log.earlier(target.dispatch.export)) for target in targets]
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
    return outcomes


def select_tuning(profile: Profile, outcomes: list[Outcome], tunable: list[Target], config: TuneConfig, workdir: Path,
                  spec_path: Path | None, console: Console) -> tuple[list[Outcome], Tuning | None, dict | None]:
    """The tuning handed over: the selected configs (and the dispatches sharing them) that apply when
    the program is compiled, hold up inside it and make the whole program faster (:func:`tune_profile`)."""
    choices = chosen_configs(outcomes, tunable, workdir)
    if not choices:
        return outcomes, None, baselines_alone(profile, workdir, config, console)
    output = Path(spec_path) if spec_path else None  # the user's -o is written only once the spec is final
    tuning = write_tuning(choices, workdir)
    if not (config.select.check_spec and profile.manifest.get("input")):
        return outcomes, deliver(tuning, output), None
    kept, tuning, vmfb = applied_in_program(profile, choices, outcomes, tuning, config, workdir, console)
    if not kept:
        return outcomes, None, baselines_alone(profile, workdir, config, console)
    if config.select.program_rounds < 2:
        return outcomes, deliver(tuning, output), None
    handed, check = whole_program_check(profile, tuning, kept, vmfb, config, workdir, console)
    return outcomes, deliver(handed, output) if handed else None, check


def chosen_configs(outcomes: list[Outcome], tunable: list[Target], workdir: Path) -> list[Choice]:
    """The selected configs, each also for the other dispatches with its root op (:func:`shared_choices`);
    an error when no dispatch found a working config at all."""
    if not any(o.configuration for o in outcomes):
        notes = "; ".join(o.note if o.note.startswith(o.export) else f"{o.export}: {o.note}" for o in outcomes)
        if any(o.trials for o in outcomes):
            raise TracelinkError(f"{workdir / 'trials.csv'}: every candidate failed ({notes})")
        raise TracelinkError(notes)
    choices = [Choice(o.dispatch, o.fields, o.speedup) for o in outcomes if o.selected]
    for choice in shared_choices(choices, tunable) if choices else []:
        choices.append(choice)
        owner = next(o for o in outcomes if o.dispatch is choice.owner)
        owner.shared_with = ";".join(filter(None, [owner.shared_with, choice.dispatch.export]))
    return choices


def applied_in_program(profile: Profile, choices: list[Choice], outcomes: list[Outcome], tuning: Tuning,
                       config: TuneConfig, workdir: Path, console: Console) -> tuple[list[Choice], Tuning, Path]:
    """The choices that apply when the program is compiled with the tuning and (with ``validate_rounds``)
    are faster inside it, the tuning rebuilt with them alone and the program's build with it; no
    choices (the tuning removed) when none is left. The outcomes of the others get a note."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
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
    rebuild = bool(missed)
    if kept and config.select.validate_rounds >= 2:
        validated = validate_in_program(profile, kept, outcomes, workdir, config, console, vmfb)
        rebuild = rebuild or len(validated) < len(kept)
        kept = validated
    if not kept:
        tuning.remove()
        return [], tuning, vmfb
    if rebuild:
        tuning = write_tuning(kept, workdir)
        _, vmfb = check_applied(program, flags, tuning, kept, workdir / "spec_check", timeout)
    return kept, tuning, vmfb


def whole_program_check(profile: Profile, tuning: Tuning, kept: list[Choice], vmfb: Path, config: TuneConfig,
                        workdir: Path, console: Console) -> tuple[Tuning | None, dict]:
    """The program built with the tuning against the profiled build and IREE's flag baselines, in
    alternating rounds (``program_check.json``); the tuning to hand over (with the best baseline's flags
    when it is faster with them) or None (removed) when it does not make the program faster."""
    baselines = build_baselines(profile, workdir / "baselines", config.measure.compile_timeout_seconds) if config.select.baselines else {}
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
        return tuning, check
    tuning.remove()  # a tuning that does not speed the whole program up is not handed to the user
    return None, check


def deliver(tuning: Tuning, output: Path | None) -> Tuning:
    """The final tuning, its spec copied (atomically) to the user's ``-o`` path when one was given."""
    if output is None or tuning.spec is None:
        return tuning
    make_directory(output.parent)
    write_text_atomic(output, tuning.spec.read_text())
    return Tuning(output, tuning.configurations, tuning.extra_flags)
