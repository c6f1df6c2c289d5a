"""``profile.pb.gz``: parses with pprof's schema, one sample type, stacks root first from source to export, exact total."""

from __future__ import annotations

import gzip

import pytest

from tests.conftest import WORKLOADS, run_profile
from tests.test_bad_input import run_cli
from tracelink.profile_dir.profile import Profile
from tracelink.report.pprof import profile_class


@pytest.fixture(scope="module")
def braggnn(tmp_path_factory) -> Profile:
    """A torch program whose ops carry Python call stacks (braggnn.py → torch/nn/*.py)."""
    out = tmp_path_factory.mktemp("braggnn")
    return run_profile(WORKLOADS / "braggnn_torch.mlir", out, function="forward", inputs=["1x1x11x11xf32=0.5"], repetitions=3)


def read_pprof(path):
    message = profile_class()()
    message.ParseFromString(gzip.decompress(path.read_bytes()))
    return message


def test_pprof_parses_and_adds_up_to_the_dispatch_total(braggnn):
    pprof = read_pprof(braggnn.directory / "profile.pb.gz")
    strings = pprof.string_table
    assert strings[0] == ""
    assert [(strings[t.type], strings[t.unit]) for t in pprof.sample_type] == [("dispatch time", "nanoseconds")]
    assert sum(sample.value[0] for sample in pprof.sample) == int(braggnn.events["duration_ns"].sum())
    assert all(len(sample.value) == 1 and sample.value[0] > 0 for sample in pprof.sample)
    names = {f.id: strings[f.name] for f in pprof.function}
    files = {f.id: strings[f.filename] for f in pprof.function}
    exports = set(braggnn.events["export"])
    for sample in pprof.sample:
        stack = [names[location] for location in sample.location_id]  # leaf first
        assert stack[0] in exports  # the leaf is the dispatch function
        assert stack[1].startswith("#") and stack[1].endswith(stack[0])  # then its call site
    # Python frames: the outermost (root) frame of every torch op is in braggnn.py, library frames are deeper.
    deep = [sample for sample in pprof.sample if len(sample.location_id) > 4]
    assert deep
    assert all(files[sample.location_id[-1]].endswith("braggnn.py") for sample in deep)
    assert any("torch/nn" in files[location] for sample in deep for location in sample.location_id[2:-1])


def test_report_rewrites_pprof(braggnn):
    path = braggnn.directory / "profile.pb.gz"
    path.unlink()
    done = run_cli("report", str(braggnn.directory))
    assert done.returncode == 0, done.stderr
    assert sum(sample.value[0] for sample in read_pprof(path).sample) == int(braggnn.events["duration_ns"].sum())
