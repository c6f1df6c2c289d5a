"""``tracelink ingest``: fold a Tracy capture taken elsewhere into a profile, or just decode it.

Given a profile directory (from ``tracelink profile``, whose vmfb the captured program ran), the
capture's dispatch zones replace the profile's events: tables, summary, trace and report are rebuilt
over the same provenance graph. Any other directory just receives the decoded zones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tracelink.errors import TracelinkError
from tracelink.atomic import copy_atomic, make_directory, write_atomic
from tracelink.collect.tracy.decoder import TracyCapture, read_capture
from tracelink.collect.tracy.views import rebuild_executions
from tracelink.pipeline import assemble_profile, publish_profile
from tracelink.report.summary import print_summary
from tracelink.profile_dir.claim import is_profile_directory, locked, refuse_links
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.provenance.graph import run_call_sites
from tracelink.textsafe import TerminalConsole
from tracelink.profile_dir import files

ZONES_FILE = files.parquet("zones")
KEPT_CAPTURE = "artifacts/ingested.tracy"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="fold a Tracy capture (.tracy) into a profile directory, or decode it into zones.parquet",
        description="Decode a Tracy capture written by iree-tracy-capture (Tracy 0.11.x). If OUTPUT is a "
        "profile directory (or its artifacts/), its tables and report are rebuilt from the capture's "
        f"dispatches; otherwise every CPU zone is written to OUTPUT/{ZONES_FILE}.",
    )
    parser.add_argument("capture", type=Path, help="the .tracy file")
    parser.add_argument(
        "-o", "--output", "--artifacts", dest="output", type=Path, required=True,
        help="a profile directory (tracelink profile -o), or any directory (--artifacts is the old name)",
    )
    parser.add_argument("--top", type=int, default=10, help="zones to list by total time (default 10)")
    parser.set_defaults(handler=ingest)


def ingest(args: argparse.Namespace) -> int:
    """Decode ``args.capture``, fold it into the profile ``args.output`` or write ``zones.parquet`` there, print a summary."""
    if not args.capture.is_file():
        raise TracelinkError(f"no such capture file: {args.capture}")
    capture = read_capture(args.capture)
    console = TerminalConsole(highlight=False)
    _print_summary(console, capture, args.top)
    profile_dir = profile_directory(args.output)
    if profile_dir is not None:
        # the tables, summary, trace and report it rewrites, and the capture kept beside the artifacts
        with locked(profile_dir, writes=(*(name for name in files.OWNED if "." in name), KEPT_CAPTURE)):
            result = fold_into_profile(args.capture, capture, profile_dir)
        print_summary(result, console)
        return 0
    make_directory(args.output)
    refuse_links(args.output, (ZONES_FILE,))
    zones_path = write_atomic(args.output / ZONES_FILE, lambda p: capture.zones.to_parquet(p, index=False))
    console.print(f"wrote {zones_path}", markup=False)
    return 0


def profile_directory(path: Path) -> Path | None:
    """The profile directory ``path`` is, or whose ``artifacts/`` it is; None for any other directory.

    A directory with tracelink's marker is one even while ``tracelink profile`` is still writing it
    (before its ``profile.json``): ingest then waits for nothing and is refused by its lock."""
    for candidate in (path, path.parent if path.name == "artifacts" else None):
        if candidate is not None and is_profile_directory(candidate):
            return candidate
    return None


def fold_into_profile(path: Path, capture: TracyCapture, directory: Path) -> Profile:
    """Rebuild the profile in ``directory`` from the capture's dispatch zones (same provenance graph)."""
    profile = load_profile(directory)
    run_exports = [export for _, export in run_call_sites(profile.graph)]
    rebuilt = rebuild_executions(capture, run_exports)
    events = rebuilt.events
    if events.empty or events["call_site"].isna().all():
        raise TracelinkError(
            f"{path}: no dispatch of {Path(profile.summary['program']).name} in this capture "
            f"(expected zones such as {run_exports[0] if run_exports else '?'}): a capture of a different program?"
        )
    kept = directory / KEPT_CAPTURE
    if path.resolve() != kept.resolve():
        copy_atomic(path, kept)  # kept beside the artifacts so it opens in Tracy's GUI later
    run_info = {
        key: value for key, value in profile.summary.items()
        if key in ("program", "function", "target", "versions", "inputs", "memory")  # memory: the build's, not the capture's
    } | {"collector": "tracy", "capture": str(path.resolve()), "capture_program": capture.header.program, "warmup": 0}
    run_info |= rebuilt.summary()
    result = assemble_profile(directory, events, profile.graph, run_info, zones=capture.zones)
    result.memory_lines, result.memory_components = profile.memory_lines, profile.memory_components
    publish_profile(result, TerminalConsole(quiet=True))
    return result


def top_zones(zones: pd.DataFrame, count: int) -> pd.DataFrame:
    """Zone names by total (inclusive) time of their finished zones, largest first."""
    finished = zones[zones["duration_ns"].notna()]
    table = finished.groupby("name", observed=True)["duration_ns"].agg(["count", "sum", "mean"])
    return table.sort_values("sum", ascending=False).head(count)


def _print_summary(console: Console, capture: TracyCapture, top: int) -> None:
    header = capture.header
    zones = capture.zones
    threads_with_zones = zones.groupby("thread", observed=True).size()
    console.print(
        f"[bold]{escape(header.program)}[/] — Tracy {header.version_text}, {header.compression} "
        f"({header.streams} streams), {header.last_time / 1e6:,.1f} ms captured"
    )
    console.print(
        f"{len(capture.threads)} threads ({len(threads_with_zones)} with zones: "
        + ", ".join(f"{escape(str(name))} {count:,}" for name, count in threads_with_zones.items())  # the capture's names: no markup
        + f"), {len(zones):,} CPU zones, {len(capture.gpu_zones):,} GPU zones, {len(capture.messages):,} messages"
    )
    table = Table(title=f"top {top} zones by total time (inclusive)")
    for column, justify in (("zone", "left"), ("count", "right"), ("total ms", "right"), ("mean µs", "right")):
        table.add_column(column, justify=justify)
    for name, row in top_zones(zones, top).iterrows():
        table.add_row(Text(str(name)), f"{int(row['count']):,}", f"{row['sum'] / 1e6:,.3f}", f"{row['mean'] / 1e3:,.1f}")
    console.print(table)
