"""Bad input: one clear line naming the problem and the file, non-zero exit, earlier work kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

TRACELINK = [sys.executable, "-m", "tracelink.commands.cli"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TRACELINK, *args], capture_output=True, text=True, timeout=300)


def error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tracelink: error:")
    return lines[0]


def test_missing_file(tmp_path):
    line = error_line(run_cli("profile", str(tmp_path / "nope.mlir"), "-o", str(tmp_path / "out")))
    assert "nope.mlir" in line and "not found" in line


def test_parse_error_names_file_and_position(tmp_path):
    program = tmp_path / "broken.mlir"
    program.write_text("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %y : tensor<4xf32>\n}\n")
    line = error_line(run_cli("profile", str(program), "-o", str(tmp_path / "out")))
    assert "broken.mlir" in line and "parse error" in line and ":2:" in line


def test_compiler_failure_shows_its_diagnostic(tmp_path):
    program = tmp_path / "unsupported.mlir"
    # parses, but iree-compile cannot legalize a custom call it knows nothing about
    program.write_text("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = stablehlo.custom_call @mystery(%x) : (tensor<4xf32>) -> tensor<4xf32>\n  return %y : tensor<4xf32>\n}\n")
    out = tmp_path / "out"
    line = error_line(run_cli("profile", str(program), "-o", str(out)))
    assert "iree-compile failed" in line and "unsupported.mlir:2:" in line
    assert (out / "artifacts" / "compile.log").is_file()


def test_unknown_function(tmp_path):
    line = error_line(run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(tmp_path / "out"), "--function", "nothere"))
    assert "nothere" in line and "main" in line


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        (["32x256xf32=1"], "1 inputs given, the function takes 6"),
        (["32x255xf32=1", "256x512xf32=1", "512xf32=1", "512x256xf32=1", "256xf32=1", "256x10xf32=1"], "input 0: expected 32x256xf32"),
        (["32x256xi32=1", "256x512xf32=1", "512xf32=1", "512x256xf32=1", "256xf32=1", "256x10xf32=1"], "input 0: expected 32x256xf32"),
    ],
)
def test_wrong_inputs(tmp_path, inputs, expected):
    out = tmp_path / "out"
    line = error_line(run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), *(f"--input={i}" for i in inputs)))
    assert expected in line
    # the compiled artifacts were written before the inputs were checked, and stay
    assert (out / "artifacts" / "app.vmfb").is_file() and (out / "artifacts" / "manifest.json").is_file()


def test_run_failure_and_timeout_keep_artifacts(tmp_path):
    out = tmp_path / "out"
    missing = tmp_path / "missing.bin"
    inputs = [f"32x256xf32=@{missing}", "256x512xf32=1", "512xf32=1", "512x256xf32=1", "256xf32=1", "256x10xf32=1"]
    line = error_line(run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), *(f"--input={i}" for i in inputs)))
    assert "iree-benchmark-module" in line and "failed" in line and "run.log" in line
    assert (out / "artifacts" / "app.vmfb").is_file() and (out / "provenance.json").is_file()

    line = error_line(run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), "--repetitions", "100000", "--timeout", "2"))
    assert "did not finish within 2 s" in line
    assert (out / "artifacts" / "app.vmfb").is_file()
    assert not list(Path(out).glob("*.tmp"))


@pytest.mark.parametrize("collector", ["hal", "hook"])
def test_a_crashing_dispatch_is_named_with_its_line(tmp_path, collector):
    """A dispatch reading far out of bounds kills the run with SIGSEGV. The error names that dispatch and
    the program line it comes from: the hook collector's run names it itself; after any other, the run is
    repeated once under the hook, on the program built again with system-library executables."""
    out = tmp_path / "out"
    program = Path(__file__).parent / "data" / "out_of_bounds_gather.mlir"
    line = error_line(run_cli("profile", str(program), "-o", str(out), "--collector", collector,
                              "--input=16xf32=1", "--input=4xi64=1000000000000"))
    assert "crashed (SIGSEGV)" in line and "dispatch main_dispatch_0_elementwise_4_i64xf32" in line
    assert line.endswith(f"made from linalg.generic at {program}:4")
    assert (out / "artifacts" / "app.vmfb").is_file() and (out / "provenance.json").is_file()
    rerun = out / "artifacts" / "crash"
    assert rerun.is_dir() == (collector == "hal")
    if collector == "hal":
        assert (rerun / "app.vmfb").is_file() and list((rerun / "hook").glob("hook-*.tlhk"))


def test_not_a_profile_directory(tmp_path):
    from tracelink.errors import TracelinkError
    from tracelink.profile_dir.profile import load_profile

    with pytest.raises(TracelinkError, match="not a profile directory"):
        load_profile(tmp_path)


def test_a_tool_failure_whose_message_is_not_utf8_is_one_line():
    """iree-compile's diagnostics can print an imported ONNX model's raw attribute bytes: the failure is
    still one line naming the file, not a decoding traceback."""
    from tracelink.errors import TracelinkError
    from tracelink.tools import run_checked

    with pytest.raises(TracelinkError) as failed:
        run_checked(["sh", "-c", r"printf 'error: onnx-caffe2 \240\377 bytes\n' >&2; exit 1"], 30.0, "m.onnx", "compiling it")
    assert str(failed.value) == "m.onnx: sh failed compiling it: error: onnx-caffe2 \ufffd\ufffd bytes"


def test_an_iree_compile_crash_names_its_signal_and_pass():
    """A crash prints no error line, only a backtrace (this one is IREE 3.13's, building real-weight
    inception_v2 with conv data tiling and channels-last): the one line says what crashed where."""
    from tracelink.tools import compiler_failure

    backtrace = (Path(__file__).parent / "data" / "iree_compile_crash.txt").read_text()
    assert backtrace.startswith("Please report issues")
    assert compiler_failure(backtrace, -11) == "iree-compile crashed (SIGSEGV) in MaterializeDeviceEncodingPass"
    assert compiler_failure("x.mlir:3:1: note: here\nx.mlir:2:1: error: bad op\n", 1) == "x.mlir:2:1: error: bad op"


def test_a_variants_compile_log_runs_again_as_a_shell_reads_it(tmp_path):
    """compile.log's first line is the command, quoted: a pipeline flag's parentheses survive a shell."""
    import shlex

    from tracelink.errors import TracelinkError
    from tracelink.compile.targets import TARGET_FLAGS
    from tracelink.tune.spec import compile_variant

    program = Path(__file__).parent / "data" / "two_convs.mlir"
    pipeline = "--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))"
    compile_variant(program, list(TARGET_FLAGS), [pipeline], tmp_path / "ok", 300.0, "channels-last")
    command = (tmp_path / "ok" / "compile.log").read_text().splitlines()[0]
    done = subprocess.run(["bash", "-c", command.replace(str(tmp_path / "ok" / "app.vmfb"), str(tmp_path / "again.vmfb"))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "again.vmfb").stat().st_size > 0 and pipeline in shlex.split(command)
    with pytest.raises(TracelinkError) as failed:
        compile_variant(program, list(TARGET_FLAGS), ["--iree-no-such-flag"], tmp_path / "bad", 300.0, "a typo")
    assert "\n" not in str(failed.value) and str(failed.value).startswith("a typo: the program ")
    assert str(failed.value).endswith(f"(see {tmp_path / 'bad' / 'compile.log'})")


def test_a_function_that_runs_no_dispatch_is_one_error_keeping_the_build(tmp_path):
    source = tmp_path / "identity.mlir"
    source.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n")
    done = run_cli("profile", str(source), "-o", str(tmp_path / "out"))
    assert "ran no dispatch, so there is nothing to profile" in error_line(done)
    assert (tmp_path / "out" / "artifacts" / "app.vmfb").is_file()  # what was built is kept
