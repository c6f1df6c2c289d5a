"""``profile.pb.gz``: the profile in pprof's format, read by ``go tool pprof``, speedscope and Pyroscope.

One sample type, ``dispatch time`` in nanoseconds. Each sample is a stack, root first: the source frames
of one member of a source op's location (outermost first: a Python caller, a name scope, an ONNX node),
the source op, the dispatch call site, then its export; its value is the time the call site credits
that member (the call site's measured total × the op's share × the member's share), so the values add
up to the measured dispatch time. Dispatches matched to no call site are samples of their export alone.

The messages are built with the ``protobuf`` library from a descriptor of pprof's ``profile.proto``
(the subset tracelink writes: ValueType, Sample, Location, Line, Function, Profile) made in code.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from functools import cache
from pathlib import Path

import networkx as nx
import pandas as pd
from google.protobuf.message import Message

from tracelink.atomic import write_atomic
from tracelink.compile.proto_schema import INT64, MESSAGE, STRING, UINT64, Schema, message_class
from tracelink.profile_dir.profile import Profile
from tracelink.provenance.graph import nodes_of_kind
from tracelink.profile_dir import files

PACKAGE = "perftools.profiles"
# pprof's profile.proto (github.com/google/pprof/proto/profile.proto): message -> (field, number, type, repeated, message type)
SCHEMA: Schema = {
    "ValueType": [("type", 1, INT64, False, ""), ("unit", 2, INT64, False, "")],
    "Sample": [("location_id", 1, UINT64, True, ""), ("value", 2, INT64, True, "")],
    "Line": [("function_id", 1, UINT64, False, ""), ("line", 2, INT64, False, ""), ("column", 3, INT64, False, "")],
    "Location": [("id", 1, UINT64, False, ""), ("mapping_id", 2, UINT64, False, ""), ("address", 3, UINT64, False, ""), ("line", 4, MESSAGE, True, "Line")],
    "Function": [
        ("id", 1, UINT64, False, ""), ("name", 2, INT64, False, ""), ("system_name", 3, INT64, False, ""),
        ("filename", 4, INT64, False, ""), ("start_line", 5, INT64, False, ""),
    ],
    "Profile": [
        ("sample_type", 1, MESSAGE, True, "ValueType"), ("sample", 2, MESSAGE, True, "Sample"),
        ("location", 4, MESSAGE, True, "Location"), ("function", 5, MESSAGE, True, "Function"),
        ("string_table", 6, STRING, True, ""), ("time_nanos", 9, INT64, False, ""), ("duration_nanos", 10, INT64, False, ""),
        ("period_type", 11, MESSAGE, False, "ValueType"), ("period", 12, INT64, False, ""),
    ],
}
# A frame as printed in the graph: ``loc("name"("file":line:col))``, ``loc("file":line:col)`` or ``loc("name")``.
FRAME = re.compile(r'^loc\((?:"((?:[^"\\]|\\.)*)"(?=\(|\)))?\(?(?:"((?:[^"\\]|\\.)*)":(\d+):\d+)?')


@cache
def profile_class() -> type:
    """The ``perftools.profiles.Profile`` message class, from a descriptor of :data:`SCHEMA`."""
    return message_class(PACKAGE, SCHEMA, "Profile")


class PprofBuilder:
    """Interns strings, functions and locations (one line each) of a profile being built."""

    def __init__(self) -> None:
        self.message = profile_class()()
        self.strings: dict[str, int] = {}
        self.locations: dict[tuple[str, str, int], int] = {}
        self.string("")  # pprof requires string_table[0] == ""

    def string(self, text: str) -> int:
        """The index of ``text`` in the string table, adding it when new."""
        if text not in self.strings:
            self.strings[text] = len(self.strings)
            self.message.string_table.append(text)
        return self.strings[text]

    def location(self, name: str, filename: str = "", line: int = 0, system_name: str = "") -> int:
        """The id of the location of one frame, a function named ``name`` at ``filename:line``."""
        key = (name, filename, line)
        if key not in self.locations:
            ident = len(self.locations) + 1
            self.message.function.add(id=ident, name=self.string(name), system_name=self.string(system_name or name),
                                      filename=self.string(filename), start_line=line)
            self.message.location.add(id=ident).line.add(function_id=ident, line=line)
            self.locations[key] = ident
        return self.locations[key]


def frame_location(builder: PprofBuilder, frame: str) -> int:
    """A source frame's location: named by its name (else ``file:line``), at its file and line."""
    match = FRAME.match(frame)
    name, filename, line = (match.group(1), match.group(2), match.group(3)) if match else (None, None, None)
    filename = filename or ""
    line_number = int(line) if line else 0
    label = name or (f"{filename}:{line_number}" if filename else frame)
    return builder.location(label, filename, line_number)


def op_stacks(builder: PprofBuilder, graph: nx.DiGraph, op: str) -> list[tuple[float, list[int]]]:
    """Each member of a source op as (its share, its location ids root first: frames outermost first, then the op)."""
    data = graph.nodes[op]
    own = builder.location(data["label"], str(data.get("file") or ""), int(data.get("line") or 0), data.get("op_kinds") or data.get("op_names") or "")
    members = json.loads(data.get("members") or "[]") or [{"frames": []}]
    return [(1.0 / len(members), [*(frame_location(builder, f) for f in reversed(m["frames"])), own]) for m in members]


def build_pprof(profile: Profile) -> Message:
    """The pprof message of a profile (module docstring); its sample values add up to the dispatch total."""
    builder = PprofBuilder()
    message = builder.message
    message.sample_type.add(type=builder.string("dispatch time"), unit=builder.string("nanoseconds"))
    message.period_type.CopyFrom(message.sample_type[0])
    message.period = 1
    events = profile.events
    graph = profile.graph
    site_totals = events.dropna(subset=["call_site"]).groupby("call_site")["duration_ns"].sum()
    shares = profile.attribution
    ops_of_site: dict[int, list[tuple[str, float]]] = {}  # call site -> (op, fraction), in the attribution's order
    for site, op, fraction in zip(shares["call_site"], shares["op"], shares["fraction"]):
        ops_of_site.setdefault(int(site), []).append((op, fraction))
    sites = {graph.nodes[node]["index"]: graph.nodes[node] for node in nodes_of_kind(graph, "call_site")}
    stacks: list[tuple[float, list[int]]] = []  # (value, location ids root first)
    for site, total in site_totals.items():
        data = sites.get(int(site))
        export = builder.location(str(data["export"] if data else events.loc[events["call_site"] == site, "export"].iloc[0]))
        tail = [builder.location(str(data["label"]), system_name=str(data["export"])), export] if data else [export]
        ops = ops_of_site.get(int(site), [])
        if not ops:
            stacks.append((float(total), tail))
        for op, fraction in ops:
            stacks.extend((float(total) * fraction * part, [*stack, *tail]) for part, stack in op_stacks(builder, graph, op))
    unmatched = events[events["call_site"].isna()].groupby("export")["duration_ns"].sum()
    stacks.extend((float(total), [builder.location(str(export))]) for export, total in unmatched.items())
    add_samples(message, stacks)
    message.time_nanos = time.time_ns()
    message.duration_nanos = int(events["duration_ns"].sum())
    return message


def add_samples(message: Message, stacks: list[tuple[float, list[int]]]) -> None:
    """Add one sample per stack (leaf first, as pprof lists them), rounding so the integers keep the exact total."""
    frame = pd.DataFrame({"value": [value for value, _ in stacks], "ids": [tuple(ids) for _, ids in stacks]})
    merged = frame.groupby("ids", sort=False)["value"].sum()
    cumulative = merged.cumsum().round().astype("int64")
    values = cumulative.diff().fillna(cumulative).astype("int64")
    for ids, value in zip(merged.index, values):
        if value:
            message.sample.add(location_id=list(reversed(ids)), value=[int(value)])


def write_pprof(profile: Profile, path: Path | None = None) -> Path:
    """Write ``profile.pb.gz`` (gzipped pprof) into the profile directory, or to ``path``."""
    path = Path(path) if path is not None else profile.directory / files.PPROF
    data = gzip.compress(build_pprof(profile).SerializeToString(), mtime=0)
    return write_atomic(path, lambda p: p.write_bytes(data))
