"""The perf hook, for real: IREE programs run under libtracelink_hook.so (no mocks).

The test program (tests/data/hook_program.mlir) has three dispatches whose grids have 16, 16
and 8 workgroups (IREE 3.13 linearizes CPU grids, so y = z = 0).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelink.errors import Crashed, TracelinkError
from tracelink.iree_tools import tool_path
from tracelink.commands import hook as hook_command
from tracelink.collect.events import match_call_sites
from tracelink.collect.hook import hook_library_path, list_event_types, run_hooked
from tracelink.collect.hook_records import read_hook_file
from tracelink.collect.hook_tables import WORKGROUP_COLUMNS, read_hook_records, workgroups_of
from tracelink.collect.hook_stats import (
    StatsOptions,
    conditional_probabilities,
    nile_means,
    rank_buckets,
    render_cell,
)

BIN = Path(sys.executable).parent
PROGRAM = Path(__file__).parent / "data" / "hook_program.mlir"
CRASHING_PROGRAM = Path(__file__).parent / "data" / "out_of_bounds_gather.mlir"
NATIVE = Path(__file__).resolve().parent.parent / "native"
# A program exporting a fake executable library (ABI version and export count from argv),
# queried through dlsym like the IREE runtime does; it calls the first and last export. With a
# third argument, the last export recurses until it overflows its stack.
FAKE_LIBRARY = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "hook_abi.h"
static int work(const void* e, const tl_abi_dispatch_state_t* d, const tl_abi_workgroup_state_t* w) { return 0; }
static int recurse(int depth) {
  volatile char frame[4096];
  frame[0] = (char)depth;
  return recurse(depth + 1) + frame[0];  // not a tail call: each level keeps its frame
}
static int overflow(const void* e, const tl_abi_dispatch_state_t* d, const tl_abi_workgroup_state_t* w) {
  return recurse(0);
}
static tl_abi_header_t header = {0, "fake", 0, 0};
static tl_abi_library_t library = {.header = &header};
const tl_abi_header_t** iree_hal_executable_library_query(uint32_t version, const void* env) {
  return (const tl_abi_header_t**)&library;
}
int main(int argc, char** argv) {
  header.version = (uint32_t)atoi(argv[1]);
  uint32_t count = (uint32_t)atoi(argv[2]);
  tl_abi_dispatch_fn_t* ptrs = malloc(count * sizeof(*ptrs));
  char** names = malloc(count * sizeof(*names));
  for (uint32_t i = 0; i < count; ++i) {
    ptrs[i] = work;
    names[i] = malloc(32);
    snprintf(names[i], 32, "fake_export_%u", i);
  }
  if (argc > 3) ptrs[count - 1] = overflow;
  library.exports.count = count;
  library.exports.ptrs = ptrs;
  library.exports.names = (const char* const*)names;
  tl_abi_query_fn_t query = (tl_abi_query_fn_t)dlsym(dlopen(NULL, RTLD_NOW), "iree_hal_executable_library_query");
  const tl_abi_library_t* hooked = (const tl_abi_library_t*)query(header.version, NULL);
  void* bindings[2];
  tl_abi_workgroup_state_t workgroup = {0};
  for (uint32_t i = 0; i < 2; ++i) {
    tl_abi_dispatch_state_t state = {.workgroup_count_x = 1, .workgroup_count_y = 1,
                                     .workgroup_count_z = 1, .binding_ptrs = &bindings[i]};
    hooked->exports.ptrs[i == 0 ? 0 : count - 1](NULL, &state, &workgroup);
  }
  return 0;
}
"""
TARGET_FLAGS = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
]
SYSTEM_LIBRARY = ["--iree-llvmcpu-link-embedded=false"]


class Program:
    """The test program compiled both ways, its inputs and its call sites."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = root / "hook_program.vmfb"
        self.embedded_module = root / "hook_program_embedded.vmfb"
        compile_ = [str(BIN / "iree-compile"), str(PROGRAM), *TARGET_FLAGS]
        subprocess.run([*compile_, *SYSTEM_LIBRARY, "-o", str(self.module)], check=True)
        subprocess.run([*compile_, "-o", str(self.embedded_module)], check=True)
        hal = subprocess.run(
            [*compile_, *SYSTEM_LIBRARY, "--compile-to=hal"], check=True, capture_output=True, text=True
        ).stdout
        # Call sites in execution order: the export each hal.command_buffer.dispatch uses, and
        # its grid (constants are named by value: %c16).
        self.call_site_exports = re.findall(r"hal\.executable\.lookup\.function .*::@(\w+)\)", hal)
        grids = re.findall(r"workgroups\(\[%c(\d+)\w*, %c(\d+)\w*, %c(\d+)\w*\]\)", hal)
        self.call_site_grids = [int(x) * int(y) * int(z) for x, y, z in grids]
        assert len(self.call_site_exports) == len(self.call_site_grids) == 3
        rng = np.random.default_rng(0)
        self.inputs = []
        for name, shape in (("a", (256, 256)), ("b", (256, 256)), ("bias", (256,))):
            path = root / f"{name}.npy"
            np.save(path, rng.standard_normal(shape).astype(np.float32) * 0.1)
            self.inputs.append(f"--input=@{path}")

    def run_module(self, *extra: str) -> list[str]:
        return [str(BIN / "iree-run-module"), f"--module={self.module}", "--function=main", *self.inputs, *extra]

    def benchmark_module(self, *extra: str) -> list[str]:
        return [str(BIN / "iree-benchmark-module"), f"--module={self.module}", "--function=main", *self.inputs, *extra]


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Program:
    return Program(tmp_path_factory.mktemp("hook_program"))


@pytest.fixture(scope="module")
def fake_library(tmp_path_factory) -> Path:
    """The FAKE_LIBRARY program, built with the system C compiler."""
    root = tmp_path_factory.mktemp("fake_library")
    (root / "fake.c").write_text(FAKE_LIBRARY)
    binary = root / "fake"
    subprocess.run(["gcc", "-O1", f"-I{NATIVE}", str(root / "fake.c"), "-o", str(binary), "-ldl", "-rdynamic"], check=True)
    return binary


def assert_complete_dispatches(workgroups: pd.DataFrame) -> None:
    """Every dispatch ran each workgroup of its grid exactly once, in one export."""
    for _, calls in workgroups.groupby(["pid", "dispatch"]):
        assert calls["export"].nunique() == 1
        count_x = calls["workgroup_count_x"].iloc[0]
        assert sorted(calls["workgroup_x"]) == list(range(count_x))
        assert (calls[["workgroup_y", "workgroup_z"]] == 0).all().all()
        assert (calls[["workgroup_count_y", "workgroup_count_z"]] == 1).all().all()


def hal_dispatches(jsonl: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    frame = pd.DataFrame(rows)
    assert (frame["schema_version"] == 15).all()
    frame = frame[(frame["record_type"] == "host_execution_event") & (frame["op"] == "dispatch")]
    return frame.sort_values("start_host_time_ns")


def test_library_is_built_and_lists_events():
    assert hook_library_path().is_file()
    listing = list_event_types()
    assert "task-clock" in listing and "page-faults" in listing and "r<hex>" in listing


def test_benchmark_matches_hal_profile(program, tmp_path):
    """Timing only, under iree-benchmark-module with HAL profiling in the same run.

    Tolerance: the hook times the call inside HAL's own per-tile window, so per dispatch the
    sum of hooked workgroup durations can never exceed HAL's tile_duration_sum_ns (0.5 %
    slack for the two clocks); the difference is HAL's per-tile bookkeeping plus the hook's
    work outside its window (~0.1-0.3 us per tile here, a few us on each thread's first call,
    more when the VM preempts a worker in between), so the median per-tile gap must stay
    under 2 us and the totals within 20 %. Likewise each dispatch's span lies within HAL's
    dispatch window.
    """
    profile = tmp_path / "run.ireeprof"
    command = program.benchmark_module(
        "--benchmark_min_time=10x",
        "--device_profiling_mode=host-execution,queue-events,executable-metadata",
        f"--device_profiling_output={profile}",
    )
    run = run_hooked(command, tmp_path / "hook", None, None, 120)
    jsonl = tmp_path / "run.jsonl"
    subprocess.run(
        [str(BIN / "iree-profile"), "export", "--format=ireeperf-jsonl", f"--output={jsonl}", str(profile)],
        check=True,
    )
    hal = hal_dispatches(jsonl)

    assert set(run.events["export"]) == set(program.call_site_exports)
    assert_complete_dispatches(run.workgroups)
    assert (run.events["tile_count"] == run.events["workgroup_count"]).all()
    gaps = []
    for export in program.call_site_exports:
        ours = run.events[run.events["export"] == export]
        theirs = hal[hal["key"] == export]
        assert len(ours) == len(theirs) >= 10
        grids = theirs["workgroup_count"].map(lambda xyz: xyz[0] * xyz[1] * xyz[2]).to_numpy()
        assert (ours["workgroup_count"].to_numpy() == grids).all()
        assert (ours["tile_count"].to_numpy() == theirs["tile_count"].to_numpy()).all()
        hook_sum = ours["tile_duration_sum_ns"].to_numpy(dtype=float)
        hal_sum = theirs["tile_duration_sum_ns"].to_numpy(dtype=float)
        assert (hook_sum <= hal_sum * 1.005).all()
        # A dispatch's span, first workgroup start to last end, lies within HAL's dispatch window.
        assert (ours["duration_ns"].to_numpy() <= theirs["duration_ns"].to_numpy() * 1.005).all()
        gaps.extend((hal_sum - hook_sum) / ours["tile_count"].to_numpy())
        assert hook_sum.sum() >= 0.8 * hal_sum.sum()
    assert np.median(gaps) < 2000


def test_run_module_output_unchanged_and_call_sites(program, tmp_path):
    plain, hooked = tmp_path / "plain.npy", tmp_path / "hooked.npy"
    subprocess.run(program.run_module(f"--output=@{plain}"), check=True, capture_output=True)
    run = run_hooked(program.run_module(f"--output=@{hooked}"), tmp_path / "hook", None, None, 60)
    assert np.array_equal(np.load(plain), np.load(hooked))

    assert list(run.workgroups.columns) == WORKGROUP_COLUMNS
    assert_complete_dispatches(run.workgroups)
    matched = match_call_sites(run.events, program.call_site_exports)
    assert list(matched["export"]) == program.call_site_exports
    assert list(matched["call_site"]) == [0, 1, 2] and list(matched["iteration"]) == [0, 0, 0]
    assert list(run.events["workgroup_count"]) == program.call_site_grids


def test_local_sync_reused_dispatch_state_and_software_counters(program, tmp_path):
    """local-sync passes the same state (and binding table) to every dispatch."""
    command = program.benchmark_module("--device=local-sync", "--benchmark_min_time=5x")
    run = run_hooked(command, tmp_path, ["task-clock", "page-faults"], None, 60)
    assert list(run.workgroups.columns) == WORKGROUP_COLUMNS + ["task-clock", "page-faults"]
    assert_complete_dispatches(run.workgroups)
    counts = run.events.groupby("export").size()
    assert set(counts.index) == set(program.call_site_exports) and counts.nunique() == 1 and counts.iloc[0] >= 5
    assert run.workgroups["tid"].nunique() == 1

    # task-clock is the thread's CPU time around the same call: close to its wall time (a little
    # above: it also covers a counter read), except for calls during which the (shared, loaded)
    # machine preempted the thread. The read costs a few µs on a VM, so the ratio is only close to 1
    # for calls much longer than that (the matmuls' workgroups: 10-50 µs by the CPU's vector width,
    # not the reduction's 1-3 µs); every call's CPU time still covers it.
    ratio = run.workgroups["task-clock"].astype(float) / run.workgroups["duration_ns"]
    long_calls = ratio[run.workgroups["export"].str.contains("matmul")]
    assert len(long_calls) >= 100
    assert long_calls.between(0.9, 1.6).mean() > 0.8
    assert 0.95 < long_calls.median() < 1.3
    assert (ratio >= 0.9).mean() > 0.9
    # The first dispatches write fresh 256 KiB results: first-touch faults, one per 4 KiB
    # page (64 per buffer); the following iterations reuse the memory.
    faults = run.workgroups.groupby("dispatch")["page-faults"].sum().astype("int64")
    assert 0 < faults.iloc[:3].sum() <= 3 * 2 * 64
    assert faults.iloc[-3:].sum() < 16


def test_python_runtime_threads(program, tmp_path):
    """Three Python threads, each with its own local-sync device, running concurrently."""
    script = tmp_path / "threads.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import threading
            import numpy as np
            import iree.runtime as rt
            inputs = [np.load(p) for p in {[str(program.root / f"{n}.npy") for n in ("a", "b", "bias")]!r}]
            def work():
                module = rt.load_vm_flatbuffer_file({str(program.module)!r}, driver="local-sync")
                for _ in range(2):
                    np.asarray(module.main(*inputs))
            threads = [threading.Thread(target=work) for _ in range(3)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            """
        )
    )
    run = run_hooked([sys.executable, str(script)], tmp_path / "hook", ["task-clock"], None, 120)
    assert_complete_dispatches(run.workgroups)
    assert run.events.groupby("export").size().to_dict() == {export: 6 for export in program.call_site_exports}
    assert run.workgroups["tid"].nunique() == 3


def test_cli_prints_filtered_statistics_and_csv(program, tmp_path, capsys, monkeypatch):
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    monkeypatch.setenv("IREE_HOOK_OUTPUT_CSV", str(csv_dir))
    monkeypatch.setenv("IREE_HOOK_BUCKET_COUNT", "4")
    parser = argparse.ArgumentParser()
    hook_command.register(parser.add_subparsers())
    args = parser.parse_args(
        ["hook", "--events", "task-clock", "--filter", "*reduction*", "-o", str(tmp_path / "hook"), "--"]
        + program.benchmark_module("--benchmark_min_time=20x")
    )
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    sections = re.findall(r"^=== (\S+)", out, flags=re.M)
    assert len(sections) == 1 and "reduction" in sections[0]
    assert re.search(r"Statistics for thread \S+ .*: \d+ matching calls, of which:", out)
    assert re.search(r"^  \d+ calls on cpu \d+$", out, flags=re.M)
    assert re.search(r"^duration \(µs\): mean: \S+  4-ile means: (\S+ ){3}\S+$", out, flags=re.M)
    assert "task-clock (µs): mean:" in out
    assert "correlation of duration (µs) vs. task-clock (µs):" in out
    assert "conditional probability of duration 4-ile (↓) given task-clock 4-ile (→):" in out
    assert "records: " in out and str(tmp_path / "hook") in out

    table = pd.read_csv(csv_dir / "tracelink_hook_workgroups.csv")
    assert list(table.columns) == WORKGROUP_COLUMNS + ["task-clock"]
    assert table["export"].str.contains("reduction").all() and len(table) >= 20 * 8


def test_embedded_module_asks_to_recompile(program, tmp_path):
    command = program.run_module()
    command[1] = f"--module={program.embedded_module}"
    with pytest.raises(TracelinkError, match="recompile with --iree-llvmcpu-link-embedded=false"):
        run_hooked(command, tmp_path, None, None, 60)


def test_unknown_event_is_an_error(program, tmp_path):
    with pytest.raises(TracelinkError, match="unknown perf event 'no-such-event'"):
        run_hooked(program.run_module(), tmp_path, ["task-clock", "no-such-event"], None, 60)


def test_hardware_event_degrades_to_a_warning(program, tmp_path):
    run = run_hooked(program.run_module(), tmp_path, ["task-clock", "cycles"], None, 60)
    if "cycles" in run.event_names:  # a machine with a PMU
        assert run.workgroups["cycles"].astype("int64").sum() > 0
    else:
        assert any(warning.startswith("perf event dropped: cycles") for warning in run.warnings)
        assert "cycles" not in run.workgroups.columns and "task-clock" in run.workgroups.columns


def test_filter_matching_nothing_lists_exports(program, tmp_path):
    with pytest.raises(TracelinkError, match=r"filter 'nothing\*' matched none of the exports \(main_dispatch_0"):
        run_hooked(program.run_module(), tmp_path, None, "nothing*", 60)


def test_skip_start_longer_than_the_run(program, tmp_path):
    with pytest.raises(TracelinkError, match="never called"):
        run_hooked(program.run_module(), tmp_path, None, None, 60, env={"IREE_HOOK_SKIP_START_MS": "600000"})


def test_unsupported_abi_version_is_refused(fake_library, tmp_path):
    with pytest.raises(TracelinkError, match="executable-library ABI version 5, the hook supports only version 6"):
        run_hooked([str(fake_library), "5", "2"], tmp_path, None, None, 30)


def test_export_limit_leaves_later_exports_unhooked(fake_library, tmp_path):
    run = run_hooked([str(fake_library), "6", "4100"], tmp_path, None, None, 30)
    assert run.warnings == ["more than 4096 exports: 'fake_export_4096' and later ones ran unhooked"]
    assert list(run.workgroups["export"]) == ["fake_export_0"]


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(TracelinkError, match=r"a-file/out: cannot create the directory \(Not a directory\)"):
        run_hooked(["true"], blocker / "out", None, None, 10)


def test_crash_keeps_flushed_records(program, tmp_path):
    """A segfault after the dispatches: the hook flushes on SIGSEGV, then the process dies."""
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import ctypes
            import numpy as np
            import iree.runtime as rt
            module = rt.load_vm_flatbuffer_file({str(program.module)!r}, driver="local-task")
            inputs = [np.load(p) for p in {[str(program.root / f"{n}.npy") for n in ("a", "b", "bias")]!r}]
            np.asarray(module.main(*inputs))
            ctypes.string_at(0)
            """
        )
    )
    out = tmp_path / "hook"
    with pytest.raises(Crashed, match=r"crashed \(SIGSEGV\); 40 workgroup records kept in") as crash:
        run_hooked([sys.executable, str(script)], out, None, None, 60)
    assert crash.value.export is None  # the fault was outside every workgroup call
    workgroups, events = read_hook_records(out)
    assert list(events["export"]) == program.call_site_exports
    assert_complete_dispatches(workgroups)
    hook_file = read_hook_file(next(out.glob("hook-*.tlhk")))
    assert not hook_file.complete and any(notice.value == 11 for notice in hook_file.notices)


def test_a_dispatch_that_faults_is_named(program, tmp_path):
    """A workgroup call reading far out of bounds, on a local-task worker: the hook names its export."""
    module = tmp_path / "gather.vmfb"
    subprocess.run([str(BIN / "iree-compile"), str(CRASHING_PROGRAM), *TARGET_FLAGS, *SYSTEM_LIBRARY, "-o", str(module)], check=True)
    # the runtime's own binary: the console script in the venv's bin exits with a status where the tool died of a signal
    command = [tool_path("iree-run-module"), f"--module={module}", "--device=local-task", "--function=main", "--input=16xf32=1"]
    run_hooked([*command, "--input=4xi64=3"], tmp_path / "in_bounds", None, None, 60)
    with pytest.raises(Crashed, match=r"crashed \(SIGSEGV\) in dispatch main_dispatch_0_\w+;") as crash:
        run_hooked([*command, "--input=4xi64=1000000000000"], tmp_path / "hook", None, None, 60)
    assert crash.value.export.startswith("main_dispatch_0_")


def test_a_dispatch_that_overflows_its_stack_is_named(fake_library, tmp_path):
    """The fault handler runs on the hook's signal stack: an overflowed stack has no room for it."""
    with pytest.raises(Crashed, match=r"crashed \(SIGSEGV\) in dispatch fake_export_1;") as crash:
        run_hooked([str(fake_library), "6", "2", "overflow"], tmp_path, None, None, 30)
    assert crash.value.export == "fake_export_1"


def test_a_link_planted_at_the_log_is_replaced_not_followed(program, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    log = tmp_path / "run.log"
    log.symlink_to(victim)
    run_hooked(program.run_module(), tmp_path / "hook", None, None, 60, log=log)
    assert victim.read_text() == "kept" and not log.is_symlink() and "EXEC @main" in log.read_text()


def test_timeout_stops_the_command_and_keeps_records(program, tmp_path):
    out = tmp_path / "hook"
    with pytest.raises(TracelinkError, match=r"timed out after 3 s and was stopped; \d+ workgroup records kept"):
        run_hooked(program.benchmark_module("--benchmark_min_time=1000000x"), out, None, None, 3)
    workgroups, events = read_hook_records(out)
    assert len(events) > 3 and set(events["export"]) == set(program.call_site_exports)


def test_truncated_record_file_is_read_up_to_the_last_whole_chunk(program, tmp_path):
    run = run_hooked(program.run_module(), tmp_path / "hook", None, None, 60)
    cut = tmp_path / "cut" / run.record_files[0].name
    cut.parent.mkdir()
    data = run.record_files[0].read_bytes()
    for keep in (len(data) - 7, len(data) // 2, 20):
        cut.write_bytes(data[:keep])
        hook_file = read_hook_file(cut)
        assert not hook_file.complete
        assert hook_file.records is None or len(hook_file.records) <= len(run.workgroups)


def test_statistics_helpers():
    assert nile_means(np.arange(1.0, 9.0), 4) == [1.5, 3.5, 5.5, 7.5]
    assert list(rank_buckets(np.array([5.0, 1.0, 3.0, 7.0]), 2)) == [1, 0, 0, 1]
    identical = rank_buckets(np.arange(16.0), 4)
    assert np.array_equal(conditional_probabilities(identical, identical, 4), np.eye(4))
    assert render_cell(0.0, 0.5) == "  " and render_cell(1.0, 0.5) == "██"
    assert render_cell(0.25, 0.5) == "▄▄" and render_cell(1e-6, 0.5)[1] == "_"
    assert StatsOptions.from_env({}) == StatsOptions(16, True, 0.5)
    assert StatsOptions.from_env({"IREE_HOOK_NO_PROBABILITY_TABLE": ""}).probability_table is False
    with pytest.raises(TracelinkError, match="IREE_HOOK_BUCKET_COUNT"):
        StatsOptions.from_env({"IREE_HOOK_BUCKET_COUNT": "99"})


def test_hook_without_output_setting_is_passive(program):
    env = {"LD_PRELOAD": str(hook_library_path()), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(program.run_module(), env=env, capture_output=True, text=True, check=True)
    assert "TRACELINK_HOOK_OUTPUT is not set; not recording" in result.stderr


def test_each_dispatch_keeps_its_push_constants_across_workers(tmp_path):
    """tests/data/dynamic.mlir takes its row count from the input's shape (384) and the rows it scales
    from a tensor value (50): the matmul gets M as one 64-bit push constant, the scaling dispatch its
    two sizes in elements (50·256 and 384·256) after an offset. Run 10 times on local-task, whose
    workers run the workgroups, every dispatch's constants are found and are its own."""
    module = tmp_path / "dynamic.vmfb"
    subprocess.run([str(BIN / "iree-compile"), str(PROGRAM.parent / "dynamic.mlir"), *TARGET_FLAGS, *SYSTEM_LIBRARY, "-o", str(module)], check=True)
    command = [str(BIN / "iree-benchmark-module"), f"--module={module}", "--function=main", "--device=local-task",
               "--input=384x256xf32=0.01", "--input=256x128xf32=0.02", "--input=i64=50", "--benchmark_min_time=10x"]
    run = run_hooked(command, tmp_path / "hook", timeout_s=120)
    assert len(run.constants) == len(run.events) >= 20
    by_export = dict(zip(run.events["export"], run.constants))
    for export, constants in zip(run.events["export"], run.constants):
        assert constants == by_export[export], export  # the same sizes in every call
    matmul = next(values for export, values in by_export.items() if "matmul" in export)
    scale = next(values for export, values in by_export.items() if "elementwise" in export)
    assert matmul == (384, 0)
    assert scale[2:] == (50 * 256, 0, 384 * 256, 0)


def test_a_workgroup_run_ends_before_the_next_on_its_thread_once_rounded(program, tmp_path):
    # TSC ticks are fractions of a ns: here 0.3 ns. Two runs on one thread, the second starting the tick
    # after the first ends (ticks 2 to 7, then 8): rounded apart, the first run's start (0.6 -> 1 ns) and
    # duration (1.5 -> 2 ns) put its end 1 ns past the second's start (2.4 -> 2 ns), and the trace
    # showed the thread's slices overlapping (an intermittent failure of test_trace's overlap check)
    run = run_hooked(program.run_module(), tmp_path / "hook", None, None, 60)
    recorded = read_hook_file(run.record_files[0])
    records = recorded.records[:2].copy()
    records["thread"] = records["thread"][0]
    records["start_ticks"] = [2, 8]
    records["duration_ticks"] = [5, 5]
    ticking = dataclasses.replace(recorded, records=records, tsc_clock=True, origin_ticks=0, skip_ns=0,
                                  calibration=[(10**9, recorded.origin_ns + 3 * 10**8)])
    first, second = workgroups_of([ticking]).sort_values("start_ns").itertuples()
    assert (first.start_ns, first.duration_ns, second.start_ns) == (1, 1, 2)  # ends rounded: 2.1 -> 2 ns
    assert first.start_ns + first.duration_ns <= second.start_ns
