"""Memory of one call by source line, checked against IREE's own tool, and the CI gates of `tracelink diff`.

The programs are chains of four matmuls whose intermediates are known by construction: line 10 makes
T1 (1024 x N1 f32), line 12 a small 1024x16 from it, line 14 T2 (1024 x N2) from that, line 16 the
1024x8 result. T1 is dead once line 12 has run, so the packer can put T2 where T1 was, and the peak is
wherever the bigger of the two lives.

The HAL collector takes the memory from the timed run's first call; the tests check it against
`iree-profile memory` of a call run on its own, made here with IREE's tools alone.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import EXAMPLES, run_profile
from tracelink.commands.cli import main
from tracelink.commands.diff import REGRESSION
from tracelink.tools import tool_path

MiB = 1 << 20


def chain(n1: int, n2: int, k: int = 32, parameter: bool = False) -> str:
    """The four-matmul program; with ``parameter`` its first weight is the global ``model::b`` of an archive."""
    weight = "%b" if not parameter else "%bw"
    head = (f'util.global private @b = #flow.parameter.named<"model"::"b"> : tensor<{k}x{n1}xf32>\n'
            f"func.func @main(%a: tensor<1024x{k}xf32>, ") if parameter else f"func.func @main(%a: tensor<1024x{k}xf32>, %b: tensor<{k}x{n1}xf32>, "
    load = f"  %bw = util.global.load @b : tensor<{k}x{n1}xf32>\n" if parameter else ""

    def matmul(out: str, lhs: str, rhs: str, m: int, kk: int, n: int, line: int) -> str:
        return (f"  %e{out} = tensor.empty() : tensor<{m}x{n}xf32>\n"
                f"  %z{out} = linalg.fill ins(%zero : f32) outs(%e{out} : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> loc(\"model.py\":{line}:1)\n"
                f"  %{out} = linalg.matmul ins({lhs}, {rhs} : tensor<{m}x{kk}xf32>, tensor<{kk}x{n}xf32>) outs(%z{out} : tensor<{m}x{n}xf32>)"
                f" -> tensor<{m}x{n}xf32> loc(\"model.py\":{line}:1)\n")

    return (head + f"%c: tensor<{n1}x16xf32>, %d: tensor<16x{n2}xf32>, %w: tensor<{n2}x8xf32>) -> tensor<1024x8xf32> {{\n"
            + load + "  %zero = arith.constant 0.0 : f32\n"
            + matmul("t1", "%a", weight, 1024, k, n1, 10) + matmul("r1", "%t1", "%c", 1024, n1, 16, 12)
            + matmul("t2", "%r1", "%d", 1024, 16, n2, 14) + matmul("r2", "%t2", "%w", 1024, n2, 8, 16)
            + "  return %r2 : tensor<1024x8xf32>\n}\n")


def one_call_bundle(profile) -> Path:
    """A memory-events bundle of one call of the profiled program, with its inputs and parameters, made by
    `iree-run-module` itself."""
    from tracelink.compare.diff import run_inputs, run_parameters

    bundle = profile.directory.parent / f"{profile.directory.name}-one-call.ireeprof"
    command = [tool_path("iree-run-module"), f"--module={profile.artifacts / 'app.vmfb'}", f"--function={profile.summary['function']}",
               "--device=local-task", *(f"--input={value}" for value in run_inputs(profile)), *(f"--parameters={value}" for value in run_parameters(profile)),
               "--device_profiling_mode=memory-events", f"--device_profiling_output={bundle}"]
    subprocess.run(command, capture_output=True, check=True)
    return bundle


def iree_profile_memory(bundle: Path) -> dict:
    """`iree-profile memory --format=jsonl` of a bundle: its queue-allocation pool and allocation records."""
    done = subprocess.run([tool_path("iree-profile"), "memory", "--format=jsonl", str(bundle)], capture_output=True, text=True, check=True)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    pools = [r for r in records if r["type"] == "memory_pool" and r["kind"] == "queue_allocation"]
    allocations = [r for r in records if r["type"] == "memory_allocation" and r["kind"] == "queue_allocation"]
    return {"high_water": sum(p["lifecycle_high_water_bytes"] for p in pools), "allocations": allocations}


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("memory")
    programs = {"first": chain(1024, 512), "slow": chain(2048, 512, k=256)}
    made = {}
    for name, text in programs.items():
        (base / f"{name}.mlir").write_text(text)
        made[name] = run_profile(base / f"{name}.mlir", base / name, repetitions=3)
    made["first_again"] = run_profile(base / "first.mlir", base / "first_again", repetitions=3)
    weight = np.full((32, 256), 0.5, dtype=np.float32)
    import iree.runtime as rt

    index = rt.ParameterIndex()
    index.add_buffer("b", weight.tobytes())
    index.create_archive_file(str(base / "weights.irpa"))
    (base / "param.mlir").write_text(chain(256, 1024, parameter=True))
    made["param"] = run_profile(base / "param.mlir", base / "param", repetitions=3, parameters=[f"model={base / 'weights.irpa'}"])
    return made


def test_peak_equals_iree_profile_and_first_temporary_holds_it(profiles):
    profile = profiles["first"]
    memory = profile.summary["memory"]
    theirs = iree_profile_memory(one_call_bundle(profile))
    assert memory["peak_bytes"] == theirs["high_water"]
    # from the timed run's own events: no second run of the program
    assert memory["capture"] == "artifacts/run.ireeprof" and not (profile.artifacts / "memory.ireeprof").exists()
    assert memory["attributed"] and memory["peak_call_site"] == 1  # line 12's dispatch reads T1 while writing its 64 KiB
    # by construction: T1 (4 MiB) and line 12's 64 KiB are live together in the slab, and the 32 KiB result
    assert memory["split"]["transients"] == 4 * MiB + 64 * 1024
    assert memory["split"]["outputs"] == 32 * 1024
    assert memory["peak_bytes"] == 4 * MiB + 64 * 1024 + 32 * 1024
    lines = profile.memory_lines.set_index("line")
    assert lines.loc[10, "bytes_at_peak"] == 4 * MiB and lines.loc[10, "first_dispatch"] == 0 and lines.loc[10, "last_dispatch"] == 1
    assert lines.loc[14, "bytes_at_peak"] == 0 and lines.loc[14, "bytes_allocated"] == 2 * MiB  # T2 lives after T1 died
    assert profile.memory_lines.iloc[0]["line"] == 10
    assert memory["top"][0]["line"] == 10
    assert 0.5 * memory["peak_bytes"] <= lines["bytes_at_peak"].sum() == memory["live_at_peak_bytes"] <= memory["peak_bytes"]
    assert memory["resident_bytes"]["inputs"] == 4 * (1024 * 32 + 32 * 1024 + 1024 * 16 + 16 * 512 + 512 * 8)
    on_disk = pd.read_csv(profile.directory / "memory_lines.csv")
    assert list(on_disk.columns[:4]) == ["file", "line", "bytes_at_peak", "bytes_allocated"]
    assert pd.read_csv(profile.directory / "memory_components.csv")["bytes_at_peak"].sum() == memory["live_at_peak_bytes"]


def test_the_timed_runs_first_call_has_the_allocations_of_a_call_run_alone(profiles):
    from tracelink.collect.collectors import hal_collected
    from tracelink.collect.hal import read_hal_records
    from tracelink.compare.diff import run_exports

    profile = profiles["param"]
    calls = profile.summary["warmup"] + profile.summary["repetitions"]
    ours = hal_collected(profile.artifacts / "run.jsonl", {}, run_exports(profile), calls).memory
    alone = iree_profile_memory(one_call_bundle(profile))
    assert sorted((a.length, a.closed_ns is None) for a in ours.allocations) == sorted(
        (r["lifecycle_total_open_bytes"], r["open_at_end"]) for r in alone["allocations"])
    assert ours.high_water()[0] == alone["high_water"]
    # over all its calls the timed run holds every call's result: more than one call's peak
    every_call = read_hal_records(profile.artifacts / "run.jsonl").memory_events
    assert sum(r["event_type"] == "queue_alloca" for r in every_call) == calls * len(ours.allocations)
    assert iree_profile_memory(profile.artifacts / "run.ireeprof")["high_water"] > ours.high_water()[0]


def test_reader_sees_the_allocations_iree_profile_sees(profiles, tmp_path):
    from tracelink.collect.hal import export_bundle
    from tracelink.collect.memory import read_memory_events

    bundle = one_call_bundle(profiles["param"])
    (tmp_path / "run.ireeprof").write_bytes(bundle.read_bytes())
    capture = read_memory_events(export_bundle(tmp_path, 60.0))
    theirs = iree_profile_memory(bundle)
    ours = {(a.allocation_id, a.length, a.closed_ns is None) for a in capture.allocations}
    assert ours == {(r["allocation_id"], r["lifecycle_total_open_bytes"], r["open_at_end"]) for r in theirs["allocations"]}
    assert capture.high_water()[0] == theirs["high_water"]


def test_a_collector_without_memory_events_runs_one_call_for_them(profiles, tmp_path):
    profile = run_profile(profiles["first"].directory.parent / "first.mlir", tmp_path / "hooked", repetitions=2, collector="hook")
    memory = profile.summary["memory"]
    assert memory["capture"] == "artifacts/memory.ireeprof"
    assert memory["peak_bytes"] == iree_profile_memory(profile.artifacts / "memory.ireeprof")["high_water"] == profiles["first"].summary["memory"]["peak_bytes"]


def test_second_temporary_and_parameter_archive(profiles):
    profile = profiles["param"]
    memory = profile.summary["memory"]
    assert memory["peak_bytes"] == iree_profile_memory(one_call_bundle(profile))["high_water"]
    lines = profile.memory_lines.set_index("line")
    # here T2 (1024x1024, 4 MiB) is the bigger one: line 14 holds the peak, line 10's 1 MiB is dead by then
    assert profile.memory_lines.iloc[0]["line"] == 14 and lines.loc[14, "bytes_at_peak"] == 4 * MiB
    assert lines.loc[10, "bytes_at_peak"] == 0 and lines.loc[10, "bytes_allocated"] == 1 * MiB
    # the weight comes from the archive, loaded once: resident, not among the call's allocations
    assert memory["resident_bytes"]["parameters"] == 32 * 256 * 4
    assert memory["split"]["parameters"] == 0


def test_padded_tensors_count_their_zero_fill(tmp_path):
    # examples/convnet.mlir pads 32x32x16 images to 34x34x16 f32 (73,984 bytes): IREE zero-fills each
    # padded tensor with stream.cmd.fill, then a dispatch writes its interior; the whole of it is live
    profile = run_profile(EXAMPLES / "convnet.mlir", tmp_path / "convnet", repetitions=2)
    memory = profile.summary["memory"]
    assert memory["peak_bytes"] == iree_profile_memory(one_call_bundle(profile))["high_water"]
    assert memory["live_at_peak_bytes"] == memory["peak_bytes"]
    lines = profile.memory_lines.set_index("line")
    assert lines.loc[12, "bytes_at_peak"] == 34 * 34 * 16 * 4  # block1.pad
    assert lines.loc[13, "bytes_at_peak"] == 2 * 34 * 34 * 16 * 4  # the convolutions' padded outputs


def test_summary_and_report_show_the_peak_and_its_holder(profiles):
    from lxml import html

    from tracelink.report.summary import memory_text

    profile = profiles["first"]
    line = memory_text(profile.summary["memory"])
    assert line.startswith("memory: peak 4.09 MiB in one call") and "at dispatch #1: model.py:10 4 MiB" in line
    page = html.parse(str(profile.directory / "report.html"))
    chart = page.xpath('//svg[@aria-label="live bytes over the dispatch sequence of one call"]')[0]
    assert "peak 4.09 MiB at dispatch 1" in "".join(chart.itertext())
    hover = chart.xpath('.//rect[@data-position="1"]/title')[0].text  # what is live at the peak, by line
    assert hover.startswith("dispatch 1: 4.09 MiB live · call site 1") and "model.py:10 4 MiB" in hover
    assert profiles["first"].summary["memory"]["timeline_holders"][2][0] == ["model.py", 14, 2 * MiB]
    rows = page.xpath('//table[contains(@class, "memory-lines")]/tbody/tr')
    assert rows[0].xpath("td")[0].text == "model.py:10" and rows[0].xpath("td")[1].text == "4 MiB"


def test_json_carries_memory(profiles, capsys):
    assert main(["report", str(profiles["first"].directory), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["memory"]["peak_bytes"] == profiles["first"].summary["memory"]["peak_bytes"]


def run_diff(capsys, base: Path, tuned: Path, *flags: str) -> tuple[int, dict]:
    status = main(["diff", str(base), str(tuned), "--rounds", "4", "--iterations", "5", "--json", *flags])
    return status, json.loads(capsys.readouterr().out)


def test_gates_pass_an_a_a_diff(profiles, capsys):
    status, document = run_diff(capsys, profiles["first"].directory, profiles["first_again"].directory,
                                "--fail-if-slower", "10", "--fail-if-larger", "1")
    assert status == 0, document["gates"]
    assert document["gates"]["slower"]["failed"] is False and document["gates"]["larger"]["growth_pct"] == 0


def test_gates_fail_a_slower_and_larger_build(profiles, capsys):
    status, document = run_diff(capsys, profiles["first"].directory, profiles["slow"].directory,
                                "--fail-if-slower", "10", "--fail-if-larger", "10")
    gates = document["gates"]
    assert status == REGRESSION
    assert gates["slower"]["failed"] and gates["slower"]["slowdown_bound_pct"] > 10
    assert gates["larger"]["failed"] and gates["larger"]["tuned_peak_bytes"] > gates["larger"]["base_peak_bytes"]
    # without the gates the same comparison is not a failure
    assert main(["diff", str(profiles["first"].directory), str(profiles["slow"].directory), "--rounds", "0"]) == 0



def test_a_holder_without_a_line_names_a_few_of_its_ops():
    from tracelink.report.summary import some_ops

    assert some_ops("n0;n2;n3;n5;n7") == "n0;n2;n3 and 2 more ops" and some_ops("n0;n2") == "n0;n2"
