"""Model-based tuner like AutoTVM's: a cost model (``model.CostModel``) is refitted every ``plan_size``
measurements, a model optimizer (simulated annealing over the space, ``SAOptimizer``) finds the points
the model ranks highest, and those become the plan the next batches are drawn from, with a small share
of random picks (epsilon-greedy)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np

from tracelink.tune.model import CostModel, TransferModel
from tracelink.tune.space import TileSpace
from tracelink.tune.tuners.base import Tuner


class SAOptimizer:
    """Simulated annealing on the cost model's scores: finds the ``num`` best unvisited points.

    ``parallel`` chains walk from point to neighbouring point (one knob changed); a move is accepted
    when it improves the score or with probability exp(gain / temperature), the temperature falling
    linearly to zero. The chains persist between calls, so each search starts where the last ended.
    """

    def __init__(self, space: TileSpace, parallel: int = 64, iterations: int = 200, early_stop: int = 40, seed: int = 0):
        self.space = space
        self.parallel = min(parallel, len(space))
        self.iterations = iterations
        self.early_stop = early_stop
        self.rng = np.random.default_rng(seed)
        self.points: np.ndarray | None = None

    def find_maximums(self, model: CostModel | TransferModel, num: int, exclude: set[int]) -> list[int]:
        space = self.space
        if self.points is None:
            self.points = self.rng.choice(len(space), size=self.parallel, replace=False)
        points = self.points.copy()
        scores = model.predict(points)
        heap: list[tuple[float, int]] = []  # min-heap of the best (score, index) not in exclude
        in_heap: set[int] = set()

        def offer(index: int, score: float) -> None:
            if index in exclude or index in in_heap:
                return
            if len(heap) < num:
                heapq.heappush(heap, (score, index))
                in_heap.add(index)
            elif score > heap[0][0]:
                _, dropped = heapq.heapreplace(heap, (score, index))
                in_heap.discard(dropped)
                in_heap.add(index)

        for index, score in zip(points, scores):
            offer(int(index), float(score))
        spread = float(np.ptp(scores)) or 1.0
        last_change, best_floor = 0, heap[0][0] if heap else -np.inf
        for step in range(self.iterations):
            temperature = spread * (1.0 - step / self.iterations)
            candidates = space.random_neighbors(points, self.rng)
            new_scores = model.predict(candidates)
            gain = new_scores - scores
            accept = (gain > 0) | (self.rng.random(len(points)) < np.exp(np.minimum(0, gain) / max(temperature, 1e-12)))
            points = np.where(accept, candidates, points)
            scores = np.where(accept, new_scores, scores)
            for index, score in zip(candidates, new_scores):
                offer(int(index), float(score))
            floor = heap[0][0] if len(heap) == num else -np.inf
            if floor > best_floor:
                best_floor, last_change = floor, step
            elif step - last_change > self.early_stop:
                break
        self.points = points
        ranked = sorted(heap, reverse=True)
        return [index for _, index in ranked]


class XGBTuner(Tuner):
    """Model-based tuner: XGBoost cost model + simulated-annealing model optimizer."""

    name = "xgb"

    def __init__(self, space: TileSpace, seed: int = 0, plan_size: int = 8, epsilon: float = 0.1,
                 prior: TransferModel | None = None):
        super().__init__(space, seed)
        self.model = CostModel(space, seed=seed)
        self.optimizer = SAOptimizer(space, seed=seed)
        self.plan_size = plan_size
        self.epsilon = epsilon
        # before this dispatch's own measurements train the model, a model of earlier dispatches plans
        self.plan: list[int] = self.optimizer.find_maximums(prior, plan_size * 2, set()) if prior else []
        self.trained_at = 0

    def _next(self) -> int:
        while self.plan and self.plan[0] in self.visited:
            self.plan.pop(0)
        if not self.plan or self.rng.random() < self.epsilon:
            return self._random_unvisited()
        return self.plan.pop(0)

    def update(self, indices: Iterable[int], throughputs: Iterable[float]) -> None:
        super().update(indices, throughputs)
        if len(self.xs) >= self.trained_at + self.plan_size and max(self.ys, default=0) > 0:
            self.model.fit(self.xs, self.ys)
            self.plan = self.optimizer.find_maximums(self.model, self.plan_size * 2, self.visited)
            self.trained_at = len(self.xs)
