"""Measured advice: what each compiler strategy `tracelink tune` measured did to each line and op kind.

`tracelink tune PROFILE` records every strategy it tried and, per source line and op kind, the base and
strategy time (:mod:`tracelink.profile_dir.tune_record`, which reads the record as untrusted input). This
module turns that record into:

- the per-line and per-op-kind strategy tables the report, the printed summary and ``--json`` show;
- next steps that name only what was measured to help: a strategy whose whole-program status is
  ``faster`` and that made the line (dispatch) at least :data:`HELPED` times faster there
  ("img2col: 14x faster here"). A line the strategies were measured on but none helped says so; a line
  without per-line measurements keeps its verdict's next step, which then says what tune measured on
  the whole program instead of pointing at it.

A profile applies :func:`advise` once, where it is loaded (:mod:`tracelink.aggregate.shown`), to the tables
its outputs show, not to those it stores: the report, the printed summary and ``--json`` ask for them
through :func:`tracelink.report.strategies.advised`.
"""

from __future__ import annotations

import math

import pandas as pd

from tracelink.profile_dir.tune_record import Strategies
from tracelink.aggregate.utilization import NOT_MEASURED

# A line counts as helped by a strategy when its time there shrank by at least this factor: per-line
# ratios come from one short diff (3 rounds) and are kept without their interval, so the factor stays
# above what two profiles of one build differ by on a busy machine (docs/reference/numbers.md).
HELPED = 1.25
EFFECT_COLUMNS = ["strategy", "status", "base_ns", "strategy_ns", "ratio", "program_ratio"]


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


def with_measured_steps(table: pd.DataFrame, lines: list[list[tuple[str, int]]], strategies: Strategies) -> pd.DataFrame:
    """``table`` (lines or call sites) with the next step of every row the strategies were measured on
    replaced by :func:`measured_step` over its ``lines`` (one list per row)."""
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
    for keys, step in zip(lines, table["next_step"]):
        summed: dict[str, list[float]] = {}
        for key in set(keys):
            for name, (base, tried) in times.get(key, {}).items():
                total = summed.setdefault(name, [0.0, 0.0])
                total[0] += base
                total[1] += tried
        ratios = {name: base / tried if tried > 0 else math.inf for name, (base, tried) in summed.items()}
        # a row without a step (NaN after the CSV round trip) keeps none
        steps.append(measured_step(ratios, faster) or (step.replace(NOT_MEASURED, overall) if isinstance(step, str) else step))
    return table.assign(next_step=steps)


def whole_program_text(strategies: Strategies) -> str:
    """What tune measured on the whole program, for a line it has no per-line measurement of."""
    tried = ", ".join(f"{s.name} {ratio_text(s.ratio)}" if s.ratio is not None else f"{s.name} {s.status}" for s in strategies.strategies)
    faster = sorted(strategies.faster())
    if not faster:
        return f"no compiler strategy tune measured was significantly faster on the whole program ({tried})"
    return f"not measured on this line; faster on the whole program: {', '.join(faster)} ({tried})"


def advise(call_sites: pd.DataFrame, source_lines: pd.DataFrame, strategies: Strategies) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The call sites and source lines with measured next steps (a call site through its lines)."""
    site_lines = call_sites["source_lines"] if "source_lines" in call_sites else [""] * len(call_sites)
    return (
        with_measured_steps(call_sites, [line_keys(text) for text in site_lines], strategies),
        with_measured_steps(source_lines, [[(str(file), int(line))] for file, line in zip(source_lines["file"], source_lines["line"])], strategies),
    )
