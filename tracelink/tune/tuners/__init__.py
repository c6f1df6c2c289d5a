"""The tuners of both search spaces, in AutoTVM's shape, one per module, and the one loop that drives
them (:mod:`.loop`: the interface, the budget of trials and/or a deadline, and the callbacks every
measured batch goes to). Tile configs of a dispatch: the interface's base (:mod:`.base`), :mod:`.xgb`
(cost model and simulated annealing), :mod:`.random` and :mod:`.grid` (the baselines), and
:mod:`.search`, the best so far and early stopping around them; strategies: :mod:`.halving` (successive
halving, one race per batch). The task scheduler over several dispatches' searches is a tuner of the
loop too (:mod:`tracelink.tune.tile_search`)."""

from __future__ import annotations

from tracelink.errors import TracelinkError
from tracelink.tune.model import TransferModel
from tracelink.tune.space import TileSpace
from tracelink.tune.tuners.base import Tuner
from tracelink.tune.tuners.grid import GridTuner
from tracelink.tune.tuners.random import RandomTuner
from tracelink.tune.tuners.search import Search, SearchResult, search
from tracelink.tune.tuners.xgb import XGBTuner

__all__ = ["TUNERS", "Search", "SearchResult", "Tuner", "make_tuner", "search"]

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
