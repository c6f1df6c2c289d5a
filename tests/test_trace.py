"""trace.json by runtime queue and thread, for each collector, checked against the raw captures.

Each collector profiles the attention example for real (3 repetitions); the trace is checked against
an independent reading of what the collector recorded: the HAL profiler's JSON lines (queues), the
Tracy capture decoded again (thread names and ids of dispatch zones), the hook's record file (thread
names and ids of workgroup runs).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import EXAMPLES, run_profile
from tracelink.collect.events import make_events
from tracelink.collect.hook_records import read_hook_file
from tracelink.collect.tracy import read_capture
from tracelink.report.trace import lanes, write_trace

COLLECTORS = ("hal", "tracy", "hook")


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Per collector: the profile directory and its trace.json, as written by `tracelink profile`."""
    base = tmp_path_factory.mktemp("trace")
    out = {}
    for collector in COLLECTORS:
        profile = run_profile(EXAMPLES / "attention.mlir", base / collector, collector=collector, repetitions=3)
        out[collector] = (profile.directory, json.loads((profile.directory / "trace.json").read_text()))
    return out


def track_of(trace: dict) -> dict[int, str]:
    """tid -> track name."""
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def slices(trace: dict, category: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == category]


def queue_of(name: str) -> str:
    """The queue part of a queue track's name (without its lane)."""
    return name.split(" · lane ")[0]


def test_hal_tracks_are_the_queues_of_the_profilers_records(traces):
    directory, trace = traces["hal"]
    records = [json.loads(line) for line in (directory / "artifacts" / "run.jsonl").read_text().splitlines()]
    queues = {f"device {r['physical_device_ordinal']} queue {r['queue_ordinal']}" for r in records
              if r.get("record_type") == "host_execution_event" and r.get("op") == "dispatch"}
    names = track_of(trace)
    assert {queue_of(names[e["tid"]]) for e in slices(trace, "dispatch")} == queues
    assert all(e["args"]["queue"] in queues for e in slices(trace, "dispatch"))


def test_tracy_thread_tracks_are_the_captures_threads(traces):
    directory, trace = traces["tracy"]
    capture = read_capture(directory / "artifacts" / "run.tracy")
    exports = set(pd.read_csv(directory / "exports.csv")["export"])
    zones = capture.zones[capture.zones["name"].astype(str).isin(exports)]
    recorded = {f"dispatch zones · {name} (tid {tid})" for name, tid in zip(zones["thread"].astype(str), zones["tid"].astype(int))}
    names = track_of(trace)
    shown = {names[e["tid"]] for e in slices(trace, "zone")}
    assert shown and shown <= recorded
    thread_names = set(zones["thread"].astype(str))
    for event in slices(trace, "dispatch"):
        assert event["args"]["threads"] and set(event["args"]["threads"]) <= thread_names
        assert names[event["tid"]].startswith("dispatches on ")


def test_hook_thread_tracks_are_the_record_files_threads(traces):
    directory, trace = traces["hook"]
    recorded = set()
    for path in (directory / "artifacts" / "hook").glob("*.tlhk"):
        hook_file = read_hook_file(path)
        recorded |= {f"workgroups · {hook_file.threads[i][1]} (tid {hook_file.threads[i][0]})" for i in np.unique(hook_file.records["thread"])}
    names = track_of(trace)
    assert {names[e["tid"]] for e in slices(trace, "workgroup")} == recorded


@pytest.mark.parametrize("collector", COLLECTORS)
def test_every_dispatch_once_in_execution_order_and_no_track_overlaps(traces, collector):
    directory, trace = traces[collector]
    events = pd.read_parquet(directory / "events.parquet")
    dispatches = slices(trace, "dispatch")
    assert len(dispatches) == len(events)
    in_trace = [(e["args"]["call_site"], e["args"]["iteration"]) for e in sorted(dispatches, key=lambda e: e["ts"])]
    ordered = events.sort_values("start_ns", kind="stable")
    assert in_trace == list(zip(ordered["call_site"].astype(int), ordered["iteration"].astype(int)))
    by_track = defaultdict(list)
    for event in (e for e in trace["traceEvents"] if e["ph"] == "X"):
        by_track[event["tid"]].append((event["ts"], event["ts"] + event["dur"], event["name"], event["args"].get("iteration")))
    names = track_of(trace)
    for tid, spans in by_track.items():
        spans.sort()
        overlaps = [(span, after) for span, after in zip(spans, spans[1:]) if span[1] > after[0] + 1e-6]
        assert not overlaps, (names.get(tid, tid), len(overlaps), overlaps[:3])  # which track, which slices (once seen in CI, hook)


@pytest.mark.parametrize("collector", COLLECTORS)
def test_counters_are_flops_and_bytes_over_duration(traces, collector):
    directory, trace = traces[collector]
    sites = pd.read_csv(directory / "call_sites.csv").set_index("call_site")
    dispatches = slices(trace, "dispatch")
    counters = defaultdict(dict)
    for event in (e for e in trace["traceEvents"] if e["ph"] == "C"):
        counters[event["name"]][event["ts"]] = event["args"]["value"]
    assert set(counters) == {"achieved GFLOP/s", "achieved GB/s"}
    # a dispatch no other one overlaps: the counters at its start are its own rates
    alone = [e for e in dispatches if e["dur"] > 0 and not any(
        o is not e and o["ts"] < e["ts"] + e["dur"] and e["ts"] < o["ts"] + o["dur"] for o in dispatches)]
    assert alone
    sampled = max(alone, key=lambda e: sites.loc[e["args"]["call_site"], "flops"])
    row = sites.loc[sampled["args"]["call_site"]]
    duration_ns = sampled["args"]["duration_ns"]
    assert row["flops"] > 0
    assert counters["achieved GFLOP/s"][sampled["ts"]] == pytest.approx(row["flops"] / duration_ns, rel=1e-3)
    assert counters["achieved GB/s"][sampled["ts"]] == pytest.approx(row["bytes"] / duration_ns, rel=1e-3)
    assert sampled["args"]["gflops_s"] == pytest.approx(row["flops"] / duration_ns, rel=1e-3)
    assert counters["achieved GFLOP/s"][round(sampled["ts"] + sampled["dur"], 3)] >= 0


def test_overlapping_dispatches_go_on_extra_lanes_of_their_queue():
    events = make_events([
        {"export": "a", "start_ns": 0, "duration_ns": 100, "queue": "device 0 queue 0"},
        {"export": "b", "start_ns": 50, "duration_ns": 100, "queue": "device 0 queue 0"},  # overlaps a
        {"export": "c", "start_ns": 60, "duration_ns": 10, "queue": "device 0 queue 0"},  # overlaps a and b
        {"export": "d", "start_ns": 100, "duration_ns": 10, "queue": "device 0 queue 0"},  # after a
        {"export": "e", "start_ns": 0, "duration_ns": 10, "queue": "device 0 queue 1"},  # another queue
    ])
    events = events.assign(start=events["start_ns"].astype(float), end=(events["start_ns"] + events["duration_ns"]).astype(float))
    assert lanes(events, events["queue"]) == [0, 1, 2, 0, 0]


def test_rewritten_trace_of_an_old_profile_without_queues(traces, tmp_path):
    directory, _ = traces["hal"]
    events = pd.read_parquet(directory / "events.parquet").drop(columns=["queue"])
    old = tmp_path / "old"
    old.mkdir()
    for path in directory.iterdir():
        if path.is_file():
            (old / path.name).write_bytes(path.read_bytes())
    events.to_parquet(old / "events.parquet", index=False)
    trace = json.loads(write_trace(old).read_text())
    names = track_of(trace)
    assert {names[e["tid"]].split(" · lane ")[0] for e in slices(trace, "dispatch")} == {"dispatches"}
    assert len(slices(trace, "dispatch")) == len(events)
