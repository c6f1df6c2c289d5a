"""trials.csv: one row per measured tile configuration, appended as trials finish, read back by
``--resume``."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from tracelink.atomic import make_directory, open_for_writing, write_atomic
from tracelink.errors import TracelinkError, first_line
from tracelink.tune.measure import Trial

TRIAL_COLUMNS = list(Trial("", 0, "", {}, "", "ok").row())


def write_table(frame: pd.DataFrame, path: Path) -> Path:
    """``frame`` as CSV at ``path``, atomically."""
    return write_atomic(path, lambda temporary: frame.to_csv(temporary, index=False))


class TrialLog:
    """trials.csv: one row per measured configuration, appended and flushed as trials finish."""

    def __init__(self, path: Path, resume: bool):
        self.path = path
        make_directory(path.parent)
        self.previous = read_trials(path) if resume and path.exists() else None
        if not resume or not path.exists():
            with open_for_writing(path, "w", newline="") as out:
                csv.DictWriter(out, TRIAL_COLUMNS).writeheader()

    def append(self, trials: list[Trial]) -> None:
        with open_for_writing(self.path, "a", newline="") as out:
            writer = csv.DictWriter(out, TRIAL_COLUMNS)
            for trial in trials:
                writer.writerow(trial.row())

    def earlier(self, export: str) -> pd.DataFrame:
        if self.previous is None or self.previous.empty:
            return pd.DataFrame(columns=TRIAL_COLUMNS)
        return self.previous[self.previous["dispatch"] == export]


def read_trials(path: Path) -> pd.DataFrame:
    """The trials of an earlier run; a last row cut by an interrupt is dropped (its trial runs again)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:  # appends must start on a fresh line
            handle.truncate(data.rfind(b"\n") + 1)
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise TracelinkError(f"{path}: corrupt trials table ({first_line(error)}); move it away to start afresh") from None
    if list(frame.columns) != TRIAL_COLUMNS:
        raise TracelinkError(f"{path}: not a trials table of this tracelink (columns differ); move it away to start afresh")
    return frame
