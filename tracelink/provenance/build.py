"""Build the provenance of a compiled program from its input and the compiler's dumps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from tracelink.errors import TracelinkError
from tracelink.provenance.call_sites import CallSite, host_location_frames, read_call_sites
from tracelink.provenance.executable_workloads import ConstantsOfRun
from tracelink.provenance.executables import ExportInfo, read_exports, with_target_code
from tracelink.provenance.graph import build_graph
from tracelink.ir_utils import new_context, parse_file
from tracelink.provenance.locations import Normaliser
from tracelink.provenance.program import InputProgram
from tracelink.provenance.regions import member_costs, read_regions


@dataclass
class Provenance:
    graph: nx.DiGraph
    call_sites: list[CallSite]
    exports: dict[str, ExportInfo]


def phase_dump(phases: Path, phase: str) -> Path:
    """The dump of one compilation phase (``<module>.<n>.<phase>.mlir``)."""
    found = sorted(phases.glob(f"*.{phase}.mlir"))
    if not found:
        raise TracelinkError(f"{phases}: no '{phase}' phase dump (was the program compiled by tracelink?)")
    return found[0]


# The middle dumps (dispatch regions, the stream plan, the executables' sources and configured sources)
# are read once the compiler has dumped this phase: from then until the hal phase's dump it serializes the
# executables on about one core, where from global optimization to the executables' configurations it
# often keeps two busy. Read in that stretch rather than as soon as each was whole, they slow the
# compile less on a 2-core machine, and with the exports read there too, the graph is finished when
# the compiler ends rather than after it (docs/reference/numbers.md).
QUIET_PHASE = "executable-targets"


def written(phase: str) -> None:
    """The ``ready`` of dumps already whole (the compiler has ended)."""


def build_provenance(
    program: InputProgram, artifacts: Path, entry: str, argument_shapes: list[tuple[int, ...] | None] | None = None,
    constants_of_run: ConstantsOfRun | None = None, ready: Callable[[str], None] = written,
) -> Provenance:
    """Read the phase and executable dumps under ``artifacts`` and build the graph of ``entry``;
    ``argument_shapes`` (the run's input shapes) fix the dispatches' dynamic sizes, and where one is
    still unknown, the push constants ``constants_of_run`` gives (called only then).

    ``ready(phase)`` returns once that phase's dump is whole, so the graph can be built while the compiler
    still runs: the dumps are read in the compiler's order (the executable dumps are whole with the
    ``hal`` phase, which serializes the executables).
    """
    context = new_context()
    phases = artifacts / "phases"
    normalise = Normaliser(program.enclosing_locations)
    ready("input")
    costs = member_costs(parse_file(phase_dump(phases, "input"), context), normalise, entry, argument_shapes)
    ready(QUIET_PHASE)
    regions = read_regions(phase_dump(phases, "dispatch-creation"), phase_dump(phases, "flow"), normalise, context, entry, argument_shapes,
                           constants_of_run, artifacts / "executables")
    exports = read_exports(artifacts / "executables", artifacts, context)
    # the executables' binaries and GPU intermediates are written when the hal phase serializes them,
    # after the executable-targets phase's dump: every executable dump is whole with the hal phase's
    ready("hal")
    exports = with_target_code(exports, artifacts / "executables", artifacts)
    hal_module = parse_file(phase_dump(phases, "hal"), context)
    call_sites = read_call_sites(hal_module, entry, normalise)
    graph = build_graph(program, call_sites, regions, exports, host_location_frames(hal_module, normalise), costs)
    graph.graph["entry"] = entry
    return Provenance(graph, call_sites, exports)
