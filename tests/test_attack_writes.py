"""Attacks on what tracelink writes: links and files planted in a profile directory, user files named by -o.

Each test plants the link or file in a copy of a real profile, runs the real command, and asserts that
nothing outside the directory changed (checksums of a decoy tree beside it) and that the command
refused in one line, or wrote only what it owns.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.test_safety import disk_bytes, small_disk
from tracelink.errors import TracelinkError
from tracelink.commands.cli import main
from tracelink.compile.benchmarks import ensure_benchmark_dumps
from tracelink.profile_dir.profile import load_profile

CAPTURE = Path("/work/shared/fixtures/tracy/matmul_zstd1.tracy")


PROGRAM = EXAMPLES / "mlp.mlir"


@pytest.fixture(scope="module")
def base_profile(example_profiles) -> Path:
    """The session's profile of the MLP example; each test attacks its own copy."""
    return example_profiles["mlp"].directory


@pytest.fixture
def victim(tmp_path) -> Path:
    """The decoy tree: files and a folder outside every output directory, which no attack may change."""
    decoy = tmp_path / "decoy"
    (decoy / "folder").mkdir(parents=True)
    (decoy / "secret.txt").write_text("the user's own file\n")
    (decoy / "folder" / "kept.txt").write_text("kept\n")
    return decoy


def checksums(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (``root`` itself included): its kind and content hash."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = f"link:{os.readlink(path)}"
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = "dir"
    return found


def copy_of(profile: Path, tmp_path: Path, name: str = "p") -> Path:
    directory = tmp_path / name
    shutil.copytree(profile, directory, symlinks=True)
    return directory


def one_line_error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracelink: error:"), lines
    return lines[0]


def command_line(command: str, directory: Path, base: Path, tmp_path: Path) -> list[str]:
    """``command`` writing into profile ``directory`` (``base``: an untouched profile to diff against)."""
    return {
        "profile": ["profile", str(PROGRAM), "-o", str(directory), "--repetitions", "1"],
        "report": ["report", str(directory)],
        "tune": ["tune", str(directory), "--trials", "1", "--rounds", "0"],
        "diff": ["diff", str(base), str(directory), "--rounds", "0"],
        "ingest": ["ingest", str(CAPTURE), "-o", str(directory)],
        "repro": ["repro", str(directory), "0"],
    }[command]


COMMANDS = ("profile", "report", "tune", "diff", "ingest", "repro")


# Class 1: links planted where tracelink writes -------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("planted", [".tracelink.lock", ".tracelink"])
def test_a_linked_lock_or_marker_is_refused_and_its_target_kept(base_profile, victim, tmp_path, capsys, command, planted):
    directory = copy_of(base_profile, tmp_path)
    (directory / planted).unlink(missing_ok=True)
    (directory / planted).symlink_to(victim / "secret.txt")
    before = checksums(victim)
    assert main(command_line(command, directory, base_profile, tmp_path)) == 1
    line = one_line_error(capsys)
    assert f"{directory / planted}: is a symbolic link" in line, line
    assert checksums(victim) == before


@pytest.mark.parametrize(("command", "planted"), [
    ("profile", "artifacts"),  # re-profiling would write the compiler's dumps there
    ("report", "trace.json"),
    ("report", "report.html"),
    ("ingest", "artifacts"),  # the capture is kept as artifacts/ingested.tracy
    ("ingest", "events.parquet"),
    ("repro", "repro"),
    ("diff", "diff_rounds"),  # diff removes and remakes it: the removal must not reach the decoy
    ("diff", "diff.csv"),
    ("tune", "tune"),
])
def test_a_link_where_a_command_writes_is_refused(base_profile, victim, tmp_path, capsys, command, planted):
    directory = copy_of(base_profile, tmp_path)
    path = directory / planted
    if path.is_dir():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    path.symlink_to(victim if "." not in planted else victim / "secret.txt")
    before = checksums(victim)
    argv = command_line(command, directory, base_profile, tmp_path)
    if command == "diff":
        argv[argv.index("0")] = "2"  # rounds rerun both programs into diff_rounds/
    assert main(argv) == 1
    assert f"{path}: is a symbolic link" in one_line_error(capsys)
    assert checksums(victim) == before


def test_links_deep_in_what_a_command_writes_are_refused(base_profile, victim, tmp_path, capsys):
    """repro's dispatch.mlir, and a link or hard link anywhere in tune/, which tune writes all over."""
    directory = copy_of(base_profile, tmp_path)
    folder = directory / "repro" / "call_site_0"
    folder.mkdir(parents=True)
    (folder / "dispatch.mlir").symlink_to(victim / "secret.txt")
    before = checksums(victim)
    assert main(["repro", str(directory), "0"]) == 1
    assert f"{folder / 'dispatch.mlir'}: is a symbolic link" in one_line_error(capsys)
    (directory / "tune" / "x").mkdir(parents=True)
    os.link(victim / "folder" / "kept.txt", directory / "tune" / "x" / "trials.csv")
    assert main(["tune", str(directory), "--trials", "1", "--rounds", "0"]) == 1
    assert "trials.csv: has another name (a hard link)" in one_line_error(capsys)
    shutil.rmtree(directory / "tune")
    os.link(victim / "secret.txt", directory / "tune")  # a file where tune makes its folder (found by make fuzz)
    assert main(["tune", str(directory), "--trials", "1", "--rounds", "0"]) == 1
    assert f"{directory / 'tune'}: exists and is not a directory" in one_line_error(capsys)
    assert checksums(victim) == before


def test_the_write_primitives_follow_no_link(tmp_path, victim):
    """Predictable temporary names planted as links, a link at the name written, links on the way."""
    from tracelink.atomic import make_directory, open_for_writing, remove_path, write_text_atomic

    before = checksums(victim)
    out = tmp_path / "out"
    out.mkdir()
    for pid in (os.getpid(), os.getpid() + 1):  # the names tracelink's temporaries had before
        (out / f".report.html.{pid}.tmp").symlink_to(victim / "secret.txt")
    write_text_atomic(out / "report.html", "new report")
    assert (out / "report.html").read_text() == "new report"
    (out / "trace.json").symlink_to(victim / "secret.txt")
    with pytest.raises(TracelinkError, match="trace.json: is a symbolic link"):
        write_text_atomic(out / "trace.json", "{}")
    with pytest.raises(TracelinkError, match="trace.json: is a symbolic link"):
        open_for_writing(out / "trace.json", "a")
    (out / "compile.log").symlink_to(victim / "secret.txt")
    with open_for_writing(out / "compile.log") as log:  # a log is replaced: the link goes, not its target
        log.write("log")
    assert not (out / "compile.log").is_symlink()
    (out / "artifacts").symlink_to(victim)
    with pytest.raises(TracelinkError, match="artifacts: is a symbolic link"):
        make_directory(out / "artifacts" / "phases", inside=out)
    remove_path(out / "artifacts", out)  # the link is removed, its target kept
    (out / "tree").mkdir()
    (out / "tree" / "inner").symlink_to(victim)
    remove_path(out / "tree", out)
    assert not (out / "tree").exists() and not (out / "artifacts").exists()
    assert checksums(victim) == before


# Class 5: overwriting or deleting what tracelink did not write -------------------------------------------


@pytest.mark.parametrize(("argv", "name"), [
    (["report", "{p}", "-o", "{mine}"], "page.html"),
    (["diff", "{p}", "{p}", "--rounds", "0", "-o", "{mine}"], "table.csv"),
    (["repro", "{p}", "0", "-o", "{mine}"], "folder"),
    (["repro", "{p}", "0", "-o", "{mine}"], "notes.txt"),
])
def test_output_paths_refuse_what_tracelink_did_not_write(base_profile, tmp_path, capsys, argv, name):
    directory = copy_of(base_profile, tmp_path)
    mine = tmp_path / "user" / name
    if name == "folder":
        mine.mkdir(parents=True)
        (mine / "README.md").write_text("my own notes\n")
    else:
        mine.parent.mkdir()
        mine.write_text("the user's own file\n")
    if name == "table.csv":
        mine.with_suffix(".json").write_text("{}\n")
    before = checksums(mine.parent)
    assert main([word.format(p=directory, mine=mine) for word in argv]) == 1
    line = one_line_error(capsys)
    assert "not written by tracelink" in line or "exists and is not a directory" in line, line
    assert checksums(mine.parent) == before


def test_output_paths_replace_what_tracelink_wrote(base_profile, tmp_path, capsys):
    """The ownership rule lets a second run replace the first one's -o files."""
    directory = copy_of(base_profile, tmp_path)
    for argv in (["report", str(directory), "-o", str(tmp_path / "r.html")],
                 ["diff", str(directory), str(directory), "--rounds", "0", "-o", str(tmp_path / "d.csv")],
                 ["repro", str(directory), "0", "-o", str(tmp_path / "repro")]):
        assert main(argv) == 0 and main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "repro" / "run.sh").stat().st_mode & 0o111 and (tmp_path / "repro" / "dispatch.mlir").is_file()


def test_force_never_deletes_folders_the_user_made(base_profile, tmp_path, capsys):
    mine = tmp_path / "mine"
    for folder in ("artifacts", "tune"):
        (mine / folder).mkdir(parents=True)
        (mine / folder / "results.txt").write_text(f"the user's {folder}\n")
    before = checksums(mine)
    assert main(["profile", str(PROGRAM), "-o", str(mine), "--force"]) == 1
    line = one_line_error(capsys)
    assert "exists and was not written by tracelink; --force does not replace it" in line, line
    assert checksums(mine) == before


def test_reprofiling_removes_stale_repro_and_diff_rounds(base_profile, tmp_path, capsys):
    directory = copy_of(base_profile, tmp_path)
    assert main(["repro", str(directory), "0"]) == 0
    (directory / "diff_rounds" / "base_0").mkdir(parents=True)
    (directory / "diff_rounds" / "base_0" / "run.jsonl").write_text("stale\n")
    assert main(["profile", str(PROGRAM), "-o", str(directory), "--repetitions", "1"]) == 0
    assert not (directory / "repro").exists() and not (directory / "diff_rounds").exists()


# Class 8: locks, leftovers, a full disk -----------------------------------------------------------------


def test_ingest_into_a_profile_being_written_is_refused(tmp_path, capsys):
    from tracelink.profile_dir.claim import claim_output

    claim = claim_output(tmp_path / "running")  # what `tracelink profile` holds until its profile is written
    try:
        assert main(["ingest", str(CAPTURE), "-o", str(tmp_path / "running")]) == 1
        assert f"another tracelink run (pid {os.getpid()})" in one_line_error(capsys)
        assert not (tmp_path / "running" / "zones.parquet").exists()
    finally:
        claim.release()


def test_report_on_a_directory_that_is_no_profile_leaves_nothing(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine\n")
    before = checksums(plain)
    for argv in (["report", str(plain)], ["tune", str(plain)], ["repro", str(plain), "0"]):
        assert main(argv) == 1
        one_line_error(capsys)
    assert checksums(plain) == before  # no lock file left behind


def test_a_full_disk_in_repro_names_the_file_and_leaves_no_half_file(base_profile, tmp_path, capsys):
    with small_disk(tmp_path / "disk", disk_bytes(base_profile) + (1 << 20)) as disk:
        directory = copy_of(base_profile, disk)
        ensure_benchmark_dumps(directory / "artifacts", load_profile(directory).exports["benchmark_file"])  # repro's first write is its own
        (disk / "filler2").write_bytes(b"\0" * shutil.disk_usage(disk).free)  # not a byte left
        assert main(["repro", str(directory), "0"]) == 1
        line = one_line_error(capsys)
        folder = directory / "repro" / "call_site_0"
        assert f"{folder / 'dispatch.mlir'}: cannot write (No space left on device)" in line, line
        assert not (folder / "dispatch.mlir").exists() and not list(folder.glob(".*"))


def test_a_full_disk_writing_the_benchmark_dumps_names_the_file_and_leaves_no_folder(base_profile, tmp_path, capsys):
    with small_disk(tmp_path / "disk", disk_bytes(base_profile) + (1 << 20)) as disk:
        directory = copy_of(base_profile, disk)
        for dump in (directory / "artifacts" / "executables").glob("*_benchmark.mlir"):
            dump.unlink()  # as the profile wrote it: the first command needing them writes them
        (disk / "filler2").write_bytes(b"\0" * shutil.disk_usage(disk).free)
        assert main(["repro", str(directory), "0"]) == 1
        line = one_line_error(capsys)
        assert f"{directory / 'artifacts'}" in line and "No space left on device" in line, line
        assert not list((directory / "artifacts").glob(".benchmarks.*"))
        assert not list((directory / "artifacts" / "executables").glob("*_benchmark.mlir"))
