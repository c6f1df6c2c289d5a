"""The tune record, in one module: tune's **record log** (``PROFILE/tune/records.jsonl``, one JSON object
a line, one per measured trial of either search, as autotvm keeps one log) and the views derived from
it, with their schemas, writers and readers. ``tracelink tune`` appends to the log as it measures (so an
interrupt keeps every finished trial) and reads it back for ``--resume``; the strategy search's view,
``PROFILE/tune/strategies.json``, is what the advice (:mod:`tracelink.aggregate.advice`), the profile
loader and the report read, as untrusted input. It belongs to the profile directory's schema (the files'
names are in :mod:`tracelink.profile_dir.files`), below every stage, so that those readers need not import
``tune``, a later stage.

Records (``kind``), each checked field by field when the log is read (:data:`FIELDS`; a record off it
is a one-line error naming the file and line) and when it is written:

- ``strategies``: the start of a strategy search, ``{"kind", "base_flags": [str]}``;
- ``strategy``: what was measured of one strategy (its build and output check, then each race), as in
  the ``strategies`` entries below; ``{"kind", "name", "removed": true}`` drops a candidate the search
  proposed and then left out (a per-op composition that rewrote nothing);
- ``per_line``: one row of ``per_line`` below;
- ``placement`` (a tune on Ray): where a build or a race of the strategy search ran, ``{"kind", "what":
  "build" | "race", "names": [str] (the strategies built, or raced against the default), "node": str (Ray's
  node id), "address": str, "seconds": float, "stage": int (a race's stage; 0 for a build)}``;
- ``lost`` (a tune on Ray): a build or race whose worker or node died, ``{"kind", "what", "names",
  "reason": str (Ray's error), "retried": bool (false: the second loss, the trial's error)}``;
- ``tiles``: the start of a tile search, ``{"kind"}``;
- ``tile``: one measured tile configuration of a dispatch (the columns of ``trials.csv``);
- ``round``: one round of the tile search's task scheduler (the columns of ``schedule.csv``);
- ``tile_placement`` and ``tile_lost`` (a tune on Ray): a ``placement`` and a ``lost`` record of the tile
  search, ``what`` a candidate's ``build`` or the ``time`` of a dispatch's builds on its node, ``names``
  the trials (``<dispatch>#<trial>``, the default's trial 0), ``stage`` 0;
- ``dispatch``: what tuning one dispatch found (the columns of ``summary.csv``), written when the
  tile search and its checks end (an error or an interrupt included);
- ``program_check``: the whole-program check of the tuning, or of the flag baselines alone when no
  config was kept, ``{"kind", "check": {...}}`` (``program_check.json``).

The views, each derived from the log in one place (:meth:`RecordLog.write_views`, after every append;
a view whose records the log lacks is removed): ``trials.csv`` (every ``tile`` record), and of the
latest tile search ``schedule.csv`` (its rounds), ``summary.csv`` (its dispatches; the report's gains
read it) and ``program_check.json`` (its latest check); ``strategies.json`` of the latest strategy
search (below).

``strategies.json`` (schema 1) is the latest strategy search's records: each strategy's latest record,
in the order they were first proposed, and that search's per-line rows::

    {"schema": 1,
     "base": {"flags": [str]},                       # the profiled build's flags (dumps left out)
     "strategies": [{"name": str, "flags": [str],     # flags added to the base to build it
                     "status": "faster" | "not faster" | "compile failed" | "wrong outputs" | "not run",
                     "reason": str,                   # why (the error, the largest output difference,
                                                      #  the speedup and interval, or the budget)
                     "ratio": float | null,           # default time / strategy time (> 1: faster)
                     "ci": [lo, hi] | null,           # 95 % interval of ratio
                     "program": str | null}],          # a per-op composition's rewritten program
     "per_line": [{"file": str, "line": int, "op_kind": str, "strategy": str,
                   "base_ns": float, "strategy_ns": float, "ratio": float}]}

``per_line`` holds, per model line and op kind, the base and strategy time from a diff of the
strategy's profile against the base by source location (``ratio`` = base time / strategy time).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.atomic import make_directory, open_for_writing, remove_path, write_atomic, write_text_atomic
from tracelink.errors import TracelinkError
from tracelink.profile_dir import files

RECORDS_FILE = Path(files.TUNE_RECORDS)
STRATEGIES_FILE = Path(files.TUNE_STRATEGIES)
TRIALS_FILE = Path(files.TUNE_TRIALS)
SCHEDULE_FILE = Path(files.TUNE_SCHEDULE)
SUMMARY_FILE = Path(files.TUNE_SUMMARY)
CHECK_FILE = Path(files.TUNE_CHECK)
STRATEGY_WHERE = ("placement", "lost")  # where a task of the strategy search ran on Ray, and a task lost
TILE_WHERE = ("tile_placement", "tile_lost")  # the same of the tile search
STRATEGY_KINDS = ("strategies", "strategy", "per_line", *STRATEGY_WHERE)  # the strategy search's records
TILE_KINDS = ("tiles", "tile", "round", "dispatch", "program_check", *TILE_WHERE)  # the tile search's records
SCHEMA = 1
STATUSES = ("faster", "not faster", "compile failed", "wrong outputs", "not run")
MAX_FILE_BYTES = 64_000_000


@dataclass(frozen=True)
class Strategy:
    name: str
    flags: tuple[str, ...]
    status: str
    reason: str
    ratio: float | None  # whole program: base time / strategy time
    ci: tuple[float, float] | None
    program: str | None = None  # a per-op composition's rewritten program; None: the profiled one


@dataclass(frozen=True)
class Strategies:
    """A validated ``strategies.json``: the strategies and the per-line rows (``file, line, op_kind,
    strategy, base_ns, strategy_ns, ratio``)."""

    path: Path
    base_flags: tuple[str, ...]
    strategies: tuple[Strategy, ...]
    per_line: pd.DataFrame

    def faster(self) -> set[str]:
        return {strategy.name for strategy in self.strategies if strategy.status == "faster"}


class BadStrategies(ValueError):
    """The file does not follow the contract; the message says where."""


def _number(value: object, what: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (positive and value <= 0):
        raise BadStrategies(f"{what} is not a {'positive ' if positive else ''}finite number")
    return float(value)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > 10_000:
        raise BadStrategies(f"{what} is not a string")
    return value


def _strategy(entry: object, index: int) -> Strategy:
    where = f"strategies[{index}]"
    if not isinstance(entry, dict):
        raise BadStrategies(f"{where} is not an object")
    flags = entry.get("flags")
    if not isinstance(flags, list):
        raise BadStrategies(f"{where}.flags is not a list")
    status = entry.get("status")
    if status not in STATUSES:
        raise BadStrategies(f"{where}.status is not one of {', '.join(STATUSES)}")
    ratio = entry.get("ratio")
    ci = entry.get("ci")
    if ci is not None and (not isinstance(ci, list) or len(ci) != 2):
        raise BadStrategies(f"{where}.ci is not [low, high] or null")
    program = entry.get("program")
    return Strategy(
        _text(entry.get("name"), f"{where}.name"), tuple(_text(flag, f"{where}.flags") for flag in flags), status,
        _text(entry.get("reason", ""), f"{where}.reason"),
        None if ratio is None else _number(ratio, f"{where}.ratio", positive=True),
        None if ci is None else (_number(ci[0], f"{where}.ci"), _number(ci[1], f"{where}.ci")),
        None if program is None else _text(program, f"{where}.program"),
    )


def _per_line(rows: object, names: set[str]) -> pd.DataFrame:
    if not isinstance(rows, list):
        raise BadStrategies("per_line is not a list")
    out = []
    for index, row in enumerate(rows):
        where = f"per_line[{index}]"
        if not isinstance(row, dict):
            raise BadStrategies(f"{where} is not an object")
        line = row.get("line")
        if isinstance(line, bool) or not isinstance(line, int) or line < 0:
            raise BadStrategies(f"{where}.line is not a line number")
        strategy = _text(row.get("strategy"), f"{where}.strategy")
        if strategy not in names:
            raise BadStrategies(f"{where}.strategy '{strategy}' is not among the strategies")
        base, tried = _number(row.get("base_ns"), f"{where}.base_ns"), _number(row.get("strategy_ns"), f"{where}.strategy_ns")
        if base < 0 or tried < 0:
            raise BadStrategies(f"{where}: a negative time")
        # tune's ratio is the line's paired speedup (tracelink.aggregate.speedup: steadier on a loaded machine
        # than the ratio of the medians); the strategy's time is re-expressed through it, so sums
        # over lines and op kinds weigh each row by its base time and one row reads the ratio tune printed
        given = row.get("ratio")
        valid = isinstance(given, (int, float)) and not isinstance(given, bool) and math.isfinite(given) and given > 0
        ratio = float(given) if valid else (base / tried if tried > 0 else math.inf if base > 0 else 1.0)
        out.append({
            "file": _text(row.get("file"), f"{where}.file"), "line": line, "op_kind": _text(row.get("op_kind"), f"{where}.op_kind"),
            "strategy": strategy, "base_ns": base, "strategy_ns": base / ratio if math.isfinite(ratio) else tried, "ratio": ratio,
        })
    return pd.DataFrame(out, columns=["file", "line", "op_kind", "strategy", "base_ns", "strategy_ns", "ratio"])


def parse_strategies(path: Path, text: str) -> Strategies:
    """Validate the text of a ``strategies.json`` (:class:`BadStrategies` names what is wrong)."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise BadStrategies(f"not JSON ({error.__class__.__name__})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise BadStrategies(f"not a strategies document of schema {SCHEMA}")
    base = document.get("base")
    if not isinstance(base, dict) or not isinstance(base.get("flags"), list):
        raise BadStrategies("base.flags is not a list")
    entries = document.get("strategies")
    if not isinstance(entries, list):
        raise BadStrategies("strategies is not a list")
    strategies = tuple(_strategy(entry, index) for index, entry in enumerate(entries))
    names = {strategy.name for strategy in strategies}
    if len(names) != len(strategies):
        raise BadStrategies("two strategies have the same name")
    return Strategies(path, tuple(_text(flag, "base.flags") for flag in base["flags"]), strategies, _per_line(document.get("per_line", []), names))


def warn_on_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def read_strategies(directory: Path, warn: Callable[[str], None] = warn_on_stderr) -> Strategies | None:
    """The profile's measured strategies, or None when `tracelink tune` wrote none. A file that is not
    a regular file, too large or off the contract is ignored with one warning line naming it."""
    path = Path(directory) / STRATEGIES_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        if path.is_symlink() or not path.is_file():
            raise BadStrategies("not a regular file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise BadStrategies(f"larger than {MAX_FILE_BYTES // 1_000_000} MB")
        return parse_strategies(path, path.read_text(encoding="utf-8"))
    except (BadStrategies, OSError, UnicodeDecodeError) as error:
        warn(f"warning: {path}: ignored, {error}")
        return None


def resumed_strategies(log: RecordLog) -> dict[str, Strategy]:
    """What earlier strategy searches in the log measured of each strategy (its latest record), for
    ``--resume`` (the log's records are checked as it is read)."""
    return {name: _strategy({key: value for key, value in record.items() if key != "kind"}, index)
            for index, (name, record) in enumerate(latest_strategies(log.records).items())}


def strategies_document(base_flags: list[str], strategies: list[dict], per_line: list[dict]) -> dict:
    """The record as written: ``strategies`` entries and ``per_line`` rows as in the schema above."""
    return {"schema": SCHEMA, "base": {"flags": base_flags}, "strategies": strategies, "per_line": per_line}


def write_strategies(directory: Path, document: dict) -> Path:
    """Write the record of the profile in ``directory``, atomically."""
    path = Path(directory) / STRATEGIES_FILE
    make_directory(path.parent)
    return write_text_atomic(path, json.dumps(document, indent=2, allow_nan=False))


# The record log ------------------------------------------------------------------------------------

Field = tuple[Callable[[object], bool], str]  # a check of a value, and what it should be


def _json_text(value: object, kind: type) -> bool:
    try:
        return isinstance(value, str) and isinstance(json.loads(value), kind)
    except (ValueError, RecursionError):
        return False


TEXT: Field = (lambda v: isinstance(v, str) and len(v) <= 1_000_000, "a string")
INT: Field = (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
NUMBER: Field = (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)),
                 "a finite number or null")
FLAG: Field = (lambda v: isinstance(v, bool), "true or false")
OBJECT: Field = (lambda v: isinstance(v, dict), "an object")
TEXTS: Field = (lambda v: isinstance(v, list) and all(isinstance(item, str) for item in v), "a list of strings")
KNOBS: Field = (lambda v: _json_text(v, dict), "a JSON object as text")
SAMPLES: Field = (lambda v: v == "" or _json_text(v, list), "a JSON list as text, or empty")

TILE_FIELDS = {"dispatch": TEXT, "trial": INT, "tuner": TEXT, "configuration": TEXT, "knobs": KNOBS, "runtime_ms": NUMBER,
               "ci_low_ms": NUMBER, "ci_high_ms": NUMBER, "gflops": NUMBER, "verification": TEXT, "error": TEXT,
               "compile_s": NUMBER, "samples_ms": SAMPLES}
ROUND_FIELDS = {"round": INT, "dispatch": TEXT, "share": NUMBER, "score": NUMBER, "trials": INT, "best_ms": NUMBER}
DISPATCH_FIELDS = {"export": TEXT, "share": NUMBER, "space_size": INT, "trials": INT, "failed": INT, "default_ms": NUMBER,
                   "best_ms": NUMBER, "speedup": NUMBER, "ci_low": NUMBER, "ci_high": NUMBER, "configuration": TEXT,
                   "selected": FLAG, "program_speedup": NUMBER, "program_ci_low": NUMBER, "program_ci_high": NUMBER,
                   "shared_with": TEXT, "note": TEXT}
PER_LINE_FIELDS = {"file": TEXT, "line": INT, "op_kind": TEXT, "strategy": TEXT, "base_ns": NUMBER, "strategy_ns": NUMBER,
                   "ratio": NUMBER}
PLACEMENT_FIELDS = {"what": TEXT, "names": TEXTS, "node": TEXT, "address": TEXT, "seconds": NUMBER, "stage": INT}
LOST_FIELDS = {"what": TEXT, "names": TEXTS, "reason": TEXT, "retried": FLAG}
# Every kind's fields (a ``strategy`` record is checked as a ``strategies.json`` entry, or is a removal)
FIELDS: dict[str, dict[str, Field]] = {
    "strategies": {"base_flags": TEXTS}, "strategy": {"name": TEXT}, "per_line": PER_LINE_FIELDS,
    "placement": PLACEMENT_FIELDS, "lost": LOST_FIELDS, "tiles": {}, "tile_placement": PLACEMENT_FIELDS, "tile_lost": LOST_FIELDS,
    "tile": TILE_FIELDS, "round": ROUND_FIELDS, "dispatch": DISPATCH_FIELDS, "program_check": {"check": OBJECT},
}


def record_problem(record: object) -> str | None:
    """What makes ``record`` not a record of the log (None: it is one)."""
    if not isinstance(record, dict) or record.get("kind") not in FIELDS:
        kind = record.get("kind") if isinstance(record, dict) else None
        return f"not a record of tune's log (kind {kind!r})" if isinstance(kind, str) else "not a record of tune's log"
    for name, (check, expected) in FIELDS[record["kind"]].items():
        if name not in record or not check(record[name]):
            return f"a {record['kind']} record whose {name} is not {expected}"
    if record["kind"] == "strategy" and not record.get("removed"):
        try:
            _strategy({key: value for key, value in record.items() if key != "kind"}, 0)
        except BadStrategies as error:
            return f"a strategy record off the schema ({str(error).removeprefix('strategies[0]').lstrip('.')})"
    return None


class RecordLog:
    """tune's record log (the module's docstring): read when opened, appended to and flushed as trials
    are measured, its views written after every change. Opened for a search with ``kinds``, its own
    records: a fresh search (``resume`` false) starts without them, keeping the other search's."""

    def __init__(self, directory: Path, kinds: tuple[str, ...], resume: bool):
        self.directory = Path(directory)
        self.path = self.directory / RECORDS_FILE
        make_directory(self.path.parent)
        self.records = read_records(self.path) if self.path.is_file() else []
        if not resume or not self.path.is_file():
            self.records = [record for record in self.records if record["kind"] not in kinds]
            write_text_atomic(self.path, "".join(record_line(record) for record in self.records))
        self.write_views()

    def of_kind(self, *kinds: str) -> list[dict]:
        return [record for record in self.records if record["kind"] in kinds]

    def append(self, records: list[dict]) -> None:
        records = [plain(record) for record in records]  # held as they read back
        for record in records:
            if (problem := record_problem(record)) is not None:
                raise TracelinkError(f"{self.path}: refused to write {problem}")
        with open_for_writing(self.path, "a") as out:
            out.write("".join(record_line(record) for record in records))
        self.records += records
        self.write_views()

    def write_views(self) -> None:
        """Every file derived from the log, in one place (the module's docstring); a view whose records
        the log lacks is removed."""
        tiles = session(self.records, "tiles")
        checks = [record["check"] for record in tiles if record["kind"] == "program_check"]
        self._table(TRIALS_FILE, TILE_FIELDS, self.of_kind("tile") if any(r["kind"] == "tiles" for r in self.records) else None)
        self._table(SCHEDULE_FILE, ROUND_FIELDS, [record for record in tiles if record["kind"] == "round"] or None)
        self._table(SUMMARY_FILE, DISPATCH_FIELDS, [record for record in tiles if record["kind"] == "dispatch"] or None)
        self._view(CHECK_FILE, (lambda path: write_text_atomic(path, json.dumps(checks[-1], indent=2))) if checks else None)
        started = any(record["kind"] == "strategies" for record in self.records)
        self._view(STRATEGIES_FILE, (lambda path: write_strategies(self.directory, strategies_view(self))) if started else None)

    def _table(self, file: Path, columns: dict[str, Field], records: list[dict] | None) -> None:
        def write(temporary: Path) -> None:
            with temporary.open("w", newline="") as out:
                writer = csv.DictWriter(out, list(columns), extrasaction="ignore")
                writer.writeheader()
                writer.writerows(records)

        self._view(file, None if records is None else lambda path: write_atomic(path, write))

    def _view(self, file: Path, write: Callable[[Path], object] | None) -> None:
        path = self.directory / file
        if write is not None:
            write(path)
        elif path.exists() or path.is_symlink():
            remove_path(path, self.directory)


def plain(value: object) -> object:
    """``value`` as JSON holds it: a NaN or infinite number (a failed trial's time) as None (null), a
    numpy scalar as Python's, through lists and objects."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def record_line(record: dict) -> str:
    return json.dumps(plain(record), allow_nan=False) + "\n"


def read_records(path: Path) -> list[dict]:
    """The records of a log, each checked (:func:`record_problem`); a last line cut by an interrupt is
    dropped (its trial runs again)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        # appends must start on a fresh line: the file is replaced, not cut in place (a link would carry that)
        write_atomic(path, lambda temporary: temporary.write_bytes(data))
    records = []
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        lines = ["not UTF-8"]
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if (problem := record_problem(record)) is not None:
            raise TracelinkError(f"{path}:{number}: {problem}; move the file away to start afresh")
        records.append(record)
    return records


def session(records: list[dict], start: str) -> list[dict]:
    """The records from the latest ``start`` record on (a search's records follow its start)."""
    starts = [index for index, record in enumerate(records) if record["kind"] == start]
    return records[starts[-1]:] if starts else []


def latest_strategies(records: list[dict]) -> dict[str, dict]:
    """Each strategy's latest record among ``records``, in the order they were first proposed."""
    latest: dict[str, dict] = {}
    for record in records:
        if record["kind"] == "strategy":
            latest[record["name"]] = record  # a later record keeps the place of the first
    return {name: record for name, record in latest.items() if not record.get("removed")}


def strategies_view(log: RecordLog) -> dict:
    """``strategies.json`` of the latest strategy search in the log."""
    records = session(log.records, "strategies")
    entries = [{key: value for key, value in record.items() if key != "kind"} for record in latest_strategies(records).values()]
    rows = [{key: value for key, value in record.items() if key != "kind"} for record in records if record["kind"] == "per_line"]
    return strategies_document(records[0]["base_flags"] if records else [], entries, rows)
