"""Bad input: one clear line naming the problem and the file, non-zero exit, earlier work kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

TRACELINK = [sys.executable, "-m", "tracelink.cli"]


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


def test_not_a_profile_directory(tmp_path):
    from tracelink import TracelinkError
    from tracelink.profile_dir import load_profile

    with pytest.raises(TracelinkError, match="not a profile directory"):
        load_profile(tmp_path)


def test_a_tool_failure_whose_message_is_not_utf8_is_one_line():
    """iree-compile's diagnostics can print an imported ONNX model's raw attribute bytes: the failure is
    still one line naming the file, not a decoding traceback."""
    from tracelink import TracelinkError
    from tracelink.tools import run_checked

    with pytest.raises(TracelinkError) as failed:
        run_checked(["sh", "-c", r"printf 'error: onnx-caffe2 \240\377 bytes\n' >&2; exit 1"], 30.0, "m.onnx", "compiling it")
    assert str(failed.value) == "m.onnx: sh failed compiling it: error: onnx-caffe2 \ufffd\ufffd bytes"
