"""The tuner interface, in AutoTVM's shape: a tuner proposes the next batch of point indices of a
:class:`~tracelink.tune.space.TileSpace` (``next_batch``) and learns from their measured throughputs
(``update``); ``xs`` and ``ys`` are its state, which a resumed session rebuilds by ``update``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

from tracelink.tune.space import TileSpace


class Tuner(ABC):
    """Proposes unvisited points; subclasses decide the order."""

    name = "base"

    def __init__(self, space: TileSpace, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.xs: list[int] = []
        self.ys: list[float] = []

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, size: int) -> list[int]:
        batch = []
        while len(batch) < size and self.has_next():
            index = self._next()
            self.visited.add(index)
            batch.append(index)
        return batch

    def update(self, indices: Iterable[int], throughputs: Iterable[float]) -> None:
        for index, throughput in zip(indices, throughputs):
            self.visited.add(index)
            self.xs.append(index)
            self.ys.append(max(0.0, float(throughput)))

    @abstractmethod
    def _next(self) -> int:
        """The next unvisited point to try."""

    def _random_unvisited(self) -> int:
        while True:
            index = int(self.rng.integers(len(self.space)))
            if index not in self.visited:
                return index
