"""The tile search: every target dispatch's tuner (:mod:`tracelink.tune.tuners`), interleaved by Ansor's
task scheduler (:mod:`tracelink.tune.schedule`) as one tuner of the loop (:class:`Scheduler`), which owns
the budget (trials, and the deadline of the whole `tune`) and calls back after every round: the record
log (:mod:`tracelink.tune.trial_log`: the round and its trials) and the progress bar. Then each
dispatch's best configs are confirmed against its default config.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from iree.compiler import ir
from rich.console import Console
from rich.markup import escape

from tracelink.aggregate.speedup import speedup_of
from tracelink.tune.config import TuneConfig
from tracelink.tune.dispatch import config_fields
from tracelink.tune.measure import Measurer, Timing, Trial, make_pool
from tracelink.tune.model import History, history_path
from tracelink.profile_dir.tune_record import TILE_WHERE
from tracelink.tune.progress import ProgressBar
from tracelink.tune.remote import RayWork
from tracelink.tune.schedule import TaskProgress, expected_gain, next_task, task_is_new
from tracelink.tune.space import TileSpace
from tracelink.tune.targets import Outcome, Target, one_line
from tracelink.tune.trial_log import TrialLog
from tracelink.tune.tuners import Search, make_tuner
from tracelink.tune.tuners.loop import AfterBatch, Budget, Callback, Report, tune


@dataclass
class Task:
    """One dispatch being searched: its measurer and search, advanced round by round."""

    target: Target
    outcome: Outcome
    space: TileSpace
    measurer: Measurer
    default: Trial
    earlier: pd.DataFrame  # this dispatch's trials of a resumed session
    search: Search
    resumed: int  # trials the tuner knew before this session
    number: int  # the last trial number used
    trials: list[Trial] = field(default_factory=list)  # measured in this session
    progress: TaskProgress = field(default_factory=lambda: TaskProgress(0.0))
    failed: str = ""  # why its search broke off ("": it did not)

    def best_ms(self) -> float:
        """The best time so far, the default's included (from the best throughput: same flops)."""
        best = max(self.search.best, self.default.gflops)
        return self.default.runtime_ms * self.default.gflops / best if best > 0 else self.default.runtime_ms

    def measure(self, indices: list[int], report: Report) -> list[Trial]:
        """Build, verify and time the points ``indices`` of the space, numbered on from the last trial."""
        entries = []
        for index in indices:
            self.number += 1
            entries.append((self.number, self.search.tuner.name, self.space.knob_values(index), self.space.config(index)))
        done = self.measurer.measure(entries, report)
        self.trials.extend(done)
        return done


class Scheduler:
    """Ansor's task scheduler as a tuner of the loop: a point is (task, index of its space), a batch one
    round of the task with the largest expected end-to-end gain (:mod:`tracelink.tune.schedule`), at most
    ``round_size`` points so that the warm-up reaches every task when the budget per task is smaller than
    a batch. ``rounds`` holds a row per round (``schedule.csv``'s columns)."""

    def __init__(self, tasks: list[Task], round_size: int):
        self.tasks, self.round_size = tasks, round_size
        self.rounds: list[dict] = []
        self.score = math.nan  # the expected gain that chose the current round's task (NaN: its warm-up)
        self.last: Task | None = None  # the task of the latest round

    def has_next(self) -> bool:
        for task in self.tasks:  # a resumed search can be over before its first round
            task.progress.finished = task.progress.finished or task.search.finished
        return next_task([task.progress for task in self.tasks]) is not None

    def next_batch(self, size: int) -> list[tuple[Task, int]]:
        task = self.tasks[next_task([task.progress for task in self.tasks])]
        self.score = math.nan if task_is_new(task.progress) else expected_gain(task.progress)
        return [(task, index) for index in task.search.next_batch(min(size, self.round_size))]

    def update(self, batch: list[tuple[Task, int]], trials: list[Trial]) -> None:
        """The round's trials (none when its measuring failed: the task stops, the others go on)."""
        task = self.last = batch[0][0]
        if trials:
            task.search.update([index for _, index in batch], [trial.gflops if trial.ok else 0.0 for trial in trials])
        task.progress.finished = bool(task.failed) or task.search.finished
        task.progress.history.append((task.search.trials, task.best_ms()))
        self.rounds.append({"round": len(self.rounds) + 1, "dispatch": task.outcome.export, "share": task.target.share,
                            "score": self.score, "trials": task.search.trials, "best_ms": task.best_ms()})


def measure_round(batch: list[tuple[Task, int]], report: Report) -> list[Trial]:
    """One round's trials; none when measuring them fails (the error is the task's note)."""
    task = batch[0][0]
    try:
        return task.measure([index for _, index in batch], report)
    except Exception as error:  # one dispatch failing to tune is a note, the others go on
        task.failed = one_line(error)
        return []


def run_schedule(tasks: list[Task], budget: Budget, batch_size: int, log: TrialLog, callbacks: list[Callback],
                 report: Report) -> None:
    """Spend the ``budget``'s trials (resumed ones included) on the tasks through the loop, one batch per
    round; every round and its trials go to the log, then to ``callbacks``."""
    scheduler = Scheduler(tasks, max(1, budget.trials // max(len(tasks), 1)))
    spent = sum(task.search.trials for task in tasks)
    tune(scheduler, lambda batch: measure_round(batch, report), budget, batch_size,
         [AfterBatch(lambda batch, trials: log.append(trials, scheduler.rounds[-1])), *callbacks], spent)
    if scheduler.last is not None and sum(task.search.trials for task in tasks) >= budget.trials:
        scheduler.last.search.stopped = False  # the budget ran out in its round: no early stop


@dataclass
class Setup:
    """What the searches of one `tune` share: the configuration, where candidates are built (the
    directory, the compile pool), the console, the progress bar's ``report``, the cost model's history
    of earlier dispatches, the record log and, on Ray, the work there (None: in this process)."""

    config: TuneConfig
    workdir: Path
    pool: ProcessPoolExecutor
    console: Console
    report: Report
    history: History | None
    log: TrialLog
    work: RayWork | None = None


def start_task(target: Target, setup: Setup) -> Task:
    """Measure the dispatch's default config and set up its tuner (fed with the trials of a resumed
    session) and search."""
    dispatch, config, earlier = target.dispatch, setup.config, setup.log.earlier(target.dispatch.export)
    outcome = Outcome(dispatch.export, target.share, dispatch=dispatch)
    space = TileSpace(dispatch, config.space)
    outcome.space_size = len(space)
    setup.console.print(f"[bold]{escape(dispatch.export)}[/] ({target.share:.1%} of dispatch time): {escape(space.describe())}")
    measurer = Measurer(dispatch, setup.workdir / dispatch.export, config.measure, setup.pool, setup.work)
    default = measurer.measure_default(setup.report)
    outcome.default_ms = default.runtime_ms
    if not (earlier["tuner"] == "default").any():
        setup.log.append([default])
    options = config.search
    prior = setup.history.model(space, options.seed) if setup.history is not None else None
    tuner = make_tuner(options.tuner, space, seed=options.seed, budget=options.n_trial, plan_size=options.batch_size,
                       prior=prior)
    number = _resume(tuner, space, earlier)
    search = Search(tuner, options.batch_size, options.early_stopping or None)
    task = Task(target, outcome, space, measurer, default, earlier, search, len(tuner.xs), number)
    task.progress = TaskProgress(target.share, [(search.trials, task.best_ms())])
    return task


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


def finish_task(task: Task, config: TuneConfig, history: History | None, report: Report) -> Outcome:
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
    _confirm(outcome, task.measurer, task.default, good[: config.select.confirm_top], config, report)
    if result.stopped_early:
        outcome.note = (outcome.note + "; " if outcome.note else "") + f"stopped early after {result.trials} trials"
    return outcome


def begin(target: Target, setup: Setup) -> Task | Outcome:
    """``start_task``, or the outcome noting why the dispatch could not be started."""
    try:
        return start_task(target, setup)
    except Exception as error:  # one dispatch failing to tune is a note, the others go on
        return Outcome(target.export, target.share, note=one_line(error))


def end(task: Task, setup: Setup) -> Outcome:
    """``finish_task``, or the outcome noting why confirming failed."""
    try:
        return finish_task(task, setup.config, setup.history, setup.report)
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


def _confirm(outcome: Outcome, measurer: Measurer, default: Trial, best: list[Trial], config: TuneConfig,
             report: Report) -> None:
    """Re-time the default and the best candidates interleaved; keep the best significant gain."""
    timings = measurer.retime([default, *best], config.select.confirm_rounds, report=report)
    base = timings[0]
    outcome.default_ms = base.median * 1e3
    ranked = []
    for trial, timing in zip(best, timings[1:]):
        speedup, low, high = speedup_of(base.samples, timing.samples, config.select.confidence)
        ranked.append((speedup, low, high, trial, timing))
    speedup, low, high, trial, timing = max(ranked, key=lambda r: r[0])
    outcome.best_ms, outcome.speedup, outcome.ci_low, outcome.ci_high = timing.median * 1e3, speedup, low, high
    outcome.configuration = trial.configuration
    outcome.fields = config_fields(ir.Attribute.parse(trial.configuration, ir.Context()))
    outcome.selected = bool(low > 1.0 and speedup >= config.select.min_speedup)
    if not outcome.selected:
        outcome.note = (f"best config is not significantly faster than the default "
                        f"({speedup:.2f}x, {config.select.confidence:.0%} CI {low:.2f}-{high:.2f})")


def search_tiles(targets: list[Target], config: TuneConfig, workdir: Path, log: TrialLog, console: Console,
                 budget: Budget, work: RayWork | None = None) -> list[Outcome]:
    """Search every target's tile configs in the loop (``config.search.n_trial`` trials per target on
    average, scheduled by expected gain, within ``budget``'s deadline) and confirm each one's best; with
    ``work``, the candidates are built and timed on Ray (where each ran in the log's tile records)."""
    history = None
    if config.search.tuner == "xgb" and config.search.transfer:
        history = History(history_path(config.measure.device, config.measure.clock))
    pool = make_pool(config.measure.jobs)
    try:
        with ProgressBar(console, "tile configs: trials") as bar:
            if work is not None:
                work.record_to(log.log, TILE_WHERE)
                work.status = bar.status
            setup = Setup(config, workdir, pool, console, bar.report, history, log, work)
            started = [begin(target, setup) for target in targets]
            tasks = [task for task in started if isinstance(task, Task)]
            bar.done()
            run_schedule(tasks, budget.with_trials(config.search.n_trial * len(targets)), config.search.batch_size, log,
                         [bar], bar.report)
            if len(tasks) > 1:
                console.print("trials by expected end-to-end gain: " + ", ".join(
                    f"{escape(t.outcome.export)} {t.search.trials}" for t in tasks), soft_wrap=True)
            outcomes = [end(task, setup) if isinstance(task, Task) else task for task in started]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # an interrupt does not wait for compiles in flight
        raise
    # Waiting for the idle workers: left running, they race the interpreter's exit, which then prints
    # a traceback from the pool's wake-up pipe.
    pool.shutdown(wait=True)
    return outcomes
