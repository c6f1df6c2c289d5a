"""`tracelink report`: rebuild report.html, trace.json and profile.pb.gz from a profile directory."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.commands.arguments import add_source_arguments
from tracelink.profile_dir.claim import REPORT_HEADER, locked, refuse_foreign_file
from tracelink.profile_dir.profile import load_profile
from tracelink.report.html import build_report
from tracelink.report.json_output import dump, profile_document
from tracelink.report.pprof import write_pprof
from tracelink.report.sources import SourcePolicy
from tracelink.report.trace import write_trace
from tracelink.textsafe import TerminalConsole
from tracelink.profile_dir import files


def run_report_command(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise TracelinkError(f"{directory}: no such profile directory")
    if args.output is not None:  # the user's file: replaced only when it is a report tracelink wrote
        refuse_foreign_file(args.output, REPORT_HEADER)
    started = time.perf_counter()
    with locked(directory, writes=(files.TRACE, files.PPROF) + (() if args.output else (files.REPORT,))):
        profile = load_profile(directory)
        trace = write_trace(profile, directory / files.TRACE)
        pprof = write_pprof(profile)
        sources = SourcePolicy.for_profile(profile.summary, args.source_root, False if args.no_sources else None, args.source_map)
        report = build_report(profile, args.output, sources)
    size = report.stat().st_size
    TerminalConsole(stderr=True, highlight=False, markup=False).print(
        f"wrote {report} ({size / 1e6:.2f} MB), {trace} and {pprof} in {time.perf_counter() - started:.1f} s"
    )
    # --json: the profile's document (its measured strategies included) instead of the report's path
    print(dump(profile_document(profile, command="report")) if args.json else report)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="rebuild the HTML provenance report and trace.json of a profile directory")
    parser.add_argument("directory", type=Path, help="profile directory written by 'tracelink profile'")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="report file, new or an earlier tracelink report (default: DIRECTORY/report.html)")
    parser.add_argument("--json", action="store_true", help="print the profile's JSON document (hottest lines and dispatches, "
                        "verdicts, measured strategies) on stdout instead of the report's path")
    add_source_arguments(parser)
    parser.set_defaults(handler=run_report_command)
