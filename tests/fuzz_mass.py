"""Mass fuzzing (``make fuzz``): a million mutated inputs through tracelink's readers of untrusted bytes.

The hypothesis properties of ``tests/test_fuzz.py`` cost milliseconds of bookkeeping per example; this
runner has none. Each input is a seeded random mutation (byte flips, overwritten length fields,
truncation, splices from other seeds, deleted or repeated runs, invalid UTF-8, control characters,
huge numbers) of a real seed — a hook record file and the profile directory of a hook run made at
start-up, a small Tracy capture and the head of a real one from ``/work/shared/fixtures`` — or, for
locations, a random location tree (names with arbitrary bytes, call-site chains up to 1,500 deep) or a
mutated location of a shared workload, or an attack (a profile.json whose source-policy fields an
attacker edited, a name full of terminal escapes, a 1 MB name or 1,500 distinct frames). Each goes through the same reader or normaliser the hypothesis
tests call (a damaged profile-directory file through the reader ``load_profile`` uses for it).
Anything but a one-line ``TracelinkError`` is unexpected, numpy's overflow and invalid-cast warnings
too (a reader computing garbage); the first unexpected input of each target is saved (with its
traceback and the command replaying it) under ``--failures``.

Inputs are spread over worker processes in chunks; input ``i`` of a target depends only on ``--seed``,
the target and ``i``, so ``--target T --first i --inputs 1`` replays it. What costs per call rather than
per input is batched: locations are parsed a hundred per module, hook record files parsed one by one are
then read together as a run's directory. A refusal naming one input of a batch (its line, its file)
drops that input and the rest is read again; any other failure is bisected down to the inputs failing
alone. Scratch files live in /dev/shm.

    python -m tests.fuzz_mass --inputs 1000000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from tests.conftest import OUTPUT, WORKLOADS, run_profile
from tests.test_fuzz import PROFILE_FILES, mlir_string, small_capture_stream
from tests.test_safety import program
from tests import tracy_synth
from tracelink.errors import TracelinkError
from tracelink.collect.hook_records import read_hook_file
from tracelink.collect.hook_tables import read_hook_records
from tracelink.collect.tracy import read_capture
from tracelink.collect.tracy.container import iter_blocks, open_container
from tracelink.compile.program_text import check_program_text
from tracelink.collect.events import EVENT_SCHEMA, make_events
from tracelink.profile_dir.files import MARKER
from tracelink.profile_dir.profile import REQUIRED_COLUMNS, check_marker, read_frame, read_graph_file, read_summary, read_table
from tracelink.ir_utils import new_context, parse_file, walk
from tracelink.provenance.program import read_input_program
from tracelink.textsafe import xml_text
from tracelink.profile_dir import files

REAL_CAPTURE = Path("/work/shared/fixtures/tracy/matmul_zstd1.tracy")
REAL_STREAM_BYTES = 48 * 1024  # the head of the real capture's stream: header, strings, first zones
LOCATION_WORKLOADS = ("jax_flax_mnist_mlp_locs.mlir", "braggnn_torch.mlir", "onnx_light_squeezenet_nodelocs.mlir")
CONTEXT_REUSE = 200  # modules parsed in one MLIR context before a fresh one (uniqued locations pile up)
INTERESTING = (
    b"\xff", b"\xfe\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",  # invalid UTF-8
    b"\x00", b"\x01", b"\x1b[31m", b"\x7f", b"\r", b"\n", b"\t",  # control characters
    b"99999999999999999999999", b"-1", b"0", b"NaN", b"1e309", b'"', b"\\", b"/../", b"[/bold]",
)
WIDE_VALUES = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 2**63 - 1, 2**64 - 1)


# Mutations -----------------------------------------------------------------------------------------


def flip(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    """Replace one byte, or flip one bit of it."""
    if data:
        at = rng.randrange(len(data))
        data[at] = rng.randrange(256) if rng.random() < 0.5 else data[at] ^ (1 << rng.randrange(8))


def overwrite_number(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    """Write a boundary value over 1, 2, 4 or 8 bytes (length and count fields of binary formats)."""
    width = rng.choice((1, 2, 4, 8))
    if len(data) >= width:
        at = rng.randrange(len(data) - width + 1)
        value = rng.choice(WIDE_VALUES) & ((1 << (8 * width)) - 1)
        data[at:at + width] = value.to_bytes(width, "little")


def truncate(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    if data:
        del data[rng.randrange(len(data)):]


def splice(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    """Insert (or write over) a run of bytes taken from a seed, this one or another."""
    donor = rng.choice(donors) if donors and rng.random() < 0.5 else bytes(data)
    if not donor:
        return
    start = rng.randrange(len(donor))
    chunk = donor[start:start + rng.randint(1, 64)]
    at = rng.randrange(len(data) + 1)
    data[at:at + (len(chunk) if rng.random() < 0.5 else 0)] = chunk


def delete_run(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    if data:
        at = rng.randrange(len(data))
        del data[at:at + rng.randint(1, 32)]


def repeat_run(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    if data:
        at = rng.randrange(len(data))
        run = data[at:at + rng.randint(1, 32)]
        data[at:at] = run * rng.randint(1, 8)


def insert_interesting(data: bytearray, rng: random.Random, donors: list[bytes]) -> None:
    """Insert invalid UTF-8, a control character, a huge number, a quote or a path."""
    at = rng.randrange(len(data) + 1)
    data[at:at] = rng.choice(INTERESTING)


MUTATIONS = (flip, flip, overwrite_number, truncate, splice, delete_run, repeat_run, insert_interesting, insert_interesting)


def mutate(seed: bytes, rng: random.Random, donors: list[bytes]) -> bytes:
    """``seed`` with one to six random mutations."""
    data = bytearray(seed)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 6))):
        rng.choice(MUTATIONS)(data, rng, donors)
    return bytes(data)


# Random locations ----------------------------------------------------------------------------------


NAME_ALPHABET = [bytes([b]) for b in b"abcXYZ_./-:0123456789 "] + [b"\x00", b"\x01", b"\x1f", b"\x7f", b"\xc3\xa9", b"\xf0\x9f\x99\x82", b'"', b"\\", b"\n"]
INVALID_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf0\x9f")  # one name in fifty gets one (a refused batch is bisected)


def random_name(rng: random.Random) -> str:
    """An MLIR string literal of up to 10 random bytes: each escaped, or written literally when printable."""
    raw = b"".join(rng.choice(NAME_ALPHABET) for _ in range(rng.randint(0, 10)))
    if rng.random() < 0.02:
        at = rng.randint(0, len(raw))
        raw = raw[:at] + rng.choice(INVALID_UTF8) + raw[at:]
    return mlir_string(raw) if rng.random() < 0.7 else '"' + "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\{b:02X}" for b in raw) + '"'


def random_number(rng: random.Random) -> int:
    return rng.choice((0, 1, rng.randint(1, 999), rng.randint(1, 10**6), 2**31 - 1, 2**32 - 1))


def random_location(rng: random.Random, depth: int = 0) -> str:
    """A random location tree: file positions, names, call sites, fused locations (with metadata), unknown."""
    roll = rng.random()
    if depth >= 4 or roll < 0.35:
        leaf = rng.random()
        if leaf < 0.6:
            return f"{random_name(rng)}:{random_number(rng)}:{random_number(rng)}"
        return "unknown" if leaf < 0.7 else random_name(rng)
    if roll < 0.55:
        return f"callsite({random_location(rng, depth + 1)} at {random_location(rng, depth + 1)})"
    if roll < 0.75:
        members = ", ".join(random_location(rng, depth + 1) for _ in range(rng.randint(1, 4)))
        return f"fused<{random_name(rng)}>[{members}]" if rng.random() < 0.2 else f"fused[{members}]"
    return f"{random_name(rng)}({random_location(rng, depth + 1)})"


def deep_nesting(location: str, depth: int, rng: random.Random) -> str:
    """``location`` wrapped ``depth`` times: a call-site chain, nested names or nested fused locations."""
    kind = rng.choice(("callsite", "callsite", "name", "fused"))
    if kind == "callsite":
        return "callsite(" * depth + location + ' at "c.py":1:1)' * depth
    if kind == "name":
        return '"n"(' * depth + location + ")" * depth
    return 'fused<"m">[' * depth + location + ', "d.py":2:2]' * depth


def generated_location(workspace: Workspace, rng: random.Random) -> bytes:
    """A random location; one in two hundred nested 300–1,500 deep."""
    location = random_location(rng)
    if rng.random() < 0.005:
        location = deep_nesting(location, rng.randint(300, 1500), rng)
    return location.encode()


def mutated_location(workspace: Workspace, rng: random.Random) -> bytes:
    """A location of a shared workload, mutated (most no longer parse; those are refused with their line)."""
    return mutate(rng.choice(workspace.locations), rng, workspace.locations)


# Readers under test --------------------------------------------------------------------------------


@dataclass
class Workspace:
    """One worker's seeds and scratch directory."""

    seeds: Path
    scratch: Path
    record: bytes = b""
    tracy_streams: list[bytes] = field(default_factory=list)
    locations: list[bytes] = field(default_factory=list)
    profile_files: dict[str, bytes] = field(default_factory=dict)  # name -> content
    modules_parsed: int = 0
    context: object = None

    @classmethod
    def open(cls, seeds: Path, scratch_root: Path) -> Workspace:
        """A worker's workspace, its scratch directory in ``scratch_root`` (the run's, which the main
        process removes: a worker killed on an interrupt cannot)."""
        scratch = Path(tempfile.mkdtemp(prefix="worker-", dir=scratch_root))
        workspace = cls(seeds, scratch)
        workspace.record = (seeds / "record.tlhk").read_bytes()
        workspace.tracy_streams = [path.read_bytes() for path in sorted(seeds.glob("stream_*.bin"))]
        workspace.locations = [text.encode() for text in json.loads((seeds / "locations.json").read_text())]
        workspace.profile_files = {name: (seeds / "profile" / name).read_bytes() for name in PROFILE_FILES}
        return workspace

    def fresh_context(self):
        """The MLIR context to parse the next module in (renewed every CONTEXT_REUSE modules)."""
        if self.context is None or self.modules_parsed % CONTEXT_REUSE == 0:
            self.context = new_context()
        self.modules_parsed += 1
        return self.context


def hook_record(workspace: Workspace, rng: random.Random) -> bytes:
    return mutate(workspace.record, rng, [])


def read_hook_batch(workspace: Workspace, inputs: list[bytes]) -> list[BaseException | None]:
    """Each record file parsed alone; those parsed are then read together, as a directory of a run's files."""
    single = workspace.scratch / "hook-single.tlhk"
    outcomes: list[BaseException | None] = []
    for data in inputs:
        single.write_bytes(data)
        outcomes.append(outcome_of(lambda: read_hook_file(single)))
    parsed = [index for index, outcome in enumerate(outcomes) if outcome is None]
    together = read_naming_culprits(lambda batch: read_record_directory(workspace, batch), [inputs[i] for i in parsed], record_named)
    for index, outcome in zip(parsed, together):
        outcomes[index] = outcome
    return outcomes


def record_named(error: BaseException, count: int) -> int | None:
    """Which of ``count`` record files (``hook-<i>.tlhk``) a refusal names."""
    text = str(error)
    return next((i for i in range(count) if f"/hook-{i}.tlhk:" in text or f"/hook-{i}.tlhk " in text), None)


def read_record_directory(workspace: Workspace, inputs: list[bytes]) -> None:
    directory = workspace.scratch / "hook"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    for index, data in enumerate(inputs):
        (directory / f"hook-{index}.tlhk").write_bytes(data)
    read_hook_records(directory)


def tracy_capture(workspace: Workspace, rng: random.Random) -> bytes:
    """A capture whose stream was damaged (then compressed validly), or whose compressed file was."""
    stream = rng.choice(workspace.tracy_streams)
    compression = rng.choice(("zstd", "lz4"))
    path = workspace.scratch / "seed.tracy"
    if rng.random() < 0.6:
        tracy_synth.write_container(path, [mutate(stream, rng, workspace.tracy_streams)], compression)
        return path.read_bytes()
    tracy_synth.write_container(path, [stream], compression)
    return mutate(path.read_bytes(), rng, [])


def read_tracy_capture(workspace: Workspace, data: bytes) -> None:
    path = workspace.scratch / "f.tracy"
    path.write_bytes(data)
    read_capture(path)


def profile_file(workspace: Workspace, rng: random.Random) -> bytes:
    """One file of the profile directory, damaged; the file's name comes first, up to a NUL."""
    name = rng.choice(PROFILE_FILES)
    donors = [content for other, content in workspace.profile_files.items() if Path(other).suffix == Path(name).suffix]
    return name.encode() + b"\0" + mutate(workspace.profile_files[name], rng, donors)


# What load_profile reads each file with (its per-file readers, called the same way): reading the one
# damaged file costs 1-50 ms where the whole directory costs 250 ms.
PROFILE_READERS: dict[str, Callable[[Path], object]] = {
    "profile.json": read_summary,
    "provenance.json": read_graph_file,
    "events.parquet": lambda path: read_frame(path, lambda frame: make_events(frame).astype(EVENT_SCHEMA)),
    **{f"{name}.csv": (lambda path, name=name: read_table(path, REQUIRED_COLUMNS[name])) for name in files.TABLES},
    MARKER: lambda path: check_marker(path.parent),
}


def read_profile_file(workspace: Workspace, data: bytes) -> None:
    """One damaged file of the profile directory, read by the reader ``load_profile`` uses for it."""
    name, _, content = data.partition(b"\0")
    path = workspace.scratch / name.decode()
    path.write_bytes(content)
    PROFILE_READERS[name.decode()](path)


# Profile directories with planted links (issue 22 class 1) -----------------------------------------------

# Where the commands write in a profile directory: the lock and marker, the files of every command, and
# the folders repro, diff and tune write into, at the depths they write.
WRITTEN_PATHS = (
    ".tracelink", ".tracelink.lock", "profile.json", "events.parquet", "call_sites.csv", "report.html", "trace.json",
    "profile.pb.gz", "zones.parquet", "diff.csv", "diff.json", "artifacts", "artifacts/ingested.tracy", "repro",
    "repro/call_site_0", "repro/call_site_0/dispatch.mlir", "repro/call_site_0/run.sh", "repro/call_site_0/README.md",
    "diff_rounds", "diff_rounds/base_0", "diff_rounds/base_0/run.log", "tune", "tune/records.jsonl", "tune/trials.csv",
    "tune/schedule.csv", "tune/summary.csv", "tune/program_check.json", "tune/strategies.json",
)
PLANT_KINDS = ("link-to-file", "link-to-folder", "dangling-link", "hard-link", "old-temporary-name")
LINK_COMMANDS = ("profile", "report", "repro", "diff", "tune")
LINK_TIME_BOUND_S = 30  # per input: a command that hangs on a planted file is unexpected too


def planted_links(workspace: Workspace, rng: random.Random) -> bytes:
    """A command and 1-3 links or files planted where it (or another command) writes, as JSON."""
    plants = [[rng.choice(WRITTEN_PATHS), rng.choice(PLANT_KINDS)] for _ in range(rng.randint(1, 3))]
    return json.dumps({"command": rng.choice(LINK_COMMANDS), "plants": plants}).encode()


def plant(directory: Path, relative: str, kind: str, decoy: Path) -> None:
    """Replace ``directory/relative`` by a link (or hard link) to the decoy tree; its parents become real folders."""
    path = directory / relative
    for parent in reversed(path.relative_to(directory).parents[:-1]):
        if (directory / parent).is_symlink() or not (directory / parent).is_dir():
            (directory / parent).unlink(missing_ok=True)
            (directory / parent).mkdir()
    if kind == "old-temporary-name":  # the predictable temporaries tracelink's atomic writes once used, at the next pids
        for pid in range(os.getpid(), os.getpid() + 3):
            path.with_name(f".{path.name}.{pid}.tmp").unlink(missing_ok=True)
            path.with_name(f".{path.name}.{pid}.tmp").symlink_to(decoy / "secret.txt")
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    if kind == "link-to-file":
        path.symlink_to(decoy / "secret.txt")
    elif kind == "link-to-folder":
        path.symlink_to(decoy / "folder")
    elif kind == "dangling-link":
        path.symlink_to(decoy / "created-through-a-link")
    else:
        os.link(decoy / "folder" / "kept.txt", path)


def write_command(command: str, directory: Path) -> Callable[[], object]:
    """The real command writing into ``directory`` (profile: its claim, which checks, locks and clears it;
    tune: its lock and the writer of its record log and the files derived from it, not the search, which
    compiles)."""
    from tracelink.commands.cli import build_parser
    from tracelink.profile_dir.claim import claim_output, locked
    from tracelink.tune.trial_log import TrialLog

    def handle(*argv: str) -> None:
        """The command's own handler on arguments its real parser read (no exit-code mapping)."""
        args = build_parser(argv[0]).parse_args(list(argv))
        args.handler(args)

    def tune() -> None:
        with locked(directory, trees=("tune",)):
            log = TrialLog(directory, resume=True)
            log.append([], {"round": 1, "dispatch": "d", "share": 1.0, "score": None, "trials": 0, "best_ms": None})
            log.program_check({"tuned": False, "baselines": {}})

    return {
        "profile": lambda: claim_output(directory).release(),
        "report": lambda: handle("report", str(directory)),
        "repro": lambda: handle("repro", str(directory), "0"),
        "diff": lambda: handle("diff", str(directory), str(directory), "--rounds", "0"),
        "tune": tune,
    }[command]


class OutOfTime(Exception):
    """An input ran past LINK_TIME_BOUND_S."""


def read_planted_links(workspace: Workspace, data: bytes) -> None:
    """Plant the links in a copy of a real profile, run the command; the decoy tree beside it must not change.

    A one-line refusal is expected; a changed decoy, a traceback or running past the time bound is not."""
    import contextlib
    import signal

    from tests.test_attack_writes import checksums

    spec = json.loads(data)
    root = workspace.scratch / "links"
    if root.exists():
        shutil.rmtree(root)
    decoy = root / "decoy"
    (decoy / "folder").mkdir(parents=True)
    (decoy / "secret.txt").write_text("the user's own file\n")
    (decoy / "folder" / "kept.txt").write_text("kept\n")
    directory = root / "profile"
    shutil.copytree(workspace.seeds / "run", directory, symlinks=True)
    for relative, kind in spec["plants"]:
        plant(directory, relative, kind, decoy)
    before = checksums(decoy)

    def out_of_time(signal_number: int, frame: object) -> None:
        raise OutOfTime(f"{spec['command']} ran past {LINK_TIME_BOUND_S} s")

    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(LINK_TIME_BOUND_S)
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            error = outcome_of(write_command(spec["command"], directory))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if checksums(decoy) != before:
        raise AssertionError(f"{spec['command']} changed the decoy tree outside the profile: {spec['plants']}")
    if error is not None:
        raise error


FIRST_OP_LINE = 3


def location_module(locations: list[bytes]) -> bytes:
    """A function of one ``arith.addf`` per location, op ``i`` on line ``FIRST_OP_LINE + i``."""
    ops = b"".join(b"  %v" + str(i).encode() + b" = arith.addf %a, %a : f32 loc(" + location + b")\n" for i, location in enumerate(locations))
    return b"module {\nfunc.func @main(%a: f32) -> f32 {\n" + ops + b"  return %a : f32\n}\n}\n"


def outcome_of(read: Callable[[], object]) -> BaseException | None:
    """None when ``read()`` returns, else what it raised (sorted into refused / unexpected by the caller)."""
    try:
        read()
    except Exception as error:  # noqa: BLE001 — every kind is counted
        return error
    return None


def bisected(read_all: Callable[[list[bytes]], None], inputs: list[bytes]) -> list[BaseException | None]:
    """Each input's outcome when read together: all None when the whole batch reads, else split in halves."""
    if not inputs:
        return []
    error = outcome_of(lambda: read_all(inputs))
    if error is None or len(inputs) == 1:
        return [error] * len(inputs)
    half = len(inputs) // 2
    return bisected(read_all, inputs[:half]) + bisected(read_all, inputs[half:])


def read_naming_culprits(
    read_all: Callable[[list[bytes]], None], inputs: list[bytes], culprit: Callable[[BaseException, int], int | None],
) -> list[BaseException | None]:
    """Read the inputs together; a refusal naming one input (``culprit``) drops it and reads the rest again,
    any other failure is bisected."""
    outcomes: list[BaseException | None] = [None] * len(inputs)
    remaining = list(range(len(inputs)))
    while remaining:
        error = outcome_of(lambda: read_all([inputs[i] for i in remaining]))
        position = None if error is None or unexpected(error) else culprit(error, len(remaining))
        if position is None:
            if error is not None:
                for index, outcome in zip(remaining, bisected(read_all, [inputs[i] for i in remaining])):
                    outcomes[index] = outcome
            break
        outcomes[remaining.pop(position)] = error
    return outcomes


def read_locations(workspace: Workspace, locations: list[bytes]) -> list[BaseException | None]:
    """The locations checked, parsed and normalised in one module (op ``i`` on line ``FIRST_OP_LINE + i``)."""
    return read_naming_culprits(lambda batch: read_location_module(workspace, batch), locations, line_named)


def line_named(error: BaseException, count: int) -> int | None:
    """Which op of a location module a refusal names by its line (``locations.mlir:<line>: ...``)."""
    _, found, rest = str(error).partition("locations.mlir:")
    line = rest.split(":", 1)[0]
    return int(line) - FIRST_OP_LINE if found and line.isdigit() and 0 <= int(line) - FIRST_OP_LINE < count else None


def read_location_module(workspace: Workspace, locations: list[bytes]) -> None:
    path = workspace.scratch / "locations.mlir"
    path.write_bytes(location_module(locations))
    check_program_text(path)
    check_normalised(read_input_program(path, workspace.fresh_context()), len(locations))


def check_normalised(read, count: int) -> None:
    """What the hypothesis property checks: every op read, and names and frames XML can hold."""
    located = [op for op in read.ops if op.op_name == "arith.addf"]
    assert len(located) == count, f"{len(located)} of {count} ops read"
    for op in located:
        for member in op.location.members:
            member.display()
            for text in (*member.names, *member.frames):
                etree.Element("node").text = xml_text(text)


# Attacks on what is read and printed (issue 22) --------------------------------------------------------

DECOY_SECRET = "DECOY-SECRET-fuzz: no policy may read this"
HOSTILE_FIELDS: dict[str, list[object]] = {  # values an attacker writes into a received profile.json
    "allowed_roots": [["/"], ["{victim}"], [".", ".."], ["{victim}/\x00x"], 123, None, [["x"]], ["/proc/self/cwd"]],
    "source_roots": [["/"], ["{victim}"], "{victim}", None],
    "source_map": [[["", "/"]], [["/", "{victim}"]], [["secret.txt", "{victim}/secret.txt"]], [["{victim}", "{victim}"]],
                   "x", [[1, 2, 3]], [["a", None]], None],
    "program": ["{victim}/secret.txt", "secret.txt", "../../secret.txt", "", "/proc/self/cwd/secret.txt"],
    "embed_sources": [True, "yes", None, 1],
    "sources_signature": ["", "0" * 64, None, 7, "{victim}"],
}
# Where a location may say the secret is: absolute, relative to the cwd (the victim), through links of /proc.
DECOY_LOCATIONS = ("{victim}/secret.txt", "secret.txt", "./secret.txt", "../victim/secret.txt", "/proc/self/cwd/secret.txt")


def victim_dir(workspace: Workspace) -> Path:
    """The decoy directory holding the secret, the worker's working directory while a policy is tried: in
    the temporary directory, not /dev/shm (under /dev every file is refused anyway)."""
    victim = victims_of(workspace.scratch.parent) / workspace.scratch.name
    if not victim.is_dir():
        victim.mkdir(parents=True)
        (victim / "secret.txt").write_text(DECOY_SECRET + "\n")
    return victim


def victims_of(scratch_root: Path) -> Path:
    """Where the workers of a run put their decoy directories (removed with the run's scratch)."""
    return Path(tempfile.gettempdir()) / f"{scratch_root.name}-victims"


def edited_profile_json(workspace: Workspace, rng: random.Random) -> bytes:
    """The seed profile.json with one to all of its source-policy fields replaced by hostile values, then
    sometimes mutated; ``{victim}`` stands for the decoy directory."""
    summary = json.loads(workspace.profile_files["profile.json"])
    for key in rng.sample(sorted(HOSTILE_FIELDS), rng.randint(1, len(HOSTILE_FIELDS))):
        summary[key] = rng.choice(HOSTILE_FIELDS[key])
    data = json.dumps(summary).encode()
    return mutate(data, rng, []) if rng.random() < 0.3 else data


def read_edited_profile_json(workspace: Workspace, data: bytes) -> None:
    """``report``'s policy of the edited summary (no command-line roots), asked for the secret every way a
    location or a dump can name it, from the victim directory: any line of it read is a disclosure."""
    from tracelink.report.sources import SourcePolicy, dump_path

    victim = victim_dir(workspace)
    path = workspace.scratch / "profile.json"
    path.write_bytes(data.replace(b"{victim}", str(victim).encode()))
    summary = read_summary(path)
    os.chdir(victim)
    try:
        policy = SourcePolicy.for_profile(summary)
        for location in (*DECOY_LOCATIONS, str(summary.get("program") or "")):
            lines = policy.read_lines(Path(location.replace("{victim}", str(victim))), 1 << 20)
            assert lines is None or DECOY_SECRET not in "\n".join(lines), f"{location} disclosed"
        for dump in ("../victim/secret.txt", str(victim / "secret.txt"), "executables/../../victim/secret.txt"):
            assert dump_path(workspace.scratch / "artifacts", dump) is None, f"dump {dump} readable"
    finally:
        os.chdir(workspace.scratch)


TERMINAL_ALPHABET = [chr(c) for c in range(0x20)] + ["\x7f", "\x9b", "\x85", "\u202e", "\u2066", "\u200f", "\udcff", "\x1b[", "\x1b]0;", "\x1b]52;c;",
                                                       "[bold]", "[link=http://x]", "[/]", "a", "é", "🙂", " ", "\\"]
# rich's own colour sequences (SGR) are the only escapes a console may write on a terminal
RICH_SGR = re.compile("\x1b\\[[0-9;]*m")


def terminal_name(workspace: Workspace, rng: random.Random) -> bytes:
    """A name of up to 40 pieces full of control characters, escape sequences and markup (UTF-8, lone
    surrogates kept by surrogateescape)."""
    return "".join(rng.choice(TERMINAL_ALPHABET) for _ in range(rng.randint(1, 40))).encode("utf-8", "surrogatepass")


def print_terminal_name(workspace: Workspace, data: bytes) -> None:
    """The name printed by a TerminalConsole as tracelink prints names (as Text, and escaped into markup):
    nothing a terminal obeys may come out but rich's colours."""
    import io

    from rich.markup import escape
    from rich.text import Text

    from tracelink.textsafe import TERMINAL_UNSAFE, TerminalConsole

    name = data.decode("utf-8", "surrogatepass")
    out = io.StringIO()
    console = TerminalConsole(file=out, force_terminal=True, color_system="truecolor", width=60)
    console.print(Text(name, style="bold red"))
    console.print(f"[bold]{escape(name)}[/] done")
    printed = RICH_SGR.sub("", out.getvalue())
    leaked = TERMINAL_UNSAFE.search(printed.replace("\n", ""))
    assert leaked is None, f"{leaked.group()!r} reached the terminal"


def long_or_deep_location(workspace: Workspace, rng: random.Random) -> bytes:
    """A location with a name of 10 KB to 1 MB, or a call stack of 300 to 1,500 distinct frames."""
    if rng.random() < 0.5:
        size = int(10_000 * 100 ** rng.random())
        piece = random_name(rng)[1:-1].replace("\\", "") or "x"  # no escape cut in half at the end
        name = (piece * (size // len(piece) + 1))[:size]
        return f'"{name}"("{name[:4096]}.py":1:1)'.encode()
    depth = rng.randint(300, 1500)
    return ("".join(f'callsite("f{i}"("m{i}.py":{i + 1}:1) at ' for i in range(depth)) + '"leaf.py":1:1' + ")" * depth).encode()


def read_long_or_deep(workspace: Workspace, data: bytes) -> None:
    """The location read as ``profile`` reads it, then what the report does with its names: the program
    text with locations stripped, labels cut to a box, and the flame graph of its frames."""
    from tracelink.report.flame import Frame, flame_svg, member_path
    from tracelink.report.layout import short_label
    from tracelink.report.textmap import strip_locations

    path = workspace.scratch / "locations.mlir"
    path.write_bytes(location_module([data]))
    check_program_text(path)
    read = read_input_program(path, workspace.fresh_context())
    check_normalised(read, 1)
    strip_locations(path.read_text())
    op = next(op for op in read.ops if op.op_name == "arith.addf")
    root = Frame("all dispatches")
    for member in op.location.members:
        name = next(iter(member.names), "")
        levels = member_path({"positions": [str(position) for position in member.positions]}, name)
        for label in (name, *member.frames, *levels):  # as the graph's boxes show them
            short_label(label, 200.0, from_left=True)
        root.add([*levels, "#0 dispatch"], 1.0, 0)
    flame_svg(root)


# Targets -------------------------------------------------------------------------------------------


def one_by_one(read: Callable[[Workspace, bytes], None]) -> Callable[[Workspace, list[bytes]], list[BaseException | None]]:
    """A batch reader calling ``read`` on each input."""
    return lambda workspace, inputs: [outcome_of(lambda: read(workspace, data)) for data in inputs]


@dataclass(frozen=True)
class Target:
    """A reader under fuzz: how to make input ``i`` and how to read a batch of inputs."""

    name: str
    share: float  # of the total inputs
    make: Callable[[Workspace, random.Random], bytes]
    read: Callable[[Workspace, list[bytes]], list[BaseException | None]]
    batch: int = 1  # inputs read together (one MLIR module per batch)
    suffix: str = ".bin"  # of a saved failing input
    bound_s: float | None = None  # an input taking longer is unexpected (a hang or quadratic time)


TARGETS = {
    target.name: target
    for target in (
        Target("hook-record", 0.20, hook_record, read_hook_batch, batch=100, suffix=".tlhk"),
        Target("tracy-capture", 0.06, tracy_capture, one_by_one(read_tracy_capture), suffix=".tracy"),
        Target("profile-dir", 0.04, profile_file, one_by_one(read_profile_file)),
        Target("location-generated", 0.50, generated_location, read_locations, batch=100, suffix=".loc"),
        Target("location-mutated", 0.20, mutated_location, read_locations, suffix=".loc"),
        Target("planted-links", 0.0005, planted_links, one_by_one(read_planted_links), suffix=".json"),
        Target("profile-json-edited", 0.01, edited_profile_json, one_by_one(read_edited_profile_json), suffix=".json", bound_s=2.0),
        Target("terminal-names", 0.01, terminal_name, one_by_one(print_terminal_name), suffix=".txt", bound_s=1.0),
        # a 1 MB name takes ~2 s to parse, normalise and lay out alone: 30 s catches quadratic time
        Target("long-names-deep-stacks", 0.0002, long_or_deep_location, one_by_one(read_long_or_deep), suffix=".loc", bound_s=30.0),
    )
}


# Workers -------------------------------------------------------------------------------------------


@dataclass
class Chunk:
    target: str
    first: int
    count: int


@dataclass
class ChunkResult:
    """What a worker found in one chunk."""

    chunk: Chunk
    seconds: float
    refused: int = 0
    unexpected: int = 0
    first_failure: tuple[int, bytes, str] | None = None  # (input index, input, traceback)


WORKSPACE: Workspace | None = None
# Workers come from a fork server, not forked from this process: on a first run this process makes the
# seeds with IREE's and MLIR's threads running, and a worker forked then can inherit a lock one of them
# holds and wait on it forever (seen: every worker asleep on a futex, 0 inputs done).
POOL = multiprocessing.get_context("forkserver")


def start_worker(seeds: Path, scratch_root: Path) -> None:
    global WORKSPACE
    # Ctrl-C reaches the whole process group; the main process stops the workers (stop_workers), so a
    # worker does not take the interrupt as one input's outcome and go on with its chunk
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # numpy's overflow / invalid-cast warnings mean a reader computed garbage from the input: unexpected too
    warnings.simplefilter("error", RuntimeWarning)
    signal.signal(signal.SIGALRM, interrupt)
    WORKSPACE = Workspace.open(seeds, scratch_root)
    os.chdir(WORKSPACE.scratch)


def input_of(target: Target, seed: int, index: int) -> bytes:
    """Input ``index`` of ``target``: a function of the run's seed, the target and the index only."""
    assert WORKSPACE is not None
    return target.make(WORKSPACE, random.Random(f"{seed}:{target.name}:{index}"))


def unexpected(error: BaseException) -> bool:
    """Anything but a one-line TracelinkError."""
    return not isinstance(error, TracelinkError) or "\n" in str(error)


class TooSlow(Exception):
    """An input that took longer than its target's time bound."""


def interrupt(signal_number: int, frame: object) -> None:
    raise TooSlow("interrupted by the time bound")


def read_bounded(target: Target, inputs: list[bytes]) -> list[BaseException | None]:
    """``target.read`` of a batch; with a bound (batches of one), an alarm interrupts an input running past
    it and an input returning after it is a TooSlow outcome."""
    assert WORKSPACE is not None
    if target.bound_s is None:
        return target.read(WORKSPACE, inputs)
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, 2 * target.bound_s)
    try:
        outcomes = target.read(WORKSPACE, inputs)
    except TooSlow as error:
        outcomes = [error] * len(inputs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.perf_counter() - started
    if elapsed > target.bound_s * len(inputs):
        return [outcome or TooSlow(f"took {elapsed:.1f} s, bound {target.bound_s:g} s") for outcome in outcomes]
    return outcomes


def run_chunk(chunk: Chunk, seed: int) -> ChunkResult:
    assert WORKSPACE is not None
    target = TARGETS[chunk.target]
    started = time.perf_counter()
    result = ChunkResult(chunk, 0.0)
    for start in range(chunk.first, chunk.first + chunk.count, target.batch):
        indices = range(start, min(start + target.batch, chunk.first + chunk.count))
        inputs = [input_of(target, seed, index) for index in indices]
        for index, data, outcome in zip(indices, inputs, read_bounded(target, inputs)):
            if outcome is None:
                continue
            if not unexpected(outcome):
                result.refused += 1
                continue
            result.unexpected += 1
            if result.first_failure is None:
                result.first_failure = (index, data, "".join(traceback.format_exception(outcome)))
    result.seconds = time.perf_counter() - started
    return result


# Seeds ---------------------------------------------------------------------------------------------


def prepare_seeds(seeds: Path) -> None:
    """A hook profile of a small program (record file, profile directory), Tracy streams, workload locations."""
    seeds.mkdir(parents=True, exist_ok=True)
    source = seeds / "p.mlir"
    source.write_text(program("p", matmuls=2))
    profile = run_profile(source, seeds / "run", repetitions=2, collector="hook").directory
    shutil.copyfile(next((profile / "artifacts" / "hook").glob("*.tlhk")), seeds / "record.tlhk")
    (seeds / "profile").mkdir(exist_ok=True)
    for name in PROFILE_FILES:
        shutil.copyfile(profile / name, seeds / "profile" / name)
    (seeds / "stream_small.bin").write_bytes(small_capture_stream(seeds))
    real = b""
    for block in iter_blocks(open_container(REAL_CAPTURE)):
        real += block
        if len(real) >= REAL_STREAM_BYTES:
            break
    (seeds / "stream_real_head.bin").write_bytes(real[:REAL_STREAM_BYTES])
    (seeds / "locations.json").write_text(json.dumps(workload_locations()))


def workload_locations(limit: int = 2000) -> list[str]:
    """Distinct op locations of the shared workloads, as the bindings print them."""
    context = new_context()
    found: dict[str, None] = {}
    for name in LOCATION_WORKLOADS:
        module = parse_file(WORKLOADS / name, context)
        for op in walk(module.operation):
            text = str(op.location)
            if text.startswith("loc(") and len(found) < limit:
                found[text[4:-1]] = None
    return list(found)


# The run -------------------------------------------------------------------------------------------


def plan(total: int, targets: list[str], chunk_size: int, first: int) -> list[Chunk]:
    """Chunks of each target's share of ``total`` inputs, interleaved so every target progresses."""
    shares = sum(TARGETS[name].share for name in targets)
    per_target: list[list[Chunk]] = []
    for name in targets:
        count = round(total * TARGETS[name].share / shares) if len(targets) > 1 else total
        size = max(chunk_size // 10, TARGETS[name].batch) if name in ("profile-dir", "tracy-capture") else chunk_size
        if name == "planted-links":  # whole commands: ~0.1-1 s per input
            size = max(1, chunk_size // 200)
        elif (TARGETS[name].bound_s or 0) >= 10:  # inputs of seconds each: small chunks, spread over the workers
            size = 4
        per_target.append([Chunk(name, start, min(size, first + count - start)) for start in range(first, first + count, size)])
    return [chunk for group in zip_longest_chunks(per_target) for chunk in group]


def zip_longest_chunks(groups: list[list[Chunk]]) -> Iterator[list[Chunk]]:
    for position in range(max((len(group) for group in groups), default=0)):
        yield [group[position] for group in groups if position < len(group)]


@dataclass
class Tally:
    inputs: int = 0
    seconds: float = 0.0
    refused: int = 0
    unexpected: int = 0
    saved: Path | None = None


def run(total: int, targets: list[str], workers: int, seed: int, chunk_size: int, first: int, failures: Path, seeds: Path) -> dict[str, Tally]:
    """Run every chunk over ``workers`` processes; chunks lost when a worker died are re-run alone, and one
    that kills its worker alone is counted as an unexpected failure. An interrupt (Ctrl-C, SIGTERM)
    stops the workers and exits with 130."""
    tallies = {name: Tally() for name in targets}
    # in memory where there is /dev/shm: every input is a file written and read back
    scratch_root = Path(tempfile.mkdtemp(prefix="tracelink-fuzz-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        run_pools(plan(total, targets, chunk_size, first), workers, seed, failures, (seeds, scratch_root), tallies)
    finally:
        remove_scratch(scratch_root)
    return tallies


def remove_scratch(scratch_root: Path) -> None:
    for path in (scratch_root, victims_of(scratch_root)):
        shutil.rmtree(path, ignore_errors=True)


def run_pools(chunks: list[Chunk], workers: int, seed: int, failures: Path, worker_args: tuple[Path, Path],
              tallies: dict[str, Tally]) -> None:
    started = time.perf_counter()
    done = 0
    lost: list[Chunk] = []
    planned, reported = sum(chunk.count for chunk in chunks), 0
    with ProcessPoolExecutor(workers, POOL, initializer=start_worker, initargs=worker_args) as pool:
        try:
            futures = [(chunk, pool.submit(run_chunk, chunk, seed)) for chunk in chunks]
            for chunk, future in futures:
                try:
                    record(future.result(), tallies[chunk.target], failures, seed)
                except BrokenProcessPool:
                    lost.append(chunk)
                    continue
                done += chunk.count
                if done * 20 // planned > reported:  # a line every 5 %
                    reported = done * 20 // planned
                    failed = sum(t.unexpected for t in tallies.values())
                    print(f"{done:,} inputs, {failed} unexpected, {time.perf_counter() - started:.0f} s", file=sys.stderr,
                          flush=True)
        except KeyboardInterrupt:
            stop_workers(pool)
            remove_scratch(worker_args[1])
            print(f"interrupted after {done:,} inputs; the workers are stopped", file=sys.stderr, flush=True)
            sys.stdout.flush()
            # leaving the pool's block, or the interpreter's exit, joins the pool's queue threads, which can
            # block for good on a pipe no worker reads any more (seen with many small chunks queued)
            os._exit(130)
    for chunk in lost:
        with ProcessPoolExecutor(1, POOL, initializer=start_worker, initargs=worker_args) as alone:
            try:
                record(alone.submit(run_chunk, chunk, seed).result(), tallies[chunk.target], failures, seed)
            except BrokenProcessPool:
                save_crash(chunk, seed, failures, tallies[chunk.target])


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now: leaving the pool's block alone waits for every chunk handed out."""
    workers = list((pool._processes or {}).values())  # the executor has no public handle on its workers
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.kill()


def stop_on_sigterm(signal_number: int, frame: object) -> None:
    raise KeyboardInterrupt


def record(result: ChunkResult, tally: Tally, failures: Path, seed: int) -> None:
    """Add a chunk's counts; save the target's first unexpected input and its traceback."""
    tally.inputs += result.chunk.count
    tally.seconds += result.seconds
    tally.refused += result.refused
    tally.unexpected += result.unexpected
    if result.first_failure is not None and tally.saved is None:
        index, data, trace = result.first_failure
        failures.mkdir(parents=True, exist_ok=True)
        tally.saved = failures / f"{result.chunk.target}-{index}{TARGETS[result.chunk.target].suffix}"
        tally.saved.write_bytes(data)
        tally.saved.with_name(tally.saved.name + ".txt").write_text(
            f"replay: python -m tests.fuzz_mass --target {result.chunk.target} --first {index} --inputs 1 --seed {seed}\n\n{trace}"
        )


def save_crash(chunk: Chunk, seed: int, failures: Path, tally: Tally) -> None:
    """A chunk that killed its worker (a native abort): counted, and how to replay it noted."""
    tally.inputs += chunk.count
    tally.unexpected += 1
    failures.mkdir(parents=True, exist_ok=True)
    tally.saved = tally.saved or failures / f"{chunk.target}-crash-{chunk.first}.txt"
    tally.saved.write_text(f"the worker died in inputs {chunk.first}..{chunk.first + chunk.count - 1}; replay: "
                           f"python -m tests.fuzz_mass --target {chunk.target} --first {chunk.first} --inputs {chunk.count} --seed {seed}\n")


def print_table(tallies: dict[str, Tally], wall: float, workers: int) -> None:
    print(f"{'target':<20} {'inputs':>10} {'inputs/s':>10} {'refused':>10} {'unexpected':>10}  first failing input")
    for name, tally in tallies.items():
        rate = tally.inputs / tally.seconds * workers if tally.seconds else 0.0  # per second of the whole pool
        print(f"{name:<20} {tally.inputs:>10,} {rate:>10,.0f} {tally.refused:>10,} {tally.unexpected:>10,}  {tally.saved or '-'}")
    inputs = sum(t.inputs for t in tallies.values())
    print(f"{'total':<20} {inputs:>10,} {inputs / wall:>10,.0f} {sum(t.refused for t in tallies.values()):>10,} "
          f"{sum(t.unexpected for t in tallies.values()):>10,}  ({wall:.0f} s wall, {workers} workers)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="total inputs, shared between the targets")
    parser.add_argument("--target", action="append", choices=list(TARGETS), help="fuzz only these targets (repeatable)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="index of each target's first input (to replay one)")
    parser.add_argument("--chunk", type=int, default=2000, help="inputs per task handed to a worker")
    parser.add_argument("--failures", type=Path, default=OUTPUT / "fuzz" / "failures")
    parser.add_argument("--seeds", type=Path, default=OUTPUT / "fuzz" / "seeds", help="seed directory (made when missing)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)  # `kill` stops the workers too, as Ctrl-C does
    if not (args.seeds / "locations.json").is_file():
        prepare_seeds(args.seeds)
    started = time.perf_counter()
    tallies = run(args.inputs, args.target or list(TARGETS), args.workers, args.seed, args.chunk, args.first,
                  args.failures, args.seeds)
    print_table(tallies, time.perf_counter() - started, args.workers)
    return 1 if any(t.unexpected for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
