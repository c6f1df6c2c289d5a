"""`tracelink repro`: a folder of one call site's dispatch that builds and runs with its own commands."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import EXAMPLES, run_profile
from tests.test_bad_input import error_line, run_cli
from tracelink.profile_dir.profile import Profile


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Profile:
    return run_profile(EXAMPLES / "mlp.mlir", tmp_path_factory.mktemp("repro") / "mlp", repetitions=3)


def test_repro_of_the_hottest_call_site_compiles_and_runs(mlp, tmp_path):
    hottest = mlp.call_sites.sort_values("total_ns", ascending=False).iloc[0]
    folder = tmp_path / "repro"
    done = run_cli("repro", str(mlp.directory), f"#{int(hottest['call_site'])}", "-o", str(folder))
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "dispatch.mlir", "run.sh"]
    readme = (folder / "README.md").read_text()
    # Both hidden matmuls have the same FLOPs, so which one is hottest depends on the run: check the README
    # against that call site's own row (its source lines) and the layer those lines belong to in mlp.mlir.
    lines = [line for line in str(hottest["source_lines"]).split(";") if line]
    layers = {"model.py:10": "layer1.fc", "model.py:14": "layer2.fc", "model.py:18": "head.fc"}
    assert hottest["export"] in readme and lines and all(line.rsplit("/", 1)[-1] in readme for line in lines)
    assert any(layers[key] in readme for key in layers if any(line.endswith(key) for line in lines))
    ran = subprocess.run(["sh", str(folder / "run.sh")], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert (folder / "dispatch.vmfb").is_file()
    assert "real_time_median" in ran.stdout and hottest["export"] in ran.stdout


def test_repro_by_source_line_takes_its_hottest_call_site(mlp):
    done = run_cli("repro", str(mlp.directory), "model.py:11")  # the bias add, fused into the first matmul
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("call_site_0")
    assert "model.py:11" in (mlp.directory / "repro" / "call_site_0" / "README.md").read_text()


@pytest.mark.parametrize("target, expected", [("99", "no call site #99"), ("model.py:999", "no dispatch call site maps to"), ("x", "not a call site")])
def test_bad_repro_target_is_one_line(mlp, target, expected):
    assert expected in error_line(run_cli("repro", str(mlp.directory), target))
