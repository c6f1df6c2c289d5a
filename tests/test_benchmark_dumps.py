"""Benchmark dumps written when a command first needs them (`tracelink.compile.benchmarks`), checked
against the ones iree-compile writes in a full build of the same program with the profile's flags."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from iree.compiler import ir

from tests.conftest import EXAMPLES, run_profile
from tracelink.compile.benchmarks import ensure_benchmark_dumps
from tracelink.ir_utils import new_context
from tracelink.tools import tool_path


def without_locations(path: Path) -> str:
    """The program of an MLIR file, printed without its locations."""
    return ir.Module.parseFile(str(path), new_context()).operation.get_asm(enable_debug_info=False)


def full_build_dumps(profile_artifacts: Path, program: Path, out: Path) -> list[Path]:
    """The benchmark dumps of iree-compile's full build of ``program`` with the profile's flags."""
    flags = json.loads((profile_artifacts / "manifest.json").read_text())["compiler"]["flags"]
    kept = [flag for flag in flags if not flag.startswith(("--dump-compilation-phases-to", "--iree-hal-dump-executable"))]
    out.mkdir()
    subprocess.run([tool_path("iree-compile"), str(program), "-o", str(out / "app.vmfb"), *kept, f"--iree-hal-dump-executable-benchmarks-to={out}"],
                   check=True, capture_output=True, timeout=600)
    return sorted(out.glob("*_benchmark.mlir"))


def test_dumps_written_later_are_the_full_builds_and_where_the_exports_say(tmp_path):
    program = EXAMPLES / "convnet.mlir"
    profile = run_profile(program, tmp_path / "out")
    executables = profile.artifacts / "executables"
    assert not list(executables.glob("*_benchmark.mlir"))  # the profile's compile writes none
    named = set(profile.exports["benchmark_file"])
    ensure_benchmark_dumps(profile.artifacts, named)
    written = sorted(executables.glob("*_benchmark.mlir"))
    iree = full_build_dumps(profile.artifacts, program, tmp_path / "full")
    assert len(iree) >= 3 and [path.name for path in written] == [path.name for path in iree]
    assert named == {f"executables/{path.name}" for path in written}  # each export names the file IREE writes
    for ours, theirs in zip(written, iree):
        assert without_locations(ours) == without_locations(theirs), ours.name
    before = {path: path.stat().st_mtime_ns for path in written}
    ensure_benchmark_dumps(profile.artifacts, [*named, "", float("nan")])  # all there (no name: passed over): nothing compiled again
    assert {path: path.stat().st_mtime_ns for path in written} == before


def test_a_link_at_a_dump_name_is_replaced_not_followed(tmp_path):
    profile = run_profile(EXAMPLES / "convnet.mlir", tmp_path / "out")
    first, *others = sorted(set(profile.exports["benchmark_file"]))
    outside = tmp_path / "outside.mlir"
    outside.write_text("kept\n")
    (profile.artifacts / first).symlink_to(outside)
    ensure_benchmark_dumps(profile.artifacts, [first, *others])
    assert outside.read_text() == "kept\n"
    assert not (profile.artifacts / first).is_symlink() and "hal.executable" in (profile.artifacts / first).read_text()
    assert not list(profile.artifacts.glob(".benchmarks.*"))  # the compiler's private folder is removed
