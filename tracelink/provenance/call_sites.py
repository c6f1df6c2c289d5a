"""Dispatch call sites of an entry function, in execution order, from the ``hal`` phase.

Every ``hal.command_buffer.dispatch`` names its export (through ``hal.executable.lookup.function``)
and its workgroup count, and carries the location of the op that formed the dispatch. IREE records
reusable command buffers once, in a ``memoize_apply`` function called by an initializer, and the
entry function only loads the resulting global; so the walk follows calls and, for loads of a
command-buffer global, the initializers that store it. Dispatches reached otherwise only from
initializers run once at load time: they are kept as call sites with ``phase="initializer"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from iree.compiler import ir

from tracelink.errors import TracelinkError
from tracelink.ir_utils import attr, int_constant, symbol_name, symbol_ref_leaf, top_level, walk
from tracelink.provenance.locations import Normaliser, OpLocation
from tracelink.provenance.regions import code_blocks


@dataclass
class CallSite:
    """One dispatch of the host program."""

    index: int
    export: str
    location: OpLocation
    workgroups: tuple[int, int, int] | None  # None when computed at run time
    function: str
    phase: str  # "run" (each call of the entry function) or "initializer" (once, at load)


@dataclass
class HostProgram:
    """The hal-phase module indexed for the walk."""

    blocks: dict[str, ir.Operation]
    initializer_names: list[str]
    storers: dict[str, list[str]]  # global name -> code blocks that store it
    command_buffer_globals: set[str]


def index_host_program(module: ir.Module) -> HostProgram:
    blocks = dict(code_blocks(module))
    storers: dict[str, list[str]] = {}
    command_buffer_globals: set[str] = set()
    for op in top_level(module):
        if op.name == "util.global" and str(attr(op, "type").value) == "!hal.command_buffer":
            command_buffer_globals.add(symbol_name(op) or "")
    for name, block in blocks.items():
        for op in walk(block):
            if op.name == "util.global.store":
                storers.setdefault(symbol_ref_leaf(attr(op, "global")), []).append(name)
    initializer_names = [name for name, block in blocks.items() if block.name == "util.initializer"]
    return HostProgram(blocks, initializer_names, storers, command_buffer_globals)


def dispatch_export(op: ir.Operation) -> str:
    """The export a dispatch calls, through the ``hal.executable.lookup.function`` feeding it."""
    for value in op.operands:
        owner = value.owner
        if getattr(owner, "name", None) == "hal.executable.lookup.function":
            return symbol_ref_leaf(attr(owner, "entry_point"))
    raise TracelinkError(f"{op.location}: dispatch without an executable lookup")


def dispatch_workgroups(op: ir.Operation) -> tuple[int, int, int] | None:
    """The static workgroup count (operands 3–5 after command buffer, executable and function)."""
    counts = [int_constant(value) for value in list(op.operands)[3:6]]
    return None if any(c is None for c in counts) else (counts[0], counts[1], counts[2])


def ordered_dispatches(host: HostProgram, entry: str) -> list[tuple[ir.Operation, str]]:
    """Dispatch ops reached from ``entry`` in execution order, with the code block holding each."""
    ordered: list[tuple[ir.Operation, str]] = []
    active: set[str] = set()

    def visit(name: str) -> None:
        if name in active or name not in host.blocks:
            return
        active.add(name)
        for op in walk(host.blocks[name]):
            if op.name == "hal.command_buffer.dispatch":
                ordered.append((op, name))
            elif op.name == "util.call":
                visit(symbol_ref_leaf(attr(op, "callee")))
            elif op.name == "util.global.load":
                loaded = symbol_ref_leaf(attr(op, "global"))
                if loaded in host.command_buffer_globals:
                    for storer in host.storers.get(loaded, []):
                        visit(storer)
        active.discard(name)

    visit(entry)
    return ordered


def read_call_sites(hal_module: ir.Module, entry: str, normalise: Normaliser) -> list[CallSite]:
    """Call sites of ``entry`` (through the ``$async`` body the ABI wraps it in), then initializer dispatches."""
    host = index_host_program(hal_module)
    if entry not in host.blocks:
        raise TracelinkError(f"no function '{entry}' in the compiled program")
    run = ordered_dispatches(host, entry)
    seen = {op for op, _ in run}
    once: list[tuple[ir.Operation, str]] = []
    for name in host.initializer_names:
        once.extend((op, block) for op, block in ordered_dispatches(host, name) if op not in seen)
        seen.update(op for op, _ in once)
    sites = []
    for phase, found in (("run", run), ("initializer", once)):
        for op, block in found:
            location = normalise(op.location)
            sites.append(CallSite(len(sites), dispatch_export(op), location, dispatch_workgroups(op), block, phase))
    return sites


def host_location_frames(hal_module: ir.Module, normalise: Normaliser) -> set[tuple[str, ...]]:
    """Frames of every location member of every op in the host program."""
    return {frames for op in walk(hal_module.operation) for frames in normalise.frames(op.location)}
