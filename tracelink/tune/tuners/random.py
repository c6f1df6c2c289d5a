"""Uniformly random order without repetition: the baseline every other tuner has to beat."""

from __future__ import annotations

from tracelink.tune.tuners.base import Tuner


class RandomTuner(Tuner):
    """Uniformly random order without repetition."""

    name = "random"

    def _next(self) -> int:
        if len(self.visited) > 0.5 * len(self.space):
            remaining = [i for i in range(len(self.space)) if i not in self.visited]
            return remaining[int(self.rng.integers(len(remaining)))]
        return self._random_unvisited()
