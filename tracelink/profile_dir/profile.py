"""The profile directory: write every table of a profile and read it back as one object."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pandas as pd
from pyarrow import ArrowException

from tracelink.errors import TracelinkError, first_line
from tracelink.aggregate import attribution, memory, op_line_shares, reference, set_roofs
from tracelink.aggregate.shown import Shown, shown_tables
from tracelink.profile_dir.tune_record import Strategies, read_strategies
from tracelink.atomic import write_atomic, write_text_atomic
from tracelink.collect.events import EVENT_SCHEMA, make_events
from tracelink.compile.frames import LIBRARY_FRAMES
from tracelink.profile_dir.claim import FORMAT_VERSION
from tracelink.provenance.graph import read_graph
from tracelink.profile_dir import files

# Columns every reader of a table relies on; a table without them is corrupt.
# the columns the readers and the outputs (summary, report, --json) use; every profile of this format has them
REQUIRED_COLUMNS = {
    "call_sites": ("call_site", "export", "root_op", "count", "total_ns", "mean_ns", "median_ns", "p90_ns", "share", "noisy"),
    "exports": ("export", "count", "total_ns", "mean_ns", "share"),
    "source_ops": ("op", "label", "name", "file", "line", "op_names", "total_ns", "mean_ns", "share"),
    "source_lines": ("file", "line", "library", "total_ns", "mean_ns", "share", "user_self_ns", "user_self_share", "inclusive_share",
                     "ops", "call_site_ids", "gflops_s", "gbytes_s", "next_step"),
    "memory_lines": tuple(memory.LINE_COLUMNS), "memory_components": tuple(memory.COMPONENT_COLUMNS),
    "reference_lines": tuple(reference.LINE_COLUMNS), "reference_components": tuple(reference.COMPONENT_COLUMNS),
}
TEXT_COLUMNS = ("root_ops", "producer_ops", "source_lines", "root_of", "producer_in", "lines", "ops", "call_site_ids")
NUMERIC_COLUMNS = ("call_site", "line", "col", "count", "share", "workgroup_count")
NUMERIC_SUFFIXES = ("_ns",)
SUMMARY_FIELDS = {"program": str, "function": str, "iterations": int, "coverage": dict}
# host_time's figures the summary and the report compute with (absent or null: not measured)
HOST_TIME_NUMBERS = ("wall_ns_per_call", "dispatch_busy_ns_per_call", "between_dispatches_ns_per_call",
                     "outside_dispatches_ns_per_call", "host_share")
# profiles written before memory, or the framework's run (--compare), was recorded lack them
OPTIONAL_TABLES = (*files.MEMORY_TABLES, *files.REFERENCE_TABLES)


@dataclass
class Profile:
    """Everything one ``tracelink profile`` run learned."""

    directory: Path
    summary: dict
    events: pd.DataFrame
    call_sites: pd.DataFrame
    exports: pd.DataFrame
    source_ops: pd.DataFrame
    source_lines: pd.DataFrame
    graph: nx.DiGraph
    # derived once where the profile is aggregated or loaded, and read by every output:
    attribution: pd.DataFrame  # each call site's time split over its source ops (aggregate.attribution)
    line_shares: pd.DataFrame  # each source op's time split over its lines (aggregate.op_line_shares)
    shown: Shown  # the tables as the summary, the report and --json show them (aggregate.shown)
    workgroups: pd.DataFrame | None = None  # hook collector: one row per workgroup call
    zones: pd.DataFrame | None = None  # tracy collector: every zone of the runtime
    # what `tracelink tune` measured (tune/strategies.json), when it ran; read, not applied to the tables:
    # the outputs show its next steps from `shown`
    strategies: Strategies | None = None
    memory_lines: pd.DataFrame | None = None  # one call's memory by source line (summary["memory"] has the peak)
    memory_components: pd.DataFrame | None = None  # the same by component
    reference_lines: pd.DataFrame | None = None  # IREE's time per line beside the framework's own run's (--compare)
    reference_components: pd.DataFrame | None = None  # the framework's own run's time per component

    @property
    def artifacts(self) -> Path:
        return self.directory / files.ARTIFACTS

    @property
    def manifest(self) -> dict:
        path = self.artifacts / files.MANIFEST
        return json.loads(path.read_text()) if path.exists() else {}


def write_profile(profile: Profile) -> None:
    """Write the tables, events and summary into the profile directory.

    The provenance graph is not written here: the pipeline writes it as soon as it is built (so it
    survives a failing run), and nothing after that changes it.
    """
    directory = profile.directory
    write_atomic(directory / files.EVENTS, lambda p: profile.events.to_parquet(p, index=False))
    for name in files.TABLES:
        table: pd.DataFrame = getattr(profile, name)
        write_atomic(directory / files.csv(name), lambda p, t=table: t.to_csv(p, index=False))
    for name in OPTIONAL_TABLES:
        table = getattr(profile, name)
        if table is not None:
            write_atomic(directory / files.csv(name), lambda p, t=table: t.to_csv(p, index=False))
    for name in files.OPTIONAL_FRAMES:
        frame: pd.DataFrame | None = getattr(profile, name)
        if frame is not None:
            write_atomic(directory / files.parquet(name), lambda p, f=frame: f.to_parquet(p, index=False))
    write_profile_summary(profile)


def write_profile_summary(profile: Profile) -> None:
    """Write ``profile.json`` (the summary) alone."""
    write_text_atomic(profile.directory / files.SUMMARY, json.dumps(profile.summary, indent=2, default=str))


def load_profile(directory: Path) -> Profile:
    """Read a profile directory written by ``tracelink profile``; a damaged file is one clear error."""
    directory = Path(directory)
    summary_path = directory / files.SUMMARY
    if not summary_path.is_file():
        raise TracelinkError(f"{directory}: not a profile directory (no profile.json; run 'tracelink profile' first)")
    check_marker(directory)
    tables = {name: read_table(directory / files.csv(name), REQUIRED_COLUMNS[name]) for name in files.TABLES}
    summary, graph = read_summary(summary_path), read_graph_file(directory / files.GRAPH)
    machine = summary.get("machine") if isinstance(summary.get("machine"), dict) else {}
    peaks = [value if is_number(value) and value > 0 else None for value in (machine.get("peak_gflops"), machine.get("peak_gbps"))]
    sites = tables["call_sites"]
    medians = (dict(zip(pd.to_numeric(sites["call_site"], errors="coerce"), pd.to_numeric(sites["median_ns"], errors="coerce").fillna(0.0)))
               if "median_ns" in sites else {})
    library = tuple(summary.get("library_frames") or LIBRARY_FRAMES)
    try:  # the graph's node attributes (JSON inside the node-link JSON) are first read here
        set_roofs(graph, *peaks, medians)  # what the profile split its dispatches' time at
        attributed, line_shares = attribution(graph), op_line_shares(graph, library)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise TracelinkError(f"{directory / files.GRAPH}: corrupt provenance graph ({type(error).__name__}: {first_line(error)})") from None
    strategies = read_strategies(directory)
    return Profile(
        strategies=strategies,
        directory=directory,
        summary=summary,
        events=read_frame(directory / files.EVENTS, lambda frame: make_events(frame).astype(EVENT_SCHEMA)),
        graph=graph,
        attribution=attributed,
        line_shares=line_shares,
        shown=shown_tables(tables["call_sites"], tables["source_lines"], tables["source_ops"], summary, strategies),
        **tables,
        **{name: read_frame(directory / files.parquet(name)) for name in files.OPTIONAL_FRAMES if (directory / files.parquet(name)).exists()},
        **{name: read_table(directory / files.csv(name), REQUIRED_COLUMNS[name]) for name in OPTIONAL_TABLES if (directory / files.csv(name)).exists()},
    )


def check_marker(directory: Path) -> None:
    """Refuse a profile written in another format version (a directory without a marker predates it)."""
    marker = directory / files.MARKER
    if not marker.is_file():
        return
    try:
        version = json.loads(marker.read_text()).get("format")
    except (OSError, ValueError, AttributeError) as error:
        raise TracelinkError(f"{marker}: unreadable profile marker ({error})") from None
    if version != FORMAT_VERSION:
        raise TracelinkError(f"{marker}: profile format {version!r}, this tracelink reads format {FORMAT_VERSION}")


def read_summary(path: Path) -> dict:
    """``profile.json``: an object with the program, function, iterations and coverage."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise TracelinkError(f"{path}: unreadable or corrupt JSON ({error})") from None
    if not isinstance(summary, dict):
        raise TracelinkError(f"{path}: corrupt (not a JSON object)")
    if isinstance(functions := summary.get("functions"), list) and "function" not in summary:  # the top of several functions' profiles
        names = ", ".join(str(entry.get("function")) for entry in functions if isinstance(entry, dict))
        raise TracelinkError(f"{path.parent}: a profile of several functions ({names}); name one: {path.parent / files.FUNCTIONS}/<function>")
    for key, kind in SUMMARY_FIELDS.items():
        if not isinstance(summary.get(key), kind):
            raise TracelinkError(f"{path}: corrupt ('{key}' missing or not a {kind.__name__})")
    host = summary.get("host_time")
    if host is not None and not (isinstance(host, dict) and all(is_number(host.get(key)) for key in HOST_TIME_NUMBERS)):
        raise TracelinkError(f"{path}: corrupt ('host_time' is not an object of {', '.join(HOST_TIME_NUMBERS)})")
    memory = summary.get("memory")
    if memory is not None and not memory_well_formed(memory):
        raise TracelinkError(f"{path}: corrupt ('memory' is not the memory record tracelink writes)")
    return summary


def memory_well_formed(memory: object) -> bool:
    """Whether ``memory`` has what the summary and the report read of it, of the types they read."""
    if not isinstance(memory, dict) or not is_number(memory.get("peak_bytes")):
        return False
    byte_maps = [memory.get("split"), memory.get("resident_bytes")]
    if not all(isinstance(m, dict) and all(is_number(v) for v in m.values()) for m in byte_maps):
        return False
    timeline, peak = memory.get("timeline_bytes"), memory.get("peak_dispatch")
    top = memory.get("top")
    return (isinstance(timeline, list) and all(is_number(v) for v in timeline)
            and isinstance(peak, int) and not isinstance(peak, bool) and (not timeline or 0 <= peak < len(timeline))
            and isinstance(top, list) and all(isinstance(row, dict) and is_number(row.get("bytes_at_peak")) for row in top))


def is_number(value: object) -> bool:
    """A finite JSON number (not a bool, a string or null)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_graph_file(path: Path) -> nx.DiGraph:
    """``provenance.json``: the node-link graph."""
    if not path.is_file():
        raise TracelinkError(f"{path}: missing from the profile directory")
    try:
        return read_graph(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, nx.NetworkXError) as error:
        raise TracelinkError(f"{path}: unreadable or corrupt provenance graph ({type(error).__name__}: {error})") from None


def read_frame(path: Path, convert: Callable[[pd.DataFrame], pd.DataFrame] = lambda frame: frame) -> pd.DataFrame:
    """A parquet table; missing, truncated or of the wrong schema is an error naming the file."""
    if not path.is_file():
        raise TracelinkError(f"{path}: missing from the profile directory")
    try:
        return convert(pd.read_parquet(path))
    except (OSError, ValueError, TypeError, KeyError, ArrowException) as error:
        raise TracelinkError(f"{path}: unreadable or corrupt table ({type(error).__name__}: {first_line(error)})") from None


def read_table(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """A table, with the ``;``-joined id columns kept as text; a truncated or damaged CSV is refused."""
    if not path.is_file():
        raise TracelinkError(f"{path}: missing from the profile directory")
    try:
        with path.open("rb") as raw:  # to_csv ends every row, the last one too, with a newline
            raw.seek(max(0, path.stat().st_size - 1))
            if raw.read(1) not in (b"\n", b""):
                raise TracelinkError(f"{path}: truncated (the last row is incomplete)")
        frame = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS}, keep_default_na=False, na_values=[""])
    except (OSError, ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise TracelinkError(f"{path}: unreadable or corrupt CSV ({first_line(error)})") from None
    missing = [column for column in required if column not in frame]
    if missing:
        raise TracelinkError(f"{path}: corrupt (missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)})")
    for column in frame.columns:
        numeric = column in NUMERIC_COLUMNS or column.endswith(NUMERIC_SUFFIXES)
        if numeric and len(frame) and not pd.api.types.is_numeric_dtype(frame[column]):  # an empty table has no types
            raise TracelinkError(f"{path}: corrupt (column {column} holds non-numbers)")
    return frame.fillna({c: "" for c in TEXT_COLUMNS if c in frame})
