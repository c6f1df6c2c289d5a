"""Hostile programs and directories: nothing written or read outside the output, no stale profile, one line."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_bad_input import TRACELINK, error_line, run_cli

MATMUL = "  %{n} = linalg.matmul ins(%a, %b : tensor<32x32xf32>, tensor<32x32xf32>) outs(%z : tensor<32x32xf32>) -> tensor<32x32xf32>{loc}\n"


def program(module: str, function: str = "main", matmuls: int = 1, loc: str = "") -> str:
    """A program of ``matmuls`` chained 32x32 matmuls in ``module @<module>``."""
    body = "".join(MATMUL.format(n=f"m{i}", loc=loc).replace("ins(%a,", "ins(%a," if i == 0 else f"ins(%m{i - 1},") for i in range(matmuls))
    return (
        f"module @{module} {{\nfunc.func @{function}(%a: tensor<32x32xf32>, %b: tensor<32x32xf32>) -> tensor<32x32xf32> {{\n"
        "  %zero = arith.constant 0.0 : f32\n  %e = tensor.empty() : tensor<32x32xf32>\n"
        "  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>\n"
        f"{body}  return %m{matmuls - 1} : tensor<32x32xf32>\n}}\n}}\n"
    )


def tree(root: Path, skip: Path) -> set[str]:
    """Every path under ``root`` except those under ``skip``."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_relative_to(skip)}


@pytest.mark.parametrize(
    ("module", "function"),
    [('"..\\2F..\\2F..\\2Fvictim\\2Fnotes"', "main"), ('"../../victim/notes"', "main"), ("m", '"a/../../b"'), ('".."', "main")],
)
def test_symbol_names_never_become_paths_outside_the_output(tmp_path, module, function):
    jail = tmp_path / "jail"
    (jail / "victim").mkdir(parents=True)
    (jail / "work" / "sub").mkdir(parents=True)
    source = jail / "work" / "evil.mlir"
    source.write_text(program(module, function))
    out = jail / "work" / "sub" / "out"
    before = tree(jail, out)
    line = error_line(subprocess.run([*TRACELINK, "profile", str(source), "-o", str(out)], capture_output=True, text=True, cwd=jail / "work"))
    assert "symbol name" in line and "evil.mlir:" in line
    assert tree(jail, out) == before


def test_invalid_utf8_in_a_location_is_refused_with_its_line(tmp_path):
    source = tmp_path / "bad.mlir"
    source.write_text(program("m", loc=' loc("bad\\FFname"("x.py":1:1))'))
    done = run_cli("profile", str(source), "-o", str(tmp_path / "out"))
    assert done.returncode == 1  # not 134: the bindings never see the string
    line = error_line(done)
    assert "bad.mlir:6:" in line and "UTF-8" in line
    raw = tmp_path / "raw.mlir"
    raw.write_bytes(program("m").replace("main", "ma\xffin").encode("latin-1"))
    assert "raw.mlir:2:" in error_line(run_cli("profile", str(raw), "-o", str(tmp_path / "out2")))


def test_report_embeds_no_file_outside_the_allowed_roots(tmp_path):
    source = tmp_path / "leak.mlir"
    source.write_text(program("leak", loc=' loc("mm"("/etc/passwd":1:1))'))
    out = tmp_path / "out"
    done = subprocess.run([*TRACELINK, "profile", str(source), "-o", str(out), "--repetitions", "2"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = (out / "report.html").read_text()
    first_line = Path("/etc/passwd").read_text().splitlines()[0]
    assert first_line not in report
    assert "/etc/passwd: outside the allowed source roots" in report
    assert "%zero = arith.constant" in report  # the program itself is embedded
    done = subprocess.run([*TRACELINK, "report", str(out), "--no-sources"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = (out / "report.html").read_text()
    assert "%zero = arith.constant" not in report and "--no-sources" in report


def test_a_second_program_replaces_the_first_profile_entirely(tmp_path):
    first, second = tmp_path / "a.mlir", tmp_path / "b.mlir"
    first.write_text(program("a", matmuls=3))
    second.write_text(program("b", matmuls=1))
    out = tmp_path / "out"
    assert run_cli("profile", str(first), "-o", str(out), "--repetitions", "2").returncode == 0
    (out / "zones.parquet").write_bytes(b"stale")  # as a tracy run would leave it
    done = run_cli("profile", str(second), "-o", str(out), "--repetitions", "3")
    assert done.returncode == 0, done.stderr
    assert "1/1 call sites mapped" in done.stdout
    assert not (out / "zones.parquet").exists()
    assert {p.name.split(".")[0] for p in (out / "artifacts" / "phases").iterdir()} == {"b"}
    from tracelink.profile_dir.profile import load_profile

    loaded = load_profile(out)
    assert loaded.summary["program"] == str(second) and loaded.summary["iterations"] == 3 and len(loaded.call_sites) == 1


def test_a_foreign_directory_is_refused_unless_forced(tmp_path):
    source = tmp_path / "p.mlir"
    source.write_text(program("p"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.html").write_text("my own report")
    line = error_line(run_cli("profile", str(source), "-o", str(mine)))
    assert "not a tracelink profile directory" in line and "--force" in line
    assert (mine / "report.html").read_text() == "my own report"
    inside = tmp_path / "prof"
    assert run_cli("profile", str(source), "-o", str(inside), "--repetitions", "1").returncode == 0
    kept = inside / "artifacts" / "inputs" / "input_0.npy"
    line = error_line(run_cli("profile", str(source), "-o", str(inside), f"--input=@{kept}", f"--input=@{kept}"))
    assert "copy it elsewhere first" in line and kept.is_file()


def test_a_concurrent_second_run_is_refused(tmp_path):
    source = tmp_path / "p.mlir"
    source.write_text(program("p", matmuls=2))
    out = tmp_path / "out"
    first = subprocess.Popen([*TRACELINK, "profile", str(source), "-o", str(out), "--repetitions", "100000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (out / ".tracelink.lock").is_file() or not (out / ".tracelink.lock").read_text().strip():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        line = error_line(run_cli("profile", str(source), "-o", str(out)))
        assert f"another tracelink run (pid {first.pid})" in line
        # commands that write into an existing profile wait for nothing: they are refused the same way
        assert f"another tracelink run (pid {first.pid})" in error_line(run_cli("report", str(out)))
    finally:
        first.terminate()  # SIGTERM: tracelink stops its tools too
        first.wait(timeout=30)
    assert first.returncode == 143


def test_control_characters_and_deep_call_stacks_are_profiled(tmp_path):
    control = tmp_path / "ctrl.mlir"
    control.write_text(program("c", loc=' loc("a\\01b\\0Ac"("x.py":1:1))'))
    done = run_cli("profile", str(control), "-o", str(tmp_path / "c"), "--repetitions", "1")
    assert done.returncode == 0, done.stderr
    import networkx as nx

    labels = [data.get("label", "") for _, data in nx.read_graphml(tmp_path / "c" / "provenance.graphml").nodes(data=True)]
    assert any("a\\x01b" in label for label in labels)
    deep = tmp_path / "deep.mlir"
    chain = "loc(" + "callsite(" * 1000 + '"x.py":1:1' + ' at "y.py":2:2)' * 1000 + ")"
    deep.write_text(program("d", loc=" " + chain))
    done = run_cli("profile", str(deep), "-o", str(tmp_path / "d"), "--repetitions", "1")
    assert done.returncode == 0, done.stderr
    assert "1/1 call sites mapped" in done.stdout


def test_program_names_with_markup_print_literally(tmp_path):
    for missing in ("nope[v2].mlir", "data[/bold]x.mlir"):
        line = error_line(run_cli("profile", str(tmp_path / missing), "-o", str(tmp_path / "out")))
        assert missing in line
    source = tmp_path / "data[/bold]x.mlir"  # a file "bold]x.mlir" in a directory "data["
    source.parent.mkdir()
    source.write_text(program("markup"))
    done = run_cli("profile", str(source), "-o", str(tmp_path / "out"), "--repetitions", "1")
    assert done.returncode == 0, done.stderr
    assert "bold]x.mlir @main" in done.stdout


@pytest.mark.parametrize(("option", "value"), [("--repetitions", "0"), ("--repetitions", "-2"), ("--warmup", "-1"), ("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "nan")])
def test_options_out_of_range_are_refused_by_argparse(tmp_path, option, value):
    done = run_cli("profile", "any.mlir", "-o", str(tmp_path / "out"), f"{option}={value}")
    assert done.returncode == 2 and option in done.stderr and "must be" in done.stderr
    assert not (tmp_path / "out").exists()


def test_damaged_npy_inputs_and_unwritable_outputs_are_one_line(tmp_path):
    import numpy as np

    source = tmp_path / "p.mlir"
    source.write_text(program("p"))
    good = tmp_path / "good.npy"
    np.save(good, np.ones((32, 32), np.float32))
    (tmp_path / "short.npy").write_bytes(good.read_bytes()[:200])
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00{garbage")
    for name in ("short.npy", "junk.npy"):
        line = error_line(run_cli("profile", str(source), "-o", str(tmp_path / "out"), f"--input=@{tmp_path / name}", f"--input=@{good}"))
        assert f"{name}: not a valid .npy file" in line
    line = error_line(run_cli("profile", str(source), "-o", "/proc/no/such/dir"))
    assert "/proc/no/such/dir" in line


def test_a_crashing_tool_is_reported_as_a_crash_with_its_log(tmp_path):
    from tracelink.errors import TracelinkError
    from tracelink.tools import ToolRun

    run = ToolRun(["sh", "-c", "echo banner; kill -SEGV $$"], tmp_path / "run.log", "iree-benchmark-module on app.vmfb")
    with pytest.raises(TracelinkError, match=r"crashed \(SIGSEGV\); its output is in .*run\.log"):
        run.wait(30)


ELSEWHERE = "/home/someone/proj"  # where the exporting machine kept the model's source; absent here
MODEL_LINES = ["import torch", "", "y = torch.matmul(a, b)  # the distinctive line of model.py", ""]


@pytest.fixture(scope="module")
def elsewhere_profile(tmp_path_factory) -> Path:
    """A profile of a program whose matmul is located in ``ELSEWHERE/model.py``, a file not on this machine."""
    base = tmp_path_factory.mktemp("elsewhere")
    source = base / "exported.mlir"
    source.write_text(program("exported", matmuls=2, loc=f' loc("mm"("{ELSEWHERE}/model.py":3:1))'))
    done = subprocess.run([*TRACELINK, "profile", str(source), "-o", str(base / "out"), "--repetitions", "2"],
                          capture_output=True, text=True, cwd=base)
    assert done.returncode == 0, done.stderr
    return base / "out"


def local_copy_of_model(directory: Path) -> Path:
    """``directory/proj/model.py``: the model's source as checked out on this machine."""
    (directory / "proj").mkdir()
    (directory / "proj" / "model.py").write_text("\n".join(MODEL_LINES))
    return directory / "proj"


def test_source_map_finds_sources_named_by_another_machine(elsewhere_profile, tmp_path):
    report = (elsewhere_profile / "report.html").read_text()
    assert f"{ELSEWHERE}/model.py: not found on this machine" in report and "--source-map" in report
    assert MODEL_LINES[2] not in report
    local = local_copy_of_model(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(elsewhere_profile, copy)
    done = run_cli("report", str(copy), "--source-map", f"{ELSEWHERE}={local}")
    assert done.returncode == 0, done.stderr
    report = (copy / "report.html").read_text()
    assert MODEL_LINES[2] in report and f"{ELSEWHERE}/model.py: not found" not in report
    assert f"{ELSEWHERE}/model.py" in report  # the recorded path is what the report shows
    # given to `profile`, the map is kept with the profile, so a later `tracelink report` uses it too
    program_copy = tmp_path / "exported.mlir"
    shutil.copy(Path(load_summary(elsewhere_profile)["program"]), program_copy)
    out = tmp_path / "mapped"
    done = run_cli("profile", str(program_copy), "-o", str(out), "--repetitions", "1", "--source-map", f"{ELSEWHERE}/={local}")
    assert done.returncode == 0, done.stderr
    assert MODEL_LINES[2] in (out / "report.html").read_text()
    assert run_cli("report", str(out)).returncode == 0 and MODEL_LINES[2] in (out / "report.html").read_text()


def test_source_map_keeps_the_allowed_roots(elsewhere_profile, tmp_path):
    """A map onto a directory makes that directory a root, and no other: a link out of it is still refused."""
    local = local_copy_of_model(tmp_path)
    (local / "model.py").unlink()
    (local / "model.py").symlink_to("/etc/passwd")
    copy = tmp_path / "copy"
    shutil.copytree(elsewhere_profile, copy)
    assert run_cli("report", str(copy), "--source-map", f"{ELSEWHERE}={local}").returncode == 0
    report = (copy / "report.html").read_text()
    assert Path("/etc/passwd").read_text().splitlines()[0] not in report
    assert f"{ELSEWHERE}/model.py: outside the allowed source roots" in report
    assert "expected OLD=NEW" in run_cli("report", str(copy), "--source-map", "no-equals-sign").stderr


def load_summary(directory: Path) -> dict:
    return json.loads((directory / "profile.json").read_text())


def test_no_sources_embeds_neither_sources_nor_executable_dumps(elsewhere_profile, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(elsewhere_profile, copy)
    dump = next(path for path in (copy / "artifacts" / "executables").glob("*.mlir") if not path.name.startswith("configured_")).read_text()
    distinctive = "hal.interface.binding.subspan"
    assert distinctive in dump and distinctive in (copy / "report.html").read_text()  # embedded by default
    assert run_cli("report", str(copy), "--no-sources").returncode == 0
    report = (copy / "report.html").read_text()
    assert distinctive not in report and "%zero = arith.constant" not in report
    assert "executable source not embedded (--no-sources)" in report
    assert "artifacts/executables/*.mlir (executable sources dumped by iree-compile): sources not embedded (--no-sources)" in report


def test_tune_never_overwrites_a_file_it_did_not_write(elsewhere_profile, tmp_path):
    mine = tmp_path / "notes.mlir"
    mine.write_text("my own notes\n")
    line = error_line(run_cli("tune", str(elsewhere_profile), "--trials", "1", "-o", str(mine)))
    assert "notes.mlir: exists and was not written by tracelink" in line
    assert mine.read_text() == "my own notes\n"
    from tracelink.errors import TracelinkError
    from tracelink.profile_dir.claim import refuse_foreign_file
    from tracelink.tune.spec import SPEC_HEADER

    with pytest.raises(TracelinkError, match="not a regular file"):
        refuse_foreign_file(tmp_path, SPEC_HEADER)
    earlier = tmp_path / "spec.mlir"  # a spec an earlier `tracelink tune` wrote may be replaced
    earlier.write_text(f"{SPEC_HEADER}: pass it to iree-compile with\nmodule {{}}\n")
    refuse_foreign_file(earlier, SPEC_HEADER)


def test_the_previous_profile_is_gone_at_once_and_removed_without_following_links(elsewhere_profile, tmp_path):
    from tracelink.profile_dir.claim import claim_output

    out = tmp_path / "out"
    shutil.copytree(elsewhere_profile, out)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    (out / "artifacts" / "link").symlink_to(outside, target_is_directory=True)  # a link the removal must not enter
    (out / ".report.html.x1.tracelink.tmp").write_text("interrupted")  # an interrupted write's temporary
    claim = claim_output(out)
    try:  # the names are free before the removal has ended (it runs in the background)
        assert not any((out / name).exists() for name in ("artifacts", "profile.json", "report.html", "trace.json"))
    finally:
        claim.release()  # waits for the removal
    assert sorted(p.name for p in out.iterdir()) == [".tracelink", ".tracelink.lock"]
    assert (outside / "keep.txt").read_text() == "mine\n"


def test_a_profile_written_before_the_marker_is_replaced_without_force(elsewhere_profile, tmp_path):
    from tracelink.errors import TracelinkError
    from tracelink.profile_dir.claim import claim_output
    from tracelink.profile_dir.files import MARKER

    older = tmp_path / "older"
    shutil.copytree(elsewhere_profile, older)
    (older / MARKER).unlink()  # as tracelink wrote it before the marker existed
    source = tmp_path / "b.mlir"
    source.write_text(program("b", matmuls=1))
    done = run_cli("profile", str(source), "-o", str(older), "--repetitions", "1")
    assert done.returncode == 0, done.stderr
    assert load_summary(older)["program"] == str(source) and (older / MARKER).is_file()
    assert {p.name.split(".")[0] for p in (older / "artifacts" / "phases").iterdir()} == {"b"}
    (older / MARKER).write_text('{"format": 0}\n')  # a marker of an older format
    claim_output(older).release()
    assert not (older / "profile.json").exists()
    foreign = tmp_path / "foreign"  # a profile.json of the user's own is no profile directory
    foreign.mkdir()
    (foreign / "profile.json").write_text('{"program": "x", "function": "f", "iterations": 1}')
    (foreign / "call_sites.csv").write_text("mine\n")
    with pytest.raises(TracelinkError, match="not a tracelink profile directory"):
        claim_output(foreign)
    assert (foreign / "call_sites.csv").read_text() == "mine\n"


@contextmanager
def small_disk(directory: Path, free: int) -> Iterator[Path]:
    """A real file system (tmpfs) mounted on ``directory`` with about ``free`` bytes left; unmounted after."""
    directory.mkdir()
    size = free + (1 << 20)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True)
    try:
        filler = shutil.disk_usage(directory).free - free
        (directory / "filler").write_bytes(b"\0" * max(filler, 0))
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def disk_bytes(root: Path) -> int:
    """What the files under ``root`` take on a tmpfs (whole pages)."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in root.rglob("*") if p.is_file())


def test_a_full_disk_is_one_line_and_keeps_what_was_written(elsewhere_profile, tmp_path):
    """ENOSPC from a real tmpfs: while `report` rewrites its files, and while `profile` writes tables and report."""
    written_last = ("report.html", "trace.json", "profile.pb.gz")
    with small_disk(tmp_path / "disk", 16 << 20) as disk:
        copy = disk / "p"
        shutil.copytree(elsewhere_profile, copy)
        before = {name: (copy / name).read_bytes() for name in written_last}
        (disk / "filler2").write_bytes(b"\0" * (shutil.disk_usage(disk).free - 8192))
        line = error_line(run_cli("report", str(copy)))
        failed = next(name for name in written_last if f"{name}: cannot write" in line)
        assert "No space left on device" in line, line
        assert (copy / failed).read_bytes() == before[failed]  # the earlier file, whole
        json.loads((copy / "trace.json").read_text())  # each other file is its earlier or its new version, whole
        gzip.decompress((copy / "profile.pb.gz").read_bytes())
        assert not list(copy.glob(".*.tmp"))
    artifacts, total = disk_bytes(elsewhere_profile / "artifacts"), disk_bytes(elsewhere_profile)
    with small_disk(tmp_path / "disk2", artifacts + (total - artifacts) // 2) as disk:
        out = disk / "out"
        source = tmp_path / "exported.mlir"
        shutil.copy(load_summary(elsewhere_profile)["program"], source)
        line = error_line(run_cli("profile", str(source), "-o", str(out), "--repetitions", "2"))
        assert "No space left on device" in line and str(out) in line, line
        assert (out / "artifacts" / "app.vmfb").is_file() and (out / "provenance.json").is_file()  # work done is kept
        assert not list(out.glob(".*.tmp"))


def test_tools_leave_nothing_in_the_temporary_directory(tmp_path):
    """IREE's runtime leaves an empty iree_dylib_XXXXXX in TMPDIR whenever it loads system-library
    executables (the hook collector's build): tracelink gives its tools a TMPDIR of its own and removes it."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    program = Path(__file__).resolve().parents[1] / "examples" / "mlp.mlir"
    done = subprocess.run([*TRACELINK, "profile", str(program), "-o", str(tmp_path / "out"), "--repetitions", "2", "--collector", "hook"],
                          capture_output=True, text=True, env=os.environ | {"TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in temporary.iterdir()) == []
