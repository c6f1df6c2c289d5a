"""The measured-strategies view: what each compiler strategy `tracelink tune` measured did, per hot line
and per op kind, in the report, the printed summary and ``--json``.

Read from ``PROFILE/tune/strategies.json`` (:mod:`tracelink.aggregate.advice`; the report never imports
the tuner). A cell reads "img2col 14x": the line's time with the default build over its time with the
strategy's build. A strategy that made the whole program faster and the line at least
:data:`~tracelink.aggregate.advice.HELPED` times faster is marked as helping it; only those are advice.
"""

from __future__ import annotations

import dataclasses
import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tracelink.aggregate.advice import HELPED, Strategies, effects, ratio_text
from tracelink.profile_dir.profile import Profile
from tracelink.report.fmt import el, ns
from tracelink.report.widgets import grid_table, section

LINES_SHOWN = 12
KINDS_SHOWN = 12


def advised(profile: Profile) -> Profile:
    """The profile whose call sites and source lines have the next steps of what `tracelink tune` measured
    (``Profile.shown``, advised once where the profile was made); the profile itself when tune did not run.
    Its stored tables keep their own next steps: each output that presents them (the report, the printed
    summary, ``--json``) asks here."""
    if profile.strategies is None:
        return profile
    return dataclasses.replace(profile, call_sites=profile.shown.call_sites, source_lines=profile.shown.source_lines)


def ordered_effects(strategies: Strategies, keys: list[str], shown: int | None = None) -> list[tuple[tuple, float, list[dict]]]:
    """Per key (the most base time first, ``shown`` of them, or all): the key, its base time and what each
    strategy did there, best first (``strategy``, ``ratio``, ``status``, ``helped``)."""
    table = effects(strategies, keys)
    if table.empty:
        return []
    faster = strategies.faster()
    rows = []
    for key, group in table.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        tried = [
            {"strategy": row.strategy, "ratio": float(row.ratio), "status": row.status, "helped": row.strategy in faster and row.ratio >= HELPED}
            for row in group.sort_values("ratio", ascending=False, kind="stable").itertuples()
        ]
        rows.append((key, float(group["base_ns"].max()), tried))
    return sorted(rows, key=lambda item: -item[1])[:shown]


def effect_text(tried: list[dict]) -> str:
    """``img2col 14x (helps), channels-last 0.7x``."""
    return ", ".join(f"{item['strategy']} {ratio_text(item['ratio'])}" + (" (helps)" if item["helped"] else "") for item in tried)


def print_strategies(profile: Profile, console: Console, shorten=lambda path: path) -> None:
    """The printed summary's strategy tables, when `tracelink tune` measured strategies on this profile."""
    strategies = profile.strategies
    if strategies is None:
        return
    overall = Table(title=f"Compiler strategies measured by tracelink tune ({strategies.path})", title_justify="left")
    for column in ("strategy", "status", "whole program", "why"):
        overall.add_column(column, justify="right" if column == "whole program" else "left", overflow="fold")
    for strategy in strategies.strategies:
        overall.add_row(escape(strategy.name), escape(strategy.status), ratio_or_dash(strategy.ratio), escape(strategy.reason))
    console.print(overall)
    for keys, title, shown in ((["file", "line"], "What each strategy did to the hottest lines (default time / strategy time)", LINES_SHOWN),
                               (["op_kind"], "… and to each op kind", KINDS_SHOWN)):
        rows = ordered_effects(strategies, keys, shown)
        if not rows:
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("line" if len(keys) == 2 else "op kind", no_wrap=True)
        table.add_column("default", justify="right", no_wrap=True)
        table.add_column("strategies", overflow="fold")
        for key, base_ns, tried in rows:
            label = f"{shorten(key[0])}:{key[1]}" if len(keys) == 2 else str(key[0])
            table.add_row(escape(label), ns(base_ns), escape(effect_text(tried)))
        console.print(table)


def ratio_or_dash(ratio: float | None) -> str:
    return "–" if ratio is None or not math.isfinite(ratio) else ratio_text(ratio)


def strategies_section(main, profile: Profile) -> None:
    """The report's "Measured strategies" section (nothing when tune measured none)."""
    strategies = profile.strategies
    if strategies is None:
        return
    node = section(main, "strategies", "Measured strategies",
                   f"What `tracelink tune` measured on this program ({strategies.path}): each compiler strategy's status and whole-program "
                   f"ratio, then what it did per hot line and per op kind (default time / strategy time). Marked: it made the program "
                   f"faster and the line at least {HELPED:g}x faster, so the line's next step names it.")
    body = grid_table(node, ("strategy", "status", "whole program", "95% CI", "flags", "why"), id="strategy-table")
    for strategy in strategies.strategies:
        row = el(body, "tr", data_status=strategy.status)
        el(row, "td", class_="mono", text=strategy.name)
        el(row, "td", text=strategy.status)
        el(row, "td", class_="num", text=ratio_or_dash(strategy.ratio))
        el(row, "td", class_="num", text=f"{strategy.ci[0]:.2f}–{strategy.ci[1]:.2f}" if strategy.ci else "–")
        el(row, "td", class_="mono", text=" ".join(strategy.flags))
        el(row, "td", text=strategy.reason)
    for keys, anchor, label in ((["file", "line"], "strategy-lines", "line"), (["op_kind"], "strategy-kinds", "op kind")):
        rows = ordered_effects(strategies, keys, LINES_SHOWN if label == "line" else KINDS_SHOWN)
        if not rows:
            continue
        el(node, "h3", None, f"Per {label}")
        body = grid_table(node, (label, "default", "strategies"), id=anchor)
        for key, base_ns, tried in rows:
            row = el(body, "tr")
            el(row, "td", class_="mono", title=str(key[0]), text=f"{key[0].rsplit('/', 1)[-1]}:{key[1]}" if len(keys) == 2 else str(key[0]))
            el(row, "td", class_="num", text=ns(base_ns))
            cell = el(row, "td")
            for item in tried:
                el(cell, "span", class_="strategy helped" if item["helped"] else "strategy", data_strategy=item["strategy"],
                   data_ratio=f"{item['ratio']:.6g}", title=item["status"], text=f"{item['strategy']} {ratio_text(item['ratio'])}")


def strategies_document(profile: Profile) -> dict | None:
    """``--json``'s ``strategies``: every strategy, and what each did per line and op kind (null without tune)."""
    strategies = profile.strategies
    if strategies is None:
        return None
    return {
        "file": str(strategies.path),
        "strategies": [
            {"name": s.name, "flags": list(s.flags), "status": s.status, "reason": s.reason, "ratio": s.ratio, "ci": list(s.ci) if s.ci else None}
            for s in strategies.strategies
        ],
        "per_line": [{"file": key[0], "line": int(key[1]), "base_ns": base_ns, "effects": tried} for key, base_ns, tried in ordered_effects(strategies, ["file", "line"])],
        "per_op_kind": [{"op_kind": key[0], "base_ns": base_ns, "effects": tried} for key, base_ns, tried in ordered_effects(strategies, ["op_kind"])],
    }
