"""The tune record (tracelink/profile_dir/tune_record.py): the record log tune appends to, the views derived
from it (strategies.json, trials.csv, schedule.csv, summary.csv, program_check.json), the report's
lenient reader of strategies.json and the strict reader of the log (--resume and every view)."""

from __future__ import annotations

import re

import pytest

from tracelink.profile_dir.tune_record import (RECORDS_FILE, STRATEGIES_FILE, STRATEGY_KINDS, TILE_KINDS, RecordLog, read_strategies,
                                             read_records, resumed_strategies, strategies_view, write_strategies)
from tracelink.errors import TracelinkError

IM2COL = {"name": "im2col", "flags": ["--iree-global-opt-use-im2col-for-convs"], "status": "faster", "reason": "3.00x",
          "ratio": 3.0, "ci": [2.5, 3.5], "program": None}
PER_OP = {"name": "per-op im2col", "flags": [], "status": "not run", "reason": "", "ratio": None, "ci": None,
          "program": "/tmp/program.mlir"}
ROW = {"file": "model.py", "line": 7, "op_kind": "conv", "strategy": "im2col", "base_ns": 300.0, "strategy_ns": 100.0,
       "ratio": 2.5}


def search(directory, resume: bool, *records: dict) -> RecordLog:
    """A strategy search's records, as StrategySearch appends them."""
    log = RecordLog(directory, STRATEGY_KINDS, resume)
    log.append([{"kind": "strategies", "base_flags": ["--iree-hal-target-backends=llvm-cpu"]}, *records])
    return log


def test_the_view_is_the_latest_search_and_resume_reads_every_search(tmp_path):
    search(tmp_path, False, {"kind": "strategy", **IM2COL, "status": "not run", "ratio": None, "ci": None},
           {"kind": "strategy", **IM2COL}, {"kind": "strategy", **PER_OP}, {"kind": "per_line", **ROW})
    log = search(tmp_path, True, {"kind": "strategy", **PER_OP}, {"kind": "strategy", "name": PER_OP["name"], "removed": True})
    view = strategies_view(log)
    assert view["strategies"] == [] and view["per_line"] == []  # the latest search recorded nothing but a removal
    earlier = resumed_strategies(RecordLog(tmp_path, STRATEGY_KINDS, True))  # read back from the file
    assert list(earlier) == ["im2col"] and earlier["im2col"].ci == (2.5, 3.5) and earlier["im2col"].status == "faster"
    assert RecordLog(tmp_path, STRATEGY_KINDS, False).records == []  # a fresh search starts without them


def test_what_tune_writes_the_report_reads(tmp_path):
    log = search(tmp_path, False, {"kind": "strategy", **IM2COL}, {"kind": "strategy", **PER_OP}, {"kind": "per_line", **ROW})
    write_strategies(tmp_path, strategies_view(log))
    record = read_strategies(tmp_path)
    assert [s.name for s in record.strategies] == ["im2col", "per-op im2col"] and record.strategies[1].program == "/tmp/program.mlir"
    assert record.faster() == {"im2col"} and record.base_flags == ("--iree-hal-target-backends=llvm-cpu",)
    # a row's strategy time is read through its ratio (the paired speedup), not the two medians
    assert record.per_line.loc[0, "strategy_ns"] == pytest.approx(120.0)


def test_a_damaged_view_is_a_warning_for_the_report_and_a_damaged_log_an_error_for_resume(tmp_path):
    assert read_strategies(tmp_path) is None  # tune never ran
    path = tmp_path / STRATEGIES_FILE
    path.parent.mkdir()
    path.write_text('{"schema": 1, "base": {"flags": []}, "strategies": [{"name": "x"}]}')
    warnings = []
    assert read_strategies(tmp_path, warnings.append) is None
    assert len(warnings) == 1 and str(path) in warnings[0] and "strategies[0].flags" in warnings[0]
    (tmp_path / RECORDS_FILE).write_text('{"kind": "strategy", "name": "x"}\n')
    with pytest.raises(TracelinkError, match="move the file away to start afresh"):
        resumed_strategies(RecordLog(tmp_path, STRATEGY_KINDS, True))
    (tmp_path / RECORDS_FILE).write_text("[1, 2]\n")
    with pytest.raises(TracelinkError, match="not a record of tune's log"):
        RecordLog(tmp_path, STRATEGY_KINDS, True)


TILE = {"dispatch": "d0", "trial": 1, "tuner": "xgb", "configuration": "#config", "knobs": '{"vector_m": 8}',
        "runtime_ms": 1.5, "ci_low_ms": 1.4, "ci_high_ms": 1.6, "gflops": 20.0, "verification": "ok", "error": "",
        "compile_s": 2.0, "samples_ms": "[1.5, 1.4]"}
ROUND = {"round": 1, "dispatch": "d0", "share": 0.9, "score": None, "trials": 8, "best_ms": 1.5}
DISPATCH = {"export": "d0", "share": 0.9, "space_size": 12, "trials": 8, "failed": 0, "default_ms": 3.0, "best_ms": 1.5,
            "speedup": 2.0, "ci_low": 1.8, "ci_high": 2.2, "configuration": "#config", "selected": True,
            "program_speedup": float("nan"), "program_ci_low": None, "program_ci_high": None, "shared_with": "", "note": ""}


def tile_search(directory, resume: bool, *records: dict) -> RecordLog:
    """A tile search's records, as trial_log.TrialLog appends them."""
    log = RecordLog(directory, TILE_KINDS, resume)
    log.append([{"kind": "tiles"}, *records])
    return log


def test_the_tile_views_are_derived_from_the_log_and_show_the_latest_tile_search(tmp_path):
    import csv
    import json

    tile_search(tmp_path, False, {"kind": "tile", **TILE}, {"kind": "round", **ROUND}, {"kind": "dispatch", **DISPATCH},
                {"kind": "program_check", "check": {"tuned": False, "baselines": {}, "speedup": float("nan")}})
    tune = tmp_path / "tune"
    assert [row["trial"] for row in csv.DictReader((tune / "trials.csv").open())] == ["1"]
    assert list(csv.DictReader((tune / "schedule.csv").open())) == [
        {"round": "1", "dispatch": "d0", "share": "0.9", "score": "", "trials": "8", "best_ms": "1.5"}]
    [summary] = csv.DictReader((tune / "summary.csv").open())
    assert summary["selected"] == "True" and summary["speedup"] == "2.0" and summary["program_speedup"] == ""
    assert json.loads((tune / "program_check.json").read_text()) == {"tuned": False, "baselines": {}, "speedup": None}
    assert not (tune / "strategies.json").exists()  # no strategy search in the log
    # a resumed search: trials.csv keeps every trial, the other views are of the latest search only
    tile_search(tmp_path, True, {"kind": "tile", **TILE, "trial": 2}, {"kind": "round", **ROUND, "round": 1})
    assert [row["trial"] for row in csv.DictReader((tune / "trials.csv").open())] == ["1", "2"]
    assert len(list(csv.DictReader((tune / "schedule.csv").open()))) == 1
    assert not (tune / "summary.csv").exists() and not (tune / "program_check.json").exists()
    # a fresh tile search starts without the tile records and keeps a strategy search's
    search(tmp_path, True, {"kind": "strategy", **IM2COL})
    log = RecordLog(tmp_path, TILE_KINDS, False)
    assert [r["kind"] for r in log.records] == ["strategies", "strategy"] and (tune / "strategies.json").is_file()
    assert not (tune / "trials.csv").exists() and not (tune / "schedule.csv").exists()


def test_what_tune_writes_is_a_record_of_the_schema():
    from tracelink.profile_dir.tune_record import DISPATCH_FIELDS, TILE_FIELDS
    from tracelink.tune.measure import Trial
    from tracelink.tune.targets import Outcome

    assert list(Trial("d0", 0, "default", {}, "", "ok").row()) == list(TILE_FIELDS)
    assert list(Outcome("d0", 1.0).row()) == list(DISPATCH_FIELDS)


@pytest.mark.parametrize("record, problem", [
    ({"kind": "tile", **TILE, "trial": "1"}, "a tile record whose trial is not an integer"),
    ({"kind": "tile", **TILE, "knobs": "vector_m=8"}, "a tile record whose knobs is not a JSON object as text"),
    ({"kind": "round", **ROUND, "best_ms": "fast"}, "a round record whose best_ms is not a finite number or null"),
    ({"kind": "dispatch", **DISPATCH, "selected": "True"}, "a dispatch record whose selected is not true or false"),
    ({"kind": "program_check", "check": [1]}, "a program_check record whose check is not an object"),
    ({"kind": "dispatch", "export": "d0"}, "a dispatch record whose share is not a finite number or null"),
    ({"kind": "trial", **TILE}, "not a record of tune's log (kind 'trial')"),
])
def test_a_record_off_the_schema_is_one_line_naming_the_file_and_line(tmp_path, record, problem):
    import json

    tile_search(tmp_path, False, {"kind": "tile", **TILE})
    path = tmp_path / RECORDS_FILE
    path.write_text(path.read_text() + json.dumps(record) + "\n")
    with pytest.raises(TracelinkError) as raised:
        RecordLog(tmp_path, TILE_KINDS, True)
    assert str(raised.value) == f"{path}:3: {problem}; move the file away to start afresh"
    path.unlink()
    with pytest.raises(TracelinkError, match=re.escape(f"refused to write {problem}")):  # and it is never written
        RecordLog(tmp_path, TILE_KINDS, False).append([record])
    assert path.read_text() == ""


def test_a_cut_last_record_is_dropped_without_writing_through_a_link(tmp_path):
    """An interrupt can leave the log's last line cut; resuming drops it by replacing the log, never by
    cutting the file in place, which would cut a file a planted link points at."""
    victim = tmp_path / "victim.txt"
    victim.write_text('{"kept": 1}\n{"cut')
    log = tmp_path / RECORDS_FILE
    log.parent.mkdir(parents=True)
    log.symlink_to(victim)
    with pytest.raises(TracelinkError, match="link"):
        read_records(log)
    assert victim.read_text() == '{"kept": 1}\n{"cut'
