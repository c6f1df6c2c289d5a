"""The space walked with an even stride sized to the budget."""

from __future__ import annotations

from tracelink.tune.space import TileSpace
from tracelink.tune.tuners.base import Tuner


class GridTuner(Tuner):
    """Walks the space with an even stride sized to the budget, so a small budget still spans it."""

    name = "grid"

    def __init__(self, space: TileSpace, seed: int = 0, budget: int | None = None):
        super().__init__(space, seed)
        stride = max(1, len(space) // max(1, budget or len(space)))
        order = list(range(0, len(space), stride))
        self.order = order + [i for i in range(len(space)) if i not in set(order)]
        self.position = 0

    def _next(self) -> int:
        while self.order[self.position] in self.visited:
            self.position += 1
        return self.order[self.position]
