"""Search strategies over a TileSpace, in AutoTVM's shape.

A tuner proposes the next batch of point indices (``next_batch``) and learns from their measured
throughputs (``update``). ``XGBTuner`` splits the work like AutoTVM's model-based tuner: a cost model
(``model.CostModel``) is refitted every ``plan_size`` measurements, a model optimizer (simulated
annealing over the space, ``SAOptimizer``) finds the points the model ranks highest, and those become
the plan the next batches are drawn from, with a small share of random picks (epsilon-greedy).
``RandomTuner`` and ``GridTuner`` are the baselines. ``search`` runs any tuner against a measuring
function with a trial budget and early stopping.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from tracelink.errors import TracelinkError
from tracelink.tune.model import CostModel, TransferModel
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


class RandomTuner(Tuner):
    """Uniformly random order without repetition."""

    name = "random"

    def _next(self) -> int:
        if len(self.visited) > 0.5 * len(self.space):
            remaining = [i for i in range(len(self.space)) if i not in self.visited]
            return remaining[int(self.rng.integers(len(remaining)))]
        return self._random_unvisited()


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


TUNERS = {"xgb": XGBTuner, "random": RandomTuner, "grid": GridTuner}


def make_tuner(name: str, space: TileSpace, seed: int = 0, budget: int | None = None, plan_size: int = 8,
               prior: TransferModel | None = None) -> Tuner:
    """A tuner by name; ``budget`` spaces the grid, ``plan_size`` is the XGBoost tuner's re-fit interval,
    ``prior`` the XGBoost tuner's model of earlier dispatches."""
    if name not in TUNERS:
        raise TracelinkError(f"unknown tuner '{name}' (choose one of: {', '.join(TUNERS)})")
    if name == "grid":
        return GridTuner(space, seed=seed, budget=budget)
    if name == "xgb":
        return XGBTuner(space, seed=seed, plan_size=plan_size, prior=prior)
    return TUNERS[name](space, seed=seed)


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
        batch = self.tuner.next_batch(min(self.batch_size, limit))
        if not batch:
            return 0
        values = self.measure(batch)
        self.tuner.update(batch, values)
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
