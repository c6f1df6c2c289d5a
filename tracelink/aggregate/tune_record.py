"""The tune record: ``PROFILE/tune/strategies.json``, its schema, its writer and its readers, in one
place. ``tracelink tune`` writes it (atomically, after every measured strategy, so an interrupt keeps
what was measured) and reads it back for ``--resume``; the advice (:mod:`tracelink.aggregate.advice`),
the profile loader and the report read it as untrusted input. It sits in ``aggregate`` so that those
readers need not import ``tune``, a later stage.

Schema 1::

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

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tracelink.atomic import make_directory, write_text_atomic
from tracelink.errors import TracelinkError

STRATEGIES_FILE = Path("tune") / "strategies.json"
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
        # tune's ratio is the line's paired speedup (tracelink.tune.stats: steadier on a loaded machine
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


def load_strategies(directory: Path) -> Strategies | None:
    """An earlier tune's record for ``--resume`` (None when absent); a damaged one is an error, since
    resuming from it would redo or misread measurements."""
    path = Path(directory) / STRATEGIES_FILE
    if not path.is_file():
        return None
    try:
        return parse_strategies(path, path.read_text(encoding="utf-8"))
    except (BadStrategies, OSError, UnicodeDecodeError) as error:
        raise TracelinkError(f"{path}: not a strategies record of this tracelink ({error}); move it away to start afresh") from None


def strategies_document(base_flags: list[str], strategies: list[dict], per_line: list[dict]) -> dict:
    """The record as written: ``strategies`` entries and ``per_line`` rows as in the schema above."""
    return {"schema": SCHEMA, "base": {"flags": base_flags}, "strategies": strategies, "per_line": per_line}


def write_strategies(directory: Path, document: dict) -> Path:
    """Write the record of the profile in ``directory``, atomically."""
    path = Path(directory) / STRATEGIES_FILE
    make_directory(path.parent)
    return write_text_atomic(path, json.dumps(document, indent=2, allow_nan=False))
