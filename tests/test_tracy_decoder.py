"""The Tracy decoder against real captures (Tracy's own CSV exports as the reference), synthetic
captures with known content, damaged files, and a fuzz test."""

from __future__ import annotations

import argparse
import csv
import random
import re
import struct
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import tracy_synth
from tracelink.errors import TracelinkError
from tracelink.collect.events import EVENT_SCHEMA
from tracelink.collect.tracy import TracyCapture, TracyFormatError, read_capture
from tracelink.commands import ingest as command
from tracelink.collect.tracy.container import iter_blocks, open_container
from tracelink.collect.tracy.views import dispatch_zones, rebuild_executions, source_location_summary

FIXTURES = Path("/work/shared/fixtures/tracy")
# file -> (compression, streams), as the note on the format describes them
FIXTURE_FILES = {
    "matmul_zstd4.tracy": ("zstd", 4),
    "matmul_zstd1.tracy": ("zstd", 1),
    "matmul_lz4.tracy": ("lz4", 4),
    "matmul_lz4hc3.tracy": ("lz4", 3),
}
DISPATCH = "main_dispatch_0_matmul_256x256x512_f32"
DECOMPRESSED_SIZE = 12_147_864


@pytest.fixture(scope="module")
def captures() -> dict[str, TracyCapture]:
    return {name: read_capture(FIXTURES / name) for name in FIXTURE_FILES}


@pytest.fixture(scope="module")
def capture(captures: dict[str, TracyCapture]) -> TracyCapture:
    return captures["matmul_zstd4.tracy"]


def block_offsets(data: bytes, first: int = 6) -> list[int]:
    """Offsets of the block headers of a multi-stream container."""
    offsets, position = [], first
    while position < len(data):
        offsets.append(position)
        position += 4 + struct.unpack_from("<I", data, position)[0]
    return offsets


# -- real captures ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_container_and_exact_end_of_each_fixture(name: str, captures: dict[str, TracyCapture]) -> None:
    container = open_container(FIXTURES / name)
    assert (container.compression, container.streams) == FIXTURE_FILES[name]
    assert container.blocks == 186
    assert sum(len(block) for block in iter_blocks(container)) == DECOMPRESSED_SIZE
    # The parse walks every section and ends exactly at the end of the stream.
    assert captures[name].decompressed_size == DECOMPRESSED_SIZE
    assert captures[name].plots_end_offset < DECOMPRESSED_SIZE


def test_header(capture: TracyCapture) -> None:
    header = capture.header
    assert header.version == (0, 11, 2)
    assert (header.delay, header.resolution, header.last_time) == (37, 16, 287_380_527)
    assert header.timer_mul == pytest.approx(0.5, abs=1e-6)
    assert header.program == "iree-benchmark-module"
    assert header.capture_name.startswith("iree-benchmark-module @ ")
    assert header.cpu_manufacturer == "GenuineIntel"


def test_threads_zones_and_other_sections(capture: TracyCapture) -> None:
    assert len(capture.threads) == 7
    per_thread = capture.zones.groupby("thread", observed=True).size().to_dict()
    assert per_thread == {"Main thread": 1927, "iree-worker-0": 361, "iree-worker-1": 438, "iree-pro": 2}
    assert capture.zone_count == len(capture.zones) == 2728
    assert capture.zones["duration_ns"].notna().all()  # none unfinished
    assert len(capture.source_locations) == 226 and (capture.source_locations.index > 0).all()  # all static
    assert capture.gpu_zones.empty and capture.messages.empty and capture.lock_count == 0
    assert set(capture.plots) == {"Frame", "iree-executor-0"}
    assert len(capture.plots["iree-executor-0"]) == 75
    assert capture.plots["iree-executor-0"]["time_ns"].is_monotonic_increasing


def test_dispatch_zones(capture: TracyCapture) -> None:
    zones = dispatch_zones(capture, [DISPATCH])
    assert len(zones) == 40
    assert zones["duration_ns"].sum() == 31_515_460
    # The dispatch name is the zone's own name; its location is the runtime's tile loop.
    assert set(zones["srcloc_name"]) == {"iree_hal_cmd_execute_dispatch_tiles"}
    assert set(zones["file"]) == {"c/runtime/src/iree/hal/drivers/local_task/block_processor.c"}
    assert set(zones["thread"]) <= {"iree-worker-0", "iree-worker-1"}
    assert (capture.zones["name"] == "BM_main").sum() == 1


def read_csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_every_zone_matches_tracy_csvexport(name: str, captures: dict[str, TracyCapture]) -> None:
    """zones.csv (csvexport -u): per source location, zones in Tracy's order with start, duration, thread."""
    zones = captures[name].zones
    zones = zones[zones["duration_ns"] > 0]  # csvexport lists finished zones of positive duration
    ours: dict[tuple, list[tuple]] = {}
    for row in zip(zones["srcloc_name"], zones["file"], zones["line"], zones["start_ns"], zones["duration_ns"],
                   zones["thread_index"]):
        ours.setdefault(tuple(map(str, row[:3])), []).append(tuple(int(v) for v in row[3:]))
    theirs: dict[tuple, list[tuple]] = {}
    for row in read_csv_rows(FIXTURES / "zones.csv"):
        key = (row["name"], row["src_file"], row["src_line"])
        theirs.setdefault(key, []).append((int(row["ns_since_start"]), int(row["exec_time_ns"]), int(row["thread"])))
        assert row["value"] == ""  # csvexport of 0.11.2 prints no zone text
    assert sum(map(len, theirs.values())) == 2728
    assert ours == theirs


def test_source_location_summary_matches_tracy_csvexport_to_the_character(capture: TracyCapture) -> None:
    summary = source_location_summary(capture)
    ours = sorted(
        ",".join([row.name, row.src_file, str(row.src_line), str(row.total_ns), f"{row.total_perc:f}", str(row.counts),
                  str(row.mean_ns), str(row.min_ns), str(row.max_ns), f"{row.std_ns:f}"])
        for row in summary.itertuples()
    )
    lines = (FIXTURES / "srclocs.csv").read_text().splitlines()
    assert lines[0] == "name,src_file,src_line,total_ns,total_perc,counts,mean_ns,min_ns,max_ns,std_ns"
    assert len(ours) == 226
    assert ours == sorted(lines[1:])


def test_tracy_events_in_the_shared_schema(capture: TracyCapture) -> None:
    events = rebuild_executions(capture, [DISPATCH]).events
    assert list(events.columns) == list(EVENT_SCHEMA)
    assert {c: str(t) for c, t in events.dtypes.items()} == EVENT_SCHEMA
    # 40 zones: each of the 20 benchmark iterations (iree_vm_invoke zones) ran the dispatch once,
    # as two tile blocks on two workers; an event spans its blocks and sums their tile time.
    assert len(events) == 20 and set(events["collector"]) == {"tracy"}
    assert events["tile_duration_sum_ns"].sum() == 31_515_460
    assert (events["duration_ns"] * 2 >= events["tile_duration_sum_ns"]).all()  # two workers at most
    assert events["start_ns"].is_monotonic_increasing
    assert (events["call_site"] == 0).all() and events["iteration"].tolist() == list(range(20))
    # Two call sites of one export that Tracy saw as one execution share its span and split its tiles.
    twice = rebuild_executions(capture, [DISPATCH, DISPATCH]).events
    assert twice["call_site"].tolist() == [0, 1] * 20 and twice["iteration"].tolist() == [i // 2 for i in range(40)]
    assert twice["tile_duration_sum_ns"].sum() <= 31_515_460
    # An export the program does not have matches nothing.
    assert rebuild_executions(capture, ["no_such_dispatch"]).events.empty


def test_ingest_command_writes_zones_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["ingest", str(FIXTURES / "matmul_lz4hc3.tracy"), "-o", str(tmp_path / "art")])
    assert args.handler(args) == 0
    zones = pd.read_parquet(tmp_path / "art" / command.ZONES_FILE)
    assert len(zones) == 2728 and int((zones["name"] == DISPATCH).sum()) == 40
    out = capsys.readouterr().out
    assert "iree-benchmark-module" in out and "0.11.2" in out and "2,728 CPU zones" in out
    missing = parser.parse_args(["ingest", str(tmp_path / "nope.tracy"), "--artifacts", str(tmp_path)])
    with pytest.raises(TracelinkError, match="no such capture file"):
        missing.handler(missing)


# -- synthetic captures with known content --------------------------------------------------------


def test_rebuild_leaves_out_zones_before_the_first_iteration(tmp_path: Path) -> None:
    """An initializer's dispatch of a shared export before the first iree_vm_invoke is no iteration."""
    path = tmp_path / "iree_like.tracy"
    tracy_synth.write_iree_like(path, 3, 2)
    exports = [tracy_synth.IREE_EXPORTS[i] for i in tracy_synth.IREE_CALL_SITES]
    rebuilt = rebuild_executions(read_capture(path), exports)
    assert rebuilt.outside_iterations == 2 * 12  # two workers, twelve tile blocks each
    events = rebuilt.events
    assert events["iteration"].tolist() == [i for i in range(3) for _ in exports]
    assert events["call_site"].tolist() == list(range(len(exports))) * 3
    assert set(events["thread"]) == {"iree-worker-0,iree-worker-1"}


LOCATIONS = [
    tracy_synth.SourceLocation("outer", "outer_fn", "a.c", 10),
    tracy_synth.SourceLocation(None, "leaf_fn", "b.c", 20),  # unnamed: Tracy shows the function
    tracy_synth.SourceLocation("tile", "tile_fn", "c.c", 30),
]


def random_forest(rng: random.Random, count: int, start: int = 1_000) -> tuple[list[tracy_synth.Zone], list[tuple]]:
    """Random zone trees and the expected rows (srcloc id, start, end, depth, own name, text) in depth-first order."""
    expected: list[tuple] = []
    roots: list[tracy_synth.Zone] = []
    clock = start

    def make(depth: int) -> tracy_synth.Zone:
        nonlocal clock
        clock += rng.randint(0, 50)
        zone = tracy_synth.Zone(rng.randint(1, len(LOCATIONS)), clock, 0)
        if rng.random() < 0.1:
            zone.name = f"dispatch_{rng.randint(0, 3)}"
        if rng.random() < 0.05:
            zone.text = f"text {rng.randint(0, 9)}"
        expected.append([zone.srcloc, zone.start, None, depth, zone.name, zone.text])
        row = expected[-1]
        for _ in range(rng.choice([0, 0, 0, 1, 2, 5]) if depth < 6 else 0):
            if len(expected) < count:
                zone.children.append(make(depth + 1))
        clock += rng.randint(0, 1_000)
        zone.end = row[2] = clock
        return zone

    while len(expected) < count:
        roots.append(make(0))
    return roots, [tuple(row) for row in expected]


def observed_rows(capture: TracyCapture) -> list[tuple]:
    zones = capture.zones
    names = zones["name"].astype(object)
    own = [n if n != s else None for n, s in zip(names, zones["srcloc_name"].astype(object))]
    texts = zones["text"].astype(object).where(zones["text"].notna(), None)
    return list(zip(zones["srcloc"].tolist(), zones["start_ns"].tolist(),
                    (zones["start_ns"] + zones["duration_ns"]).tolist(), zones["depth"].tolist(), own, texts))


@pytest.mark.parametrize(
    "compression,streams,legacy,version",
    [
        ("zstd", 4, False, (0, 11, 2)),
        ("lz4", 3, False, (0, 11, 2)),
        ("zstd", 1, True, (0, 11, 1)),
        ("lz4", 1, True, (0, 11, 0)),
    ],
)
def test_synthetic_capture_round_trip(
    tmp_path: Path, compression: str, streams: int, legacy: bool, version: tuple[int, int, int]
) -> None:
    """~20k zones over two threads: records straddle many 64 KiB blocks and both stream layouts."""
    rng = random.Random(7)
    main, main_rows = random_forest(rng, 12_000)
    worker, worker_rows = random_forest(rng, 8_000, start=500)
    path = tmp_path / "synthetic.tracy"
    size = tracy_synth.write_capture(
        path, {(101, "main"): main, (202, "worker"): worker}, LOCATIONS, compression=compression, streams=streams,
        legacy=legacy, version=version,
        messages=[tracy_synth.Message(7, 1_500, "hello", 202), tracy_synth.Message(9, 2_500, "bye", 101)],
        plots={"queue depth": [(1_000, 1.0), (3_000, 4.5), (3_500, 2.0)]},
    )
    assert size > 8 * tracy_synth.BLOCK_SIZE
    capture = read_capture(path)
    assert capture.header.version == version and capture.decompressed_size == size
    assert capture.threads == {101: "main", 202: "worker"}
    assert observed_rows(capture) == main_rows + worker_rows
    assert capture.zones["thread"].tolist() == ["main"] * len(main_rows) + ["worker"] * len(worker_rows)
    assert capture.zones["thread_index"].tolist() == [1] * len(main_rows) + [2] * len(worker_rows)
    unnamed = capture.zones[capture.zones["srcloc"] == 2]
    assert set(unnamed["srcloc_name"]) == {"leaf_fn"} and set(unnamed["file"]) == {"b.c"}
    messages = capture.messages[["time_ns", "text", "thread"]].values.tolist()
    assert messages == [[1_500, "hello", "worker"], [2_500, "bye", "main"]]
    assert capture.plots["queue depth"].values.tolist() == [[1_000, 1.0], [3_000, 4.5], [3_500, 2.0]]


def test_gpu_zones(tmp_path: Path) -> None:
    gpu = {7: [tracy_synth.Zone(1, 100, 400, [tracy_synth.Zone(3, 150, 250)]), tracy_synth.Zone(3, 500, 520)]}
    path = tmp_path / "gpu.tracy"
    tracy_synth.write_capture(path, {(1, "t"): [tracy_synth.Zone(1, 10, 20)]}, LOCATIONS, gpu=gpu)
    zones = read_capture(path).gpu_zones
    offset = tracy_synth.GPU_OFFSET
    assert zones[["name", "tid", "depth", "cpu_start_ns", "cpu_end_ns"]].values.tolist() == [
        ["outer", 7, 0, 100, 400], ["tile", 7, 1, 150, 250], ["tile", 7, 0, 500, 520]]
    assert zones["gpu_start_ns"].tolist() == [100 + offset, 150 + offset, 500 + offset]
    assert zones["gpu_end_ns"].tolist() == [400 + offset, 250 + offset, 520 + offset]


def test_unfinished_zone_has_no_duration_and_does_not_shift_later_zones(tmp_path: Path) -> None:
    zones = [tracy_synth.Zone(1, 100, -1, [tracy_synth.Zone(3, 120, 130)]), tracy_synth.Zone(1, 200, 260)]
    path = tmp_path / "unfinished.tracy"
    tracy_synth.write_capture(path, {(1, "t"): zones}, LOCATIONS)
    got = read_capture(path).zones
    assert got["start_ns"].tolist() == [100, 120, 200]
    assert got["duration_ns"].isna().tolist() == [True, False, False]
    assert got["duration_ns"].iloc[1:].tolist() == [10, 60]


# -- damaged files --------------------------------------------------------------------------------


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad.tracy"
    path.write_bytes(b"GARBAGE!" + (FIXTURES / "matmul_zstd4.tracy").read_bytes()[8:])
    with pytest.raises(TracyFormatError) as error:
        read_capture(path)
    assert str(error.value) == f"{path}: not a Tracy capture (magic b'GARB') at byte 0 of the compressed file"


def test_truncated_inside_a_block(tmp_path: Path) -> None:
    data = (FIXTURES / "matmul_zstd4.tracy").read_bytes()
    last = block_offsets(data)[-1]
    path = tmp_path / "cut.tracy"
    path.write_bytes(data[:-1000])
    with pytest.raises(TracyFormatError) as error:
        read_capture(path)
    size = len(data) - last - 4
    assert str(error.value) == (
        f"{path}: truncated file: block of {size} bytes runs past the end at byte {last} of the compressed file"
    )


def test_truncated_at_a_block_boundary_is_found_in_the_stream(tmp_path: Path) -> None:
    data = (FIXTURES / "matmul_lz4.tracy").read_bytes()
    path = tmp_path / "cut.tracy"
    path.write_bytes(data[: block_offsets(data)[50]])  # 50 whole blocks: the container itself is fine
    with pytest.raises(TracyFormatError) as error:
        read_capture(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    offset = int(re.search(r"at decompressed byte (\d+)$", message).group(1))
    assert offset <= 50 * tracy_synth.BLOCK_SIZE
    assert "truncated" in message


@pytest.mark.parametrize("name", ["matmul_zstd4.tracy", "matmul_lz4hc3.tracy"])
def test_corrupt_block(tmp_path: Path, name: str) -> None:
    data = bytearray((FIXTURES / name).read_bytes())
    offset = block_offsets(data)[10]
    data[offset + 4 : offset + 20] = b"\xff" * 16
    path = tmp_path / "corrupt.tracy"
    path.write_bytes(data)
    expected = rf"^{re.escape(str(path))}: corrupt block 10 \(.+\) at byte {offset} of the compressed file$"
    with pytest.raises(TracyFormatError, match=expected):
        read_capture(path)


@pytest.mark.parametrize("version", [(0, 12, 0), (0, 10, 0), (0, 11, 3)])
def test_unsupported_version(tmp_path: Path, version: tuple[int, int, int]) -> None:
    path = tmp_path / "other.tracy"
    tracy_synth.write_capture(path, {(1, "t"): [tracy_synth.Zone(1, 10, 20)]}, LOCATIONS, version=version)
    dotted = ".".join(map(str, version))
    with pytest.raises(TracyFormatError) as error:
        read_capture(path)
    supported = "(this reader implements 0.11.0 to 0.11.2)"
    assert str(error.value) == f"{path}: Tracy file version {dotted} is not supported {supported}"


class HugeStringCount(tracy_synth.Strings):
    """A string table whose count claims 2**60 entries."""

    def encode(self) -> bytes:
        return struct.pack("<Q", 1 << 60) + super().encode()[8:]


def test_huge_count_is_refused_before_allocating(tmp_path: Path) -> None:
    strings = HugeStringCount()
    extras = tracy_synth.ZoneExtras(strings)
    threads = [tracy_synth.Thread(1, "t", tracy_synth.encode_zones([tracy_synth.Zone(1, 10, 20)], extras))]
    pieces = list(tracy_synth.logical_stream(threads, LOCATIONS, strings, extras))
    path = tmp_path / "huge.tracy"
    tracy_synth.write_container(path, pieces)
    # The first piece is everything before the string table.
    at = len(pieces[0])
    expected = rf"1,152,921,504,606,846,976 strings cannot fit in the rest of the stream at decompressed byte {at}$"
    with pytest.raises(TracyFormatError, match=expected):
        read_capture(path)


# -- fuzzing --------------------------------------------------------------------------------------

MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(st.just("insert"), st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=8)),
)


def mutate(data: bytes, mutations: list[tuple]) -> bytes:
    out = bytearray(data)
    for kind, where, value in mutations:
        position = int(where * len(out))
        if kind == "flip":
            out[position] ^= 1 << value
        elif kind == "truncate":
            del out[position:]
        else:
            out[position:position] = value
        if not out:
            break
    return bytes(out)


def read_or_format_error(data: bytes) -> None:
    """Reading must either succeed or raise TracyFormatError: never another exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.tracy"
        path.write_bytes(data)
        try:
            read_capture(path)
        except TracyFormatError as error:
            assert str(error).startswith(f"{path}: ") and "\n" not in str(error)


FIXTURE_BYTES = (FIXTURES / "matmul_zstd4.tracy").read_bytes()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MUTATION, min_size=1, max_size=3))
def test_fuzz_compressed_file(mutations: list[tuple]) -> None:
    read_or_format_error(mutate(FIXTURE_BYTES, mutations))


@pytest.fixture(scope="module")
def fixture_stream(capture: TracyCapture) -> tuple[bytes, int]:
    """The fixture's decompressed stream, and where its decoded sections end (the plots)."""
    return b"".join(iter_blocks(open_container(FIXTURES / "matmul_zstd4.tracy"))), capture.plots_end_offset


# Where to aim: anywhere, the header, or the last 100 kB of decoded sections (source locations, zone
# extras, CPU zones, GPU zones, plots), which a uniform position would rarely hit behind the big
# string table.
TARGET = st.sampled_from(["anywhere", "header", "sections"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3), target=TARGET)
def test_fuzz_decompressed_stream(fixture_stream: tuple[bytes, int], mutations: list[tuple], target: str) -> None:
    """Mutate the logical stream and recompress it, so the damage reaches the section parser."""
    stream, sections_end = fixture_stream
    regions = {"anywhere": (0, len(stream)), "header": (0, 1_000), "sections": (sections_end - 100_000, sections_end)}
    low, high = regions[target]
    aimed = [(kind, (low + where * (high - low)) / len(stream), value) for kind, where, value in mutations]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stream.tracy"
        tracy_synth.write_container(path, [mutate(stream, aimed)], "lz4", 2)
        read_or_format_error(path.read_bytes())
