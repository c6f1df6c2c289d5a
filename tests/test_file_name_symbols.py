"""Symbol names IREE turns into file names are checked in every syntax; all other symbols may hold anything."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from iree.compiler import ir

from tests.conftest import REPO, run_profile
from tests.test_bad_input import TRACELINK, error_line
from tracelink.errors import TracelinkError
from tracelink.compile.program_text import check_program_text

BERT_STYLE = REPO / "tests" / "data" / "bert_style_globals.mlir"
BODY = """
  ^bb0(%a: tensor<32x32xf32>, %b: tensor<32x32xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<32x32xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
    %m = linalg.matmul ins(%a, %b : tensor<32x32xf32>, tensor<32x32xf32>) outs(%z : tensor<32x32xf32>) -> tensor<32x32xf32>
    func.return %m : tensor<32x32xf32>
"""
FUNCTION_TYPE = "(tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>"
# From out/artifacts/phases, five levels up is the jail the test builds around the output directory.
ESCAPE = "../../../../../victim/notes"


def generic_program(module: str, function: str = "main") -> str:
    """A 32x32 matmul program written in generic form, module and function named by ``sym_name``."""
    return (
        f'"builtin.module"() <{{sym_name = "{module}"}}> ({{\n'
        f'  "func.func"() <{{function_type = {FUNCTION_TYPE}, sym_name = "{function}"}}> ({{{BODY}  }}) : () -> ()\n'
        "}) : () -> ()\n"
    )


def write_bytecode(text: str, path: Path) -> Path:
    context = ir.Context()
    module = ir.Module.parse(text, context)
    with path.open("wb") as file:
        module.operation.write_bytecode(file)
    return path


def digest(root: Path, skip: Path) -> dict[str, str]:
    """Every path under ``root`` but ``skip`` with a checksum of its content ("dir" for folders)."""
    return {
        str(path.relative_to(root)): "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*")) if not path.is_relative_to(skip)
    }


@pytest.mark.parametrize("syntax", ["generic", "bytecode"])
def test_a_module_name_climbing_out_is_refused_in_generic_form_and_bytecode(tmp_path, syntax):
    jail = tmp_path / "jail"
    (jail / "victim").mkdir(parents=True)
    (jail / "victim" / "notes.1.input.mlir").write_text("the user's own file\n")
    (jail / "work" / "sub").mkdir(parents=True)
    source = jail / "work" / "evil.mlir"
    source.write_text(generic_program(ESCAPE))
    if syntax == "bytecode":
        source = write_bytecode(source.read_text(), jail / "work" / "evil.mlirbc")
    out = jail / "work" / "sub" / "out"
    before = digest(jail, out)
    done = subprocess.run([*TRACELINK, "profile", str(source), "-o", str(out)], capture_output=True, text=True, cwd=jail / "work")
    line = error_line(done)
    assert done.returncode == 1
    assert f"{source}" in line and "builtin.module" in line and "victim/notes" in line
    assert (f"{source}:1:" in line) == (syntax == "generic")  # bytecode has no text line to name
    assert digest(jail, out) == before
    assert not out.exists() or not any(out.rglob("*.mlir"))


def test_a_function_name_is_a_file_name_in_generic_form_too(tmp_path):
    source = tmp_path / "fn.mlir"
    source.write_text(generic_program("m", function="../../f"))
    with pytest.raises(TracelinkError, match=r"fn\.mlir:2: symbol name '\.\./\.\./f' of func\.func contains a path separator"):
        check_program_text(source)


def test_only_names_that_reach_files_are_checked(tmp_path):
    source = tmp_path / "names.mlir"
    source.write_text(
        'module @m {\n'
        '  util.global private @"weights/layer_0/kernel" = dense<1.0> : tensor<4xf32>\n'
        '  func.func private @"tf/external/declaration"(tensor<4xf32>) -> tensor<4xf32>\n'
        '  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
        '    %w = util.global.load @"weights/layer_0/kernel" : tensor<4xf32>\n'
        '    %y = arith.addf %x, %w : tensor<4xf32>\n'
        '    return %y : tensor<4xf32>\n'
        '  }\n'
        '}\n'
    )
    check_program_text(source)  # globals and declarations never name a file
    source.write_text(source.read_text().replace("@main", '@"main/x"'))
    with pytest.raises(TracelinkError, match=r"names\.mlir:4: symbol name 'main/x' of func\.func"):
        check_program_text(source)


def test_a_stablehlo_encoder_with_tensorflow_style_global_names_profiles(tmp_path):
    profiled = run_profile(BERT_STYLE, tmp_path / "out", repetitions=3)
    cover = profiled.summary["coverage"]
    assert cover["call_sites"] >= 8 and cover["call_sites_mapped"] == cover["call_sites"]
    assert cover["events"] == 3 * cover["call_sites"] and cover["events_unmatched"] == 0
    lines = profiled.source_lines
    matmul_lines = set(lines.loc[lines["file"].str.endswith("bert.py") & (lines["total_ns"] > 0), "line"])
    assert {22, 23, 24, 25, 27, 31, 33} <= matmul_lines  # every dot_general's line got time
    assert {p.name.split(".")[0] for p in (tmp_path / "out" / "artifacts" / "phases").iterdir()} == {"bert_style"}


def test_an_output_path_holding_an_at_sign_profiles_and_diffs(tmp_path):
    # IREE's tools read --module=PATH@NAME as a native module's create function: such a path did not load
    out = tmp_path / "runs@today" / "mlp"
    profile = run_profile(REPO / "examples" / "mlp.mlir", out, repetitions=2)
    assert (profile.call_sites["count"] > 0).all()
    done = subprocess.run([*TRACELINK, "diff", str(out), str(out), "--rounds", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
