"""Tuned gains per source line, from the ``diff.csv`` that ``tracelink diff BASE TUNED`` writes into TUNED.

``diff.csv`` has one row per source op, matched between the two profiles by location (``label, file,
line``): median time per iteration in each (``base_ns``, ``tuned_ns``), ``speedup`` = base ÷ tuned
and its 95 % interval from alternating rounds (``ci_low``, ``ci_high``), and the op's median in each
round of each build (``base_rounds``, ``tuned_rounds``: ``;``-joined, empty where the build lacks the
op). Rows are matched to this profile's source ops by label (and file and line), and through them to
the lines the report shows. A line's time in a round is the sum of its measured ops' medians there,
and its gain is the one speedup statistic (:mod:`tracelink.aggregate.speedup`) of those paired
per-round sums: for a line of one op, exactly that op's row. No diff.csv: no gains view. An
unreadable one: a note saying why, and no gains.

Next to the diff, tune's own result: ``diff.json`` names the base profile, and the base's
``tune/summary.csv`` (written by ``tracelink tune BASE``) has per tuned dispatch its isolated speedup
(``speedup``, ``ci_low``, ``ci_high``: candidate against default config, timed alone) and its in-program
speedup (``program_speedup``, ``program_ci_low``, ``program_ci_high``: the dispatch's time per call of
the program built with the config against the profiled build). A dispatch maps to this profile's lines
through its call sites (same export name); a dispatch given the config of another (``shared_with``)
shows that one's numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.aggregate.speedup import speedup_of
from tracelink.report.fmt import el, ns, pct
from tracelink.report.model import ReportModel
from tracelink.report.view_data import Gain, Gains, TunedDispatch, interval_text
from tracelink.report.widgets import grid_table, line_link, number_text, op_link
from tracelink.profile_dir import files

DIFF_FILE = files.DIFF_TABLE
ROUND_COLUMNS = ("base_rounds", "tuned_rounds")  # each op's median in every round, which a line's gain is computed from
REQUIRED = ("label", "file", "line", "base_ns", "tuned_ns", *ROUND_COLUMNS)
TOP_GAINS = 15
MIN_SHARE = 0.001  # ops below this share of both profiles' time are left out of the summary table


def finite(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def read_diff(directory) -> pd.DataFrame | str | None:
    """diff.csv of a profile directory; None when absent, a message when it cannot be used."""
    path = directory / DIFF_FILE
    if not path.is_file():
        return None
    try:
        # the per-round medians as text: one round's would read as a number
        frame = pd.read_csv(path, keep_default_na=True, dtype=dict.fromkeys(ROUND_COLUMNS, str))
    except (OSError, ValueError, pd.errors.ParserError) as error:
        return f"{path}: unreadable ({error})"
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        return f"{path}: missing columns {', '.join(missing)}"
    frame["label"] = frame["label"].astype(str)
    frame["file"] = frame["file"].fillna("").astype(str)
    try:
        rounds = {column: [parse_rounds(text) for text in frame[column]] for column in ROUND_COLUMNS}
    except ValueError as error:
        return f"{path}: unreadable per-round medians ({error})"
    count = {len(values) for values in rounds["base_rounds"] + rounds["tuned_rounds"] if values.size}
    if len(count) > 1:
        return f"{path}: rows with different numbers of rounds ({', '.join(map(str, sorted(count)))})"
    for column, values in rounds.items():  # an op a build lacks took no time in it, in every round
        frame[column] = [row if row.size else np.zeros(max(count, default=1)) for row in values]
    return frame


def parse_rounds(text) -> np.ndarray:
    """``12.5;13.0;12.75`` as an array; empty for an empty cell (NaN after the CSV round trip)."""
    if not isinstance(text, str) or not text:
        return np.empty(0)
    return np.array([float(item) for item in text.split(";")])


def gain_data(model: ReportModel) -> Gains | None:
    """The gains of the profile's source lines, None without diff.csv."""
    frame = read_diff(model.profile.directory)
    if frame is None:
        return None
    if isinstance(frame, str):
        return Gains(rows=pd.DataFrame(columns=[*REQUIRED, "op"]), lines={}, problem=frame)
    by_label: dict[str, list[str]] = {}
    for node, info in model.ops.items():
        by_label.setdefault(info["label"], []).append(node)
    frame["op"] = [match_op(model, by_label, row) for row in frame.itertuples(index=False)]
    per_line: dict[str, list] = {}
    for row in frame.itertuples(index=False):
        if row.op:
            for key in model.ops[row.op]["lines"]:
                per_line.setdefault(key, []).append(row)
    gains = Gains(rows=frame, lines={key: line_gain(rows) for key, rows in per_line.items()},
                  end_to_end=read_end_to_end(model.profile.directory))
    add_tune_results(model, gains)
    return gains


def add_tune_results(model: ReportModel, gains: Gains) -> None:
    """tune's per-dispatch result from the base profile's tune/summary.csv, mapped onto this profile's
    lines; a line without a diff row gets a gain of its own holding only them."""
    path = tune_summary_path(model.profile.directory)
    if path is None:
        return
    try:
        summary = pd.read_csv(path, keep_default_na=True)
        gains.tuned = tuned_dispatches(summary, model)
    except (OSError, ValueError, KeyError, AttributeError, pd.errors.ParserError) as error:
        gains.tune_problem = f"{path}: unreadable ({error})"
        return
    gains.tune_source = str(path)
    for tuned in gains.tuned:
        for key in tuned.lines:
            gains.lines.setdefault(key, Gain(None, None, None, 0.0, 0.0)).tuned.append(tuned)


def tune_summary_path(directory: Path) -> Path | None:
    """The base profile's tune/summary.csv, from the base ``tracelink diff`` recorded in diff.json."""
    try:
        base = json.loads((directory / files.DIFF_SUMMARY).read_text()).get("base")
    except (OSError, ValueError, AttributeError):
        return None
    path = Path(base) / files.TUNE_SUMMARY if isinstance(base, str) and base else None
    return path if path is not None and path.is_file() else None


def tuned_dispatches(summary: pd.DataFrame, model: ReportModel) -> list[TunedDispatch]:
    """One entry per tuned dispatch of summary.csv with a measured speedup, and one per dispatch sharing its config."""
    lines: dict[str, list[str]] = {}  # export -> the lines its call sites compute
    for site in model.call_sites:
        known = lines.setdefault(site["export"], [])
        known += [key for key in site["lines"] if key not in known]
    found = []
    for row in summary.itertuples(index=False):
        if finite(row.speedup) is None:
            continue
        numbers = [finite(getattr(row, column)) for column in ("speedup", "ci_low", "ci_high", "program_speedup",
                                                                   "program_ci_low", "program_ci_high")]
        selected = str(row.selected) == "True"
        found.append(TunedDispatch(str(row.export), *numbers, selected, lines=lines.get(str(row.export), [])))
        shared = row.shared_with if isinstance(row.shared_with, str) else ""
        for export in filter(None, shared.split(";")):
            found.append(TunedDispatch(export, *numbers, selected, owner=str(row.export), lines=lines.get(export, [])))
    return found


def read_end_to_end(directory) -> Gain | None:
    """The end-to-end gain ``tracelink diff`` writes to diff.json, when present and readable."""
    path = directory / files.DIFF_SUMMARY
    try:
        total = json.loads(path.read_text())["end_to_end"]
        return Gain(finite(total["speedup"]), finite(total["ci_low"]), finite(total["ci_high"]), total["base_ns"], total["tuned_ns"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def match_op(model: ReportModel, by_label: dict[str, list[str]], row) -> str:
    """This profile's source op of a diff row: same label, and same file and line when there are several."""
    candidates = by_label.get(row.label, [])
    if len(candidates) > 1:
        line = finite(row.line)
        candidates = [n for n in candidates if model.ops[n]["file"] == row.file and (line is None or model.ops[n]["line"] == int(line))] or candidates
    return candidates[0] if candidates else ""


def line_gain(rows: list) -> Gain:
    """The gain of the ops ``rows`` together: in each round the sum of their medians per build, and the
    speedup and interval of those paired sums (one op: its own row's). Times: the sums' medians over rounds."""
    base = np.sum([row.base_rounds for row in rows], axis=0)
    tuned = np.sum([row.tuned_rounds for row in rows], axis=0)
    speedup, low, high = speedup_of(base, tuned)
    return Gain(finite(speedup), finite(low), finite(high), float(np.median(base)), float(np.median(tuned)), [row.label for row in rows])


# Markup --------------------------------------------------------------------------------------------


def gain_badge(parent, gain: Gain | None):
    """The gain of a source line, next to its heat (an empty cell without one)."""
    if gain is None:
        return el(parent, "span", class_="gain")
    title = "\n".join([f"tuned vs base: {gain.text()} (speedup, 95% CI)", f"median per iteration: {ns(gain.base_ns)} → {ns(gain.tuned_ns)}"]
                      + ([f"{len(gain.labels)} ops, their medians summed per round:"] + gain.labels if len(gain.labels) > 1 else gain.labels)
                      + [f"tune, {tuned.export}: {tuned.text()}" for tuned in gain.tuned])
    badge = el(parent, "span", class_=f"gain {gain.verdict}", title=title, data_speedup=number_text(gain.speedup), text=gain.text())
    for tuned in gain.tuned:
        el(badge, "span", class_="tuned", data_export=tuned.export, data_isolated=number_text(tuned.speedup),
           data_in_program=number_text(tuned.program_speedup),
           text=f" · tune {interval_text(tuned.speedup, None, None)} alone, {interval_text(tuned.program_speedup, None, None)} in program")
    return badge


def tune_table(parent, model: ReportModel, gains: Gains) -> None:
    """tune's own result per tuned dispatch: the lines it computes, its isolated and in-program speedups."""
    el(parent, "h3", None, "Tuned dispatches")
    el(parent, "p", class_="note", text=(
        f"From {gains.tune_source} (tracelink tune on the base profile): each dispatch's speedup with its tuned config "
        "timed alone against the default config, and inside the program against the profiled build, with 95% CIs."
    ))
    body = grid_table(parent, ("dispatch", "lines", "alone (95% CI)", "in the program (95% CI)", "handed over"), id="tune-table")
    for tuned in gains.tuned:
        tr = el(body, "tr", data_export=tuned.export, data_isolated=number_text(tuned.speedup),
                data_in_program=number_text(tuned.program_speedup))
        el(tr, "td", class_="mono", text=tuned.export + (f" (the config of {tuned.owner})" if tuned.owner else ""))
        lines = el(tr, "td", class_="mono")
        for key in tuned.lines:
            line_link(lines, model, key)
            el(lines, "br")
        el(tr, "td", class_="num", text=interval_text(tuned.speedup, tuned.ci_low, tuned.ci_high))
        el(tr, "td", class_="num", text=interval_text(tuned.program_speedup, tuned.program_ci_low, tuned.program_ci_high))
        el(tr, "td", text="yes" if tuned.selected else "no")


def gains_table(parent, model: ReportModel, gains: Gains) -> None:
    """The "Tuning gains" table of the summary: the ops with the most base time, their speedups and CIs."""
    el(parent, "h3", None, "Tuning gains")
    if gains.problem:
        el(parent, "p", class_="muted", text=f"diff.csv is present but not used: {gains.problem}")
        return
    el(parent, "p", class_="note", text=(
        "From diff.csv (tracelink diff BASE TUNED): median time per iteration of each source op in the base and this (tuned) profile, "
        "speedup = base ÷ tuned, the geometric mean of the alternating rounds' ratios, with its 95% CI (Student's t on their "
        "logarithms). Green: faster for sure (CI above 1); red: slower (CI below 1)."
    ))
    if gains.end_to_end is not None:
        total = gains.end_to_end
        el(parent, "p", class_=f"gain {total.verdict}", id="gain-end-to-end", text=(
            f"End to end (all dispatch time per iteration): {ns(total.base_ns)} → {ns(total.tuned_ns)}, {total.text()}"
        ))
    if gains.tuned:
        tune_table(parent, model, gains)
    elif gains.tune_problem:
        el(parent, "p", class_="muted", text=f"tune's summary is present but not used: {gains.tune_problem}")
    rows = gains.rows
    share_columns = [c for c in ("base_share", "tuned_share") if c in rows]
    shown = rows[rows[share_columns].fillna(0).max(axis=1) >= MIN_SHARE] if share_columns else rows
    body = grid_table(parent, ("source op", "lines", "base", "tuned", "speedup (95% CI)", "base share"), id="gains-table")
    for row in shown.head(TOP_GAINS).itertuples(index=False):
        gain = line_gain([row])
        tr = el(body, "tr", data_label=row.label)
        cell = el(tr, "td", class_="mono")
        if row.op:
            op_link(cell, model, row.op)
        else:
            el(cell, "span", title="no such op in this profile", text=row.label)
        lines = el(tr, "td", class_="mono")
        for key in (model.ops[row.op]["lines"][:3] if row.op else []):
            line_link(lines, model, key)
            el(lines, "br")
        el(tr, "td", class_="num", text=ns(finite(row.base_ns)))
        el(tr, "td", class_="num", text=ns(finite(row.tuned_ns)))
        gain_badge(el(tr, "td", class_="num"), gain)
        el(tr, "td", class_="num", text=pct(finite(getattr(row, "base_share", None))))
    if len(shown) > TOP_GAINS:
        el(parent, "p", class_="muted small", text=f"{len(shown) - TOP_GAINS} more ops in diff.csv.")
