"""The provenance graph: source ops ↔ dispatch call sites ↔ exports ↔ executables (networkx).

Nodes carry a ``kind``: ``source_op`` (``op:<n>``), ``call_site`` (``cs:<i>``), ``export``
(``export:<name>``) and ``executable`` (``exe:<name>``). Edges: source op → call site with ``role``
(``root`` or ``producer``) and ``weight`` (the op's share of the dispatch's estimated cost), call site
→ export, export → executable. Every attribute is a string, number or bool so GraphML can hold it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from tracelink.atomic import write_atomic, write_text_atomic
from tracelink.textsafe import xml_safe_graph
from tracelink.provenance.call_sites import CallSite
from tracelink.provenance.executables import ExportInfo
from tracelink.provenance.locations import SourceLocation
from tracelink.provenance.program import InputProgram
from tracelink.provenance.regions import DispatchRegion


@dataclass
class SourceOpIndex:
    """Source-op node ids by location; input locations first, in program order."""

    ids: dict[SourceLocation, str]
    by_frames: dict[tuple[str, ...], SourceLocation]


def call_site_node(index: int) -> str:
    return f"cs:{index}"


def build_graph(
    program: InputProgram,
    call_sites: list[CallSite],
    regions: list[DispatchRegion],
    exports: dict[str, ExportInfo],
    host_locations: set[tuple[str, ...]] | None = None,
) -> nx.DiGraph:
    """Build the provenance graph of one entry function.

    ``host_locations`` are the location frames of every host-phase op; the audit uses them to tell a
    compute op folded into host code from one the compiler removed.
    """
    graph = nx.DiGraph(program=str(program.path))
    index = SourceOpIndex({}, {})
    for op in program.ops:
        if op.location.known and op.location not in index.ids:
            add_source_op(graph, index, op.location, in_input=True)
        if op.location.known:
            node = graph.nodes[index.ids[op.location]]
            node["op_names"] = join_unique(node["op_names"], op.op_name)
            node["compute"] = node["compute"] or op.compute
    for name, info in exports.items():
        graph.add_node(f"exe:{info.executable}", kind="executable", label=info.executable)
        graph.add_node(
            f"export:{name}", kind="export", label=name, executable=info.executable, root_op=info.root_op,
            shapes=info.shapes, lowering_config=info.lowering_config, workgroup_size=info.workgroup_size,
            source_file=info.source_file, configured_file=info.configured_file, benchmark_file=info.benchmark_file,
        )
        graph.add_edge(f"export:{name}", f"exe:{info.executable}", kind="defined_in")
    for site, region in zip(call_sites, match_regions(call_sites, regions)):
        add_call_site(graph, index, site, region)
    graph.graph["audit"] = json.dumps(audit(graph, program, host_locations or set()))
    return graph


def add_source_op(graph: nx.DiGraph, index: SourceOpIndex, location: SourceLocation, in_input: bool) -> str:
    """Add a source-op node for ``location`` and return its id."""
    node = f"op:{len(index.ids)}"
    index.ids[location] = node
    index.by_frames.setdefault(location.frames, location)
    first = location.positions[0] if location.positions else None
    graph.add_node(
        node, kind="source_op", label=location.display(), name=location.name or "",
        file=first.file if first else "", line=first.line if first else 0, col=first.col if first else 0,
        frames=json.dumps(list(location.frames)), positions=json.dumps([str(p) for p in location.positions]),
        op_names="", in_input=in_input, compute=False,
    )
    return node


def resolve_source_op(graph: nx.DiGraph, index: SourceOpIndex, location: SourceLocation) -> str | None:
    """The source-op node of a dispatch location, creating one for locations the input lacks.

    A location that extends an input location with more frames is an input op inlined at a call
    (``callsite(op at call)``): it becomes its own node, carrying the inlined op's names.
    """
    if not location.known:
        return None
    if location in index.ids:
        return index.ids[location]
    inlined_from = next(
        (index.by_frames[location.frames[:n]] for n in range(len(location.frames) - 1, 0, -1) if location.frames[:n] in index.by_frames),
        None,
    )
    node = add_source_op(graph, index, location, in_input=False)
    if inlined_from is not None:
        origin = graph.nodes[index.ids[inlined_from]]
        graph.nodes[node].update(op_names=origin["op_names"], compute=origin["compute"], inlined_from=index.ids[inlined_from])
    return node


def match_regions(call_sites: list[CallSite], regions: list[DispatchRegion]) -> list[DispatchRegion | None]:
    """Pair each call site with its dispatch region: same export and location, first unused in order."""
    unused = list(regions)
    matched: list[DispatchRegion | None] = []
    for site in call_sites:
        found = next((r for r in unused if r.export == site.export and r.location == site.location), None)
        found = found or next((r for r in unused if r.location == site.location), None)
        if found is not None:
            unused.remove(found)
        matched.append(found)
    return matched


def add_call_site(graph: nx.DiGraph, index: SourceOpIndex, site: CallSite, region: DispatchRegion | None) -> None:
    node = call_site_node(site.index)
    workgroups = "x".join(map(str, site.workgroups)) if site.workgroups else "dynamic"
    graph.add_node(
        node, kind="call_site", label=f"#{site.index} {site.export}", index=site.index, export=site.export,
        workgroups=workgroups, workgroup_count=(site.workgroups[0] * site.workgroups[1] * site.workgroups[2]) if site.workgroups else 0,
        loc=site.location.display(), function=site.function, phase=site.phase,
        root_op=region.root_op if region else graph.nodes.get(f"export:{site.export}", {}).get("root_op", "unknown"),
        region_matched=region is not None,
    )
    if f"export:{site.export}" not in graph:
        graph.add_node(f"export:{site.export}", kind="export", label=site.export, executable="", root_op="unknown")
    graph.add_edge(node, f"export:{site.export}", kind="dispatches")
    costs = region.costs if region else {site.location: 1.0}
    weights: dict[str, float] = defaultdict(float)
    roles: dict[str, str] = {}
    total = sum(costs.values()) or 1.0
    for location, cost in costs.items():
        source = resolve_source_op(graph, index, location)
        if source is None:
            continue
        weights[source] += cost / total
        if location == site.location or roles.get(source) == "root":
            roles[source] = "root"
        else:
            roles.setdefault(source, "producer")
    root = resolve_source_op(graph, index, site.location)
    if root is not None and root not in weights:
        weights[root] = 0.0  # the call site's own op, even when fusion left it no body ops of its own
        roles[root] = "root"
    for source, weight in weights.items():
        graph.add_edge(source, node, kind="feeds", role=roles[source], weight=weight)


def join_unique(existing: str, name: str) -> str:
    names = [n for n in existing.split(", ") if n]
    return ", ".join(names if name in names else [*names, name])


# Queries -------------------------------------------------------------------------------------------


def nodes_of_kind(graph: nx.DiGraph, kind: str) -> list[str]:
    """Node ids of one kind, in insertion order."""
    return [node for node, data in graph.nodes(data=True) if data.get("kind") == kind]


def ops_of_call_site(graph: nx.DiGraph, index: int) -> list[tuple[str, str]]:
    """(source-op node, role) pairs feeding call site ``index``, root first."""
    pairs = [(source, data["role"]) for source, _, data in graph.in_edges(call_site_node(index), data=True) if data.get("kind") == "feeds"]
    return sorted(pairs, key=lambda pair: (pair[1] != "root", pair[0]))


def call_sites_of_op(graph: nx.DiGraph, op_node: str) -> list[tuple[int, str]]:
    """(call-site index, role) pairs a source op feeds."""
    return sorted((graph.nodes[target]["index"], data["role"]) for _, target, data in graph.out_edges(op_node, data=True) if data.get("kind") == "feeds")


def ops_at_line(graph: nx.DiGraph, file: str, line: int) -> list[str]:
    """Source-op nodes with any position (Python call-stack frames and fused members too) at file:line.

    ``file`` matches a position's file exactly or as a path suffix (``model.py`` matches ``/src/model.py``).
    """
    def at_line(position: str) -> bool:
        path, line_text, _ = position.rsplit(":", 2)
        return int(line_text) == line and (path == file or path.endswith("/" + file))

    return [node for node in nodes_of_kind(graph, "source_op") if any(map(at_line, json.loads(graph.nodes[node]["positions"])))]


def call_sites_of_line(graph: nx.DiGraph, file: str, line: int) -> list[tuple[int, str]]:
    """(call-site index, role) pairs fed by any source op at file:line (file may be a path suffix)."""
    found: dict[int, str] = {}
    for op_node in ops_at_line(graph, file, line):
        for index, role in call_sites_of_op(graph, op_node):
            if found.get(index) != "root":
                found[index] = role
    return sorted(found.items())


# Audit ---------------------------------------------------------------------------------------------


def audit(graph: nx.DiGraph, program: InputProgram, host_locations: set[tuple[str, ...]]) -> dict:
    """What the mapping could not explain, or explains with a caveat.

    - ``ops_without_location``: input compute ops with an unknown location;
    - ``ops_without_dispatch``: input compute ops feeding no call site, with why when knowable
      (hoisted to an initializer, left in host code, or folded away);
    - ``ops_split``: source ops feeding several run-phase call sites (split or recomputed);
    - ``shared_executables``: exports dispatched by several call sites (deduplicated executables).
    """
    index = {data["frames"]: node for node, data in graph.nodes(data=True) if data.get("kind") == "source_op"}
    without_location = [op.op_name for op in program.ops if op.compute and not op.location.known]
    without_dispatch = []
    seen: set[str] = set()
    for op in program.ops:
        if not op.compute or not op.location.known:
            continue
        node = index[json.dumps(list(op.location.frames))]
        if node in seen:
            continue
        seen.add(node)
        sites = call_sites_of_op(graph, node) + [site for inlined in inlined_copies(graph, node) for site in call_sites_of_op(graph, inlined)]
        run_sites = [i for i, _ in sites if graph.nodes[call_site_node(i)]["phase"] == "run"]
        if run_sites:
            continue
        if sites:
            reason = "hoisted to an initializer (runs once at load)"
        elif op.location.frames in host_locations:
            reason = "in host code (no dispatch: a copy, reshape or metadata change)"
        else:
            reason = "folded away by the compiler"
        without_dispatch.append({"op": node, "op_names": graph.nodes[node]["op_names"], "loc": graph.nodes[node]["label"], "reason": reason})
    split = []
    for node in nodes_of_kind(graph, "source_op"):
        sites = [(i, role) for i, role in call_sites_of_op(graph, node) if graph.nodes[call_site_node(i)]["phase"] == "run"]
        if len(sites) > 1:
            split.append({"op": node, "loc": graph.nodes[node]["label"], "call_sites": [i for i, _ in sites], "roles": sorted({r for _, r in sites})})
    shared = []
    for node in nodes_of_kind(graph, "export"):
        sites = sorted(graph.nodes[s]["index"] for s, _ in graph.in_edges(node))
        if len(sites) > 1:
            shared.append({"export": graph.nodes[node]["label"], "call_sites": sites})
    return {
        "ops_without_location": without_location,
        "ops_without_dispatch": without_dispatch,
        "ops_split": split,
        "shared_executables": shared,
    }


def inlined_copies(graph: nx.DiGraph, op_node: str) -> list[str]:
    return [node for node, data in graph.nodes(data=True) if data.get("inlined_from") == op_node]


def audit_of(graph: nx.DiGraph) -> dict:
    """The audit stored in the graph."""
    return json.loads(graph.graph["audit"])


# Export --------------------------------------------------------------------------------------------


def write_graph(graph: nx.DiGraph, graphml: Path, node_link: Path) -> None:
    """Write GraphML and node-link JSON, each atomically."""
    write_atomic(graphml, lambda p: nx.write_graphml(xml_safe_graph(graph), p))
    write_text_atomic(node_link, json.dumps(nx.node_link_data(graph, edges="links"), indent=1))


def read_graph(node_link: Path) -> nx.DiGraph:
    """Read the node-link JSON back."""
    return nx.node_link_graph(json.loads(node_link.read_text()), edges="links")
