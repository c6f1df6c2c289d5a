"""One dispatch's search: a tile tuner with its best so far and early stopping, itself a tuner of the
loop (:mod:`.loop`; the task scheduler of ``tile_search`` interleaves the searches of several
dispatches), and :func:`search`, one search alone within a trial budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracelink.tune.tuners.base import Tuner
from tracelink.tune.tuners.loop import Budget, tune


@dataclass
class SearchResult:
    trials: int
    best_index: int | None
    best_throughput: float
    stopped_early: bool


class Search:
    """A tuner's search, batch by batch: trials the tuner already knows (resumed) count as done; the
    search stops early when the best has not improved during the last ``early_stopping`` trials."""

    def __init__(self, tuner: Tuner, batch_size: int = 8, early_stopping: int | None = None):
        self.tuner, self.batch_size, self.early_stopping = tuner, batch_size, early_stopping
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

    def has_next(self) -> bool:
        return not self.finished

    def next_batch(self, size: int) -> list[int]:
        return self.tuner.next_batch(min(self.batch_size, size))

    def update(self, batch: list[int], throughputs: list[float]) -> None:
        """Learn from the throughput of each point (0 for a failure)."""
        self.tuner.update(batch, throughputs)
        for index, value in zip(batch, throughputs):
            self.trials += 1
            if value > self.best:
                self.best_index, self.best, self.best_at = index, value, self.trials
        if self.early_stopping is not None and self.trials - self.best_at >= self.early_stopping:
            self.stopped = True

    def result(self) -> SearchResult:
        return SearchResult(self.trials, self.best_index, self.best, self.stopped)


def search(
    tuner: Tuner,
    measure: Callable[[list[int]], list[float]],
    n_trial: int,
    batch_size: int = 8,
    early_stopping: int | None = None,
) -> SearchResult:
    """Measure up to ``n_trial`` points proposed by ``tuner`` (counting those it already knows) in the
    loop; a stop in the budget's last batch is no early stop."""
    run = Search(tuner, batch_size, early_stopping)
    tune(run, measure, Budget(trials=n_trial), batch_size, spent=run.trials)
    run.stopped = run.stopped and run.trials < n_trial
    return run.result()
