"""Fuzzing the readers of untrusted bytes: only a one-line ``TracelinkError`` may come out of them.

Bounded for ``make test`` (``TRACELINK_FUZZ_EXAMPLES`` examples per property, 60 by default);
``make fuzz`` runs a million inputs through the same readers with ``tests/fuzz_mass.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests import tracy_synth
from tests.conftest import run_profile
from tests.test_safety import program
from tracelink.commands.cli import main
from tracelink.errors import TracelinkError
from tracelink.collect.hook_tables import read_hook_records
from tracelink.collect.tracy import read_capture
from tracelink.collect.tracy.container import iter_blocks, open_container
from tracelink.profile_dir.profile import load_profile
from tracelink.compile.program_text import check_program_text
from tracelink.provenance.program import read_input_program
from tracelink.textsafe import xml_text

EXAMPLES = int(os.environ.get("TRACELINK_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE_FILES = ("profile.json", "provenance.json", "events.parquet", "call_sites.csv", "exports.csv", "source_ops.csv",
                 "source_lines.csv", ".tracelink")


def damaged(data: bytes, draw_flips: list[tuple[int, int]], cut: int | None) -> bytes:
    """``data`` with bytes replaced at (position mod size, value), then cut at ``cut`` mod size."""
    out = bytearray(data)
    for position, value in draw_flips:
        if out:
            out[position % len(out)] = value
    if cut is not None and out:
        out = out[: cut % len(out)]
    return bytes(out)


FLIPS = st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 255)), min_size=1, max_size=6)
CUTS = st.none() | st.integers(0, 2**31)


def mlir_string(raw: bytes) -> str:
    """An MLIR string literal holding exactly ``raw`` (every byte escaped as \\XX)."""
    return '"' + "".join(f"\\{byte:02X}" for byte in raw) + '"'


LOCATIONS = st.recursive(
    st.builds(lambda line, col: f'"f.py":{line}:{col}', st.integers(1, 10**6), st.integers(1, 999))
    | st.builds(lambda raw: f"{mlir_string(raw)}(\"g.py\":1:1)", st.binary(max_size=8)),
    lambda inner: st.builds(lambda a, b: f"callsite({a} at {b})", inner, inner)
    | st.builds(lambda members: f"fused[{', '.join(members)}]", st.lists(inner, min_size=1, max_size=3))
    | st.builds(lambda raw, child: f"{mlir_string(raw)}({child})", st.binary(max_size=6), inner),
    max_leaves=12,
)


@FUZZ
@given(LOCATIONS, st.integers(0, 1200))
def test_locations_are_refused_or_normalised(location: str, depth: int) -> None:
    """Any location: refused with its line (invalid UTF-8) or read, with names XML can hold."""
    chain = "callsite(" * depth + location + ' at "c.py":1:1)' * depth
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "p.mlir"
        path.write_text(program("m", loc=f" loc({chain})"))
        try:
            check_program_text(path)
        except TracelinkError as error:
            assert "p.mlir:6:" in str(error) and "UTF-8" in str(error)
            return
        read = read_input_program(path)
    matmul = next(op for op in read.ops if op.op_name == "linalg.matmul")
    assert matmul.location.known
    for text in (text for member in matmul.location.members for text in (*member.names, *member.frames)):
        etree.Element("node").text = xml_text(text)


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    source = base / "p.mlir"
    source.write_text(program("p", matmuls=2))
    return run_profile(source, base / "hook", repetitions=2, collector="hook").directory


@FUZZ
@given(st.sampled_from(PROFILE_FILES), FLIPS, CUTS)
def test_profile_directory_readers(profile_dir: Path, name: str, flips, cut) -> None:
    with tempfile.TemporaryDirectory() as directory:
        copy = Path(directory)
        for file in PROFILE_FILES:
            shutil.copy(profile_dir / file, copy / file)
        (copy / name).write_bytes(damaged((profile_dir / name).read_bytes(), flips, cut))
        try:
            load_profile(copy)
        except TracelinkError as error:
            assert "\n" not in str(error)


def test_a_damaged_op_location_inside_the_graph_is_the_graph_files_error(profile_dir: Path, tmp_path: Path) -> None:
    """The graph's JSON stays valid while an op's members (JSON held in a string inside it) do not."""
    copy = tmp_path / "copy"
    shutil.copytree(profile_dir, copy)
    graph = json.loads((copy / "provenance.json").read_text())
    op = next(node for node in graph["nodes"] if node.get("members"))
    op["members"] = op["members"][:-3]
    (copy / "provenance.json").write_text(json.dumps(graph))
    with pytest.raises(TracelinkError, match=r"provenance\.json: corrupt provenance graph \(JSONDecodeError"):
        load_profile(copy)


@pytest.mark.parametrize("table", ["call_sites", "exports", "source_ops", "source_lines", "memory_lines", "memory_components"])
def test_each_column_of_a_table_renamed_is_one_error_or_read(profile_dir: Path, table: str, tmp_path: Path, capsys) -> None:
    """A header byte flipped renames one column: the profile is refused naming the file, or every output reads it."""
    header, rows = (profile_dir / f"{table}.csv").read_text().split("\n", 1)
    columns = header.split(",")
    for index, column in enumerate(columns):
        copy = tmp_path / column
        shutil.copytree(profile_dir, copy)
        (copy / f"{table}.csv").write_text(",".join([*columns[:index], f"x{column}", *columns[index + 1:]]) + "\n" + rows)
        status = main(["report", str(copy), "--json"])
        error = capsys.readouterr().err
        assert status == 0 or (status == 1 and f"{table}.csv" in error and error.count("\n") == 1), (column, error)


@FUZZ
@given(FLIPS, CUTS)
def test_hook_record_reader(profile_dir: Path, flips, cut) -> None:
    record = next((profile_dir / "artifacts" / "hook").glob("*.tlhk"))
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / record.name
        path.write_bytes(damaged(record.read_bytes(), flips, cut))
        try:
            read_hook_records(path)
        except TracelinkError:
            pass


def small_capture_stream(directory: Path) -> bytes:
    """The decompressed stream of a small synthetic capture (zones, a message), written in ``directory``."""
    path = directory / "seed.tracy"
    zone, where = tracy_synth.Zone, tracy_synth.SourceLocation
    tracy_synth.write_capture(
        path, {(1, "main"): [zone(1, 10, 90, [zone(2, 20, 30), zone(3, 40, 50)]), zone(1, 100, 200)], (2, "w"): [zone(3, 15, 25)]},
        [where("outer", "outer_fn", "a.c", 10), where(None, "leaf", "b.c", 20), where("tile", "t", "c.c", 30)],
        messages=[tracy_synth.Message(7, 50, "hi", 1)],
    )
    return b"".join(iter_blocks(open_container(path)))


@pytest.fixture(scope="module")
def tracy_stream(tmp_path_factory) -> bytes:
    return small_capture_stream(tmp_path_factory.mktemp("tracy"))


@FUZZ
@given(FLIPS, CUTS, st.sampled_from(["zstd", "lz4"]), st.booleans())
def test_tracy_container_and_decoder(tracy_stream: bytes, flips, cut, compression: str, flip_container: bool) -> None:
    """Damage the decoded stream (then compress it validly) or the compressed container itself."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "f.tracy"
        if flip_container:
            tracy_synth.write_container(path, [tracy_stream], compression)
            path.write_bytes(damaged(path.read_bytes(), flips, cut))
        else:
            tracy_synth.write_container(path, [damaged(tracy_stream, flips, cut)], compression)
        try:
            read_capture(path)
        except TracelinkError:
            pass


def test_hook_record_with_a_clock_beyond_any_run_is_refused(profile_dir: Path, tmp_path: Path) -> None:
    """Found by ``make fuzz``: a damaged calibration made ns-per-tick huge, and the reader cast the
    resulting times to int64 garbage (numpy's invalid-cast warning) instead of refusing the file."""
    from tracelink.collect.hook_records import _CALIBRATION, _CHUNK, _PREAMBLE, _Chunk

    data = bytearray(next((profile_dir / "artifacts" / "hook").glob("*.tlhk")).read_bytes())
    offset, damaged_pairs = _PREAMBLE.size, 0
    while offset + _CHUNK.size <= len(data):
        tag, length = _CHUNK.unpack_from(data, offset)
        if tag in (_Chunk.RECORDS, _Chunk.END):
            ticks, _ = _CALIBRATION.unpack_from(data, offset + _CHUNK.size)
            _CALIBRATION.pack_into(data, offset + _CHUNK.size, ticks, 2**64 - 1)
            damaged_pairs += 1
        offset += _CHUNK.size + length
    assert damaged_pairs
    path = tmp_path / "hook-1.tlhk"
    path.write_bytes(bytes(data))
    with pytest.raises(TracelinkError, match="hook-1.tlhk: corrupt hook record file \\(clock values out of range\\)"):
        read_hook_records(path)


def test_an_interrupted_mass_fuzz_run_stops_its_workers(tmp_path: Path) -> None:
    """Ctrl-C on ``make fuzz`` ends the run at once, workers included (they used to go on with every
    chunk handed out). The run is a session of its own, so its whole process group can be watched."""
    import re
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    command = [sys.executable, "-m", "tests.fuzz_mass", "--inputs", "20000", "--workers", "2", "--chunk", "100",
               "--target", "hook-record", "--seeds", str(tmp_path / "seeds"), "--failures", str(tmp_path / "failures")]
    run = subprocess.Popen(command, cwd=REPO, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        assert run.stderr is not None
        for line in run.stderr:  # the first progress line: workers are busy with their chunks
            if re.fullmatch(r"[\d,]+ inputs, \d+ unexpected, \d+ s", line.strip()):
                break
        os.kill(run.pid, signal.SIGINT)
        assert run.wait(30) == 130
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(run.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("workers of the interrupted run still alive 15 s after it exited")
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
