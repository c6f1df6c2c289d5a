"""One search of one tuner against a measuring function: batch by batch, with a trial budget and
early stopping (the task scheduler of ``run`` interleaves the searches of several dispatches)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracelink.tune.tuners.base import Tuner
from tracelink.tune.tuners.loop import step


@dataclass
class SearchResult:
    trials: int
    best_index: int | None
    best_throughput: float
    stopped_early: bool


class Search:
    """One search, advanced one batch at a time (the task scheduler interleaves the searches of several
    dispatches). Trials the tuner already knows (resumed) count as done."""

    def __init__(self, tuner: Tuner, measure: Callable[[list[int]], list[float]], batch_size: int = 8,
                 early_stopping: int | None = None):
        self.tuner, self.measure, self.batch_size, self.early_stopping = tuner, measure, batch_size, early_stopping
        self.best_index, self.best, self.best_at = None, 0.0, 0
        for i, (index, value) in enumerate(zip(tuner.xs, tuner.ys)):
            if value > self.best:
                self.best_index, self.best, self.best_at = index, value, i + 1
        self.trials = len(tuner.xs)
        self.stopped = False

    @property
    def finished(self) -> bool:
        """Stopped early, or every point of the space measured."""
        return self.stopped or not self.tuner.has_next()

    def step(self, limit: int) -> int:
        """Measure one batch of at most ``limit`` points; returns how many were measured.

        ``measure`` returns the throughput of each point (0 for a failure). The search stops early
        when the best has not improved during the last ``early_stopping`` trials."""
        batch, values = step(self.tuner, self.measure, min(self.batch_size, limit))
        if not batch:
            return 0
        for index, value in zip(batch, values):
            self.trials += 1
            if value > self.best:
                self.best_index, self.best, self.best_at = index, value, self.trials
        if self.early_stopping is not None and self.trials - self.best_at >= self.early_stopping:
            self.stopped = True
        return len(batch)

    def result(self) -> SearchResult:
        return SearchResult(self.trials, self.best_index, self.best, self.stopped)


def search(
    tuner: Tuner,
    measure: Callable[[list[int]], list[float]],
    n_trial: int,
    batch_size: int = 8,
    early_stopping: int | None = None,
) -> SearchResult:
    """Measure up to ``n_trial`` points proposed by ``tuner`` (counting those it already knows), one
    ``Search`` alone."""
    run = Search(tuner, measure, batch_size, early_stopping)
    while run.trials < n_trial and not run.finished:
        run.step(n_trial - run.trials)
    run.stopped = run.stopped and run.trials < n_trial  # a stop in the budget's last batch is no early stop
    return run.result()
