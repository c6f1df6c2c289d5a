"""Real programs written by others (../shared/workloads): every call site maps to source locations."""

from __future__ import annotations

import pytest

from tests.conftest import WORKLOADS, run_profile

# program, function, inputs, parameters: as the workloads README runs them
WORKLOAD_RUNS = {
    "jax_flax_mnist_mlp_locs": ("main", [], []),
    "braggnn_torch": ("forward", ["1x1x11x11xf32=0.5"], []),
    "mnist_mlp_trained": ("predict", ["1x28x28x1xf32=0.5"], []),
    "clip_text_toy_f32": ("forward_bs4", ["4x17xi64=1"], [f"model={WORKLOADS / 'clip_text_toy_f32.irpa'}"]),
    "onnx_light_squeezenet_nodelocs": ("squeezenet_old", [], []),
}


@pytest.fixture(scope="module")
def workload_profiles(tmp_path_factory):
    base = tmp_path_factory.mktemp("workloads")
    return {
        name: run_profile(WORKLOADS / f"{name}.mlir", base / name, function=function, inputs=inputs, parameters=parameters, repetitions=3)
        for name, (function, inputs, parameters) in WORKLOAD_RUNS.items()
    }


@pytest.mark.parametrize("name", list(WORKLOAD_RUNS))
def test_every_call_site_maps_to_a_source_location(workload_profiles, name):
    profile = workload_profiles[name]
    run_sites = profile.call_sites[profile.call_sites["phase"] == "run"]
    assert len(run_sites) > 0
    assert (run_sites["root_ops"].str.len() > 0).all(), run_sites.loc[run_sites["root_ops"] == "", ["call_site", "export"]]
    cover = profile.summary["coverage"]
    assert cover["dispatch_time_attributed_share"] == 1.0
    assert cover["events_unmatched"] == 0
    assert (run_sites["count"] == 3).all()


def test_clip_call_sites_each_get_their_own_source_op(workload_profiles):
    profile = workload_profiles["clip_text_toy_f32"]
    sites = profile.call_sites
    assert len(sites) == 40
    assert sites["executable"].nunique() == 16
    assert (sites["root_ops"].str.split(";").str.len() == 1).all()
    shared = profile.summary["audit"]["shared_executables"]
    assert len(shared) == 12
    for entry in shared:  # a deduplicated executable's call sites each keep their own source op
        roots = sites.set_index("call_site").loc[entry["call_sites"], "root_ops"]
        assert roots.nunique() == len(roots), entry
    # ops rooted in several call sites are the ones IREE splits (layer norms: two reductions each)
    repeated = sites.loc[sites.duplicated("root_ops", keep=False), "root_ops"]
    split = {entry["op"] for entry in profile.summary["audit"]["ops_split"]}
    assert set(repeated) <= split
    assert (sites["phase"] == "initializer").sum() == 1


@pytest.mark.parametrize(("name", "python_file"), [("jax_flax_mnist_mlp_locs", ".py"), ("braggnn_torch", "braggnn.py")])
def test_python_locations_reach_the_line_table(workload_profiles, name, python_file):
    lines = workload_profiles[name].source_lines
    python_lines = lines[lines["file"].str.endswith(python_file)]
    assert len(python_lines) > 0
    assert python_lines["total_ns"].sum() > 0


def test_onnx_node_names_are_the_source_locations(workload_profiles):
    profile = workload_profiles["onnx_light_squeezenet_nodelocs"]
    hot = profile.source_ops[profile.source_ops["total_ns"] > 0]
    assert (hot["name"].fillna("") != "").all()  # ONNX node names (loc("n7")), no file:line
    assert profile.summary["coverage"]["dispatch_time_with_source_lines_share"] == 0.0
