"""``--json``: one JSON document on stdout that validates against the documented schema; tables on stderr."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.conftest import EXAMPLES
from tests.test_bad_input import run_cli
from tracelink.report.json_output import SCHEMA_PATH

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def validated(stdout: str) -> dict:
    """The single JSON document on stdout, checked against the schema."""
    document = json.loads(stdout)  # fails on anything printed besides the document
    jsonschema.validate(document, SCHEMA)
    return document


@pytest.fixture(scope="module")
def mlp_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("json") / "mlp"
    done = run_cli("profile", str(EXAMPLES / "mlp.mlir"), "-o", str(out), "--repetitions", "3", "--json")
    assert done.returncode == 0, done.stderr
    return out, done


def test_profile_json(mlp_json):
    out, done = mlp_json
    document = validated(done.stdout)
    assert document["command"] == "profile" and document["summary"]["function"] == "main"
    assert document["summary"]["dispatch_time_attributed_share"] == 1.0
    assert document["hottest_lines"][0]["file"].endswith("model.py")
    assert len(document["hottest_dispatches"]) == document["summary"]["call_sites"]
    assert "Hottest dispatches" in done.stderr  # the human tables moved to stderr


def test_diff_json(mlp_json):
    out, _ = mlp_json
    done = run_cli("diff", str(out), str(out), "--rounds", "0", "--json")
    assert done.returncode == 0, done.stderr
    document = validated(done.stdout)
    assert document["end_to_end"]["verdict"].startswith("not tested")
    assert document["end_to_end"]["speedup"] == pytest.approx(1.0)
    assert all(row["speedup"] == pytest.approx(1.0) for row in document["source_ops"])
    # one round (the recorded profiles): each op's median in it, the same in both
    assert all(row["base_rounds"] == row["tuned_rounds"] == [row["base_ns"]] for row in document["source_ops"])
    assert "speedup" in done.stderr


def test_schema_rejects_a_document_missing_its_summary(mlp_json):
    document = json.loads(mlp_json[1].stdout)
    del document["summary"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, SCHEMA)
