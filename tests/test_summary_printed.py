"""The summary `tracelink profile` prints: its tables are rendered while the memory run ends, before the
report; what it prints is what :func:`print_summary` prints for the profile directory it wrote."""

from __future__ import annotations

from tests.conftest import EXAMPLES
from tests.test_bad_input import run_cli
from tracelink.cli import main
from tracelink.profile_dir import load_profile
from tracelink.report import summary
from tracelink.report.summary import print_summary, summary_console


def test_the_printed_summary_is_that_of_the_written_profile(tmp_path):
    out = tmp_path / "mlp"
    done = run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), "--repetitions", "3")
    assert done.returncode == 0, done.stderr
    console = summary_console()  # not a terminal here either: the width for pipes
    with console.capture() as printed:
        print_summary(load_profile(out), console)
    assert "memory: peak" in done.stdout and "Hottest dispatches" in done.stdout
    assert done.stdout == printed.get()


def test_tables_that_fail_beside_the_memory_run_are_printed_once_the_profile_is_written(tmp_path, monkeypatch, capsys):
    tried = []

    def failing(profile, console):
        tried.append(profile.directory)
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(summary, "rendered_tables", failing)
    out = tmp_path / "mlp"
    assert main(["profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), "--repetitions", "2"]) == 0
    assert tried == [out] and (out / "report.html").is_file()
    assert "Hottest dispatches" in capsys.readouterr().out  # rendered after the report instead
