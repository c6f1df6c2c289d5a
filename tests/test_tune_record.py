"""The tune record (tracelink/aggregate/tune_record.py): the record log tune appends to, the strategies.json
view derived from it, the report's lenient reader of that view and --resume's strict reader of the log."""

from __future__ import annotations

import pytest

from tracelink.aggregate.tune_record import (RECORDS_FILE, STRATEGIES_FILE, STRATEGY_KINDS, RecordLog, read_strategies,
                                             resumed_strategies, strategies_view, write_strategies)
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
