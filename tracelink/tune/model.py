"""The cost model: gradient-boosted trees (XGBoost) ranking configurations by predicted speed.

Features are the log2 of every knob plus quantities derived from the tiles (workgroup count, register,
L1 and L2 footprints, vector-level arithmetic intensity, vector tiles per workgroup). Like AutoTVM's
XGBoost model it is trained with a ranking objective on throughput normalised by the best seen, so it
only has to order configurations, not predict their run time; failed trials train as zero throughput.

Transfer across dispatches and runs (AutoTVM's transfer learning, simplified): every measured trial is
kept in a history per machine (CPU, compiler, device, clock), as its derived features — the same
quantities for every dispatch, unlike the knobs — and its throughput relative to its dispatch's best.
A model trained on that history (``TransferModel``) ranks a new dispatch's configurations before any
of them is measured, so the first batch is chosen by what worked on this machine instead of at random.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xgboost as xgb

from tracelink.collect.machine import cache_dir, cpu_model
from tracelink.tools import compiler_version
from tracelink.tune.space import TileSpace

DERIVED = ("workgroups", "register_bytes", "l1_bytes", "l2_bytes", "intensity", "vector_tiles_per_workgroup")
MIN_HISTORY = 16  # trials before the history is worth a model


def feature_names(space: TileSpace) -> list[str]:
    return [f"log2_{knob.name}" for knob in space.knobs] + [f"log2_{name}" for name in DERIVED]


def _log_derived(space: TileSpace, point: tuple[int, ...]) -> list[float]:
    derived = space.derived(point)
    return [np.log2(max(derived[name], 1e-9)) for name in DERIVED]


def features(space: TileSpace) -> np.ndarray:
    """One row of features per point of the space (float32, shape len(space) x n_features)."""
    rows = [[np.log2(max(value, 1)) for value in point] + _log_derived(space, point) for point in space.points]
    return np.asarray(rows, dtype=np.float32)


class CostModel:
    """Predicts a score (higher is faster) for points of a space from measured ones."""

    def __init__(self, space: TileSpace, rounds: int = 60, seed: int = 0):
        self.space = space
        self.table = features(space)
        self.rounds = rounds
        self.seed = seed
        self.booster: xgb.Booster | None = None
        self.params = {
            "objective": "rank:pairwise",
            "max_depth": 4,
            "eta": 0.3,
            "gamma": 1e-4,
            "min_child_weight": 1,
            "subsample": 1.0,
            "lambda": 1.0,
            "nthread": 1,
            "seed": seed,
            "verbosity": 0,
        }

    def fit(self, indices: list[int], throughputs: list[float]) -> None:
        """Train on measured points; throughput 0 marks a failed trial."""
        y = np.asarray(throughputs, dtype=np.float64)
        if len(indices) < 2 or y.max() <= 0:
            return
        train = xgb.DMatrix(self.table[np.asarray(indices)], label=y / y.max(), feature_names=feature_names(self.space))
        self.booster = xgb.train(self.params, train, num_boost_round=self.rounds)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, indices: np.ndarray | list[int]) -> np.ndarray:
        if self.booster is None:
            return np.zeros(len(indices))
        return self.booster.inplace_predict(self.table[np.asarray(indices)])


def history_path(device: str, clock: str) -> Path:
    """Where the trials measured on this machine (CPU, compiler) with ``device`` and ``clock`` are kept."""
    key = f"{cpu_model()}|{compiler_version()}|{device}|{clock}"
    name = "".join(ch if ch.isalnum() else "_" for ch in key)[:200]
    return cache_dir() / "models" / f"{name}.npy"


class History:
    """Trials of every dispatch tuned on one machine: derived features, then relative throughput (0..1)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.rows = np.load(path) if path.is_file() else np.zeros((0, len(DERIVED) + 1), dtype=np.float32)
        except (OSError, ValueError):  # a damaged history is started afresh: it only speeds the search up
            self.rows = np.zeros((0, len(DERIVED) + 1), dtype=np.float32)
        if self.rows.ndim != 2 or self.rows.shape[1] != len(DERIVED) + 1:
            self.rows = np.zeros((0, len(DERIVED) + 1), dtype=np.float32)

    def add(self, space: TileSpace, indices: list[int], throughputs: list[float]) -> None:
        """Add one dispatch's trials and save; throughputs are made relative to its best."""
        best = max(throughputs, default=0.0)
        if best <= 0:
            return
        rows = [_log_derived(space, space.points[i]) + [y / best] for i, y in zip(indices, throughputs)]
        self.rows = np.vstack([self.rows, np.asarray(rows, dtype=np.float32)])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp.npy")
        np.save(temporary, self.rows)
        temporary.replace(self.path)  # concurrent tunes never read half a file

    def model(self, space: TileSpace, seed: int = 0) -> "TransferModel | None":
        """A model of this history for ``space``, or None while the history is too small."""
        if len(self.rows) < MIN_HISTORY or self.rows[:, -1].max() <= 0:
            return None
        return TransferModel(space, self.rows, seed)


class TransferModel:
    """A ranking model on derived features, trained on other dispatches' trials (same ``predict`` as CostModel)."""

    def __init__(self, space: TileSpace, rows: np.ndarray, seed: int = 0):
        params = dict(CostModel(space, seed=seed).params)
        train = xgb.DMatrix(rows[:, :-1], label=rows[:, -1], feature_names=list(DERIVED))
        self.booster = xgb.train(params, train, num_boost_round=60)
        self.table = np.asarray([_log_derived(space, point) for point in space.points], dtype=np.float32)

    def predict(self, indices: np.ndarray | list[int]) -> np.ndarray:
        return self.booster.inplace_predict(self.table[np.asarray(indices)])
