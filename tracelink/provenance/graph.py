"""The provenance graph: source ops ↔ dispatch call sites ↔ exports ↔ executables (networkx).

Nodes carry a ``kind``: ``source_op`` (``op:<n>``, one per input op location, and one per call chain
for an op inlined at several calls), ``call_site`` (``cs:<i>``), ``export`` (``export:<name>``) and
``executable`` (``exe:<name>``). Edges: source op → call site with ``role`` (``root``: the op the
dispatch is named after, every member when that location is fused; ``producer``: an op fused into it;
``init``: a fill whose location CSE may have borrowed from another layer, weight 0), ``weight`` (the
op's share of the dispatch's estimated cost) and ``flops`` and ``bytes`` (its part of the dispatch's
FLOPs and traffic at the run's sizes, which the aggregation weighs at the machine's roofs), call site →
export, export → executable. Every attribute is a string, number or bool so GraphML can hold it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from tracelink.atomic import write_atomic, write_text_atomic
from tracelink.textsafe import xml_safe_graph
from tracelink.provenance.call_sites import CallSite
from tracelink.provenance.executables import ExportInfo
from tracelink.provenance.locations import OpLocation, SourceLocation
from tracelink.provenance.program import InputOp, InputProgram
from tracelink.provenance.regions import DispatchRegion, MemberCosts


@dataclass
class SourceOpIndex:
    """Source-op node ids by whole location, and by location member; input ops first, in program order."""

    ids: dict[OpLocation, str] = field(default_factory=dict)
    owner: dict[SourceLocation, str] = field(default_factory=dict)  # member -> node of the first op holding it
    by_frames: dict[tuple[str, ...], str] = field(default_factory=dict)  # member frames -> node
    member_costs: dict[tuple[str, ...], float] = field(default_factory=dict)  # member frames -> own work before fusion
    member_flops: dict[tuple[str, ...], float] = field(default_factory=dict)  # member frames -> own FLOPs before fusion
    standalone: dict[tuple[str, ...], float] = field(default_factory=dict)  # member frames -> its unfused work in all regions

    def own_cost(self, member: SourceLocation) -> float:
        """A member's own work before fusion; an inlined member (frames extended by its call) takes its op's."""
        return by_frames_prefix(self.member_costs, member.frames)

    def own_flops(self, member: SourceLocation) -> float:
        """A member's own FLOPs before fusion, looked up as :meth:`own_cost`."""
        return by_frames_prefix(self.member_flops, member.frames)

    def presence(self, member: SourceLocation, inside: dict[tuple[str, ...], float] | None) -> float:
        """The part of a member's work that runs in the dispatch whose unfused work by member is ``inside``.

        A member with ops of its own (located at it alone) in some dispatch regions does its work there:
        its part here is the share of that work this region holds, 0 when all of it runs in other
        dispatches. A member with no op of its own anywhere exists only inside merged ops: 1.
        """
        total = self.standalone.get(member.frames, 0.0)
        if inside is None or total <= 0:
            return 1.0
        return inside.get(member.frames, 0.0) / total


def by_frames_prefix(values: dict[tuple[str, ...], float], frames: tuple[str, ...]) -> float:
    """The value of the longest prefix of ``frames`` that has one (an inlined op's frames extend its op's), else 0."""
    for length in range(len(frames), 0, -1):
        if frames[:length] in values:
            return values[frames[:length]]
    return 0.0


def standalone_work(region: DispatchRegion) -> dict[tuple[str, ...], float]:
    """A region's work by member, over the locations that are one member (not the compiler's merged ones)."""
    work: dict[tuple[str, ...], float] = defaultdict(float)
    for location, cost in region.costs.items():
        if len(location.members) == 1:
            work[location.members[0].frames] += cost
    return work


def call_site_node(index: int) -> str:
    return f"cs:{index}"


def build_graph(
    program: InputProgram,
    call_sites: list[CallSite],
    regions: list[DispatchRegion],
    exports: dict[str, ExportInfo],
    host_locations: set[tuple[str, ...]] | None = None,
    member_costs: MemberCosts | None = None,
) -> nx.DiGraph:
    """Build the provenance graph of one entry function.

    ``host_locations`` are the frames of every host-phase location; the audit uses them (and the
    locations present in the dispatch regions) to tell why an input op reaches no dispatch.
    ``member_costs`` (:func:`~tracelink.provenance.regions.member_costs`) weigh the members of the
    compiler's fused locations, and the input ops a dispatched op absorbed (:func:`share_absorbed`);
    without them members share equally and absorbed ops get no time.
    """
    graph = nx.DiGraph(program=str(program.path))
    costs = member_costs or MemberCosts()
    index = SourceOpIndex(member_costs=costs.work, member_flops=costs.flops)
    for region in regions:
        for frames, cost in standalone_work(region).items():
            index.standalone[frames] = index.standalone.get(frames, 0.0) + cost
    for op in program.ops:
        if not op.location.known:
            continue
        if op.location not in index.ids:
            add_source_op(graph, index, op.location, in_input=True)
        node = graph.nodes[index.ids[op.location]]
        node["op_names"] = join_unique(node["op_names"], op.op_name)
        if op.compute:
            node["compute"] = True
            node["op_kinds"] = join_unique(node["op_kinds"], op.op_name)
    for name, info in exports.items():
        graph.add_node(f"exe:{info.executable}", kind="executable", label=info.executable)
        graph.add_node(
            f"export:{name}", kind="export", label=name, executable=info.executable, root_op=info.root_op,
            shapes=info.shapes, lowering_config=info.lowering_config, workgroup_size=info.workgroup_size,
            source_file=info.source_file, configured_file=info.configured_file, benchmark_file=info.benchmark_file,
            target_file=info.target_file, binding_bytes=info.binding_bytes if info.binding_bytes is not None else -1.0,
        )
        graph.add_edge(f"export:{name}", f"exe:{info.executable}", kind="defined_in")
    for site, region in zip(call_sites, match_regions(call_sites, regions)):
        add_call_site(graph, index, site, region)
    in_dispatches = set().union(*(region.present for region in regions)) if regions else set()
    found = audit(graph, program, index, host_locations or set(), in_dispatches)
    graph.graph["audit"] = json.dumps(found)
    absorbed = {finding["op"] for finding in found["ops_without_dispatch"] if finding["reason"] == REASONS["absorbed"]}
    share_absorbed(graph, program, index, absorbed)
    return graph


def add_source_op(graph: nx.DiGraph, index: SourceOpIndex, location: OpLocation, in_input: bool) -> str:
    """Add a source-op node for ``location`` and return its id."""
    node = f"op:{len(index.ids)}"
    index.ids[location] = node
    for member in location.members:
        index.owner.setdefault(member, node)
        index.by_frames.setdefault(member.frames, node)
    first = location.members[0]
    position = first.positions[0] if first.positions else None
    graph.add_node(
        node, kind="source_op", label=location.display(), name=first.name or "",
        file=position.file if position else "", line=position.line if position else 0, col=position.col if position else 0,
        frames=json.dumps(list(first.frames)),
        members=json.dumps([{"frames": list(m.frames), "positions": [str(p) for p in m.positions]} for m in location.members]),
        positions=json.dumps(list(dict.fromkeys(str(p) for m in location.members for p in m.positions))),
        op_names="", op_kinds="", in_input=in_input, compute=False,
    )
    return node


def resolve_member(graph: nx.DiGraph, index: SourceOpIndex, member: SourceLocation) -> str:
    """The source-op node of one location member, creating one for members the input lacks.

    A member that extends an input op's frames (``callsite(op at call)``) is that op inlined at a
    call: it becomes its own node, one per call chain, carrying the inlined op's names.
    """
    if member in index.owner:
        return index.owner[member]
    inlined_from = next(
        (index.by_frames[member.frames[:n]] for n in range(len(member.frames) - 1, 0, -1) if member.frames[:n] in index.by_frames),
        None,
    )
    node = add_source_op(graph, index, OpLocation((member,)), in_input=False)
    if inlined_from is not None:
        origin = graph.nodes[inlined_from]
        graph.nodes[node].update(op_names=origin["op_names"], op_kinds=origin["op_kinds"], compute=origin["compute"], inlined_from=inlined_from)
    return node


def resolve_source_ops(
    graph: nx.DiGraph, index: SourceOpIndex, location: OpLocation, inside: dict[tuple[str, ...], float] | None = None,
) -> dict[str, float]:
    """The source ops a dispatch-side location stands for, each with its share of it.

    A location of the input resolves to its op; a fused location the compiler made resolves member by
    member, each member's share in proportion to its own work before fusion (IREE keeps no record of
    how much each contributed to the merged op, but a ReLU merged into a convolution did a ReLU's
    work) times the part of that work done in this dispatch (:meth:`SourceOpIndex.presence`, from
    ``inside``, the region's :func:`standalone_work`): a MaxPool whose location the compiler merged
    into the next convolution's, but whose pooling runs in a dispatch of its own, gets nothing here.
    Members with no known work share equally (those whose work is here) when none of them has any.
    """
    if not location.known:
        return {}
    if location in index.ids:
        return {index.ids[location]: 1.0}
    presence = [index.presence(member, inside) for member in location.members]
    costs = [index.own_cost(member) * part for member, part in zip(location.members, presence)]
    if sum(costs) <= 0:
        costs = presence if sum(presence) > 0 else [1.0] * len(presence)
    total = sum(costs)
    shares: dict[str, float] = defaultdict(float)
    for member, cost in zip(location.members, costs):
        shares[resolve_member(graph, index, member)] += cost / total
    return dict(shares)


def match_regions(call_sites: list[CallSite], regions: list[DispatchRegion]) -> list[DispatchRegion | None]:
    """Pair each call site with its dispatch region: same export and location, first unused in order; then
    the sites left over (an export renamed after the flow phase) with unused regions at their location.

    Exact pairs go first because later phases add dispatches dispatch creation never formed (data tiling's
    pack and unpack dispatches carry the matmul's location): matched by location in program order, such a
    dispatch would take the matmul's region and leave the matmul with none."""
    queues: dict[tuple[str | None, OpLocation], deque[int]] = defaultdict(deque)
    by_location: dict[OpLocation, deque[int]] = defaultdict(deque)
    for position, region in enumerate(regions):
        queues[(region.export, region.location)].append(position)
        by_location[region.location].append(position)
    used: set[int] = set()

    def take(queue: deque[int]) -> int | None:
        while queue and queue[0] in used:
            queue.popleft()
        if not queue:
            return None
        used.add(queue[0])
        return queue.popleft()

    found = [take(queues[(site.export, site.location)]) for site in call_sites]
    found = [take(by_location[site.location]) if position is None else position for site, position in zip(call_sites, found)]
    return [regions[position] if position is not None else None for position in found]


def cost_of(region: DispatchRegion) -> dict:
    """A call site's cost model from its dispatch region."""
    return {"flops": region.flops, "bytes": region.bytes, "cost_exact": region.cost_exact}


def export_cost(export: dict) -> dict:
    """The cost model of a call site dispatch creation never formed (data tiling's pack and unpack, added
    later): no FLOPs, and the buffer views its executable binds as its traffic; a lower bound of 0 when a
    view is dynamic or the executable was not read."""
    moved = float(export.get("binding_bytes", -1.0))
    return {"flops": 0.0, "bytes": max(moved, 0.0), "cost_exact": moved >= 0}


def add_call_site(graph: nx.DiGraph, index: SourceOpIndex, site: CallSite, region: DispatchRegion | None) -> None:
    node = call_site_node(site.index)
    workgroups = "x".join(map(str, site.workgroups)) if site.workgroups else "dynamic"
    graph.add_node(
        node, kind="call_site", label=f"#{site.index} {site.export}", index=site.index, export=site.export,
        workgroups=workgroups, workgroup_count=(site.workgroups[0] * site.workgroups[1] * site.workgroups[2]) if site.workgroups else 0,
        loc=site.location.display(), function=site.function, phase=site.phase,
        root_op=region.root_op if region else graph.nodes.get(f"export:{site.export}", {}).get("root_op", "unknown"),
        region_matched=region is not None,
        **(cost_of(region) if region else export_cost(graph.nodes.get(f"export:{site.export}", {}))),
    )
    if f"export:{site.export}" not in graph:
        graph.add_node(f"export:{site.export}", kind="export", label=site.export, executable="", root_op="unknown")
    graph.add_edge(node, f"export:{site.export}", kind="dispatches")
    costs = dict(region.costs) if region else {}
    traffic = dict(region.traffic) if region else {}
    inside = standalone_work(region) if region else None
    roots = resolve_source_ops(graph, index, site.location)
    if roots and not any(resolve_source_ops(graph, index, location).keys() & roots.keys() for location in costs):
        # The dispatch is named after its root op (IREE's convention), so the root gets a share even
        # where no structured op of the region kept its location.
        costs[site.location] = max(costs.values(), default=1.0)
        traffic[site.location] = [max((part[k] for part in traffic.values()), default=0.0) for k in (0, 1)]
    total = sum(costs.values()) or 1.0
    weights: dict[str, float] = defaultdict(float)
    moved: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # source op -> [FLOPs, bytes]
    for location, cost in costs.items():
        for source, share in resolve_source_ops(graph, index, location, inside).items():
            weights[source] += cost / total * share
            flops, size = traffic.get(location, (0.0, 0.0))
            moved[source][0] += flops * share
            moved[source][1] += size * share
    for source, weight in weights.items():
        if weight > 0:  # a merged location's member whose work runs elsewhere does not feed this dispatch
            graph.add_edge(source, node, kind="feeds", role="root" if source in roots else "producer", weight=weight,
                           flops=moved[source][0], bytes=moved[source][1])
    for location in region.init if region else ():
        for source in resolve_source_ops(graph, index, location):
            if source not in weights:
                graph.add_edge(source, node, kind="feeds", role="init", weight=0.0)


def share_absorbed(graph: nx.DiGraph, program: InputProgram, index: SourceOpIndex, absorbed: set[str]) -> None:
    """Give input ops that a dispatched op absorbed their part of its time, by their own FLOPs.

    IREE raises some groups of input ops into one op and keeps only one location: a softmax's max,
    subtract, exp, sum and divide become one ``linalg.softmax`` at the divide's location, so the whole
    softmax would read as the divide's time. Each op the audit found *absorbed* (its value flows, through
    ops that reach no dispatch, into one that does) is credited, in every call site its consumer feeds,
    a part of the consumer's weight in proportion to its FLOPs before fusion (data movement, such as a
    broadcast, counts none); an op feeding several consumers splits its FLOPs between them. Edges get
    the role ``absorbed``.
    """
    node_of = {position: index.ids[op.location] for position, op in enumerate(program.ops) if op.location.known}
    location_of = {node: location for location, node in index.ids.items()}
    dispatched = {source for source, _, data in graph.edges(data=True) if data.get("kind") == "feeds" and data.get("weight", 0) > 0}
    parts: dict[str, dict[str, float]] = defaultdict(dict)  # consumer node -> absorbed node -> FLOPs
    for position, op in enumerate(program.ops):
        node = node_of.get(position)
        if node not in absorbed or node in dispatched:
            continue
        flops = sum(index.own_flops(member) for member in op.location.members)
        consumers = dispatched_consumers(program, position, node_of, dispatched)
        for consumer in consumers:
            parts[consumer][node] = parts[consumer].get(node, 0.0) + flops / len(consumers)
    for consumer, shares in parts.items():
        own = sum(index.own_flops(member) for member in location_of[consumer].members)
        total = own + sum(shares.values())
        if total <= 0 or not sum(shares.values()):
            continue
        for _, site, data in list(graph.out_edges(consumer, data=True)):
            if data.get("kind") != "feeds" or data.get("weight", 0) <= 0:
                continue
            weight, work, moved = data["weight"], data.get("flops", 0.0), data.get("bytes", 0.0)
            data.update(weight=weight * own / total, flops=work * own / total, bytes=moved * own / total)
            for node, flops in shares.items():
                if flops > 0:
                    part = flops / total
                    graph.add_edge(node, site, kind="feeds", role="absorbed", weight=weight * part, flops=work * part, bytes=moved * part)


def dispatched_consumers(program: InputProgram, start: int, node_of: dict[int, str], dispatched: set[str]) -> list[str]:
    """The dispatched source ops the value of op ``start`` reaches first, through ops that reach no dispatch."""
    reached = first_reached(program, start, lambda position: node_of.get(position) in dispatched)
    return list(dict.fromkeys(node_of[position] for position in reached))


def first_reached(program: InputProgram, start: int, stops: Callable[[int], bool]) -> Iterator[int]:
    """The ops the value of op ``start`` flows into first for which ``stops`` holds, through ops for which
    it does not (an iterative walk over users, each op visited once)."""
    pending, visited = list(program.ops[start].users), {start}
    while pending:
        position = pending.pop()
        if position in visited:
            continue
        visited.add(position)
        if stops(position):
            yield position
        else:
            pending.extend(program.ops[position].users)


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


def root_ops_of_export(graph: nx.DiGraph, export: str) -> list[str]:
    """The distinct source ops at the root of the call sites that dispatch ``export``, in call-site order."""
    sites = sorted(data["index"] for _, data in graph.nodes(data=True) if data.get("kind") == "call_site" and data["export"] == export)
    return list(dict.fromkeys(op for index in sites for op, role in ops_of_call_site(graph, index) if role == "root"))


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


REASONS = {
    "initializer": "hoisted to an initializer (runs once at load)",
    "in_dispatch": "inside a dispatch without compute of its own (a slice, copy or reshape there)",
    "reshape": "reshape or view (no data movement)",
    "host": "in host code (a copy, reshape or metadata change)",
    "constant": "folded into a constant at compile time",
    "absorbed": "absorbed into a consumer's dispatch (its location was not kept)",
    "folded": "folded away by the compiler (its result is unused or computed otherwise)",
}
RESHAPE_WORDS = ("reshape", "view", "collapse_shape", "expand_shape", "squeeze", "flatten", "tensor.cast", "bitcast")


def audit(
    graph: nx.DiGraph, program: InputProgram, index: SourceOpIndex,
    host_locations: set[tuple[str, ...]], in_dispatches: set[tuple[str, ...]],
) -> dict:
    """What the mapping could not explain, or explains with a caveat.

    - ``ops_without_location``: input compute ops with an unknown location;
    - ``ops_without_dispatch``: input compute ops feeding no run-phase call site, each with the first
      reason that holds (see :data:`REASONS`): its location is on an initializer's dispatch; it is in
      a dispatch region but not computed there; it is a reshape or view; it is in host code; all its
      operands are constants; its value flows into an op that is dispatched; else folded away;
    - ``reasons``: how many ops each reason covers;
    - ``ops_split``: source ops feeding several run-phase call sites as root or producer;
    - ``shared_executables``: exports dispatched by several call sites (deduplicated executables).
    """
    phase_of = {node: data["phase"] for node, data in graph.nodes(data=True) if data.get("kind") == "call_site"}
    without_dispatch = ops_reaching_no_dispatch(graph, program, index, phase_of, host_locations, in_dispatches)
    return {
        "ops_without_location": [op.op_name for op in program.ops if op.compute and not op.location.known],
        "ops_without_dispatch": without_dispatch,
        "reasons": dict(Counter(finding["reason"] for finding in without_dispatch).most_common()),
        "ops_split": split_source_ops(graph, phase_of),
        "shared_executables": shared_exports(graph),
    }


def phases_fed(graph: nx.DiGraph, phase_of: dict[str, str]) -> dict[str, set[str]]:
    """The phases of the call sites each source op feeds, an inlined op's also counted for the op it was inlined from."""
    phases_of: dict[str, set[str]] = defaultdict(set)
    for source, target, data in graph.edges(data=True):
        if data.get("kind") == "feeds":
            phases_of[source].add(phase_of[target])
            if "inlined_from" in graph.nodes[source]:
                phases_of[graph.nodes[source]["inlined_from"]].add(phase_of[target])
    return phases_of


def ops_reaching_no_dispatch(
    graph: nx.DiGraph, program: InputProgram, index: SourceOpIndex, phase_of: dict[str, str],
    host_locations: set[tuple[str, ...]], in_dispatches: set[tuple[str, ...]],
) -> list[dict]:
    """The audit's ``ops_without_dispatch``: one finding per source op, with the first reason that holds."""
    phases_of = phases_fed(graph, phase_of)
    dispatched = [("run" in phases_of.get(index.ids[op.location], ())) if op.location.known else False for op in program.ops]
    constant = constant_ops(program)
    without_dispatch = []
    for position, op, node in first_undispatched(program, index, dispatched):
        frames = {member.frames for member in op.location.members}
        if phases_of.get(node):
            reason = "initializer"
        elif frames & in_dispatches:
            reason = "in_dispatch"
        elif any(word in op.op_name.lower() for word in RESHAPE_WORDS):
            reason = "reshape"
        elif frames & host_locations:
            reason = "host"
        elif constant[position]:
            reason = "constant"
        elif feeds_dispatched(program, position, dispatched):
            reason = "absorbed"
        else:
            reason = "folded"
        without_dispatch.append({"op": node, "op_names": graph.nodes[node]["op_names"], "loc": graph.nodes[node]["label"], "reason": REASONS[reason]})
    return without_dispatch


def first_undispatched(program: InputProgram, index: SourceOpIndex, dispatched: list[bool]) -> Iterator[tuple[int, InputOp, str]]:
    """(position, op, source-op node) of the first undispatched input compute op of each source op."""
    seen: set[str] = set()
    for position, op in enumerate(program.ops):
        if not op.compute or not op.location.known or dispatched[position]:
            continue
        node = index.ids[op.location]
        if node not in seen:
            seen.add(node)
            yield position, op, node


def split_source_ops(graph: nx.DiGraph, phase_of: dict[str, str]) -> list[dict]:
    """The audit's ``ops_split``: source ops feeding several run-phase call sites as root or producer."""
    split = []
    for node in nodes_of_kind(graph, "source_op"):
        sites = [i for i, role in call_sites_of_op(graph, node) if role != "init" and phase_of[call_site_node(i)] == "run"]
        if len(sites) > 1:
            roles = sorted({role for i, role in call_sites_of_op(graph, node) if i in sites})
            split.append({"op": node, "loc": graph.nodes[node]["label"], "call_sites": sites, "roles": roles})
    return split


def shared_exports(graph: nx.DiGraph) -> list[dict]:
    """The audit's ``shared_executables``: exports dispatched by several call sites."""
    shared = []
    for node in nodes_of_kind(graph, "export"):
        sites = sorted(graph.nodes[s]["index"] for s, _ in graph.in_edges(node))
        if len(sites) > 1:
            shared.append({"export": graph.nodes[node]["label"], "call_sites": sites})
    return shared


def constant_ops(program: InputProgram) -> list[bool]:
    """Whether each input op computes from constants only (so the compiler can fold it)."""
    constant = [False] * len(program.ops)
    for position, op in enumerate(program.ops):  # producers come first in program order
        is_constant = op.op_name.endswith(("constant", "literal")) or op.op_name == "onnx.Constant"
        constant[position] = is_constant or (bool(op.producers) and all(p >= 0 and constant[p] for p in op.producers))
    return constant


def feeds_dispatched(program: InputProgram, start: int, dispatched: list[bool]) -> bool:
    """Whether the value of op ``start`` flows, through ops that reach no dispatch, into one that does."""
    return any(True for _ in first_reached(program, start, dispatched.__getitem__))


def audit_of(graph: nx.DiGraph) -> dict:
    """The audit stored in the graph."""
    return json.loads(graph.graph["audit"])


def run_call_sites(graph: nx.DiGraph) -> list[tuple[int, str]]:
    """``(index, export)`` of the call sites each call of the function runs (not the initializers'), in
    call-site order: what a run's events are matched against."""
    return sorted((data["index"], data["export"]) for _, data in graph.nodes(data=True)
                  if data.get("kind") == "call_site" and data.get("phase", "run") == "run")


# Export --------------------------------------------------------------------------------------------


def write_graphml(graph: nx.DiGraph, path: Path) -> None:
    """Write the graph as GraphML (for graph tools: yEd, Gephi), atomically."""
    write_atomic(path, lambda p: nx.write_graphml(xml_safe_graph(graph), p))


def write_node_link(graph: nx.DiGraph, path: Path) -> None:
    """Write the graph as node-link JSON (what tracelink reads back), atomically; one line, which
    Python's C encoder writes (an indented one took the pure-Python encoder, twice the time)."""
    write_text_atomic(path, json.dumps(nx.node_link_data(graph, edges="links")))


def read_graph(node_link: Path) -> nx.DiGraph:
    """Read the node-link JSON back."""
    return nx.node_link_graph(json.loads(node_link.read_text()), edges="links")
