"""The cost model: gradient-boosted trees (XGBoost) ranking configurations by predicted speed.

Features are the log2 of every knob plus quantities derived from the tiles (workgroup count, register,
L1 and L2 footprints, vector-level arithmetic intensity, vector tiles per workgroup). Like AutoTVM's
XGBoost model it is trained with a ranking objective on throughput normalised by the best seen, so it
only has to order configurations, not predict their run time; failed trials train as zero throughput.
"""

from __future__ import annotations

import numpy as np
import xgboost as xgb

from tracelink.tune.space import TileSpace

DERIVED = ("workgroups", "register_bytes", "l1_bytes", "l2_bytes", "intensity", "vector_tiles_per_workgroup")


def feature_names(space: TileSpace) -> list[str]:
    return [f"log2_{knob.name}" for knob in space.knobs] + [f"log2_{name}" for name in DERIVED]


def features(space: TileSpace) -> np.ndarray:
    """One row of features per point of the space (float32, shape len(space) x n_features)."""
    rows = []
    for point in space.points:
        derived = space.derived(point)
        rows.append([np.log2(max(value, 1)) for value in point] + [np.log2(max(derived[name], 1e-9)) for name in DERIVED])
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
