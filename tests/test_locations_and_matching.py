"""Location normalisation (typed MLIR locations) and matching events to call sites."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from iree.compiler import ir

from tracelink.collect.events import make_events, match_call_sites
from tracelink.provenance.locations import Position, normalise


def location(text: str) -> ir.Location:
    module = ir.Module.parse(f"module {{\n  func.func private @f() {text}\n}}", ir.Context())
    return module.body.operations[0].location


def test_callsite_frames_names_and_positions():
    (loc,) = normalise(location('loc(callsite("blk.conv"("net.py":13:15) at callsite("net.py":41:13 at "main.py":7:1)))')).members
    assert loc.names == ("blk.conv",)
    assert loc.positions == (Position("net.py", 13, 15), Position("net.py", 41, 13), Position("main.py", 7, 1))
    assert loc.display() == "blk.conv @ net.py:13:15 ← net.py:41:13 ← main.py:7:1"


def test_enclosing_function_wrapper_is_stripped_and_alone_is_unknown():
    enclosing = frozenset({str(location('loc("app.mlir":1:1)'))})
    wrapped = normalise(location('loc(callsite("fc"("m.py":3:1) at "app.mlir":1:1))'), enclosing)
    assert wrapped == normalise(location('loc("fc"("m.py":3:1))'))
    assert not normalise(location('loc("app.mlir":1:1)'), enclosing).known


def test_fused_location_is_one_member_per_fused_op():
    a, b = normalise(location('loc(fused<"jax">["a"("x.py":1:2), "b"("y.py":3:4)])')).members
    assert (a.names, a.positions) == (("a",), (Position("x.py", 1, 2),))
    assert (b.names, b.positions) == (("b",), (Position("y.py", 3, 4),))
    assert not normalise(location("loc(unknown)")).known


def test_function_location_is_stripped_from_every_fused_member_and_nested_call():
    """IREE writes fused[callsite(a at F), callsite(b at F)]: F (the func.func line) must never stay a frame."""
    enclosing = frozenset({str(location('loc("app.mlir":6:3)'))})
    fused = normalise(location('loc(fused[callsite("app.mlir":20:5 at "app.mlir":6:3), callsite("app.mlir":30:5 at "app.mlir":6:3)])'), enclosing)
    assert [m.positions for m in fused.members] == [(Position("app.mlir", 20, 5),), (Position("app.mlir", 30, 5),)]
    nested = normalise(location('loc(callsite(callsite("m.py":3:1 at "app.mlir":6:3) at "main.py":9:1))'), enclosing)
    assert nested.members[0].positions == (Position("m.py", 3, 1), Position("main.py", 9, 1))
    inside = normalise(location('loc(callsite(fused["a.py":1:1, "b.py":2:2] at "c.py":3:3))'), enclosing)
    assert [m.positions for m in inside.members] == [
        (Position("a.py", 1, 1), Position("c.py", 3, 3)), (Position("b.py", 2, 2), Position("c.py", 3, 3)),
    ]


def test_a_thousand_frame_stack_does_not_recurse():
    text = '"f.py":1:1'
    for depth in range(2, 1200):
        text = f'callsite({text} at "f.py":{depth}:1)'
    (member,) = normalise(location(f"loc({text})")).members
    assert len(member.frames) == 1199 and member.positions[0] == Position("f.py", 1, 1)


@settings(max_examples=60, deadline=None)
@given(
    exports=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8),
    iterations=st.integers(1, 4),
    data=st.data(),
)
def test_matching_recovers_call_sites_when_exports_overlap(exports, iterations, data):
    truth = [(i, site) for i in range(iterations) for site in range(len(exports))]
    # the runtime may overlap independent dispatches: any order that keeps each export's own order
    order = data.draw(st.permutations(range(len(truth))))
    order = sorted(order, key=lambda k: (exports[truth[k][1]], k))  # per export, program order
    shuffled = [truth[k] for k in order]
    events = make_events(pd.DataFrame({"export": [exports[site] for _, site in shuffled]}))
    matched = match_call_sites(events, exports)
    assert list(zip(matched["iteration"], matched["call_site"])) == shuffled


def test_unknown_export_stays_unmatched():
    matched = match_call_sites(make_events(pd.DataFrame({"export": ["x", "a"]})), ["a"])
    assert matched["call_site"].isna().tolist() == [True, False]
