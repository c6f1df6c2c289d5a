"""The tune record (tracelink/aggregate/tune_record.py): what tune writes, the report's lenient reader and
--resume's strict one read back the same."""

from __future__ import annotations

import pytest

from tracelink.aggregate.tune_record import (STRATEGIES_FILE, load_strategies, read_strategies, strategies_document,
                                             write_strategies)
from tracelink.errors import TracelinkError


def document() -> dict:
    strategies = [{"name": "im2col", "flags": ["--iree-global-opt-use-im2col-for-convs"], "status": "faster",
                   "reason": "3.00x", "ratio": 3.0, "ci": [2.5, 3.5], "program": None},
                  {"name": "per-op im2col", "flags": [], "status": "not run", "reason": "", "ratio": None, "ci": None,
                   "program": "/tmp/program.mlir"}]
    per_line = [{"file": "model.py", "line": 7, "op_kind": "conv", "strategy": "im2col", "base_ns": 300.0,
                 "strategy_ns": 100.0, "ratio": 2.5}]
    return strategies_document(["--iree-hal-target-backends=llvm-cpu"], strategies, per_line)


def test_what_tune_writes_both_readers_read_back(tmp_path):
    write_strategies(tmp_path, document())
    for record in (read_strategies(tmp_path), load_strategies(tmp_path)):
        assert [s.name for s in record.strategies] == ["im2col", "per-op im2col"]
        assert record.strategies[0].ci == (2.5, 3.5) and record.strategies[1].program == "/tmp/program.mlir"
        assert record.faster() == {"im2col"} and record.base_flags == ("--iree-hal-target-backends=llvm-cpu",)
        # a row's strategy time is read through its ratio (the paired speedup), not the two medians
        assert record.per_line.loc[0, "strategy_ns"] == pytest.approx(120.0)


def test_a_damaged_record_is_a_warning_for_the_report_and_an_error_for_resume(tmp_path):
    assert read_strategies(tmp_path) is None and load_strategies(tmp_path) is None  # tune never ran
    path = tmp_path / STRATEGIES_FILE
    path.parent.mkdir()
    path.write_text('{"schema": 1, "base": {"flags": []}, "strategies": [{"name": "x"}]}')
    warnings = []
    assert read_strategies(tmp_path, warnings.append) is None
    assert len(warnings) == 1 and str(path) in warnings[0] and "strategies[0].flags" in warnings[0]
    with pytest.raises(TracelinkError, match="move it away to start afresh"):
        load_strategies(tmp_path)
