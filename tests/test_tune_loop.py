"""The one loop both searches of `tune` run (tracelink/tune/tuners/loop.py): the budget (trials, deadline) it
stops at, the callbacks it calls, and the tile search's task scheduler as a tuner of it, on stand-in
measurements (no compiler)."""

from __future__ import annotations

import io
import time

import pandas as pd
from rich.console import Console

from tracelink.tune.measure import Timing, Trial
from tracelink.tune.progress import ProgressBar
from tracelink.tune.schedule import TaskProgress
from tracelink.tune.targets import Outcome, Target
from tracelink.tune.tile_search import Task, run_schedule
from tracelink.tune.tuners import Search, make_tuner, search
from tracelink.tune.tuners.loop import DEADLINE, DONE, TRIALS, Budget, Callback, tune


class Recorder(Callback):
    """Every call a loop makes to its callbacks, in order."""

    def __init__(self):
        self.calls = []

    def begin(self, budget, spent):
        self.calls.append(("begin", budget.trials, spent))

    def measured(self, batch, results):
        self.calls.append(("measured", list(batch)))

    def end(self, stop):
        self.calls.append(("end", stop))


class Points:
    """A tile space stand-in: ``size`` points, point i's throughput i + 1."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self):
        return self.size

    def knob_values(self, index):
        return {"k": index}

    def config(self, index):
        return {"distribution": [index]}


def test_the_loop_stops_at_the_trial_budget_counting_resumed_trials_and_calls_back_in_order():
    tuner = make_tuner("grid", Points(20))
    tuner.update([0, 1], [1.0, 2.0])  # resumed
    recorder = Recorder()
    stop = tune(Search(tuner, batch_size=4), lambda batch: [float(i + 1) for i in batch], Budget(trials=9), 4, [recorder],
                spent=2)
    assert stop == TRIALS and len(tuner.xs) == 9  # 2 resumed, then batches of 4 and 3
    assert recorder.calls[0] == ("begin", 9, 2) and recorder.calls[-1] == ("end", TRIALS)
    assert [len(call[1]) for call in recorder.calls if call[0] == "measured"] == [4, 3]


def test_the_loop_stops_when_the_space_is_done_or_the_deadline_has_passed():
    assert tune(make_tuner("random", Points(5)), lambda batch: [1.0] * len(batch), Budget(), 2) == DONE
    measured = []
    stop = tune(make_tuner("random", Points(5)), measured.extend, Budget(deadline=time.monotonic() - 1), 2)
    assert stop == DEADLINE and measured == []
    # a search stopped early by its own rule ends the loop too; a stop in the budget's last batch is none
    result = search(make_tuner("grid", Points(50)), lambda batch: [1.0] * len(batch), 40, batch_size=4, early_stopping=8)
    assert result.stopped_early and result.trials == 12
    assert not search(make_tuner("grid", Points(50)), lambda batch: [1.0] * len(batch), 8, batch_size=4,
                      early_stopping=8).stopped_early


def test_an_error_in_measuring_ends_the_callbacks_and_propagates():
    recorder = Recorder()

    def broken(batch):
        raise KeyboardInterrupt

    try:
        tune(make_tuner("random", Points(5)), broken, Budget(), 2, [recorder])
    except KeyboardInterrupt:
        pass
    assert recorder.calls[-1] == ("end", "interrupted")


class Measured:
    """A measurer stand-in: point i of the space runs at i + 1 GFLOP/s (``broken``: measuring raises)."""

    def __init__(self, export: str, broken: bool = False):
        self.export, self.broken = export, broken

    def measure(self, entries, report):
        if self.broken:
            raise RuntimeError("the candidates' directory vanished")
        report("measure", 0, len(entries))
        return [Trial(self.export, number, tuner, knobs, str(fields), "ok", timing=Timing([1.0 / (knobs["k"] + 1)]),
                      gflops=knobs["k"] + 1.0) for number, tuner, knobs, fields in entries]


def task(export: str, share: float, broken: bool = False) -> Task:
    default = Trial(export, 0, "default", {}, "", "ok", timing=Timing([1.0]), gflops=1.0)
    tuner = make_tuner("grid", Points(30))
    task = Task(Target(export, share), Outcome(export, share), Points(30), Measured(export, broken), default,
                pd.DataFrame(), Search(tuner, batch_size=2), 0, 0)
    task.progress = TaskProgress(share, [(0, task.best_ms())])
    return task


class Log:
    """The tile search's log stand-in: what it is handed after every round."""

    def __init__(self):
        self.rounds = []

    def append(self, trials, scheduled=None):
        self.rounds.append((len(trials), scheduled))


def test_the_scheduler_spends_the_trials_by_share_through_the_loop_and_logs_every_round():
    big, small = task("big", 0.9), task("small", 0.1)
    log, recorder, console = Log(), Recorder(), Console(file=io.StringIO())
    with ProgressBar(console, "tiles") as bar:
        run_schedule([big, small], Budget(trials=6), 2, log, [recorder, bar], bar.report)
    assert big.search.trials + small.search.trials == 6 and big.search.trials > small.search.trials
    assert [scheduled["dispatch"] for _, scheduled in log.rounds] == ["big", "small", "big"]  # warm-up in order
    assert [scheduled["round"] for _, scheduled in log.rounds] == [1, 2, 3] and log.rounds[0][0] == 2
    assert recorder.calls[0] == ("begin", 6, 0) and recorder.calls[-1] == ("end", TRIALS)
    assert [t.trial for t in big.trials] == [1, 2, 3, 4]  # numbered on per dispatch


def test_a_dispatch_whose_measuring_fails_stops_with_a_note_and_the_others_go_on():
    broken, fine = task("broken", 0.9, broken=True), task("fine", 0.1)
    log = Log()
    run_schedule([broken, fine], Budget(trials=6), 2, log, [], lambda *_: None)
    assert broken.failed == "RuntimeError: the candidates' directory vanished" and broken.search.trials == 0
    assert fine.search.trials == 6 and log.rounds[0] == (0, log.rounds[0][1])  # the failed round is logged, no trials
