"""Every damaged file of a profile directory, read by every command: exit 1 and one line naming the file."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_profile
from tests.test_safety import program
from tracelink.commands.cli import main

CAPTURE = Path("/work/shared/fixtures/tracy/matmul_lz4hc3.tracy")


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


def garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xffnot what tracelink wrote\n")


def wrong_shape(path: Path) -> None:
    path.write_text({".json": "[1, 2]\n", ".csv": "x,y\n1,2\n", ".parquet": ""}[path.suffix])


def text_in_numbers(path: Path) -> None:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    rows[1][rows[0].index("total_ns")] = "lots"
    with path.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)


def delete(path: Path) -> None:
    path.unlink()


def edited(field: str, value: object) -> Callable[[Path], None]:
    """profile.json with one recorded field replaced, as a hand edit or a hostile file would."""
    def edit(path: Path) -> None:
        summary = json.loads(path.read_text())
        summary[field] = value
        path.write_text(json.dumps(summary))
    edit.__name__ = f"{field}_{type(value).__name__}"
    return edit


DAMAGE: dict[str, list[Callable[[Path], None]]] = {
    "profile.json": [truncate, garbage, wrong_shape, edited("host_time", {"wall_ns_per_call": "x"}),
                     edited("host_time", "\x1b[31m"), edited("memory", "junk"), edited("memory", {"peak_bytes": 1, "split": []})],
    "provenance.json": [truncate, garbage, wrong_shape],
    "events.parquet": [truncate, garbage, delete],
    "call_sites.csv": [truncate, wrong_shape, text_in_numbers],
    "exports.csv": [truncate, garbage, text_in_numbers],
    "source_ops.csv": [truncate, wrong_shape, text_in_numbers],
    "source_lines.csv": [truncate, garbage, text_in_numbers],
}
CASES = [(name, damage) for name, damages in DAMAGE.items() for damage in damages]


@pytest.fixture(scope="module")
def good_profile(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("corrupt")
    source = base / "two.mlir"
    source.write_text(program("two", matmuls=2))
    return run_profile(source, base / "good", repetitions=2).directory


def commands(directory: Path, good: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", str(directory)],
        "diff": ["diff", str(good), str(directory), "-o", str(directory.parent / "d.csv")],
        "tune": ["tune", str(directory), "--trials", "1"],
        "ingest": ["ingest", str(CAPTURE), "--artifacts", str(directory)],
    }


@pytest.mark.parametrize(("name", "damage"), CASES, ids=[f"{n}-{d.__name__}" for n, d in CASES])
def test_each_command_reports_a_damaged_file_in_one_line(good_profile, tmp_path, capsys, name, damage):
    directory = tmp_path / "p"
    shutil.copytree(good_profile, directory)
    damage(directory / name)
    for command, argv in commands(directory, good_profile).items():
        assert main(argv) == 1, command
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("tracelink: error:"), (command, lines)
        assert name in lines[0], (command, lines[0])


def test_diff_refuses_another_program_and_a_json_output(good_profile, tmp_path, capsys):
    other = tmp_path / "other.mlir"
    other.write_text(program("other", matmuls=1))
    different = run_profile(other, tmp_path / "other", repetitions=2).directory
    assert main(["diff", str(good_profile), str(different), "-o", str(tmp_path / "d.csv")]) == 1
    err = capsys.readouterr().err
    assert "profiles of two different programs" in err and len(err.strip().splitlines()) == 1
    assert main(["diff", str(good_profile), str(good_profile), "-o", str(tmp_path / "x.json")]) == 1
    assert "takes a .csv path" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    assert main(["diff", str(good_profile), str(good_profile), "-o", str(tmp_path / "x.csv")]) == 0
    assert (tmp_path / "x.csv").read_text().startswith("label,") and (tmp_path / "x.json").read_text().startswith("{")


def test_a_record_log_cut_mid_record_resumes_without_the_partial_record(tmp_path):
    from tracelink.tune.measure import Trial
    from tracelink.tune.trial_log import TrialLog

    path = tmp_path / "tune" / "records.jsonl"
    path.parent.mkdir()
    record = json.dumps({"kind": "tile", **Trial("d", 1, "xgb", {"k": 1}, "x", "compile_error").row()}).replace("NaN", "null")
    path.write_text(record + "\n" + record + "\n" + record[: len(record) // 2])
    log = TrialLog(tmp_path, resume=True)
    assert len(log.previous) == 2 and path.read_text().endswith("\n")
    assert len((tmp_path / "tune" / "trials.csv").read_text().splitlines()) == 3  # the header and both trials
    path.write_text("a,b\n1,2\n")
    from tracelink.errors import TracelinkError

    with pytest.raises(TracelinkError, match="not a record of tune's log"):
        TrialLog(tmp_path, resume=True)


def test_a_damaged_hal_export_names_its_line(good_profile, tmp_path):
    from tracelink.collect.hal import read_records
    from tracelink.errors import TracelinkError

    lines = (good_profile / "artifacts" / "run.jsonl").read_text().splitlines()
    assert [record["record_type"] for record in read_records(good_profile / "artifacts" / "run.jsonl")] == [json.loads(line)["record_type"] for line in lines]
    damaged = tmp_path / "run.jsonl"
    for bad, reason in (('{"schema_version": 15', "not JSON"), (f"{lines[1]},{lines[1]}", "not JSON"), ("[1]", "not one ireeperf-jsonl record")):
        damaged.write_text("\n".join([lines[0], bad, *lines[2:]]) + "\n")
        with pytest.raises(TracelinkError, match=f"run.jsonl:2: {reason}"):
            read_records(damaged)
