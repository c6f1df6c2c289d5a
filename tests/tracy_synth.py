"""A small writer of valid Tracy 0.11.x captures, for tests and benchmarks.

It writes what Tracy's own ``Worker::Write`` writes, with only the content a test needs: source
locations, threads with CPU zone trees (optionally named / with text), messages and plots; every other
section is present and empty. ``write_iree_like`` writes millions of zones shaped like IREE's runtime.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import lz4.block
import zstandard

BLOCK_SIZE = 65_536
MAGICS = {"lz4": b"tlZ\x04", "zstd": b"tZst"}
_ACTIVE_INDEX = 3  # StringRef flags: active | is-index


@dataclass(frozen=True)
class SourceLocation:
    name: str | None  # None: an unnamed location (Tracy then shows the function)
    function: str
    file: str
    line: int


@dataclass
class Zone:
    srcloc: int  # 1-based id: position in the capture's source location list + 1
    start: int
    end: int
    children: list[Zone] = field(default_factory=list)
    name: str | None = None
    text: str | None = None


@dataclass
class Timeline:
    """Encoded zones of one thread: top-level count, total zones, and the bytes in stream order."""

    top_level: int
    zone_count: int
    chunks: Iterable[bytes]


@dataclass
class Thread:
    tid: int
    name: str
    timeline: Timeline
    message_keys: list[int] = field(default_factory=list)


@dataclass
class Message:
    key: int
    time: int
    text: str
    thread: int  # tid


class Strings:
    """The string table: index order is the table order; keys are made-up client pointers."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def add(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))

    @staticmethod
    def key(index: int) -> int:
        return 0x1000 + 16 * index

    def encode(self) -> bytes:
        parts = [struct.pack("<Q", len(self.index))]
        for text, index in self.index.items():
            data = text.encode()
            parts.append(struct.pack("<QQ", self.key(index), len(data)) + data)
        return b"".join(parts)


class ZoneExtras:
    """Zone extras (entry 0 is the placeholder): Int24 callstack, StringIdx text, StringIdx name, Int24 color."""

    def __init__(self, strings: Strings) -> None:
        self.strings = strings
        self.entries: list[bytes] = [bytes(12)]

    def add(self, name: str | None, text: str | None) -> int:
        def idx(value: str | None) -> bytes:
            return (0 if value is None else self.strings.add(value) + 1).to_bytes(3, "little")

        self.entries.append(bytes(3) + idx(text) + idx(name) + bytes(3))
        return len(self.entries) - 1

    def encode(self) -> bytes:
        return struct.pack("<Q", len(self.entries)) + b"".join(self.entries)


def encode_zones(zones: list[Zone], extras: ZoneExtras) -> Timeline:
    """Encode a zone forest depth first with one running time reference, as Tracy writes it."""
    out: list[bytes] = []
    reference = 0
    count = 0

    def write(level: list[Zone]) -> None:
        nonlocal reference, count
        for zone in level:
            count += 1
            extra = extras.add(zone.name, zone.text) if zone.name is not None or zone.text is not None else 0
            out.append(struct.pack("<hqII", zone.srcloc, zone.start - reference, extra, len(zone.children)))
            reference = zone.start
            write(zone.children)
            out.append(struct.pack("<q", zone.end - reference))
            reference = zone.end

    write(zones)
    return Timeline(top_level=len(zones), zone_count=count, chunks=[b"".join(out)])


GPU_OFFSET = 1_000_000  # synthetic GPU clock: the CPU time plus this


def encode_gpu_zones(zones: list[Zone]) -> bytes:
    """A GPU timeline: CPU and GPU start deltas, srcloc, callstack, thread, child count, children,
    CPU and GPU end deltas, with one running reference per clock."""
    out: list[bytes] = []
    cpu_ref = gpu_ref = 0

    def write(level: list[Zone]) -> None:
        nonlocal cpu_ref, gpu_ref
        for zone in level:
            gpu_start, gpu_end = zone.start + GPU_OFFSET, zone.end + GPU_OFFSET
            out.append(struct.pack("<qqh3sHQ", zone.start - cpu_ref, gpu_start - gpu_ref, zone.srcloc, bytes(3), 0,
                                   len(zone.children)))
            cpu_ref, gpu_ref = zone.start, gpu_start
            write(zone.children)
            out.append(struct.pack("<qq", zone.end - cpu_ref, gpu_end - gpu_ref))
            cpu_ref, gpu_ref = zone.end, gpu_end

    write(zones)
    return b"".join(out)


def sized(text: str) -> bytes:
    """A ``u64`` length and the UTF-8 bytes."""
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def logical_stream(
    threads: list[Thread],
    source_locations: list[SourceLocation],
    strings: Strings,
    extras: ZoneExtras,
    *,
    version: tuple[int, int, int] = (0, 11, 2),
    messages: list[Message] = (),
    plots: dict[str, list[tuple[int, float]]] | None = None,
    gpu: dict[int, list[Zone]] | None = None,
    program: str = "synthetic",
    last_time: int = 0,
) -> Iterator[bytes]:
    """The decompressed byte stream of a capture, in pieces (zone bytes are streamed)."""
    plots = plots or {}
    head = [b"tracy" + bytes(version)]
    head.append(struct.pack("<qqdqQQqBI12sB", 37, 16, 0.5, last_time, 0, 4242, 100_000, 2, 1, b"GenuineIntel", 0))
    capture_times = struct.pack("<QQ", 1_700_000_000, 1_700_000_000)
    head += [sized("synthetic capture"), sized(program), capture_times, sized("host")]
    # CPU topology: package 0 (> die 0 since 0.11.2) > cores 0 and 1, one hardware thread each.
    cores = struct.pack("<Q", 2) + struct.pack("<IQI", 0, 1, 0) + struct.pack("<IQI", 1, 1, 1)
    dies = struct.pack("<QI", 1, 0) + cores if version >= (0, 11, 2) else cores
    head.append(struct.pack("<QI", 1, 0) + dies)
    head.append(bytes(28))  # crash event
    head.append(struct.pack("<QQBQ", 1, 0, 1, 0))  # one continuous frame set named 0, no frames
    # Strings referenced below must be in the table before it is written.
    thread_name_index = {t.tid: strings.add(t.name) for t in threads}
    plot_index = {name: strings.add(name) for name in plots}
    message_index = [strings.add(m.text) for m in messages]
    location_refs = []
    for location in source_locations:
        refs = b""
        for value in (location.name, location.function, location.file):
            refs += struct.pack("<QB", 0, 0) if value is None else struct.pack("<QB", strings.add(value), _ACTIVE_INDEX)
        location_refs.append(refs + struct.pack("<II", location.line, 0))
    # Zone extras (and their strings) must be registered before this runs: the string table comes first.
    timelines = [t.timeline for t in threads]
    yield b"".join(head)
    yield strings.encode()
    pointers = {Strings.key(i) + 1: Strings.key(i) for i in plot_index.values()}  # client pointer -> key
    yield struct.pack("<Q", len(pointers)) + b"".join(struct.pack("<QQ", p, k) for p, k in pointers.items())
    yield struct.pack("<Q", len(threads)) + b"".join(
        struct.pack("<QQ", tid, Strings.key(i)) for tid, i in thread_name_index.items()
    )
    yield struct.pack("<Q", 0)  # external names
    local = [0] + [t.tid for t in threads]
    yield struct.pack(f"<Q{len(local)}Q", len(local), *local)
    yield struct.pack("<Q", 0)  # external thread table
    yield struct.pack("<Q", len(source_locations)) + b"".join(
        struct.pack("<Q", 0x9000 + i) + refs for i, refs in enumerate(location_refs)
    )
    expand = [0] + [0x9000 + i for i in range(len(source_locations))]
    yield struct.pack(f"<Q{len(expand)}Q", len(expand), *expand)
    yield struct.pack("<Q", 0)  # dynamic source locations
    yield struct.pack("<QQ", 0, 0)  # per-location zone counts (CPU, GPU)
    yield struct.pack("<Q", 0)  # locks
    reference = 0
    encoded_messages = [struct.pack("<Q", len(messages))]
    for message, index in zip(messages, message_index):
        text = struct.pack("<QB", index, _ACTIVE_INDEX)
        encoded_messages.append(struct.pack("<Qq", message.key, message.time - reference) + text + bytes(4 + 3))
        reference = message.time
    yield b"".join(encoded_messages)
    yield extras.encode()
    yield struct.pack("<QQQ", sum(t.zone_count for t in timelines), 0, len(threads))
    thread_header = "<QQQB" + ("i" if version >= (0, 11, 1) else "") + "I"
    for thread, timeline in zip(threads, timelines):
        header_values = [thread.tid, timeline.zone_count, 0, 0] + ([0] if version >= (0, 11, 1) else [])
        yield struct.pack(thread_header, *header_values, timeline.top_level)
        yield from timeline.chunks
        keys = thread.message_keys
        yield struct.pack(f"<Q{len(keys)}QQQ", len(keys), *keys, 0, 0)  # messages, ctx switch samples, samples
    gpu = gpu or {}
    gpu_zone_count = sum(_count(zones) for zones in gpu.values())
    yield struct.pack("<QQQ", gpu_zone_count, 0, 1 if gpu else 0)  # GPU zones: total, child lists, contexts
    if gpu:  # one context: thread, calibration, count, period, type, name, overflow, timelines
        yield struct.pack("<QBQfB3sQQ", 0, 0, gpu_zone_count, 1.0, 0, bytes(3), 0, len(gpu))
        for tid, zones in gpu.items():
            yield struct.pack("<QQ", tid, len(zones)) + encode_gpu_zones(zones)
    encoded_plots = [struct.pack("<Q", len(plots))]
    for name, points in plots.items():
        values = [v for _, v in points]
        pointer = Strings.key(plot_index[name]) + 1
        encoded_plots.append(struct.pack("<BBBBIQdddQ", 0, 0, 0, 1, 0, pointer, min(values, default=0),
                                         max(values, default=0), sum(values), len(points)))
        reference = 0
        for time, value in points:
            encoded_plots.append(struct.pack("<qd", time - reference, value))
            reference = time
    yield b"".join(encoded_plots)
    yield _EMPTY_TAIL


def _count(zones: list[Zone]) -> int:
    return sum(1 + _count(zone.children) for zone in zones)


# Memory (pools, total), call stacks, frames, app info, frame image dictionary size, frame images,
# context switches, per-CPU total and 256 per-CPU counts, tid->pid, CPU thread data, symbol counts (3),
# symbol code, code-symbol map, hardware samples, source cache.
_EMPTY_TAIL = bytes(8 * 5) + bytes(4) + bytes(8 * 3) + bytes(8 * 256) + bytes(8 * 9)


def write_container(
    path: Path, pieces: Iterable[bytes], compression: str = "zstd", streams: int = 4, legacy: bool = False
) -> int:
    """Compress the logical stream into 64 KiB blocks round-robin over ``streams`` continuous
    contexts, as Tracy's FileWrite does; returns the decompressed size."""
    if legacy:
        assert streams == 1
    compressors = [_StreamCompressor(compression) for _ in range(streams)]
    size = 0
    block_index = 0
    pending = bytearray()
    with path.open("wb") as out:
        out.write(MAGICS[compression] if legacy else b"tr\xfdP" + bytes([0 if compression == "lz4" else 1, streams]))

        def emit(block: bytes) -> None:
            nonlocal block_index
            data = compressors[block_index % streams].compress(block)
            out.write(struct.pack("<I", len(data)) + data)
            block_index += 1

        for piece in pieces:
            size += len(piece)
            pending += piece
            while len(pending) >= BLOCK_SIZE:
                emit(bytes(pending[:BLOCK_SIZE]))
                del pending[:BLOCK_SIZE]
        if pending:
            emit(bytes(pending))
    return size


class _StreamCompressor:
    def __init__(self, compression: str) -> None:
        self.compression = compression
        self.previous = b""
        if compression == "zstd":
            self.zstd = zstandard.ZstdCompressor(level=1).compressobj()

    def compress(self, block: bytes) -> bytes:
        if self.compression == "zstd":
            return self.zstd.compress(block) + self.zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        data = lz4.block.compress(block, store_size=False, dict=self.previous)
        self.previous = block
        return data


def write_capture(
    path: Path,
    threads: dict[tuple[int, str], list[Zone]],
    source_locations: list[SourceLocation],
    *,
    compression: str = "zstd",
    streams: int = 4,
    legacy: bool = False,
    version: tuple[int, int, int] = (0, 11, 2),
    messages: list[Message] = (),
    plots: dict[str, list[tuple[int, float]]] | None = None,
    gpu: dict[int, list[Zone]] | None = None,
) -> int:
    """Write a capture of zone trees per (tid, thread name); returns the decompressed size."""
    strings = Strings()
    extras = ZoneExtras(strings)
    keys_of_thread: dict[int, list[int]] = {}
    for message in messages:
        keys_of_thread.setdefault(message.thread, []).append(message.key)
    thread_list = [
        Thread(tid, name, encode_zones(zones, extras), keys_of_thread.get(tid, []))
        for (tid, name), zones in threads.items()
    ]
    last_time = max([z.end for zones in threads.values() for z in zones] + [0])
    pieces = logical_stream(
        thread_list, source_locations, strings, extras, version=version, messages=messages, plots=plots, gpu=gpu,
        last_time=last_time,
    )
    return write_container(path, pieces, compression, streams, legacy)


# IREE's runtime zones that executions are rebuilt from (see tracelink.collect.tracy.views).
IREE_LOCATIONS = [
    SourceLocation("iree_vm_invoke", "iree_vm_invoke", "iree/vm/invocation.c", 300),
    SourceLocation("iree_hal_local_task_process_region", "process_region", "iree/hal/local_task/command_buffer.c", 400),
    SourceLocation(None, "iree_hal_cmd_execute_dispatch_tiles", "iree/hal/drivers/local_task/block_processor.c", 500),
]
IREE_EXPORTS = ["main_dispatch_0_matmul", "main_dispatch_1_elementwise", "main_dispatch_2_reduce"]
# The run phase's call sites (export of each), one region each: export 1 runs twice per iteration.
IREE_CALL_SITES = [0, 1, 2, 1]
_BLOCKS = 12  # tile-block zones per worker per dispatch
ZONE_RECORD_SIZE = 26  # every encoded zone: i16 srcloc, i64 start delta, u32 extra, u32 children, i64 end delta
_PERIOD = 100_000  # ns per iteration


def _iree_iteration(thread: int, begin: int, exports: list[int]) -> list[Zone]:
    """The zones of one thread in one iteration starting at ``begin``: thread 0 the iree_vm_invoke
    zone, a worker a process_region zone per dispatch with its tile-block zones."""
    if thread == 0:
        return [Zone(1, begin, begin + _PERIOD - 1_000)]
    regions = []
    for region, export in enumerate(exports):
        at = begin + 1_000 + region * 20_000 + thread * 10
        blocks = [Zone(3, at + 5 + 1_000 * b, at + 900 + 1_000 * b, name=IREE_EXPORTS[export]) for b in range(_BLOCKS)]
        regions.append(Zone(2, at, at + 1_000 * _BLOCKS + 100, blocks))
    return regions


def _repeated_timeline(thread: int, iterations: int, extras: ZoneExtras) -> Timeline:
    """One thread's zones: an initializer's dispatch of export 1 before the first iteration (workers
    only), then ``iterations`` identical iterations. With a constant period every iteration after the
    first encodes to the same bytes, so the stream is the first iteration's bytes, then those repeated."""
    prefix = [] if thread == 0 else _iree_iteration(thread, 0, [1])
    first = [*prefix, *_iree_iteration(thread, _PERIOD, IREE_CALL_SITES)]
    second = _iree_iteration(thread, 2 * _PERIOD, IREE_CALL_SITES)
    encoded = b"".join(encode_zones(first + second, extras).chunks)
    head_size = ZONE_RECORD_SIZE * _count(first)
    head, repeat = encoded[:head_size], encoded[head_size:]

    def chunks() -> Iterator[bytes]:
        yield head
        for done in range(1, iterations, 1_000):
            yield repeat * min(1_000, iterations - done)

    later = iterations - 1
    return Timeline(len(first) + later * len(second), _count(first) + later * _count(second), chunks())


def write_iree_like(path: Path, iterations: int, workers: int) -> tuple[int, int]:
    """A capture shaped like IREE's (zstd, 4 streams): a main thread with one iree_vm_invoke zone per
    iteration and ``workers`` threads running every call site of IREE_CALL_SITES as a process_region
    zone of tile-block zones named by its export, plus an initializer's dispatch before the first
    iteration. Returns the decompressed size and the zone count."""
    strings = Strings()
    extras = ZoneExtras(strings)
    threads = [Thread(100 + t, "main" if t == 0 else f"iree-worker-{t - 1}", _repeated_timeline(t, iterations, extras))
               for t in range(workers + 1)]
    zones = sum(thread.timeline.zone_count for thread in threads)
    last_time = (iterations + 2) * _PERIOD
    size = write_container(path, logical_stream(threads, IREE_LOCATIONS, strings, extras, last_time=last_time), "zstd", 4)
    return size, zones
