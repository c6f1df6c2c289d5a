"""The summary `tracelink profile` prints: its tables are rendered while the report is built; what it
prints is what :func:`print_summary` prints for the profile directory it wrote. The command keeps its
tables' strings as Python objects; the files it writes are those of pandas' default storage."""

from __future__ import annotations

import shutil

import pandas as pd

from tests.conftest import EXAMPLES
from tests.test_bad_input import run_cli
from tracelink.commands.cli import main
from tracelink.pipeline import assemble_profile, write_profile_files
from tracelink.profile_dir.profile import load_profile
from tracelink.report import build_report, summary
from tracelink.report.summary import print_summary, rendered_tables, summary_console


def test_the_printed_summary_is_that_of_the_written_profile(tmp_path):
    out = tmp_path / "mlp"
    done = run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), "--repetitions", "3")
    assert done.returncode == 0, done.stderr
    console = summary_console()  # not a terminal here either: the width for pipes
    with console.capture() as printed:
        print_summary(load_profile(out), console)
    assert "memory: peak" in done.stdout and "Hottest dispatches" in done.stdout
    assert done.stdout == printed.get()


def test_tables_that_fail_beside_the_report_are_printed_once_the_profile_is_written(tmp_path, monkeypatch, capsys):
    tried = []

    def failing(profile, console):
        tried.append(profile.directory)
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(summary, "rendered_tables", failing)
    out = tmp_path / "mlp"
    assert main(["profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), "--repetitions", "2"]) == 0
    assert tried == [out] and (out / "report.html").is_file()
    assert "Hottest dispatches" in capsys.readouterr().out  # rendered after the report instead


def test_strings_kept_as_python_objects_write_the_same_files(example_profiles, tmp_path):
    source = example_profiles["convnet"].directory
    out = tmp_path / "out"  # the same directory for both, as the files name it
    written, tables = {}, {}
    for storage in ("pyarrow", "python"):
        out.mkdir()
        with pd.option_context("mode.string_storage", storage):
            loaded = load_profile(source)
            result = assemble_profile(out, loaded.events, loaded.graph, dict(loaded.summary),
                                      library_frames=tuple(loaded.summary["library_frames"]))
            assert result.call_sites["export"].dtype.storage == storage
            result.summary["memory"], result.memory_lines, result.memory_components = loaded.summary["memory"], loaded.memory_lines, loaded.memory_components
            write_profile_files(result)
            build_report(result)
            tables[storage] = rendered_tables(result, summary_console())
            written[storage] = {path.name: path.read_bytes() for path in out.iterdir() if path.suffix in (".csv", ".json", ".html", ".graphml")}
        shutil.rmtree(out)
    assert set(written["python"]) >= {"call_sites.csv", "source_lines.csv", "profile.json", "report.html", "trace.json"}
    assert written["python"] == written["pyarrow"]
    assert tables["python"] == tables["pyarrow"]
