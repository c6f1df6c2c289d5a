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

import pandas as pd

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
from tracelink.report.textmap import SourceTexts
from tracelink.tools import InBackground
from tracelink.profile_dir import files


@dataclass
class BuiltProvenance:
    """The job's result: the run's ``--input`` values (the user's, checked, or generated), the graph,
    what profile.json says of the hooked call that fixed sizes the inputs' shapes did not (None when
    none was needed), where the call's tensors live (the stream phase's plan, which the memory
    tables read), the graph's line shares (:func:`~tracelink.aggregate.op_line_shares`, for the
    aggregation) and the program and executable sources parsed for the report (None with ``--no-sources``)."""

    inputs: list[str]
    provenance: Provenance
    runtime_sizes: dict | None
    stream_plan: StreamPlan
    line_shares: pd.DataFrame
    texts: SourceTexts | None


class ProvenanceJob:
    """Inputs, then the provenance graph of ``entry`` (written to ``out``) and its line shares, in a
    background thread; the program's text, the stream phase's memory plan, then the executables' sources,
    parsed for the report, in another.

    ``compiled`` gives the build, waiting for the compiler if it still runs; ``ready(phase)`` returns
    once that phase's dump is whole. ``texts`` keeps the sources parsed for the report (shared by the
    functions of one program, which parse its text once); None when the report embeds none.
    """

    def __init__(self, source: InputProgram, entry: str, options: ProfileOptions, out: Path,
                 compiled: Callable[[], CompileResult], ready: Callable[[str], None], *, texts: SourceTexts | None) -> None:
        self.source, self.entry, self.options, self.out = source, entry, options, out
        self.compiled, self._ready, self._texts = compiled, ready, texts
        self._stopped = threading.Event()
        # the stream plan and the executables' sources are read beside the graph's middle dumps, in the
        # compiler's quieter stretch (build.QUIET_PHASE)
        self._plan = InBackground(self._read_plan, "tracelink-stream-plan")
        self._work = InBackground(self._build, "tracelink-provenance")

    def result(self) -> BuiltProvenance:
        try:
            inputs, provenance, runtime_sizes, line_shares = self._work.result()
        except BaseException:
            self._plan.cancel()
            raise
        plan, texts = self._plan.result()
        return BuiltProvenance(inputs, provenance, runtime_sizes, plan, line_shares, texts)

    def cancel(self) -> None:
        self._stopped.set()  # the job stops at the next dump it would wait for
        self._work.cancel()
        self._plan.cancel()

    def ready(self, phase: str) -> None:
        """Wait until ``phase``'s dump is whole, unless the job was cancelled meanwhile."""
        self._ready(phase)
        if self._stopped.is_set():
            raise TracelinkError(f"{self.out}: the provenance graph of {self.entry} was not built (stopped)")

    def _read_plan(self) -> tuple[StreamPlan, SourceTexts | None]:
        artifacts = self.out / files.ARTIFACTS
        texts, program = self._texts, self.source.path
        # the program's functions locate the dumps' ops (the report skips a program over its size limit)
        enclosing = texts.program(program)[1] if texts is not None and small_program(program) else frozenset()
        self.ready(QUIET_PHASE)  # the executables' sources and configured dumps are whole before it too
        # the user's inputs fix a dynamic program's sizes (generated inputs are of a static signature)
        plan = read_stream_plan(phase_dump(artifacts / "phases", "stream"), self.entry, input_shapes(self.options.inputs))
        if texts is not None:
            context = functools.cache(new_context)  # one for all the dumps
            for path in source_dumps(artifacts / "executables"):
                texts.dump(path, enclosing, context)
        return plan, texts

    def _build(self) -> tuple[list[str], Provenance, dict | None, pd.DataFrame]:
        artifacts = self.out / files.ARTIFACTS
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
        # the graph's own table, which the aggregation after the run reads: made here, it fills the compiler's
        # last stretch (its vm phase) instead of the serial one after the run (the attribution waits for the
        # machine's roofs, known after the run)
        line_shares = op_line_shares(provenance.graph, self.options.library_frames)
        return inputs, provenance, (sizes.summary or None) if sizes is not None else None, line_shares


def input_shapes(inputs: list[str]) -> list[tuple[int, ...] | None]:
    """The shape of each ``--input`` value (None where the value does not say it)."""
    return [(described := described_type(value)) and described[0] for value in inputs]


def run_inputs(phases: Path, entry: str, options: ProfileOptions, artifacts: Path) -> list[str]:
    """The run's ``--input`` values: the user's, checked against the signature, or generated from it."""
    specs = read_signature(phase_dump(phases, "input"), entry)
    if options.inputs:
        check_inputs(options.inputs, specs)
        return list(options.inputs)
    return generate_inputs(specs, artifacts / files.INPUTS, options.seed)


def small_program(program: Path) -> bool:
    """Whether the report reads ``program``'s text (it skips one over :data:`MAX_PROGRAM_BYTES`)."""
    try:
        return program.stat().st_size <= MAX_PROGRAM_BYTES
    except OSError:
        return False
