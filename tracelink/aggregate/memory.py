"""Memory of one call by source line and component: the events' peak, explained by the compiler's packing.

The peak is IREE's own figure: the high water of the call's queue allocations in the memory events
(:mod:`tracelink.collect.memory`). What fills it comes from the stream plan
(:mod:`tracelink.provenance.memory_plan`): every range a dispatch writes is a *buffer*, made by that
dispatch's root source ops and live from that dispatch to the last one reading it before it is
overwritten. Buffers in a result allocation are held from the call's start to its end (IREE allocates
results before the first dispatch and hands them to the caller). The *live set* at a dispatch is the
union of the bytes its live buffers cover; the peak dispatch is where it is largest, and what is live
there, by the line whose op wrote it, is ``bytes_at_peak``. The part of the peak outside the live set is
packing slack: slab bytes no live buffer holds at that dispatch (alignment, and room the packer keeps
for a buffer that lives at another time).

A range a copy fills from an argument (a KV cache the call updates: IREE copies it into the slab,
updates it there and copies it back) holds that argument: it is the argument's, not a line's, and a
write into it (the update) stays the argument's bytes, so a cache is counted once. A result such a copy
fills is the argument returned updated (a functional cache): it counts in the outputs, named. The events'
allocations are matched to the plan's allocations (:func:`match_allocations`) by the sizes the run
fixed, so the split works on dynamic shapes as on static ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import pandas as pd

from tracelink.aggregate import held_lines
from tracelink.aggregate.components import component_of
from tracelink.collect.memory import Allocation, MemoryCapture
from tracelink.provenance.graph import ops_of_call_site
from tracelink.provenance.memory_plan import Alloca, PlannedCommand, StreamPlan

LINE_COLUMNS = ["file", "line", "bytes_at_peak", "bytes_allocated", "transient_bytes_at_peak", "output_bytes_at_peak",
                "buffers", "first_dispatch", "last_dispatch", "ops"]
COMPONENT_COLUMNS = ["component", "bytes_at_peak", "bytes_allocated", "buffers"]
TOP_HOLDERS = 5


@dataclass
class Buffer:
    """Bytes one command writes into one allocation, and the dispatches over which they are live."""

    alloca: int
    lifetime: str  # "transient" or "external" (a result)
    start: int  # offset in the allocation
    length: int
    writer: int | None  # the dispatch credited with it (a fill's: the next dispatch writing into it)
    first: int
    last: int
    copy_of: int | None = None  # the argument a copy filled it from: its bytes are that argument's


def plan_buffers(plan: StreamPlan) -> list[Buffer]:
    """Every range a command writes into one of the call's allocations, with its live span over the dispatches.

    Commands are replayed in order over who holds each byte of each allocation: a write takes its bytes
    from the buffers that held them, a read keeps alive the buffers holding the bytes it reads. So a
    buffer lives from its command to the last read of bytes it still holds (a fill's zero border stays
    its own after a dispatch writes the interior; a buffer whose bytes are all taken is read no more).
    """
    buffers: list[Buffer] = []
    count = len(plan.dispatches)
    ordinals = {id(command): k for k, command in enumerate(plan.dispatches)}
    holders: dict[str, list[tuple[int, int, Buffer]]] = {}  # origin -> (start, end, buffer) segments
    for c, command in enumerate(plan.commands):
        at = min(command.position, count - 1)
        for access in command.accesses:
            if access.reads:
                for begin, end, buffer in holders.get(access.origin, []):
                    if overlaps(access.offset, access.length, begin, end - begin) and buffer.lifetime == "transient":
                        buffer.last = max(buffer.last, at)
        for access in command.accesses:
            if not access.writes or not access.origin.startswith("alloca:"):
                continue
            alloca = plan.allocas[int(access.origin.split(":")[1])]
            start = access.offset or 0
            length = access.length if access.length is not None else (alloca.size or 0) - start
            if length <= 0:
                continue
            writer = (ordinals[id(command)] if command.kind == "dispatch" else copied_writer(command, holders)
                      if command.kind == "copy" and copied_writer(command, holders) is not None
                      else next_writer(plan, c, access.origin, start, length, ordinals))
            buffer = (Buffer(alloca.index, "external", start, length, writer, 0, count - 1) if alloca.lifetime == "external"
                      else Buffer(alloca.index, "transient", start, length, writer, at, at))
            buffer.copy_of = copied_argument(command)
            buffers.append(buffer)
            holders[access.origin] = take(holders.get(access.origin, []), start, start + length) + [(start, start + length, buffer)]
    return buffers


def copied_writer(command: PlannedCommand, holders: dict[str, list[tuple[int, int, Buffer]]]) -> int | None:
    """The dispatch that wrote the bytes a copy reads (its data is theirs), if a buffer of the call holds them."""
    source = command.accesses[0]
    return next((buffer.writer for begin, end, buffer in holders.get(source.origin, [])
                 if buffer.writer is not None and overlaps(source.offset, source.length, begin, end - begin)), None)


def copied_argument(command: PlannedCommand) -> int | None:
    """The argument a copy reads from (the ranges it writes hold that argument), else None."""
    if command.kind != "copy":
        return None
    source = command.accesses[0].origin
    return int(source.split(":")[1]) if source.startswith("argument:") and int(source.split(":")[1]) >= 0 else None


def take(segments: list[tuple[int, int, Buffer]], start: int, end: int) -> list[tuple[int, int, Buffer]]:
    """The segments with [start, end) cut out of them (a new write holds those bytes now)."""
    kept = []
    for begin, stop, buffer in segments:
        if stop <= start or end <= begin:
            kept.append((begin, stop, buffer))
            continue
        if begin < start:
            kept.append((begin, start, buffer))
        if end < stop:
            kept.append((end, stop, buffer))
    return kept


def next_writer(plan: StreamPlan, after: int, origin: str, start: int, length: int, ordinals: dict[int, int]) -> int | None:
    """The first dispatch after command ``after`` writing into [start, start + length) (a padded tensor's interior)."""
    for command in plan.commands[after + 1 :]:
        if command.kind == "dispatch" and any(a.writes and a.origin == origin and overlaps(a.offset, a.length, start, length)
                                              for a in command.accesses):
            return ordinals[id(command)]
    return None


def overlaps(offset: int | None, length: int | None, start: int, size: int) -> bool:
    """Whether an access (unknown offset or length: the whole resource) touches [start, start + size)."""
    if offset is None or length is None:
        return True
    return offset < start + size and start < offset + length


def live_shares(buffers: list[Buffer], at: int) -> list[tuple[Buffer, int]]:
    """The buffers live at dispatch ``at`` and the bytes each holds there; bytes two of them cover count once,
    for the later writer (the earlier one's data there was overwritten), but an argument's copy keeps its
    bytes (a write into it updates the argument in place)."""
    live = sorted((b for b in buffers if b.first <= at <= b.last),
                  key=lambda b: (b.copy_of is None, -(b.writer if b.writer is not None else -1)))
    covered: dict[int, list[tuple[int, int]]] = {}
    shares = []
    for buffer in live:
        ranges = covered.setdefault(buffer.alloca, [])
        own = buffer.length - sum(max(0, min(end, buffer.start + buffer.length) - max(begin, buffer.start)) for begin, end in ranges)
        ranges.append((buffer.start, buffer.start + buffer.length))
        shares.append((buffer, max(own, 0)))
    return shares


def match_allocations(allocations: list[Allocation], plan: StreamPlan) -> dict[int, Alloca]:
    """Each queue allocation (by ``id``) matched to the call's ``stream.resource.alloca`` it is: in the order
    both are made, of the size the run fixed, a result (still open at the end) to an external one; an
    alloca whose size the run's shapes did not fix takes the next allocation of its kind."""
    unmatched = list(plan.allocas)
    found: dict[int, Alloca] = {}
    for allocation in allocations:
        kind = "external" if allocation.closed_ns is None else "transient"
        sized = [alloca for alloca in unmatched if alloca.size == allocation.length]
        alloca = (next((a for a in sized if a.lifetime == kind), None) or next(iter(sized), None)
                  or next((a for a in unmatched if a.size is None and a.lifetime == kind), None))
        if alloca is not None:
            unmatched.remove(alloca)
            found[id(allocation)] = alloca
    return found


def classify(capture: MemoryCapture, plan: StreamPlan, at_peak: list[Allocation], copies: dict[int, dict[int, int]],
             returned: dict[int, int]) -> dict:
    """The allocations open at the events' high water by what they hold (``split``): a result is ``outputs``,
    a transient slab ``transients`` but for the bytes it holds of an argument's copy at the peak (``copies``:
    alloca -> argument -> bytes), which are ``inputs``; an allocation matching no alloca is an argument's
    copy when it has that argument's size, else ``other``. ``split_inputs`` names the arguments,
    ``split_outputs`` the function's results in ``outputs`` (with the argument each returns updated, from
    ``returned``: result -> argument), ``split_other`` says why each other allocation matched nothing."""
    matched = match_allocations(capture.allocations, plan)
    arguments = {argument: size for argument, size in plan.arguments.items() if size}
    split = dict.fromkeys(["inputs", "outputs", "transients", "constants", "parameters", "other"], 0)
    held: dict[int, int] = {}
    other = []
    results = []
    for allocation in at_peak:
        alloca = matched.get(id(allocation))
        if alloca is not None and alloca.lifetime == "external":
            split["outputs"] += allocation.length
            results += [result for result in plan.results if result.origin == f"alloca:{alloca.index}"]
        elif alloca is not None:
            for argument, size in copies.get(alloca.index, {}).items():
                held[argument] = held.get(argument, 0) + size
            inside = min(sum(copies.get(alloca.index, {}).values()), allocation.length)
            split["inputs"] += inside
            split["transients"] += allocation.length - inside
        elif (argument := next((a for a, size in arguments.items() if size == allocation.length), None)) is not None:
            arguments.pop(argument)
            held[argument] = held.get(argument, 0) + allocation.length
            split["inputs"] += allocation.length
        else:
            split["other"] += allocation.length
            other.append({"bytes": allocation.length, "why": unmatched_reason(plan, allocation)})
    named = [{"argument": argument, "type": plan.argument_types.get(argument, ""), "bytes": size} for argument, size in sorted(held.items())]
    outputs = [{"result": result.position, "type": result.type, "bytes": result.length, "argument": returned.get(result.position)}
               for result in sorted(results, key=lambda result: result.position)]
    return {"split": split, "split_inputs": named, "split_outputs": outputs, "split_other": other}


def returned_arguments(buffers: list[Buffer], plan: StreamPlan) -> dict[int, int]:
    """Result position -> the argument it returns updated: a copy from that argument fills the result's
    range (a cache returned rather than updated in place: the call copies it into its result, then
    updates it there), so its bytes are counted once, as that result's."""
    return {result.position: buffer.copy_of for result in plan.results for buffer in buffers
            if buffer.copy_of is not None and result.origin == f"alloca:{buffer.alloca}"
            and overlaps(result.offset, result.length, buffer.start, buffer.length)}


def unmatched_reason(plan: StreamPlan, allocation: Allocation) -> str:
    """Why an allocation open at the peak matched none of the call's allocas and no argument."""
    if any(alloca.size is None for alloca in plan.allocas):
        return f"{allocation.length} bytes: not an allocation of the call's plan whose size is known, and a size the run's shapes do not fix is unknown"
    if not plan.allocas:
        return f"{allocation.length} bytes: the call's plan has no allocations (read from another function?)"
    return f"{allocation.length} bytes: no allocation of the call's plan and no argument has this size (made outside the call's plan)"


def argument_copies(shares: list[tuple[Buffer, int]]) -> dict[int, dict[int, int]]:
    """Bytes of argument copies among live ``shares``: alloca -> argument -> bytes."""
    copies: dict[int, dict[int, int]] = {}
    for buffer, share in shares:
        if buffer.copy_of is not None:
            per_alloca = copies.setdefault(buffer.alloca, {})
            per_alloca[buffer.copy_of] = per_alloca.get(buffer.copy_of, 0) + share
    return copies


def dispatch_sources(graph: nx.DiGraph, call_sites: list[tuple[int, str]], plan: StreamPlan,
                     line_shares: pd.DataFrame) -> list[list[dict]] | None:
    """For each dispatch of the plan, its root source ops (label, name, file, line) from the provenance graph,
    each on its user line (the graph's ``line_shares``: library frames folded into the model line calling
    them, as the summary ranks time); None when the plan's dispatches are not the call sites' (other
    exports, or another order), which would credit bytes to the wrong lines."""
    if [export for _, export in call_sites] != [dispatch.export for dispatch in plan.dispatches]:
        return None
    lines = held_lines(line_shares)
    return [[{**graph.nodes[node], **dict(zip(("file", "line"), lines.get(node, ())))}
             for node, role in ops_of_call_site(graph, index) if role == "root"] for index, _ in call_sites]


def memory_tables(capture: MemoryCapture, plan: StreamPlan, graph: nx.DiGraph, call_sites: list[tuple[int, str]],
                  line_shares: pd.DataFrame) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(profile.json's ``memory``, memory_lines, memory_components) of one call.

    ``call_sites`` are the run-phase call sites (index, export) in execution order, one per dispatch of the
    plan; ``line_shares`` the graph's :func:`~tracelink.aggregate.op_line_shares`.
    """
    peak_bytes, at_peak = capture.high_water()
    buffers = plan_buffers(plan)
    count = len(plan.dispatches)
    sources = dispatch_sources(graph, call_sites, plan, line_shares)
    makers = {id(buffer): buffer_sources(buffer, sources, plan) for buffer in buffers}
    live = [live_shares(buffers, i) for i in range(count)]
    timeline = [sum(share for _, share in shares) for shares in live]
    peak_at = max(range(count), key=lambda i: timeline[i]) if count else 0
    at_peak_shares = {id(b): share for b, share in live[peak_at]} if count else {}
    rows = []
    for buffer in (buffer for buffer in buffers if buffer.copy_of is None):  # an argument's copy is no line's
        ops = makers[id(buffer)]
        for op in ops:  # a dispatch with several root ops: each holds an equal part
            share = 1 / len(ops)
            held = at_peak_shares.get(id(buffer), 0) * share
            rows.append({
                "file": op.get("file") or "", "line": op.get("line"), "label": op.get("label", ""),
                "component": component_of(op.get("name")),
                "bytes_at_peak": held, "bytes_allocated": buffer.length * share,
                "transient_bytes_at_peak": held if buffer.lifetime == "transient" else 0.0,
                "output_bytes_at_peak": held if buffer.lifetime == "external" else 0.0,
                "buffers": 1, "first_dispatch": buffer.first, "last_dispatch": buffer.last,
            })
    lines, components = line_table(rows), component_table(rows)
    live_at_peak = int(lines["bytes_at_peak"].sum()) if not lines.empty else 0
    classified = classify(capture, plan, at_peak, argument_copies(live[peak_at]) if count else {}, returned_arguments(buffers, plan))
    split = classified["split"]
    summary = {
        "peak_bytes": peak_bytes,
        **classified,
        "resident_bytes": resident(plan),
        "live_at_peak_bytes": live_at_peak,
        "slack_bytes": max(split["transients"] + split["outputs"] - live_at_peak, 0),
        "peak_dispatch": peak_at,
        "peak_call_site": call_sites[peak_at][0] if sources is not None and count else None,
        "attributed": sources is not None,
        "timeline_bytes": [int(value) for value in timeline],
        "timeline_holders": [holders(shares, makers) for shares in live],
        "top": lines.head(TOP_HOLDERS)[["file", "line", "bytes_at_peak", "ops"]].to_dict("records"),
        "capture": f"artifacts/{capture.bundle}",
    }
    return summary, lines, components


def buffer_sources(buffer: Buffer, sources: list[list[dict]] | None, plan: StreamPlan) -> list[dict]:
    """The source ops credited with a buffer: the root ops of the dispatch that wrote it, or a placeholder;
    for an argument's copy the argument (no line)."""
    if buffer.copy_of is not None:
        name = f"argument {buffer.copy_of} ({plan.argument_types.get(buffer.copy_of, '?')})"
        return [{"label": name, "name": "", "file": name, "line": None}]
    credited = sources[buffer.writer] if sources is not None and buffer.writer is not None else []
    return credited or [{"label": "(no source op)", "name": "", "file": "", "line": None}]


def holders(shares: list[tuple[Buffer, int]], makers: dict[int, list[dict]], shown: int = 3) -> list[list]:
    """The lines holding most of one dispatch's live bytes: ``[file, line, bytes]``, largest first."""
    by_line: dict[tuple[str, int | None], float] = {}
    for buffer, share in shares:
        ops = makers[id(buffer)]
        for op in ops:
            key = (op.get("file") or "", op.get("line"))
            by_line[key] = by_line.get(key, 0.0) + share / len(ops)
    ranked = sorted(by_line.items(), key=lambda item: -item[1])[:shown]
    return [[file, line, int(round(value))] for (file, line), value in ranked if value > 0]


def resident(plan: StreamPlan) -> dict[str, int]:
    """Bytes the program holds outside the call's queue allocations: its inputs (imported as they are),
    parameters and constants (loaded once, at start-up); IREE's memory events record none of them."""
    totals = {"inputs": sum(size or 0 for size in plan.arguments.values()), "constants": 0, "parameters": 0}
    for kind, size in plan.resident.values():
        totals[f"{kind}s"] += size or 0
    return totals


def line_table(rows: list[dict]) -> pd.DataFrame:
    """memory_lines: one row per source line, what it holds at the peak first."""
    if not rows:
        return pd.DataFrame(columns=LINE_COLUMNS)
    frame = pd.DataFrame(rows)
    frame["line"] = pd.array(frame["line"], dtype="Int64")
    grouped = frame.groupby(["file", "line"], dropna=False, sort=False).agg(
        bytes_at_peak=("bytes_at_peak", "sum"), bytes_allocated=("bytes_allocated", "sum"),
        transient_bytes_at_peak=("transient_bytes_at_peak", "sum"), output_bytes_at_peak=("output_bytes_at_peak", "sum"),
        buffers=("buffers", "sum"), first_dispatch=("first_dispatch", "min"), last_dispatch=("last_dispatch", "max"),
        ops=("label", lambda labels: ";".join(dict.fromkeys(labels))),
    ).reset_index()
    for column in ("bytes_at_peak", "bytes_allocated", "transient_bytes_at_peak", "output_bytes_at_peak"):
        grouped[column] = grouped[column].round().astype("int64")
    return grouped.sort_values(["bytes_at_peak", "bytes_allocated"], ascending=False).reset_index(drop=True)[LINE_COLUMNS]


def component_table(rows: list[dict]) -> pd.DataFrame:
    """memory_components: the same by component (name scope or module path)."""
    if not rows:
        return pd.DataFrame(columns=COMPONENT_COLUMNS)
    grouped = pd.DataFrame(rows).groupby("component", sort=False).agg(
        bytes_at_peak=("bytes_at_peak", "sum"), bytes_allocated=("bytes_allocated", "sum"), buffers=("buffers", "sum"),
    ).reset_index()
    for column in ("bytes_at_peak", "bytes_allocated"):
        grouped[column] = grouped[column].round().astype("int64")
    return grouped.sort_values(["bytes_at_peak", "bytes_allocated"], ascending=False).reset_index(drop=True)[COMPONENT_COLUMNS]
