"""What the report shows, computed from a profile: files and their hot lines, ops, call sites, executables.

Everything here is plain data (dicts, lists, numbers, text); :mod:`tracelink.report.html` turns it
into markup and the viewer's JSON. The model imports no view: :func:`tracelink.report.assemble.build_model`
assembles it, with the optional views' data (:mod:`tracelink.report.view_data`). A *line* is one line of one shown file; its time is the *self*
time of the source ops at that line, as in ``source_lines.csv`` (an op's time split between its fused
members, each member's part on its innermost line), and its inclusive time counts every line of an op's
call stack. Ops reach a line two ways: a position of their location (``file:line:col``, Python frames
included), or, in the input program, the line their text is written on (so ops located only by a
name, e.g. ONNX node names, still light up the program: their whole time is that line's).
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
from iree.compiler import ir

from tracelink.profile_dir.profile import Profile
from tracelink.provenance.graph import nodes_of_kind, ops_of_call_site
from tracelink.aggregate.utilization import UTILIZATION_COLUMNS
from tracelink.report.fmt import concrete, file_name, lower_bound_mark, text_or_empty
from tracelink.report.sources import SourcePolicy, dump_path
from tracelink.report.textmap import SourceTexts, TextOp
from tracelink.report.view_data import Gains, WorkgroupData, ZoneData

MAX_LINE_CHARS = 320  # longer lines (embedded weights, target attributes) are cut for display
MAX_EXECUTABLE_LINE_CHARS = 200  # target and layout attributes of executables are long and repetitive
# What the report shows of one name (location names, op names) and of one path (no file has a longer
# one: PATH_MAX); a 1 MB name would otherwise be repeated in every view that shows it.
MAX_NAME_CHARS = 1000
MAX_PATH_CHARS = 4096
MAX_FILE_LINES = 20000  # a bigger input program is shown around its mapped lines only
CONTEXT_LINES = 3  # lines shown around mapped lines of other files read from disk
MAX_OTHER_FILE_BYTES = 4_000_000
MAX_PROGRAM_BYTES = 64_000_000
# Ops of an executable that carry the dispatch's location without computing anything of it.
STRUCTURAL_OPS = ("hal.", "builtin.", "func.", "util.", "iree_tensor_ext.", "arith.constant", "tensor.empty", "scf.yield", "linalg.yield")
STRUCTURAL_SUFFIXES = ("_end", "return", ".yield")


@dataclass
class Line:
    key: str  # "f<file>:<line>"
    file: int
    number: int
    ops: list[str] = field(default_factory=list)
    call_sites: dict[int, str] = field(default_factory=dict)  # index -> "root" | "producer" | "absorbed"
    total_ns: float = 0.0  # self time
    mean_ns: float = 0.0
    share: float = 0.0
    inclusive_share: float = 0.0
    # self time with library frames counted for the model line calling them (the summary's ranking)
    user_mean_ns: float = 0.0
    user_share: float = 0.0
    verdict: str = ""  # what bounds it, from source_lines.csv (the verdict of the call site giving it the most time)
    next_step: str = ""
    gflops_s: float | None = None  # achieved, over the dispatch time credited to the line
    gbytes_s: float | None = None
    lower_bound: bool = False  # its FLOPs and bytes are lower bounds (a dynamic size the run did not fix)


@dataclass
class SourceFile:
    index: int
    path: str
    is_program: bool
    text: list[str] | None  # every line of the file, when readable
    lines: dict[int, Line] = field(default_factory=dict)  # mapped lines by number
    shown: list[int] = field(default_factory=list)  # line numbers to show (with gaps where they jump)

    @property
    def id(self) -> str:
        return f"f{self.index}"

    @property
    def name(self) -> str:
        return file_name(self.path) or self.path

    @property
    def max_share(self) -> float:
        return max((line.share for line in self.lines.values()), default=0.0)


@dataclass
class Executable:
    index: int
    name: str
    exports: list[str]
    source_file: str  # relative to artifacts/
    text: list[str] | None  # the source without locations, lines cut
    line_ops: dict[int, list[str]] = field(default_factory=dict)  # text line -> source ops its op came from
    call_sites: list[int] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"x{self.index}"


@dataclass
class ReportModel:
    profile: Profile
    summary: dict
    files: list[SourceFile]
    lines: dict[str, Line]
    ops: dict[str, dict]  # op node -> label, name, op_names, lines, call sites, times
    call_sites: list[dict]
    executables: dict[str, Executable]  # by executable name
    durations: dict[int, np.ndarray]  # call site -> durations (ns) in event order
    per_iteration: dict[int, list[tuple[int, float]]]  # call site -> (iteration, ns)
    audit: dict
    iteration_strip: list[dict]  # dispatches of one representative iteration: call site, start, duration
    counters: list[str]  # extra numeric call-site columns a collector gave
    workgroups: WorkgroupData | None = None  # hook collector: per-workgroup views
    zones: ZoneData | None = None  # tracy collector: runtime overhead around dispatches
    gains: Gains | None = None  # diff.csv in the profile directory: tuned gains per line
    skipped_sources: dict[str, str] = field(default_factory=dict)  # files not embedded -> why

    @functools.cached_property
    def dumped_sites(self) -> dict[str, int | None]:
        """Per executable (by name), the call site whose locations its dump carries: IREE dumps a shared
        executable once, with one call site's locations; the one with most ops in common."""
        sites = {site["index"]: {op for op, _, _ in site["ops"]} for site in self.call_sites}
        dumped = {}
        for name, executable in self.executables.items():
            in_dump = {op for ops in executable.line_ops.values() for op in ops}
            dumped[name] = max(executable.call_sites, key=lambda i: (len(in_dump & sites[i]) if i in sites else -1, -i), default=None)
        return dumped


def short_export(name: str) -> str:
    """``forward$async_dispatch_3_matmul_64x64`` → ``dispatch_3_matmul_64x64``."""
    at = name.find("dispatch_")
    return name[at:] if at > 0 else name


def bounded(text: str, limit: int) -> str:
    """``text`` unchanged up to ``limit`` characters, else its first ``limit`` and how many more there are."""
    return text if len(text) <= limit else f"{text[:limit]} … ({len(text) - limit} more characters)"


def cut(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """A line of a file for display: without trailing blanks, :func:`bounded`."""
    return bounded(text.rstrip(), limit)


def positions_of(data: dict) -> list[tuple[str, int]]:
    """Distinct (file, line) of a source-op node's positions, innermost first."""
    found: dict[tuple[str, int], None] = {}
    for position in json.loads(data.get("positions") or "[]"):
        path, line, _ = position.rsplit(":", 2)
        found[(bounded(path, MAX_PATH_CHARS), int(line))] = None
    return list(found)


def same_file(position_file: str, program: str) -> bool:
    return bool(position_file) and (position_file == program or program.endswith("/" + position_file))


def member_keys(graph: nx.DiGraph) -> dict[str, str]:
    """Source-op node by the frames (as JSON) of each member of its location; the first op holding a member wins."""
    keys: dict[str, str] = {}
    for node, data in graph.nodes(data=True):
        if data.get("kind") == "source_op":
            for member in json.loads(data.get("members") or "[]") or [{"frames": json.loads(data["frames"])}]:
                keys.setdefault(json.dumps(member["frames"]), node)
    return keys


def op_table(profile: Profile, graph: nx.DiGraph) -> dict[str, dict]:
    """Every source op: display data, the call sites it feeds, and its time (from source_ops.csv)."""
    times = {row.op: row for row in profile.source_ops.itertuples()} if not profile.source_ops.empty else {}
    ops: dict[str, dict] = {}
    for node in nodes_of_kind(graph, "source_op"):
        data = graph.nodes[node]
        feeds = sorted(
            (graph.nodes[target]["index"], edge["role"]) for _, target, edge in graph.out_edges(node, data=True) if edge.get("kind") == "feeds"
        )
        row = times.get(node)
        ops[node] = {
            "label": bounded(str(data.get("label", node)), MAX_NAME_CHARS), "name": bounded(str(data.get("name") or ""), MAX_NAME_CHARS),
            "op_names": bounded(str(data.get("op_names") or ""), MAX_NAME_CHARS), "kinds": bounded(str(data.get("op_kinds") or data.get("op_names") or ""), MAX_NAME_CHARS),
            "file": bounded(str(data.get("file") or ""), MAX_PATH_CHARS), "line": int(data.get("line") or 0), "positions": positions_of(data),
            "call_sites": feeds, "total_ns": (number(row.total_ns) or 0.0) if row is not None else 0.0,
            "mean_ns": (number(row.mean_ns) or 0.0) if row is not None else 0.0, "share": (number(row.share) or 0.0) if row is not None else 0.0,
            "lines": [],
        }
    return ops


def map_lines(line_shares: pd.DataFrame, ops, program, program_ops, by_frames, sources: SourcePolicy) -> tuple[list[SourceFile], dict[str, Line]]:
    """The files to show and their mapped lines (see the module docstring); ``line_shares`` is the profile's."""
    fractions = line_fractions(line_shares, program)
    files: dict[str, SourceFile] = {}
    written: list[tuple[str, int]] = []
    if program:
        files[program] = SourceFile(index=0, path=program, is_program=True, text=sources.read_lines(Path(program), MAX_PROGRAM_BYTES))
        if files[program].text is not None:
            written = written_lines(program_ops, by_frames)
    for node, number in written:
        if not ops[node]["positions"]:  # located by a name only: its text line is its line
            fractions[(node, program, number)] = [1.0, 1.0, 1.0]
    at_line = ops_by_line(ops, program, written)
    for path in sorted({path for path, _ in at_line}, key=lambda p: (p != program, p)):
        if path not in files:
            text = None if path == program else sources.read_lines(Path(path), MAX_OTHER_FILE_BYTES)
            files[path] = SourceFile(index=len(files), path=path, is_program=path == program, text=text)
    for (path, number), nodes in at_line.items():
        files[path].lines[number] = mapped_line(ops, fractions, path, number, nodes)
    return number_shown_files(files, ops)


def line_fractions(shares: pd.DataFrame, program: str) -> dict[tuple[str, str, int], list[float]]:
    """(op, shown file, line) -> [self, inclusive, user self] fractions of the op's time at that line, from
    the profile's line shares (:func:`tracelink.aggregate.op_line_shares`)."""
    fractions: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    columns = (shares[name].tolist() for name in ("op", "file", "line", "self", "inclusive", "user_self"))
    for op, path, number, own, inclusive, user in zip(*columns):
        parts = fractions[(op, program if program and same_file(path, program) else path, number)]
        parts[0] += own
        parts[1] += inclusive
        parts[2] += user
    return fractions


def written_lines(program_ops: list[TextOp] | None, by_frames: dict[str, str]) -> list[tuple[str, int]]:
    """(op, line) for each op of the program's text that is a source op: the line its text is written on."""
    written = []
    for text_op in program_ops or []:
        node = next((by_frames[key] for key in text_op.keys if key in by_frames), None)
        if node is not None and text_op.line > 0:
            written.append((node, text_op.line))
    return written


def ops_by_line(ops: dict[str, dict], program: str, written: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, None]]:
    """The ops at each (shown file, line), in order: those written there in the program, then those located there."""
    at_line: dict[tuple[str, int], dict[str, None]] = defaultdict(dict)
    for node, number in written:
        at_line[(program, number)][node] = None
    for node, op in ops.items():
        for path, number in op["positions"]:
            target = program if program and same_file(path, program) else path
            at_line[(target, number)][node] = None
    return at_line


def mapped_line(ops: dict[str, dict], fractions: dict[tuple[str, str, int], list[float]], path: str, number: int, nodes: dict[str, None]) -> Line:
    """The line at path:number: its ops' parts of their time there, and the call sites giving it time."""
    # the op holding most of the line's time first
    held = {node: ops[node]["total_ns"] * fractions.get((node, path, number), (0.0, 0.0, 0.0))[0] for node in nodes}
    line = Line(key="", file=0, number=number, ops=sorted(nodes, key=lambda node: -held[node]))
    for node in line.ops:
        op = ops[node]
        own, inclusive, user = fractions.get((node, path, number), (0.0, 0.0, 0.0))
        line.total_ns += op["total_ns"] * own
        line.mean_ns += op["mean_ns"] * own
        line.share += op["share"] * own
        line.inclusive_share += op["share"] * inclusive
        line.user_mean_ns += op["mean_ns"] * user
        line.user_share += op["share"] * user
        if own <= 0 and inclusive <= 0 and user <= 0:
            continue  # an op written here whose time goes to other lines
        for index, role in op["call_sites"]:
            if role != "init" and line.call_sites.get(index) != "root":  # only call sites giving the line time
                line.call_sites[index] = role
    line.call_sites = dict(sorted(line.call_sites.items()))
    return line


def number_shown_files(files: dict[str, SourceFile], ops: dict[str, dict]) -> tuple[list[SourceFile], dict[str, Line]]:
    """The files shown, numbered in the order shown; their lines by key, each key also listed on its ops."""
    shown = [f for f in files.values() if f.lines or f.text is not None]  # not a program that is gone and explains nothing
    ordered = sorted(shown, key=lambda f: (not f.is_program, -f.max_share, f.path))
    lines: dict[str, Line] = {}
    for index, source_file in enumerate(ordered):  # the program first, then the hottest files
        source_file.index = index
        source_file.shown = shown_lines(source_file)
        for number in sorted(source_file.lines):
            line = source_file.lines[number]
            line.file, line.key = index, f"{source_file.id}:{number}"
            lines[line.key] = line
            for node in line.ops:
                ops[node]["lines"].append(line.key)
    return ordered, lines


def add_line_utilization(source_lines: pd.DataFrame, files: list[SourceFile], program: str, profile: Profile) -> None:
    """Each shown line's verdict and achieved rates, from ``source_lines.csv`` (files matched as lines are)."""
    if "verdict" not in source_lines:
        return
    by_path = {source_file.path: source_file for source_file in files}
    for row in source_lines.itertuples():
        source_file = by_path.get(program if program and same_file(str(row.file), program) else str(row.file))
        line = source_file.lines.get(int(row.line)) if source_file is not None else None
        if line is not None:
            line.verdict, line.next_step = text_or_empty(row.verdict), concrete(text_or_empty(row.next_step), profile)
            line.gflops_s, line.gbytes_s = number(row.gflops_s), number(row.gbytes_s)
            line.lower_bound = lower_bound_mark(getattr(row, "lower_bound", None)) != ""


def shown_lines(source_file: SourceFile) -> list[int]:
    """Which line numbers a file view shows: all of a readable program, else mapped lines (with context)."""
    mapped = sorted(source_file.lines)
    if source_file.text is None:
        return mapped
    count = len(source_file.text)
    if source_file.text and source_file.text[-1] == "":
        count -= 1
    if source_file.is_program and count <= MAX_FILE_LINES:
        return list(range(1, count + 1))
    keep: set[int] = set()
    for number in mapped:
        keep.update(range(max(1, number - CONTEXT_LINES), min(count, number + CONTEXT_LINES) + 1))
    keep.update(n for n in mapped if n > count)
    return sorted(keep)


def call_site_rows(profile: Profile, graph: nx.DiGraph, lines: dict[str, Line], ops: dict[str, dict]) -> list[dict]:
    """One dict per call site: provenance, export data, statistics and the ops/lines it computes."""
    table = profile.call_sites
    rows = {int(row["call_site"]): row for row in table.to_dict("records")} if not table.empty else {}
    counters = counter_columns(table)
    out = []
    for node in nodes_of_kind(graph, "call_site"):
        data = graph.nodes[node]
        index = int(data["index"])
        export = graph.nodes.get(f"export:{data['export']}", {})
        row = rows.get(index, {})
        fed = [(source, edge) for source, _, edge in graph.in_edges(node, data=True) if edge.get("kind") == "feeds"]
        weight_total = sum(float(edge.get("weight", 0.0)) for _, edge in fed)
        fractions = {
            source: (float(edge.get("weight", 0.0)) / weight_total if weight_total > 0 else (1.0 if edge.get("role") == "root" else 0.0))
            for source, edge in fed
        }
        op_roles = [(op, role, fractions.get(op, 0.0)) for op, role in ops_of_call_site(graph, index)]
        line_keys = sorted({key for op, _, _ in op_roles for key in ops.get(op, {}).get("lines", [])}, key=line_sort_key)
        out.append({
            "index": index, "export": str(data["export"]), "executable": str(export.get("executable") or row.get("executable") or ""),
            "root_op": bounded(str(data.get("root_op") or ""), MAX_NAME_CHARS), "loc": bounded(str(data.get("loc") or ""), MAX_NAME_CHARS),
            "phase": str(data.get("phase") or "run"),
            "workgroups": str(data.get("workgroups") or ""), "workgroup_count": int(data.get("workgroup_count") or 0),
            "shapes": str(export.get("shapes") or ""), "lowering_config": str(export.get("lowering_config") or ""),
            "workgroup_size": str(export.get("workgroup_size") or ""), "source_file": str(export.get("source_file") or ""),
            "target_file": str(export.get("target_file") or ""), "ops": op_roles, "lines": line_keys,
            **{key: number(row.get(key)) for key in ("count", "total_ns", "mean_ns", "median_ns", "p10_ns", "p90_ns", "ci95_low_ns", "ci95_high_ns", "share", "tile_count_mean", "tile_duration_sum_mean_ns")},
            **{key: number(row.get(key)) for key in UTILIZATION_COLUMNS if key not in ("verdict", "next_step")},
            "verdict": text_or_empty(row.get("verdict")), "next_step": concrete(text_or_empty(row.get("next_step")), profile),
            "lower_bound": lower_bound_mark(row.get("lower_bound")) != "",
            "extra": {key: number(row.get(key)) for key in counters},
        })
    return sorted(out, key=lambda site: site["index"])


def line_sort_key(key: str) -> tuple[int, int]:
    file_id, number = key.split(":")
    return int(file_id[1:]), int(number)


def number(value) -> float | None:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(result) else result


KNOWN_CALL_SITE_COLUMNS = {
    "call_site", "export", "executable", "root_op", "loc", "phase", "workgroups", "workgroup_count", "root_ops", "producer_ops", "absorbed_ops",
    "source_lines", "count", "total_ns", "mean_ns", "median_ns", "p10_ns", "p90_ns", "ci95_low_ns", "ci95_high_ns", "share", "noisy",
    "tile_count_mean", "tile_duration_sum_mean_ns", *UTILIZATION_COLUMNS,
}


def counter_columns(table: pd.DataFrame) -> list[str]:
    """Numeric call-site columns beyond the known ones: counters a collector measured."""
    return [c for c in table.columns if c not in KNOWN_CALL_SITE_COLUMNS and pd.api.types.is_numeric_dtype(table[c])]


def read_executables(profile: Profile, graph: nx.DiGraph, enclosing, by_frames, texts: SourceTexts,
                     context: Callable[[], ir.Context], embed: bool = True) -> dict[str, Executable]:
    """Each executable's dumped source (locations removed) and, per line, the source ops it came from
    (one ``texts`` does not hold yet is parsed in ``context()``).

    Without ``embed`` (``--no-sources``) no dump is read: dumps hold the user's program text.
    """
    executables: dict[str, Executable] = {}
    for node in nodes_of_kind(graph, "export"):
        data = graph.nodes[node]
        name = str(data.get("executable") or "")
        if not name:
            continue
        executable = executables.get(name)
        if executable is None:
            executable = Executable(index=len(executables), name=name, exports=[], source_file=str(data.get("source_file") or ""), text=None)
            executables[name] = executable
            path = dump_path(profile.artifacts, executable.source_file) if executable.source_file else None
            dump = texts.dump(path, enclosing, context) if embed and path is not None and path.is_file() else None
            if dump is not None:
                executable.text = [cut(line, MAX_EXECUTABLE_LINE_CHARS) for line in dump.stripped.split("\n")]
                for text_op in dump.ops or []:
                    if text_op.name.startswith(STRUCTURAL_OPS) or text_op.name.endswith(STRUCTURAL_SUFFIXES):
                        continue
                    found = [by_frames[key] for key in text_op.keys if key in by_frames]
                    if found and text_op.line > 0:
                        executable.line_ops.setdefault(text_op.line, [])
                        executable.line_ops[text_op.line] = list(dict.fromkeys(executable.line_ops[text_op.line] + found))
        executable.exports.append(str(data.get("label") or node.removeprefix("export:")))
        executable.call_sites.extend(sorted(int(graph.nodes[s]["index"]) for s, _ in graph.in_edges(node)))
    return executables


def event_series(events: pd.DataFrame) -> tuple[dict[int, np.ndarray], dict[int, list[tuple[int, float]]]]:
    """Each call site's execution times (event order) and its time in each iteration."""
    timed = events.dropna(subset=["call_site"])
    sites = timed["call_site"].astype("int64").to_numpy()
    values = timed["duration_ns"].astype("float64").to_numpy()
    order = np.argsort(sites, kind="stable")
    keys, starts = np.unique(sites[order], return_index=True)
    durations = {int(k): part for k, part in zip(keys, np.split(values[order], starts[1:]))}
    per_iteration: dict[int, list[tuple[int, float]]] = {}
    with_iteration = timed.dropna(subset=["iteration"])
    if not with_iteration.empty:
        sums = with_iteration.astype({"call_site": "int64", "iteration": "int64", "duration_ns": "float64"}).groupby(["call_site", "iteration"])["duration_ns"].sum()
        for (site, iteration), value in sums.items():
            per_iteration.setdefault(int(site), []).append((int(iteration), float(value)))
    return durations, per_iteration


def iteration_strip(events: pd.DataFrame) -> list[dict]:
    """The dispatches of the iteration whose total time is the median one, with start offsets."""
    timed = events.dropna(subset=["call_site", "iteration", "start_ns", "duration_ns"])
    if timed.empty:
        return []
    totals = timed.groupby("iteration")["duration_ns"].sum().sort_values(kind="stable")
    chosen = totals.index[len(totals) // 2]
    rows = timed[timed["iteration"] == chosen].sort_values("start_ns", kind="stable")
    origin = int(rows["start_ns"].min())
    return [
        {"call_site": int(r.call_site), "start": int(r.start_ns) - origin, "duration": int(r.duration_ns), "iteration": int(chosen)}
        for r in rows.itertuples()
    ]
