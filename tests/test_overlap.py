"""Work `tracelink profile` overlaps: the provenance graph built while the real compiler writes its dumps
is the graph built from the finished dumps, a forked writer's failure reaches the caller, a tool's exit
wakes its waiter, and the modules loaded beside the compiler stay out of the collector's passes."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import networkx as nx
import pandas as pd
import pytest

from tracelink.aggregate import op_line_shares
from tracelink.collect.inputs import described_type
from tracelink.compile import CompileOptions, PendingCompile, dumped_phases
from tracelink.errors import TracelinkError
from tracelink.pipeline.options import ProfileOptions
from tracelink.provenance.build import QUIET_PHASE, build_provenance
from tracelink.provenance.executables import source_dumps
from tracelink.provenance.graph import write_node_link
from tracelink.provenance.program import read_input_program
from tracelink.pipeline.provenance_job import ProvenanceJob
from tracelink.report.textmap import SourceTexts
from tracelink.commands.profile import imported_beside_the_compiler
from tracelink.tools import InChildProcess, open_files, wait_for_exit

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def graph_document(graph: nx.DiGraph, directory: Path) -> dict:
    write_node_link(graph, directory / "provenance.json")
    return json.loads((directory / "provenance.json").read_text())


def test_the_graph_built_beside_the_compiler_is_the_graph_of_the_finished_dumps(tmp_path):
    program = EXAMPLES / "attention.mlir"
    out = tmp_path / "out"
    pending = PendingCompile(program, out / "artifacts", CompileOptions())
    phases = out / "artifacts" / "phases"
    waited: list[tuple[str, bytes | None]] = []

    def ready(phase: str) -> None:
        pending.wait_for_phase(phase)
        dump = next(phases.glob(f"*.{phase}.mlir"), None)
        waited.append((phase, dump.read_bytes() if dump is not None else None))

    job = ProvenanceJob(read_input_program(program), "attention", ProfileOptions(), out, lambda: compiled, ready, texts=SourceTexts())
    compiled = pending.finish()
    built = job.result()
    beside = built.provenance
    shapes = [described_type(value)[0] for value in built.inputs]
    after = build_provenance(read_input_program(program), out / "artifacts", "attention", shapes)
    # each dump was whole when the wait for it ended: its bytes then are those the compiler left
    for phase, read in waited:
        assert read == next(phases.glob(f"*.{phase}.mlir")).read_bytes(), phase
    # inputs, then the graph; in a thread of its own, the stream plan, then the executables' sources: the
    # middle dumps once the compiler is in its quieter stretch
    assert sorted(phase for phase, _ in waited) == sorted(["input", "input", QUIET_PHASE, QUIET_PHASE, "hal"])
    assert [phase for phase, _ in waited if phase != QUIET_PHASE] == ["input", "input", "hal"]
    assert json.loads((out / "provenance.json").read_text()) == graph_document(after.graph, tmp_path)
    # the program and the executables' sources the report shows were parsed beside the compiler, each of
    # them, and come with the graph's line shares in the job's result
    sources = source_dumps(out / "artifacts" / "executables")
    assert built.texts is not None and program.resolve() in built.texts.programs
    parsed = {path for path, _ in built.texts.dumps}
    assert sources and all(path.resolve() in parsed for path in sources)
    pd.testing.assert_frame_equal(built.line_shares, op_line_shares(after.graph))
    assert [site.export for site in beside.call_sites] == [site.export for site in after.call_sites]


def test_the_files_a_process_holds_open_are_read_from_proc(tmp_path):
    """What tells a dump the compiler is still writing from one it has closed."""
    path = tmp_path / "dump.mlir"
    with path.open("w"):
        assert str(path.resolve()) in open_files(os.getpid())
    assert str(path.resolve()) not in open_files(os.getpid())
    assert open_files(2**22 + 1) is None  # no such process (above Linux's pid limit)


def test_a_stopped_compile_ends_the_wait_for_its_dumps(tmp_path):
    program = EXAMPLES / "convnet.mlir"
    pending = PendingCompile(program, tmp_path / "artifacts", CompileOptions())
    waiter = threading.Thread(target=pending.wait_for_phase, args=("vm",))  # the last phase: only the end returns
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # still waiting while the compiler runs
    pending.run.kill()
    pending.ended.set()  # what StartedProfile.stop does
    waiter.join(5)
    assert not waiter.is_alive()
    assert "vm" not in dumped_phases(tmp_path / "artifacts" / "phases")


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # JAX's, when an earlier test loaded it: hidden from the writer here
def test_a_forked_writer_writes_or_says_why_it_did_not(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)  # loaded by an earlier test: the work would run here
    written = tmp_path / "written.txt"
    InChildProcess(lambda: written.write_text("done"), "writer").wait()
    assert written.read_text() == "done"

    def fail() -> None:
        raise TracelinkError(f"{tmp_path / 'trace.json'}: disk full\nsecond line")

    with pytest.raises(TracelinkError, match=r"trace\.json: disk full$"):
        InChildProcess(fail, "writer").wait()
    with pytest.raises(TracelinkError, match="writer ended with exit code -9"):
        InChildProcess(lambda: os.kill(os.getpid(), signal.SIGKILL), "writer").wait()


def test_with_jax_loaded_the_work_runs_in_the_caller(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", sys.modules.get("jax") or types.ModuleType("jax"))
    pids = InChildProcess(os.getpid, "writer")
    assert pids.wait() == os.getpid()

    def fail() -> None:
        raise TracelinkError("trace.json: disk full")

    failing = InChildProcess(fail, "writer")  # the caller's own work beside it is done before the failure is said
    with pytest.raises(TracelinkError, match="disk full"):
        failing.wait()


def test_a_tool_s_exit_wakes_the_wait_for_it_without_polling(monkeypatch):
    # Popen.wait(timeout=...) sleeps between looks (up to 50 ms, 25 ms late on average at each tool's end);
    # the pidfd wait sleeps in the kernel: with time.sleep broken, only the pidfd wait still works
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s")

    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(3)"])
    monkeypatch.setattr(time, "sleep", no_sleep)
    assert wait_for_exit(quick, 60) == 3
    polled = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    with pytest.raises(AssertionError, match="slept"):
        polled.wait(timeout=60)
    monkeypatch.undo()
    assert polled.wait() == 0
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(subprocess.TimeoutExpired):
        wait_for_exit(slow, 0.2)
    assert slow.poll() is None  # a timeout leaves the tool to the caller, as Popen.wait does
    slow.kill()
    assert wait_for_exit(slow, None) == -signal.SIGKILL
    assert wait_for_exit(slow, 1) == -signal.SIGKILL  # already reaped: its code again


def test_the_modules_loaded_beside_the_compiler_are_left_out_of_the_collector(monkeypatch):
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(gc.isenabled()))
    frozen: list[bool] = []
    (loaded,) = imported_beside_the_compiler("report.trace")
    assert loaded is sys.modules["tracelink.report.trace"]
    assert frozen == [False]  # frozen with the collector off throughout the imports
    assert gc.isenabled()
