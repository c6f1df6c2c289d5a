"""A dispatch's workload from its push constants: an executable's constant loads through to its workload ordinals.

IREE passes a dispatch's dynamic sizes as push constants (u32 each; a 64-bit index as two, joined
by ``extui``/``shli``/``ori``). Inside the executable ``hal.interface.constant.load ordinal(i)`` reads
constant ``i``, and ``iree_tensor_ext.dispatch.workload.ordinal %v, k`` marks the value that is workload
operand ``k`` of the dispatch region it was made from (``flow.dispatch.workgroups[w0, w1, ...]``,
whose operands and results take their dynamic dims from the same host values). Evaluating each
marked value on a dispatch's recorded constants gives that region's workload, and so its sizes.

The recorded constants of one call of the profiled function come in per export, in execution order
(:data:`DispatchConstants`). The j-th dispatch of an export is the j-th region dispatching it, in program
order, after the initializers' (which run first, at load); where the counts differ (a dispatch under
host control flow), that export's constants are not used.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from iree.compiler import ir

from tracelink.ir_utils import attr, parse_file, symbol_name, walk
from tracelink.provenance.runtime_sizes import RuntimeSizes, segments

# export name -> the push constants of each of its dispatches in one call of the profiled function
# (initializers' dispatches first), in execution order
DispatchConstants = Mapping[str, Sequence[tuple[int, ...]]]
# called only when some size is still unknown: the constants of a run (None when there is none)
ConstantsOfRun = Callable[[], DispatchConstants | None]
WORKLOAD_ORDINAL = "iree_tensor_ext.dispatch.workload.ordinal"


class ExportWorkloads:
    """The dispatch functions of the dumped executables (``configured_*.mlir``), parsed on first use."""

    def __init__(self, executables_dir: Path, context: ir.Context) -> None:
        self.executables_dir = executables_dir
        self.context = context
        self._modules: list[ir.Module] = []  # the bindings free a module's ops with it
        self._functions: dict[str, ir.Operation] | None = None

    def function(self, export: str) -> ir.Operation | None:
        """The ``func.func`` an export calls, or None when no dump has it."""
        if self._functions is None:
            self._functions = {}
            for path in sorted(self.executables_dir.glob("configured_*.mlir")):
                module = parse_file(path, self.context)
                self._modules.append(module)
                self._functions |= {symbol_name(op) or "": op for op in walk(module.operation) if op.name == "func.func"}
        return self._functions.get(export)

    def workload(self, export: str, constants: Sequence[int]) -> dict[int, int]:
        """Workload ordinal → value, for a dispatch of ``export`` that got ``constants``; the ordinals
        whose value the constants do not fix are left out."""
        function = self.function(export)
        if function is None:
            return {}
        run = RuntimeSizes(constants=constants)
        found: dict[int, int] = {}
        for op in walk(function):
            ordinal = attr(op, "ordinal") if op.name == WORKLOAD_ORDINAL else None
            value = run.value(op.operands[0]) if isinstance(ordinal, ir.IntegerAttr) else None
            if value is not None:
                found[ordinal.value] = value
        return found


def workload_seeds(region_op: ir.Operation, workload: Mapping[int, int]) -> dict[ir.Value, int]:
    """The host values a ``flow.dispatch.workgroups`` passes as its workload, with their run's values."""
    counts = segments(region_op)
    operands = list(region_op.operands)[: counts[0] if counts else 0]
    return {operands[k]: size for k, size in workload.items() if 0 <= k < len(operands)}


def entry_constants(
    constants: DispatchConstants, entry_exports: Sequence[str | None], initializer_exports: Sequence[str | None],
) -> list[tuple[int, ...] | None]:
    """The constants of each of the entry function's regions (``entry_exports``, in program order), after
    the initializers' dispatches of the same export; None for an export whose count does not match."""
    in_entry, in_initializers = Counter(entry_exports), Counter(initializer_exports)
    seen: Counter[str | None] = Counter()
    found: list[tuple[int, ...] | None] = []
    for export in entry_exports:
        recorded = constants.get(export, ()) if export is not None else ()
        position = in_initializers[export] + seen[export]
        seen[export] += 1
        exact_count = len(recorded) == in_initializers[export] + in_entry[export]
        found.append(tuple(recorded[position]) if exact_count else None)
    return found
