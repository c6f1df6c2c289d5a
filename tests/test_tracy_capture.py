"""A real Tracy capture of a freshly compiled program, and the capture's failure paths."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tracelink.errors import TracelinkError
from tracelink.collect.tracy import read_capture
from tracelink.collect.tracy.capture import capture_tracy, tracy_tools
from tracelink.collect.tracy.views import dispatch_zones, rebuild_executions

APP = Path(__file__).parent / "data" / "tracy_matmul_app.mlir"
COMPILE_FLAGS = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
]
INPUTS = ["--input=256x512xf32=1", "--input=512x256xf32=1", "--input=256xf32=1"]
IREE_COMPILE = Path(sys.executable).parent / "iree-compile"  # installed with iree-base-compiler
# hal.executable.lookup.function ... function(@executable::@variant::@export): one per dispatch call site
LOOKUP = re.compile(r"hal\.executable\.lookup\.function .*function\(@[\w$.-]+::@[\w$.-]+::@([\w$.-]+)\)")


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and int(entry) != os.getpid():
                found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The app compiled for llvm-cpu, and its dispatch call sites' exports in execution order."""
    work = tmp_path_factory.mktemp("tracy_app")
    vmfb = work / "app.vmfb"
    subprocess.run([str(IREE_COMPILE), str(APP), *COMPILE_FLAGS, "-o", str(vmfb)], check=True, timeout=300)
    hal = subprocess.run(
        [str(IREE_COMPILE), str(APP), *COMPILE_FLAGS, "--compile-to=hal"], check=True, capture_output=True, text=True,
        timeout=300,
    ).stdout
    return vmfb, LOOKUP.findall(hal)


def test_fresh_capture_has_dispatch_zones_matching_call_sites(compiled: tuple[Path, list[str]], tmp_path: Path) -> None:
    vmfb, call_site_exports = compiled
    assert len(call_site_exports) == 1 and call_site_exports[0].startswith("main_dispatch_0_matmul")
    command = [
        str(tracy_tools().tool("iree-benchmark-module")), f"--module={vmfb}", "--device=local-task", "--function=main",
        *INPUTS, "--benchmark_min_time=5x",
    ]
    output = tmp_path / "out" / "run.tracy"
    assert capture_tracy(command, output, timeout_s=120) == output
    assert processes_mentioning(str(output)) == []  # the capture is gone

    capture = read_capture(output)
    assert capture.header.version == (0, 11, 2)
    assert capture.header.program == "iree-benchmark-module"
    assert capture.decompressed_size > capture.plots_end_offset
    dispatches = dispatch_zones(capture, call_site_exports)
    assert len(dispatches) >= 5  # at least one per benchmark repetition
    assert (dispatches["duration_ns"] > 0).all()
    assert set(dispatches["srcloc_name"]) == {"iree_hal_cmd_execute_dispatch_tiles"}
    events = rebuild_executions(capture, call_site_exports).events
    invokes = capture.zones[capture.zones["name"] == "iree_vm_invoke"]
    assert len(events) == len(invokes) >= 5  # one dispatch per call of the function
    assert events["call_site"].notna().all() and set(events["call_site"]) == {0}
    assert set(events["export"]) == set(call_site_exports)
    assert events["iteration"].tolist() == list(range(len(events)))
    assert events["tile_duration_sum_ns"].sum() == dispatches["duration_ns"].sum()


def test_failing_program_is_reported_and_nothing_is_left_running(tmp_path: Path) -> None:
    command = [str(tracy_tools().tool("iree-run-module")), f"--module={tmp_path / 'missing.vmfb'}", "--function=main"]
    output = tmp_path / "failed.tracy"
    with pytest.raises(TracelinkError, match=r"iree-run-module failed with exit code [1-9]"):
        capture_tracy(command, output, timeout_s=60)
    assert processes_mentioning(str(output)) == []


def test_timeout_kills_both_processes(tmp_path: Path) -> None:
    marker = "31.4159"  # a sleep nobody else runs
    output = tmp_path / "hang.tracy"
    with pytest.raises(TracelinkError, match=r"sleep did not finish within 1 s"):
        capture_tracy(["sleep", marker], output, timeout_s=1)
    assert processes_mentioning(marker) == []
    assert processes_mentioning(str(output)) == []
    assert not output.exists()
