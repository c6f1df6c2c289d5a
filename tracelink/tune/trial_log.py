"""The tile search's side of tune's record log (:mod:`tracelink.profile_dir.tune_record`, which writes the
views): a ``tiles`` record when the search starts, a ``tile`` record per measured configuration and a
``round`` record per round of the task scheduler as they are measured (a callback of the loop in
``tile_search``), then a ``dispatch`` record per tuned dispatch and the ``program_check``; ``--resume``
reads the earlier tile records back."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tracelink.profile_dir.tune_record import TILE_FIELDS, TILE_KINDS, RecordLog
from tracelink.tune.measure import Trial
from tracelink.tune.targets import Outcome


class TrialLog:
    """The tile records of the profile ``directory``'s log: a fresh search (``resume`` false) starts
    without the earlier ones; ``previous`` holds the earlier trials (the columns of ``trials.csv``)."""

    def __init__(self, directory: Path, resume: bool):
        self.log = RecordLog(directory, TILE_KINDS, resume)
        self.previous = pd.DataFrame([{column: record[column] for column in TILE_FIELDS} for record in self.log.of_kind("tile")],
                                     columns=list(TILE_FIELDS))
        self.log.append([{"kind": "tiles"}])

    def append(self, trials: list[Trial], scheduled: dict | None = None) -> None:
        """Measured trials, and the scheduler's round that measured them."""
        rounds = [{"kind": "round", **scheduled}] if scheduled else []
        self.log.append([*({"kind": "tile", **trial.row()} for trial in trials), *rounds])

    def outcomes(self, outcomes: list[Outcome]) -> None:
        """What tuning each dispatch found (``summary.csv``)."""
        self.log.append([{"kind": "dispatch", **outcome.row()} for outcome in outcomes])

    def program_check(self, check: dict) -> None:
        """The whole-program check (``program_check.json``)."""
        self.log.append([{"kind": "program_check", "check": check}])

    def earlier(self, export: str) -> pd.DataFrame:
        return self.previous[self.previous["dispatch"] == export]
