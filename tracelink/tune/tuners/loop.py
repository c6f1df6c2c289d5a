"""The one loop both searches of `tune` run, autotvm's ``Tuner.tune`` in small: a tuner of either search
space (:class:`SpaceTuner`: tile configs of a dispatch, or the strategy search's races) proposes a batch,
the caller's ``measure`` measures it, the tuner learns from the results, and every measured batch goes
to the callbacks (the record of what was measured, the progress display)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

Point = TypeVar("Point")
Result = TypeVar("Result")
Callback = Callable[[list, list], None]  # (batch, results), after every measured batch


class SpaceTuner(Protocol[Point, Result]):
    """The tuner interface of both search spaces: what to measure next, and what was measured."""

    def has_next(self) -> bool:
        """Whether anything is left to propose."""

    def next_batch(self, size: int) -> list[Point]:
        """Up to ``size`` points to measure next ([] when none is left)."""

    def update(self, batch: list[Point], results: list[Result]) -> None:
        """Learn from the measured ``results`` of ``batch``."""


def step(tuner: SpaceTuner[Point, Result], measure: Callable[[list[Point]], list[Result]], size: int,
         callbacks: Sequence[Callback] = ()) -> tuple[list[Point], list[Result]]:
    """One batch: proposed, measured, learnt from and handed to the callbacks; ([], []) when the tuner
    has nothing left."""
    batch = tuner.next_batch(size)
    if not batch:
        return [], []
    results = measure(batch)
    tuner.update(batch, results)
    for callback in callbacks:
        callback(batch, results)
    return batch, results


def drive(tuner: SpaceTuner[Point, Result], measure: Callable[[list[Point]], list[Result]], size: int,
          callbacks: Sequence[Callback] = ()) -> None:
    """Batches until the tuner has nothing left to propose."""
    while tuner.has_next():
        batch, _ = step(tuner, measure, size, callbacks)
        if not batch:
            return
