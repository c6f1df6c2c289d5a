"""GPU profiles on Vulkan, run on Mesa's lavapipe (a Vulkan driver on the CPU, installed by `make test`).

The MLP example is profiled with ``--device vulkan`` and with the default llvm-cpu build, and checked
against IREE's own outputs read here independently: the ``hal`` phase's dispatches, the HAL profile's
JSON lines and ``iree-run-module --dump_devices``. CUDA and HIP have no device here: their builds are
checked up to the provenance graph.
"""

from __future__ import annotations

import json
import os
import subprocess

import jsonschema
import pytest
from iree.compiler import ir

from tests import tracy_synth
from tests.conftest import EXAMPLES, run_profile
from tests.test_attribution import PhaseReading
from tests.test_bad_input import error_line, run_cli
from tracelink.collect.machine.gpu import compute_units_and_cache, parse_device_listing
from tracelink.collect.tracy import read_capture
from tracelink.collect.tracy.gpu import gpu_executions
from tracelink.compile import CompileOptions, compile_program
from tracelink.provenance.build import build_provenance
from tracelink.provenance.program import read_input_program
from tracelink.report.fmt import ns
from tracelink.report.json_output import SCHEMA_PATH
from tracelink.tools import tool_path

REPETITIONS = 4
PROGRAM = EXAMPLES / "mlp.mlir"


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """The MLP profiled on Vulkan (lavapipe) and on llvm-cpu (local-task)."""
    base = tmp_path_factory.mktemp("vulkan")
    return {
        device: run_profile(PROGRAM, base / device, repetitions=REPETITIONS, compile=CompileOptions(device=device))
        for device in ("vulkan", "local-task")
    }


@pytest.fixture(scope="module")
def vulkan(side_by_side):
    return side_by_side["vulkan"]


def jsonl_records(profile, record_type: str) -> list[dict]:
    lines = (profile.directory / "artifacts" / "run.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["record_type"] == record_type]


def test_vulkan_build_targets_spirv_and_profile_names_the_device(vulkan):
    flags = vulkan.manifest["compiler"]["flags"]
    assert "--iree-hal-target-device=vulkan" in flags and not any("llvmcpu" in flag for flag in flags)
    listing = subprocess.run([tool_path("iree-run-module"), "--dump_devices=vulkan"], capture_output=True, text=True, timeout=60).stdout
    name = next(line.split(":", 1)[1].strip() for line in listing.splitlines() if line.startswith("name:"))
    target = json.loads((vulkan.directory / "profile.json").read_text())["target"]
    assert target["backend"] == "vulkan-spirv" and target["device"] == "vulkan" and target["device_name"] == name
    assert "llvmpipe" in name  # lavapipe's device: every number below is the CPU's
    assert vulkan.summary["machine"]["kind"] == "gpu" and vulkan.summary["machine"]["cpu"] == name


def test_call_sites_are_the_hal_dispatches_each_run_once_per_iteration(vulkan):
    context = ir.Context()
    context.allow_unregistered_dialects = True
    hal = PhaseReading(vulkan.directory / "artifacts" / "phases", context)
    assert list(vulkan.call_sites.sort_values("call_site")["export"]) == hal.dispatch_exports
    events = vulkan.events
    assert events["call_site"].notna().all() and len(events) == REPETITIONS * len(hal.dispatch_exports)
    per_iteration = events.groupby("iteration")["call_site"].apply(sorted)
    assert len(per_iteration) == REPETITIONS and all(sites == list(range(len(hal.dispatch_exports))) for sites in per_iteration)


def test_events_are_the_device_timestamped_dispatch_records(vulkan):
    records = jsonl_records(vulkan, "dispatch_event")
    assert records and all(r["device_tick_domain"] == "device_tick" for r in records)
    measured = sorted(r["duration_ns"] for r in records)  # warm-up included: the events are a subset
    durations = sorted(int(d) for d in vulkan.events["duration_ns"])
    assert all(d in measured for d in durations)
    assert not jsonl_records(vulkan, "host_execution_event")  # no host time passed off as device time


def test_device_time_is_within_wall_time_and_overhead_is_apart(vulkan):
    times = vulkan.summary["device_time"]
    assert times["clock"] == "device timestamps" and times["iterations"] == REPETITIONS
    per_iteration = vulkan.events.groupby("iteration")["duration_ns"].sum().astype(float)
    # the medians are of every measured iteration but the last, whose wall time is cut at its device end
    assert times["dispatch_ns_per_iteration"] == pytest.approx(per_iteration.sort_index().iloc[:-1].median())
    parts = [times[f"{part}_ns_per_iteration"] for part in ("dispatch", "queue", "submit", "host")]
    assert all(part >= 0 for part in parts)
    # lavapipe's device timestamps are the CPU's, written by worker threads that a loaded machine preempts
    # between a timestamp and the work: a device interval then reads longer than the host period around it
    # (1.12x seen at load average 15); a device busier than the run's wall time by more is a wrong clock
    assert times["dispatch_ns_per_iteration"] + times["queue_ns_per_iteration"] <= 1.25 * times["wall_ns_per_iteration"]
    # each measured device execute spans its dispatches (device clock), read from the records themselves
    executes = {r["submission_id"]: r["duration_ns"] for r in jsonl_records(vulkan, "queue_device_event") if r["op"] == "execute"}
    by_submission: dict[int, int] = {}
    for record in jsonl_records(vulkan, "dispatch_event"):
        by_submission[record["submission_id"]] = by_submission.get(record["submission_id"], 0) + record["duration_ns"]
    assert by_submission and all(total <= executes[submission] for submission, total in by_submission.items())


def test_report_and_summary_show_device_time_and_overhead_separately(vulkan):
    html = (vulkan.directory / "report.html").read_text()
    times = vulkan.summary["device_time"]
    assert "Device time and overhead per iteration" in html
    for label, key in (("device dispatch time", "dispatch"), ("device queue overhead", "queue"), ("submission latency", "submit"), ("host time", "host")):
        assert label in html and ns(times[f"{key}_ns_per_iteration"]) in html
    done = run_cli("profile", str(PROGRAM), "-o", str(vulkan.directory.parent / "cli"), "--device", "vulkan", "--repetitions", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert "llvmpipe" in done.stderr and "device dispatch time" in done.stderr and "host time" in done.stderr
    document = json.loads(done.stdout)
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    assert document["summary"]["target"]["device"] == "vulkan" and document["summary"]["device_time"]["iterations"] == 2


def test_same_program_on_llvm_cpu_maps_to_the_same_ops_and_lines(side_by_side):
    gpu, cpu = side_by_side["vulkan"], side_by_side["local-task"]
    assert list(gpu.call_sites["export"]) == list(cpu.call_sites["export"])
    assert json.loads((cpu.directory / "profile.json").read_text())["target"]["backend"] == "llvm-cpu"
    assert "device_time" not in cpu.summary
    for profile in (gpu, cpu):
        assert profile.summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    lines = {name: set(zip(p.source_lines["file"], p.source_lines["line"], p.source_lines["total_ns"] > 0)) for name, p in side_by_side.items()}
    assert lines["vulkan"] == lines["local-task"]


def test_trace_pprof_and_target_code_of_a_gpu_profile(vulkan):
    trace = json.loads((vulkan.directory / "trace.json").read_text())
    dispatches = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "dispatch"]
    assert len(dispatches) == len(vulkan.events) and all(e["args"]["queue"] == "device 0 queue 0" for e in dispatches)
    assert (vulkan.directory / "profile.pb.gz").stat().st_size > 0
    targets = vulkan.exports["export"].map(lambda e: vulkan.graph.nodes[f"export:{e}"].get("target_file", ""))
    assert all(targets) and all("spirv.mlir" in t and "spirv." in (vulkan.artifacts / t).read_text() for t in targets)


def test_repro_writes_and_runs_the_vulkan_benchmark(vulkan, tmp_path):
    folder = tmp_path / "repro"
    done = run_cli("repro", str(vulkan.directory), "0", "-o", str(folder))
    assert done.returncode == 0, done.stderr
    script = (folder / "run.sh").read_text()
    assert "--iree-hal-target-device=vulkan" in script and "--device=vulkan" in script
    ran = subprocess.run(["sh", str(folder / "run.sh")], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "real_time_median" in ran.stdout


def test_diff_runs_both_gpu_profiles_again_on_the_gpu(side_by_side, tmp_path):
    gpu = side_by_side["vulkan"]
    done = run_cli("diff", str(gpu.directory), str(gpu.directory), "--rounds", "2", "--iterations", "2", "-o", str(tmp_path / "diff.csv"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "diff.csv").read_text().count("\n") > 1


def test_tune_says_llvm_cpu_only_and_does_nothing(vulkan):
    before = sorted(p.name for p in vulkan.directory.iterdir())
    assert "supports llvm-cpu only for now" in error_line(run_cli("tune", str(vulkan.directory)))
    assert sorted(p.name for p in vulkan.directory.iterdir()) == before


@pytest.mark.parametrize("args, expected", [
    (["--device", "vulkan", "--collector", "hook"], "--device vulkan gives per-dispatch device time to --collector hal only"),
    (["--device", "vulkan", "--collector", "tracy"], "no Tracy GPU zones"),
    (["--device", "cuda", "--collector", "hal"], "CUDA driver has no HAL-native profiling"),
    (["--device", "hip"], "--device hip needs --target-chip"),
    (["--target-chip", "sm_80"], "are for GPU devices"),
])
def test_device_options_that_do_not_fit_fail_in_one_line_before_writing(tmp_path, args, expected):
    out = tmp_path / "out"
    assert expected in error_line(run_cli("profile", str(PROGRAM), "-o", str(out), *args))
    assert not out.exists()


@pytest.mark.parametrize("device, chip", [("cuda", "sm_80"), ("hip", "gfx942")])
def test_cuda_and_hip_builds_give_the_same_call_sites(tmp_path, device, chip):
    """No CUDA or HIP device here: their compile and provenance are what can be checked."""
    compiled = compile_program(PROGRAM, tmp_path / "artifacts", CompileOptions(device=device, target_chip=chip))
    assert any(flag.endswith(f"={chip}") for flag in compiled.flags)
    context = ir.Context()
    context.allow_unregistered_dialects = True
    hal = PhaseReading(compiled.phases, context)
    provenance = build_provenance(read_input_program(PROGRAM), compiled.artifacts, "main")
    assert [site.export for site in provenance.call_sites] == hal.dispatch_exports and len(hal.dispatch_exports) == 3
    assert all(data.get("benchmark_file") for _, data in provenance.graph.nodes(data=True) if data.get("kind") == "export")


def test_cuda_and_hip_dispatches_are_the_tracy_gpu_zones_named_by_export(tmp_path):
    """What the tracy collector reads on CUDA/HIP (no device here: a capture written in Tracy's format
    the way IREE's stream tracing fills it: one GPU zone per kernel launch, named by its export)."""
    exports = ["main_dispatch_0_matmul", "main_dispatch_1_add"]
    locations = [tracy_synth.SourceLocation("iree_vm_invoke", "iree_vm_invoke", "invocation.c", 1),
                 *(tracy_synth.SourceLocation(None, export, "mlp.mlir", 10) for export in exports),
                 tracy_synth.SourceLocation(None, "iree_hal_cuda_stream_command_buffer", "cb.c", 5)]
    invokes = [tracy_synth.Zone(1, 1_000 + 10_000 * i, 9_000 + 10_000 * i) for i in range(3)]
    launches = [tracy_synth.Zone(2, 500, 600)]  # an initializer's launch at load: outside every call
    for i in range(3):  # call sites: matmul, add, matmul; GPU durations 300, 50, 200 + i
        at = 1_100 + 10_000 * i
        kernels = [tracy_synth.Zone(2, at, at + 300), tracy_synth.Zone(3, at + 400, at + 450), tracy_synth.Zone(2, at + 500, at + 700 + i)]
        launches.append(tracy_synth.Zone(4, at - 50, at + 800 + i, kernels))  # the coarse command-buffer zone around them
    path = tmp_path / "cuda.tracy"
    tracy_synth.write_capture(path, {(1, "main"): invokes}, locations, gpu={7: launches})
    rebuilt = gpu_executions(read_capture(path), [exports[0], exports[1], exports[0]])
    events = rebuilt.events
    assert rebuilt.outside_iterations == 1
    assert list(events["call_site"]) == [0, 1, 2] * 3 and list(events["iteration"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert list(events["duration_ns"]) == [300, 50, 200, 300, 50, 201, 300, 50, 202]
    assert events["start_ns"].iloc[0] == 0 and events["start_ns"].is_monotonic_increasing


def test_local_sync_runs_on_local_sync(tmp_path):
    profile = run_profile(PROGRAM, tmp_path / "sync", repetitions=2, compile=CompileOptions(device="local-sync"))
    assert "--device=local-sync" in (profile.artifacts / "run.log").read_text()
    assert profile.summary["target"]["device"] == "local-sync" and profile.summary["target"]["backend"] == "llvm-cpu"
    assert len(profile.events) == 2 * len(profile.call_sites) and profile.events["call_site"].notna().all()


def test_device_listing_gives_name_compute_units_and_l2(tmp_path):
    """Vulkan's listing as the installed runtime prints it; CUDA's in the format of IREE's
    cuda_driver.c dump (no CUDA device here to print one)."""
    listing = subprocess.run([tool_path("iree-run-module"), "--dump_devices=vulkan"], capture_output=True, text=True, timeout=60).stdout
    vulkan = parse_device_listing(listing)
    assert vulkan["type"] == "cpu" and "llvmpipe" in vulkan["name"]
    assert compute_units_and_cache(vulkan)[0] == len(os.sched_getaffinity(0))  # lavapipe: one thread per core
    cuda = parse_device_listing(
        "# ====\n# Enumerated devices for driver 'cuda'\n# ====\n\n# ----\n# --device=cuda://GPU-00ff\n#   NVIDIA H100 80GB HBM3\n# ----\n"
        "\n- memory-l2-cache-size: 52428800 bytes\n\n- gpu-multiprocessor-count: 132\n- gpu-clock-rate: 1980000 kHz\n- gpu-warp-size: 32\n"
        "# ----\n# --device=cuda://GPU-0100\n#   another\n# ----\n\n- gpu-multiprocessor-count: 8\n"
    )
    assert cuda["name"] == "NVIDIA H100 80GB HBM3" and compute_units_and_cache(cuda) == (132, 52428800.0)
    assert compute_units_and_cache({"name": "a GPU on Vulkan"}) == (0, 0.0)
