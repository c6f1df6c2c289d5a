"""The one loop both searches of `tune` run, autotvm's ``Tuner.tune(n_trial, measure_option, callbacks)``
in small: a tuner of either search space (:class:`SpaceTuner`: the task scheduler over the tile
configs of the hot dispatches, one dispatch's tile configs, or the strategy search's races) proposes a
batch, the caller's ``measure`` measures it, the tuner learns from the results, and every measured
batch goes to the callbacks (the record log, the progress bar). The loop owns the budget (trials and/or
a deadline) and stops on it; each result counts as one trial."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

Point = TypeVar("Point")
Result = TypeVar("Result")
Report = Callable[[str, int, int], None]  # within a batch: what is being done, units done, units in all

DONE, TRIALS, DEADLINE = "done", "trials", "deadline"  # why a loop stopped


def no_report(what: str, done: int, total: int) -> None:
    """A :data:`Report` for work nobody watches."""


class SpaceTuner(Protocol[Point, Result]):
    """The tuner interface of both search spaces: what to measure next, and what was measured."""

    def has_next(self) -> bool:
        """Whether anything is left to propose."""

    def next_batch(self, size: int) -> list[Point]:
        """Up to ``size`` points to measure next ([] when none is left)."""

    def update(self, batch: list[Point], results: list[Result]) -> None:
        """Learn from the measured ``results`` of ``batch``."""


@dataclass(frozen=True)
class Budget:
    """What a loop may spend: ``trials`` (None: no limit) and a ``deadline`` (``time.monotonic()``
    seconds; None: none). No batch starts once either is spent; work inside a batch may ask
    :meth:`left_s` too (a strategy race builds several programs)."""

    trials: int | None = None
    deadline: float | None = None

    @classmethod
    def of_seconds(cls, seconds: float) -> Budget:
        return cls(deadline=time.monotonic() + seconds)

    def left_s(self) -> float:
        """Seconds left before the deadline (infinite without one)."""
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def with_trials(self, trials: int) -> Budget:
        """The same deadline with a trial limit."""
        return Budget(trials, self.deadline)


class Callback:
    """What a loop tells as it runs (autotvm's callbacks); each method does nothing unless overridden."""

    def begin(self, budget: Budget, spent: int) -> None:
        """The loop starts; ``spent`` trials of ``budget`` were measured before (a resumed session's)."""

    def report(self, what: str, done: int, total: int) -> None:
        """Inside a batch: ``done`` of ``total`` units of ``what`` (the caller's ``measure`` reports)."""

    def measured(self, batch: list, results: list) -> None:
        """After every measured batch."""

    def end(self, stop: str) -> None:
        """The loop stopped, for ``stop`` (``done``, ``trials``, ``deadline``; ``interrupted`` by an error)."""


class AfterBatch(Callback):
    """A plain function of ``(batch, results)`` as a callback, called after every measured batch."""

    def __init__(self, function: Callable[[list, list], None]):
        self.function = function

    def measured(self, batch: list, results: list) -> None:
        self.function(batch, results)


def stop_reason(tuner: SpaceTuner, budget: Budget, spent: int) -> str | None:
    """Why no further batch starts (None: one does)."""
    if not tuner.has_next():
        return DONE
    if budget.trials is not None and spent >= budget.trials:
        return TRIALS
    if budget.left_s() <= 0:
        return DEADLINE
    return None


def tune(tuner: SpaceTuner[Point, Result], measure: Callable[[list[Point]], list[Result]], budget: Budget = Budget(),
         size: int = 1, callbacks: Sequence[Callback] = (), spent: int = 0) -> str:
    """Batches of at most ``size`` points (and at most the trials left) until the tuner has nothing left,
    the budget's trials are spent or its deadline has passed; ``spent`` trials count as measured already.
    Returns why it stopped (``done``, ``trials`` or ``deadline``)."""
    for callback in callbacks:
        callback.begin(budget, spent)
    stop = "interrupted"
    try:
        while (reason := stop_reason(tuner, budget, spent)) is None:
            batch = tuner.next_batch(size if budget.trials is None else min(size, budget.trials - spent))
            if not batch:
                reason = DONE
                break
            results = measure(batch)
            tuner.update(batch, results)
            spent += len(results)
            for callback in callbacks:
                callback.measured(batch, results)
        stop = reason
    finally:
        for callback in callbacks:
            callback.end(stop)
    return stop
