"""Measured advice: what each compiler strategy `tracelink tune` measured did to each line and op kind.

`tracelink tune PROFILE` writes ``PROFILE/tune/strategies.json`` (schema 1): every strategy it tried
(its flags, a status — ``faster``, ``not faster``, ``compile failed``, ``wrong outputs`` or ``not run``
— the reason, the whole program's ratio and its 95 % interval) and, from a diff of the strategy's
profile against the base by source location, per source line and op kind the base and strategy time
(``ratio`` = base time / strategy time). This module reads that file as untrusted input (a damaged
one is ignored with one warning line naming it) and turns it into:

- the per-line and per-op-kind strategy tables the report, the printed summary and ``--json`` show;
- next steps that name only what was measured to help: a strategy whose whole-program status is
  ``faster`` and that made the line (op, dispatch) at least :data:`HELPED` times faster there
  ("img2col: 14x faster here"). A line the strategies were measured on but none helped says so; a line
  without per-line measurements keeps its verdict's next step, which then says what tune measured on
  the whole program instead of pointing at it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tracelink.aggregate.utilization import NOT_MEASURED

STRATEGIES_FILE = Path("tune") / "strategies.json"
SCHEMA = 1
STATUSES = ("faster", "not faster", "compile failed", "wrong outputs", "not run")
# A line counts as helped by a strategy when its time there shrank by at least this factor: per-line
# ratios come from one diff of medians without an interval, and two profiles of the same build (10
# iterations each, this 2-core VM at a load average of 17) differed by 1.10x and 1.19x on their two lines.
HELPED = 1.25
MAX_FILE_BYTES = 64_000_000
EFFECT_COLUMNS = ["strategy", "status", "base_ns", "strategy_ns", "ratio", "program_ratio"]


@dataclass(frozen=True)
class Strategy:
    name: str
    flags: tuple[str, ...]
    status: str
    reason: str
    ratio: float | None  # whole program: base time / strategy time
    ci: tuple[float, float] | None


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
    return Strategy(
        _text(entry.get("name"), f"{where}.name"), tuple(_text(flag, f"{where}.flags") for flag in flags), status,
        _text(entry.get("reason", ""), f"{where}.reason"),
        None if ratio is None else _number(ratio, f"{where}.ratio", positive=True),
        None if ci is None else (_number(ci[0], f"{where}.ci"), _number(ci[1], f"{where}.ci")),
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
        # tune's ratio is diff's speedup (the geometric mean of per-round ratios, steadier on a loaded
        # machine than the ratio of the medians); the strategy's time is re-expressed through it, so sums
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


def effects(strategies: Strategies, keys: list[str], rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """What each strategy did per ``keys`` (e.g. file and line, or op kind): base and strategy time
    summed over the rows (``rows`` defaults to every per-line row), their ratio, the strategy's
    whole-program status and ratio."""
    rows = strategies.per_line if rows is None else rows
    if rows.empty:
        return pd.DataFrame(columns=[*keys, *EFFECT_COLUMNS])
    sums = rows.groupby([*keys, "strategy"], sort=False)[["base_ns", "strategy_ns"]].sum().reset_index()
    by_name = {strategy.name: strategy for strategy in strategies.strategies}
    sums["ratio"] = [base / tried if tried > 0 else math.inf for base, tried in zip(sums["base_ns"], sums["strategy_ns"])]
    sums["status"] = [by_name[name].status for name in sums["strategy"]]
    sums["program_ratio"] = [by_name[name].ratio for name in sums["strategy"]]
    return sums[[*keys, *EFFECT_COLUMNS]]


def ratio_text(ratio: float) -> str:
    """A speed ratio as people say it: 14x, 1.3x, 0.7x."""
    if math.isinf(ratio):
        return "∞x"
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.2g}x"


def measured_step(ratios: dict[str, float], faster: set[str]) -> str:
    """The next step from what was measured on one line (op, dispatch), ``ratios`` per strategy: the
    strategies that made the program faster and helped it (≥ :data:`HELPED`), with their ratios there,
    best first; or that none did."""
    if not ratios:
        return ""
    ordered = sorted(ratios.items(), key=lambda item: -item[1])
    good = [(name, ratio) for name, ratio in ordered if name in faster and ratio >= HELPED]
    if good:
        return ", ".join(f"{name}: {ratio_text(ratio)} faster here" for name, ratio in good)
    tried = ", ".join(f"{name} {ratio_text(ratio)}" for name, ratio in ordered)
    return f"no strategy that made the program faster helped it here (measured: {tried})"


def line_keys(text: str) -> list[tuple[str, int]]:
    """``file:line;file:line`` → [(file, line)] (a file name may hold colons)."""
    keys = []
    for item in str(text or "").split(";"):
        path, _, number = item.rpartition(":")
        if path and number.isdigit():
            keys.append((path, int(number)))
    return keys


def with_measured_steps(table: pd.DataFrame, lines_of: Callable[[pd.Series], list[tuple[str, int]]], strategies: Strategies) -> pd.DataFrame:
    """``table`` (lines, ops or call sites) with the next step of every row the strategies were
    measured on replaced by :func:`measured_step` over its lines."""
    if table.empty or "next_step" not in table:
        return table
    overall = whole_program_text(strategies)
    times: dict[tuple[str, int], dict[str, list[float]]] = {}  # line -> strategy -> [base ns, strategy ns]
    for row in strategies.per_line.itertuples():
        pair = times.setdefault((row.file, int(row.line)), {}).setdefault(row.strategy, [0.0, 0.0])
        pair[0] += row.base_ns
        pair[1] += row.strategy_ns
    faster = strategies.faster()
    steps = []
    for _, row in table.iterrows():
        summed: dict[str, list[float]] = {}
        for key in set(lines_of(row)):
            for name, (base, tried) in times.get(key, {}).items():
                total = summed.setdefault(name, [0.0, 0.0])
                total[0] += base
                total[1] += tried
        ratios = {name: base / tried if tried > 0 else math.inf for name, (base, tried) in summed.items()}
        steps.append(measured_step(ratios, faster) or str(row["next_step"]).replace(NOT_MEASURED, overall))
    return table.assign(next_step=steps)


def whole_program_text(strategies: Strategies) -> str:
    """What tune measured on the whole program, for a line it has no per-line measurement of."""
    tried = ", ".join(f"{s.name} {ratio_text(s.ratio)}" if s.ratio is not None else f"{s.name} {s.status}" for s in strategies.strategies)
    faster = sorted(strategies.faster())
    if not faster:
        return f"no compiler strategy tune measured was significantly faster on the whole program ({tried})"
    return f"not measured on this line; faster on the whole program: {', '.join(faster)} ({tried})"


def advise(call_sites: pd.DataFrame, source_ops: pd.DataFrame, source_lines: pd.DataFrame, strategies: Strategies) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The three tables with measured next steps (a call site and an op through their lines)."""
    return (
        with_measured_steps(call_sites, lambda row: line_keys(row.get("source_lines", "")), strategies),
        with_measured_steps(source_ops, lambda row: line_keys(row.get("lines", "")), strategies),
        with_measured_steps(source_lines, lambda row: [(str(row["file"]), int(row["line"]))], strategies),
    )
