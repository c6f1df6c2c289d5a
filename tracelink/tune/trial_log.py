"""The tile search's side of tune's record log (:mod:`tracelink.aggregate.tune_record`): one ``tile``
record per measured configuration, appended as trials finish and read back by ``--resume``, and
``trials.csv``, one row per tile record of the log, derived from it after every batch."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from tracelink.aggregate.tune_record import RecordLog
from tracelink.atomic import write_atomic
from tracelink.tune.measure import Trial

TRIAL_COLUMNS = list(Trial("", 0, "", {}, "", "ok").row())
TILE = "tile"


def write_table(frame: pd.DataFrame, path: Path) -> Path:
    """``frame`` as CSV at ``path``, atomically."""
    return write_atomic(path, lambda temporary: frame.to_csv(temporary, index=False))


class TrialLog:
    """The tile records of the profile ``directory``'s log: a fresh search (``resume`` false) starts
    without the earlier ones; ``previous`` holds them for ``--resume``."""

    def __init__(self, directory: Path, resume: bool):
        self.log = RecordLog(directory, (TILE,), resume)
        self.table = Path(directory) / "tune" / "trials.csv"
        self.previous = pd.DataFrame(self.rows(), columns=TRIAL_COLUMNS)
        self.write_table()

    def rows(self) -> list[dict]:
        return [{column: record.get(column) for column in TRIAL_COLUMNS} for record in self.log.of_kind(TILE)]

    def append(self, trials: list[Trial]) -> None:
        self.log.append([{"kind": TILE, **trial.row()} for trial in trials])
        self.write_table()

    def write_table(self) -> None:
        """trials.csv from the log (a failed trial's times are empty)."""
        def write(temporary: Path) -> None:
            with temporary.open("w", newline="") as out:
                writer = csv.DictWriter(out, TRIAL_COLUMNS)
                writer.writeheader()
                writer.writerows(self.rows())

        write_atomic(self.table, write)

    def earlier(self, export: str) -> pd.DataFrame:
        return self.previous[self.previous["dispatch"] == export]
