"""`tracelink diff`: compare two profiles source op by source op, and gate regressions for CI.

``--fail-if-slower PCT`` and ``--fail-if-larger PCT`` turn the comparison into a check: the command
prints and writes everything as without them, then exits with :data:`REGRESSION` when a gate fails
(see :func:`tracelink.compare.diff.gate_verdicts`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.profile_dir.claim import locked, refuse_foreign_file
from tracelink.compare.diff import DEFAULT_ROUNDS
from tracelink.profile_dir import files

REGRESSION = 3  # exit status of a diff whose gate failed


def register(subparsers: argparse._SubParsersAction) -> None:
    diff = subparsers.add_parser(
        "diff",
        help="compare two profiles source line by source line",
        description="Compare two profiles of the same program (e.g. before and after tuning), matching source "
        "ops by source location. Both compiled programs run again alternately for --rounds rounds; per-op and "
        "end-to-end speedups get 95%% intervals from the run-to-run variation, and differences whose interval "
        "contains 1 are reported as no significant difference. Writes diff.csv. With --fail-if-slower or "
        f"--fail-if-larger, exits {REGRESSION} when the second profile regressed beyond the threshold.",
    )
    diff.add_argument("base", type=Path, help="profile directory of the baseline")
    diff.add_argument("tuned", type=Path, help="profile directory to compare with it")
    diff.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                      help=f"alternating runs of each program (default {DEFAULT_ROUNDS}; 0: compare the recorded "
                      "profiles, without an interval)")
    diff.add_argument("--iterations", type=int, help="calls of the function per run (default: the base profile's)")
    diff.add_argument("-o", "--output", type=Path, help="CSV to write (default <tuned>/diff.csv)")
    diff.add_argument("--fail-if-slower", type=float, metavar="PCT",
                      help=f"exit {REGRESSION} when the second profile is significantly slower end to end and even the "
                      "least slowdown its 95%% interval allows is above PCT percent (needs --rounds 2 or more)")
    diff.add_argument("--fail-if-larger", type=float, metavar="PCT",
                      help=f"exit {REGRESSION} when the second profile's memory peak of one call is more than PCT percent "
                      "above the first's")
    diff.add_argument("--json", action="store_true", help="print one JSON document on stdout (the table goes to stderr)")
    diff.set_defaults(handler=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tracelink.textsafe import TerminalConsole
    from tracelink.compare.diff import CSV_HEADER, JSON_HEADER, diff_profiles, gate_verdicts, write_diff

    if args.iterations is not None and args.iterations < 1:
        raise TracelinkError(f"--iterations must be at least 1, got {args.iterations}")
    if args.rounds < 0:
        raise TracelinkError(f"--rounds must be 0 or more, got {args.rounds}")
    for flag, value in (("--fail-if-slower", args.fail_if_slower), ("--fail-if-larger", args.fail_if_larger)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise TracelinkError(f"{flag} takes a percentage of 0 or more, got {value}")
    output = args.output or args.tuned / files.DIFF_TABLE
    if output.suffix != ".csv":  # diff.json goes beside it, with the same stem
        raise TracelinkError(f"{output}: diff -o takes a .csv path (the end-to-end figures go to {output.with_suffix('.json').name})")
    if args.output is not None:  # the user's files: replaced only when tracelink wrote them
        refuse_foreign_file(output, CSV_HEADER)
        refuse_foreign_file(output.with_suffix(".json"), JSON_HEADER)
    writes = ("diff_rounds",) + (() if args.output else (files.DIFF_TABLE, files.DIFF_SUMMARY))
    console = TerminalConsole(stderr=True, highlight=False)
    with locked(args.tuned, writes=writes), console.status(f"running both programs alternately, {args.rounds} rounds"):
        frame = diff_profiles(args.base, args.tuned, rounds=args.rounds, iterations=args.iterations)
        frame.attrs["gates"] = gate_verdicts(frame, args.fail_if_slower, args.fail_if_larger)
        path = write_diff(frame, output)
    total = frame.attrs["end_to_end"]
    how = f"{total['rounds']} alternating rounds" if total["rounds"] > 1 else "the recorded profiles"
    table = Table(title=f"{args.tuned} vs {args.base} (median per iteration, {how})")
    for column in ("source op", "base ms", "tuned ms", "speedup", "95% CI", "verdict"):
        table.add_column(column, justify="left" if column in ("source op", "verdict") else "right")
    for row in [total] + frame.to_dict("records"):
        if row["label"] == total["label"] or (row["base_share"] or 0) >= 0.001 or (row["tuned_share"] or 0) >= 0.001:
            table.add_row(str(row["label"]), _ms(row["base_ns"] / 1e6), _ms(row["tuned_ns"] / 1e6),
                          "" if math.isnan(row["speedup"]) else f"{row['speedup']:.2f}x", _interval(row), row["verdict"])
    out = TerminalConsole(highlight=False, stderr=args.json)
    out.print(table)
    out.print(f"end to end: {total['verdict']}, {total['speedup']:.2f}x (95% CI {_interval(total) or 'none'}, "
              f"{total['base_iterations']} vs {total['tuned_iterations']} iterations); per source op: {path}")
    if total["load_warning"]:
        out.print(f"warning: {total['load_warning']}")
    gates = frame.attrs["gates"]
    for line in gate_lines(gates):
        out.print(line)
    if args.json:
        from tracelink.report.json_output import diff_document, dump

        print(dump(diff_document(frame, args.base, args.tuned, path)))
    return REGRESSION if any(gate and gate["failed"] for gate in gates.values()) else 0


def gate_lines(gates: dict) -> list[str]:
    """One line per gate asked for: passed or FAILED, and why."""
    lines = []
    slower, larger = gates["slower"], gates["larger"]
    if slower is not None:
        lines.append(f"--fail-if-slower {slower['threshold_pct']:g}: {'FAILED' if slower['failed'] else 'passed'} ({slower['why']})")
    if larger is not None:
        lines.append(f"--fail-if-larger {larger['threshold_pct']:g}: {'FAILED' if larger['failed'] else 'passed'} (peak "
                     f"{larger['base_peak_bytes']:,} → {larger['tuned_peak_bytes']:,} bytes, {larger['growth_pct']:+.1f}%)")
    return lines


def _ms(value: float) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.3f}"


def _interval(row: dict) -> str:
    return "" if math.isnan(row["ci_low"]) else f"{row['ci_low']:.2f}-{row['ci_high']:.2f}"
