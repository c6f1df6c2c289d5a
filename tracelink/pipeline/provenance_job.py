"""One function's run inputs, provenance graph and memory plan, built in background threads.

Started while the compiler runs, the job reads each dump once the compiler has written it whole
(:meth:`~tracelink.compile.PendingCompile.wait_for_phase`): the compiler keeps about one core busy, so on
a machine with two cores most of the graph is built beside it instead of after it. The job never runs
beside the timed run (:mod:`tracelink.pipeline` waits for it first): building the graph there slowed
the dispatches measured.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracelink.aggregate import op_line_shares
from tracelink.collect.hook_sizes import HookedSizes
from tracelink.collect.inputs import check_inputs, described_type, generate_inputs, read_signature
from tracelink.compile import CompileResult
from tracelink.errors import TracelinkError
from tracelink.pipeline.options import ProfileOptions
from tracelink.ir_utils import new_context
from tracelink.provenance.build import QUIET_PHASE, Provenance, build_provenance, phase_dump
from tracelink.provenance.executables import source_dumps
from tracelink.provenance.graph import write_node_link
from tracelink.provenance.memory_plan import StreamPlan, read_stream_plan
from tracelink.provenance.program import InputProgram
from tracelink.report.model import MAX_PROGRAM_BYTES
from tracelink.report.textmap import dump_text, program_text_ops
from tracelink.tools import InBackground
from tracelink.profile_dir import files


@dataclass
class BuiltProvenance:
    """The job's result: the run's ``--input`` values (the user's, checked, or generated), the graph,
    what profile.json says of the hooked call that fixed sizes the inputs' shapes did not (None when
    none was needed), and where the call's tensors live (the stream phase's plan, which the memory
    tables read)."""

    inputs: list[str]
    provenance: Provenance
    runtime_sizes: dict | None
    stream_plan: StreamPlan


class ProvenanceJob:
    """Inputs, then the provenance graph of ``entry`` (written to ``out``), in a background thread; the
    stream phase's memory plan, then the executables' sources parsed for the report, in another.

    ``compiled`` gives the build, waiting for the compiler if it still runs; ``ready(phase)`` returns
    once that phase's dump is whole.
    """

    def __init__(self, source: InputProgram, entry: str, options: ProfileOptions, out: Path,
                 compiled: Callable[[], CompileResult], ready: Callable[[str], None]) -> None:
        self.source, self.entry, self.options, self.out = source, entry, options, out
        self.compiled, self._ready = compiled, ready
        self._stopped = threading.Event()
        # the stream plan and the executables' sources are read beside the graph's middle dumps, in the
        # compiler's quieter stretch (build.QUIET_PHASE)
        self._plan = InBackground(self._read_plan, "tracelink-stream-plan")
        self._work = InBackground(self._build, "tracelink-provenance")

    def result(self) -> BuiltProvenance:
        try:
            inputs, provenance, runtime_sizes = self._work.result()
        except BaseException:
            self._plan.cancel()
            raise
        return BuiltProvenance(inputs, provenance, runtime_sizes, self._plan.result())

    def cancel(self) -> None:
        self._stopped.set()  # the job stops at the next dump it would wait for
        self._work.cancel()
        self._plan.cancel()

    def ready(self, phase: str) -> None:
        """Wait until ``phase``'s dump is whole, unless the job was cancelled meanwhile."""
        self._ready(phase)
        if self._stopped.is_set():
            raise TracelinkError(f"{self.out}: the provenance graph of {self.entry} was not built (stopped)")

    def _read_plan(self) -> StreamPlan:
        artifacts = self.out / files.ARTIFACTS
        self.ready(QUIET_PHASE)  # the executables' sources and configured dumps are whole before it too
        # the user's inputs fix a dynamic program's sizes (generated inputs are of a static signature)
        plan = read_stream_plan(phase_dump(artifacts / "phases", "stream"), self.entry, input_shapes(self.options.inputs))
        if self.options.embed_sources:  # else the report shows no dump
            warm_dump_texts(self.source.path, artifacts / "executables")
        return plan

    def _build(self) -> tuple[list[str], Provenance, dict | None]:
        artifacts = self.out / files.ARTIFACTS
        if self.options.embed_sources:  # else the report reads no program text
            warm_program_text(self.source.path)
        self.ready("input")
        inputs = run_inputs(artifacts / "phases", self.entry, self.options, artifacts)
        # the shapes the run gives the inputs fix most dynamic sizes the cost model reads; the rest come from
        # each dispatch's push constants in one hooked call, made only when a size is still unknown
        shapes = input_shapes(inputs)
        options = self.options
        sizes = (HookedSizes(self.compiled, options.compile, self.entry, inputs, options.parameters, artifacts, options.timeout_s)
                 if options.hooked_sizes else None)
        provenance = build_provenance(self.source, artifacts, self.entry, shapes, sizes, self.ready)
        write_node_link(provenance.graph, self.out / files.GRAPH)  # the GraphML comes after the run, with the trace
        # the graph's own table, which the aggregation after the run reads first (kept with the graph): made
        # here, it fills the compiler's last tenths of a second (its vm phase) instead of the serial stretch
        # after the run (the attribution waits for the machine's roofs, known after the run)
        op_line_shares(provenance.graph, self.options.library_frames)
        return inputs, provenance, (sizes.summary or None) if sizes is not None else None


def input_shapes(inputs: list[str]) -> list[tuple[int, ...] | None]:
    """The shape of each ``--input`` value (None where the value does not say it)."""
    return [(described := described_type(value)) and described[0] for value in inputs]


def run_inputs(phases: Path, entry: str, options: ProfileOptions, artifacts: Path) -> list[str]:
    """The run's ``--input`` values: the user's, checked against the signature, or generated from it."""
    specs = read_signature(phase_dump(phases, "input"), entry)
    if options.inputs:
        check_inputs(options.inputs, specs)
        return list(options.inputs)
    return generate_inputs(specs, artifacts / "inputs", options.seed)


def warm_dump_texts(program: Path, executables: Path) -> None:
    """Parse the executables' dumped sources for the report now, beside the compiler (``dump_text``
    keeps them), against the program's function locations as the report reads them."""
    enclosing = program_text_ops(program)[1] if small_program(program) else frozenset()
    context = functools.cache(new_context)  # one for all the dumps
    for path in source_dumps(executables):
        dump_text(path, enclosing, context)


def small_program(program: Path) -> bool:
    """Whether the report reads ``program``'s text (it skips one over :data:`MAX_PROGRAM_BYTES`)."""
    try:
        return program.stat().st_size <= MAX_PROGRAM_BYTES
    except OSError:
        return False


def warm_program_text(program: Path) -> None:
    """Parse the program's text for the report now, beside the compiler: the report reads it at the end
    (``program_text_ops`` keeps the last file it parsed)."""
    if small_program(program):
        program_text_ops(program)
