"""The examples, profiled for real: exact provenance, consistent time attribution, full coverage."""

from __future__ import annotations

import numpy as np
import pytest

from tracelink.aggregate import attribution
from tracelink.provenance.graph import call_sites_of_line, ops_of_call_site


def mapping(profile) -> dict[int, tuple[str, set[tuple[str, str]]]]:
    """call site -> (export, {(source-op label without the examples/ path, role)})."""
    graph = profile.graph
    result = {}
    for row in profile.call_sites.itertuples():
        ops = {(graph.nodes[op]["label"].rsplit("/examples/", 1)[-1], role) for op, role in ops_of_call_site(graph, row.call_site)}
        result[row.call_site] = (row.export, ops)
    return result


def test_mlp_maps_each_layer_with_fused_bias_and_relu(example_profiles):
    got = mapping(example_profiles["mlp"])
    assert got == {
        0: ("main_dispatch_0_matmul_32x512x256_f32", {
            ("layer1.fc @ model.py:10:12", "root"), ("layer1.bias @ model.py:11:12", "producer"), ("layer1.relu @ model.py:12:12", "producer")}),
        1: ("main_dispatch_1_matmul_32x256x512_f32", {
            ("layer2.fc @ model.py:14:12", "root"), ("layer2.bias @ model.py:15:12", "producer"), ("layer2.relu @ model.py:16:12", "producer")}),
        2: ("main_dispatch_2_matmul_32x10x256_f32", {("head.fc @ model.py:18:16", "root")}),
    }
    assert call_sites_of_line(example_profiles["mlp"].graph, "model.py", 11) == [(0, "producer")]


def test_attention_shares_one_executable_between_the_three_projections(example_profiles):
    profile = example_profiles["attention"]
    got = mapping(profile)
    fill = ("attention.mlir:10:13", "init")  # the zero-init fill, written without a location: no cost, not a producer
    assert got[0] == ("attention_dispatch_0_matmul_64x64x128_f32", {("attn.q_proj @ attention.py:21:12", "root"), fill})
    assert got[1] == ("attention_dispatch_0_matmul_64x64x128_f32", {("attn.k_proj @ attention.py:22:12", "root"), fill})
    assert got[2] == ("attention_dispatch_0_matmul_64x64x128_f32", {("attn.v_proj @ attention.py:23:12", "root"), fill})
    assert got[3][1] == {("attn.scores @ attention.py:25:17", "root"), ("attn.scale @ attention.py:26:17", "producer"), fill}
    assert got[4][1] == {("attn.softmax @ attention.py:27:12", "root")}
    assert got[6][1] >= {("attn.out_proj @ attention.py:29:14", "root"), ("attn.residual @ attention.py:30:16", "producer")}
    audit = profile.summary["audit"]
    assert {"export": "attention_dispatch_0_matmul_64x64x128_f32", "call_sites": [0, 1, 2]} in audit["shared_executables"]
    # IREE folds the key transpose into the scores matmul and drops its location: the audit says so.
    assert [(entry["loc"], entry["reason"]) for entry in audit["ops_without_dispatch"]] == [
        ("attn.k_transpose @ attention.py:25:19", "absorbed into a consumer's dispatch (its location was not kept)"),
    ]


def test_convnet_repeated_blocks_keep_their_own_call_stacks(example_profiles):
    profile = example_profiles["convnet"]
    got = mapping(profile)
    assert got[1][0] == got[2][0] == "convnet_dispatch_1_conv_32x32x16x3x3x16_f32"
    assert ("block1.conv @ convnet.py:13:15 ← convnet.py:40:13", "root") in got[1][1]
    assert ("block2.conv @ convnet.py:13:15 ← convnet.py:41:13", "root") in got[2][1]
    assert ("block3.conv @ convnet.py:13:15 ← convnet.py:42:13", "root") in got[3][1]
    assert ("block2.relu @ convnet.py:15:16 ← convnet.py:41:13", "producer") in got[2][1]
    # block 3's bias and relu fuse into the pooling reduction instead of its conv
    assert ("block3.relu @ convnet.py:15:16 ← convnet.py:42:13", "producer") in got[4][1]
    lines = profile.source_lines.set_index(["file", "line"])
    sites = profile.call_sites.set_index("call_site")["total_ns"]
    for site, calling_line in ((1, 40), (2, 41), (3, 42)):  # each block's calling line carries its own conv's time, inclusively
        # the conv is its dispatch's root: most of the dispatch's time (its fused bias and relu share the rest)
        assert lines.loc[("convnet.py", calling_line), "inclusive_ns"] > 0.5 * sites[site]
        assert lines.loc[("convnet.py", calling_line), "share"] == 0  # no op is written on it: no self time
    # the conv line inside the block function holds all three blocks' conv time as self time
    assert lines.loc[("convnet.py", 13), "share"] > max(lines.loc[("convnet.py", n), "inclusive_share"] for n in (40, 41, 42))


@pytest.mark.parametrize("name", ["mlp", "attention", "convnet"])
def test_per_op_times_add_up_to_dispatch_totals(example_profiles, name):
    profile = example_profiles[name]
    shares = attribution(profile.graph)
    assert np.allclose(shares.groupby("call_site")["fraction"].sum(), 1.0)
    assert profile.source_ops["total_ns"].sum() == pytest.approx(profile.call_sites["total_ns"].sum(), rel=1e-9)
    assert profile.call_sites["total_ns"].sum() == pytest.approx(profile.events["duration_ns"].sum(), rel=1e-9)


@pytest.mark.parametrize("name", ["mlp", "attention", "convnet"])
def test_full_coverage_and_statistics(example_profiles, name):
    profile = example_profiles[name]
    cover = profile.summary["coverage"]
    assert cover["dispatch_time_attributed_share"] == 1.0
    assert cover["call_sites_mapped"] == cover["call_sites"] == len(profile.call_sites)
    assert cover["events_unmatched"] == 0
    sites = profile.call_sites
    assert (sites["count"] == 5).all()  # 5 repetitions after warm-up, every call site once each
    assert (0 <= sites["ci95_low_ns"]).all() and (sites["ci95_low_ns"] <= sites["median_ns"]).all() and (sites["median_ns"] <= sites["ci95_high_ns"]).all()
    assert (sites["p10_ns"] <= sites["median_ns"]).all() and (sites["median_ns"] <= sites["p90_ns"]).all()
    assert sites["share"].sum() == pytest.approx(1.0)


def test_profile_directory_round_trips(example_profiles):
    from tracelink.profile_dir.profile import load_profile

    original = example_profiles["mlp"]
    loaded = load_profile(original.directory)
    assert loaded.call_sites["total_ns"].tolist() == pytest.approx(original.call_sites["total_ns"].tolist())
    assert sorted(loaded.graph.nodes) == sorted(original.graph.nodes)
    for name in ("profile.json", "events.parquet", "call_sites.csv", "exports.csv", "source_ops.csv", "source_lines.csv", "provenance.graphml", "provenance.json", "artifacts/manifest.json", "artifacts/app.vmfb"):
        assert (original.directory / name).is_file(), name
    assert list((original.directory / "artifacts" / "inputs").glob("input_*.npy"))
