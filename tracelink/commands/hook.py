"""``tracelink hook -- CMD``: run any command under the perf hook and print its statistics.

The command (iree-benchmark-module, iree-run-module, a Python script using iree.runtime, ...)
must load a module compiled with ``--iree-llvmcpu-link-embedded=false``. After it ends, this
prints a per-export summary, the seed-style per-thread statistics (shaped by
IREE_HOOK_BUCKET_COUNT / IREE_HOOK_NO_PROBABILITY_TABLE / IREE_HOOK_GAMMA) and where the
records are. See :mod:`tracelink.collect.hook` for the environment variables.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.collect.hook import list_event_types, run_hooked
from tracelink.collect.hook_tables import CSV_FILE_NAME
from tracelink.collect.hook_stats import StatsOptions, format_statistics, format_summary
from tracelink.textsafe import terminal_text

DEFAULT_OUTPUT_DIR = Path("tracelink-hook")


def _event_list(text: str | None) -> list[str] | None:
    """Parse ``--events a,b``; None keeps IREE_HOOK_PERF_EVENT_TYPES from the environment."""
    if text is None:
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


def run_command(args: argparse.Namespace) -> int:
    """Handler of ``tracelink hook``."""
    if args.list_events or "IREE_HOOK_LIST_EVENT_TYPES" in os.environ:
        print(list_event_types(), end="")
        return 0
    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise TracelinkError("nothing to run: give the command after `--`, e.g. tracelink hook -- iree-run-module ...")
    options = StatsOptions.from_env(os.environ)
    run = run_hooked(command, args.output, _event_list(args.events), args.filter, args.timeout)
    print()
    print(terminal_text(format_summary(run.events)))  # dispatch names are the program's
    print()
    print(terminal_text(format_statistics(run.workgroups, run.event_names, options)))
    for warning in run.warnings:
        print(terminal_text(f"warning: {warning}"))
    files = ", ".join(str(path) for path in run.record_files)
    print(terminal_text(f"{len(run.workgroups)} workgroup calls in {len(run.events)} dispatches; records: {files}"))
    csv_dir = os.environ.get("IREE_HOOK_OUTPUT_CSV")
    if csv_dir:
        print(f"CSV: {Path(csv_dir) / CSV_FILE_NAME}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``hook`` subcommand."""
    parser = subparsers.add_parser(
        "hook",
        help="run a command under the perf hook (per-workgroup timing and perf counters)",
        description=(
            "Run CMD with tracelink's LD_PRELOAD hook, then print per-export, per-thread statistics "
            "of the workgroup calls. The module must be compiled with --iree-llvmcpu-link-embedded=false."
        ),
    )
    parser.add_argument("--events", help="comma-separated perf events, e.g. task-clock,page-faults")
    parser.add_argument("--filter", help="glob of export names to hook (default: all)")
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT_DIR, help="directory for the record files")
    parser.add_argument("--timeout", type=float, default=None, help="stop the command after this many seconds")
    parser.add_argument(
        "--list-events", action="store_true", help="list the accepted perf event names and exit (or IREE_HOOK_LIST_EVENT_TYPES)"
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command to run")
    parser.set_defaults(handler=run_command)
