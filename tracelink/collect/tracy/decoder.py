"""Decode a .tracy capture (Tracy 0.11.x, as written by IREE 3.13's ``iree-tracy-capture``).

No section records its length, so every section is parsed in order, as Tracy's own loader does:
header, capture information, CPU topology, crash event, frames, strings and pointers, threads, source
locations, locks, messages, zone extras, CPU zones, GPU zones, plots. The sections after the plots
(memory, call stacks, frame images, context switches, symbols, source cache) hold nothing this reader
uses; they are walked with counted skips, keeping nothing, so that the parse accounts for every byte
and must end exactly where the stream ends.

Counts read from the file are checked against the bytes left before anything is allocated for them,
so a corrupt file raises :class:`TracyFormatError` instead of exhausting memory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.collect.tracy.container import ByteReader, TracyFormatError, open_container
from tracelink.collect.tracy.timeline import LEAF_SIZE, Timeline, read_timeline

# Tracy's loader at 0.11.2 accepts older files too, but this reader implements only the 0.11 layouts:
# 0.11.0, plus the thread group hint (0.11.1) and CPU dies (0.11.2).
OLDEST_SUPPORTED = (0, 11, 0)
NEWEST_SUPPORTED = (0, 11, 2)
UNKNOWN = "???"  # what Tracy shows for a string it cannot resolve

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U16 = struct.Struct("<H")
_U64_PAIR = struct.Struct("<QQ")
_MACHINE = struct.Struct("<qqdqQQqBI12sB")
_FRAME_SET = struct.Struct("<QB")
_LOCK = struct.Struct("<I3shBBqq")
_GPU_CONTEXT = struct.Struct("<QBQfB3sQ")
_GPU_ZONE_BEGIN = struct.Struct("<qqh3sH")  # then a u64 child count
_GPU_ZONE_END = struct.Struct("<qq")
_PLOT = struct.Struct("<BBBBIQddd")

_STRING_REF = [("value", "<u8"), ("flags", "u1")]
_SOURCE_LOCATION = np.dtype(
    [("name", _STRING_REF), ("function", _STRING_REF), ("file", _STRING_REF), ("line", "<u4"), ("color", "<u4")]
)
_STATIC_SOURCE_LOCATION = np.dtype([("pointer", "<u8"), ("location", _SOURCE_LOCATION)])
_MESSAGE = np.dtype(
    [("key", "<u8"), ("time_delta", "<i8"), ("text", _STRING_REF), ("color", "<u4"), ("callstack", "u1", 3)]
)
_ZONE_EXTRA = np.dtype([("callstack", "u1", 3), ("text", "u1", 3), ("name", "u1", 3), ("color", "u1", 3)])
_PLOT_POINT = np.dtype([("time_delta", "<i8"), ("value", "<f8")])

_ACTIVE, _IS_INDEX = 2, 1  # StringRef flag bits
_SRCLOC_IDS = 1 << 15
_EXTRA_TEXT, _EXTRA_NAME = 0, 1  # columns of the zone-extras string table


@dataclass(frozen=True)
class TracyHeader:
    """The capture-wide values of a .tracy file."""

    version: tuple[int, int, int]
    delay: int
    resolution: int  # timer resolution, ns
    timer_mul: float  # ns per tick of the client's timer
    last_time: int  # ns since capture start of the last event
    frame_offset: int
    pid: int
    sampling_period: int
    cpu_arch: int
    cpu_id: int
    cpu_manufacturer: str
    on_demand: bool
    capture_name: str
    program: str
    capture_time: int  # Unix time, s
    executable_time: int
    host_info: str
    compression: str
    streams: int

    @property
    def version_text(self) -> str:
        return _dotted(self.version)


@dataclass
class TracyCapture:
    """Everything this reader takes from a capture. Times are ns since the capture started."""

    path: Path
    header: TracyHeader
    threads: dict[int, str]  # tid -> name, every thread the capture knows
    source_locations: pd.DataFrame  # index: source location id (int16 as Tracy numbers them)
    zones: pd.DataFrame  # CPU zones, per thread in depth-first order
    gpu_zones: pd.DataFrame
    messages: pd.DataFrame
    plots: dict[str, pd.DataFrame]  # name -> time_ns, value (sorted by time)
    zone_count: int  # the CPU zone total the file declares
    lock_count: int
    frame_counts: dict[str, int]  # frame set name -> frames
    plots_end_offset: int  # decompressed offset where the plots (the last section decoded) end
    decompressed_size: int  # length of the whole logical stream, where the parse ended


def read_capture(path: str | Path) -> TracyCapture:
    """Decode the capture at ``path``. Raises :class:`TracyFormatError` for anything it cannot read."""
    path = Path(path)
    container = open_container(path)
    reader = ByteReader(container)
    return _Sections(reader, container.compression, container.streams).read()


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _version_error(path: Path, version: tuple[int, int, int]) -> TracyFormatError:
    return TracyFormatError(
        f"{path}: Tracy file version {_dotted(version)} is not supported "
        f"(this reader implements {_dotted(OLDEST_SUPPORTED)} to {_dotted(NEWEST_SUPPORTED)})"
    )


def _int24(triples: np.ndarray) -> np.ndarray:
    """Little-endian 3-byte unsigned integers from an (n, 3) uint8 array."""
    as_int = triples.astype(np.int32)
    return as_int[:, 0] | as_int[:, 1] << 8 | as_int[:, 2] << 16


@dataclass
class _ThreadZones:
    """What the CPU zone section says about one thread, besides its zones."""

    tid: int
    zone_count: int
    message_keys: np.ndarray  # keys of the messages this thread emitted


class _Sections:
    """Parses the sections in file order, keeping what later sections need to resolve references."""

    def __init__(self, reader: ByteReader, compression: str, streams: int) -> None:
        self.reader = reader
        self.compression = compression
        self.streams = streams
        self.version = (0, 0, 0)
        self.strings: list[str] = []
        self.pointer_strings: dict[int, str] = {}  # client pointer -> string
        self.thread_names: dict[int, str] = {}
        self.external_names: dict[int, tuple[str, str]] = {}
        self.local_threads: np.ndarray = np.empty(0, np.uint64)

    # -- helpers -----------------------------------------------------------------------------

    def _records(self, dtype: np.dtype, what: str) -> np.ndarray:
        """A ``u64`` count followed by that many fixed-size records."""
        count = self.reader.count(dtype.itemsize, what)
        return np.frombuffer(self.reader.read(count * dtype.itemsize), dtype=dtype)

    def _string_ref(self, value: int, flags: int) -> str | None:
        """Resolve a StringRef (a string-table index or a client pointer); None when not active."""
        if not flags & _ACTIVE:
            return None
        if not flags & _IS_INDEX:
            return self.pointer_strings.get(value, UNKNOWN)
        if value >= len(self.strings):
            raise self.reader.error(f"corrupt data: string index {value} out of range")
        return self.strings[value]

    def _thread_name(self, tid: int) -> str:
        """Tracy's rule: the thread's own name, else the external name, else '???'."""
        name = self.thread_names.get(tid)
        external = self.external_names.get(tid)
        if name is None:
            return external[1] if external else UNKNOWN
        # A client that could not name a thread sends its number; prefer the external name then.
        if external and name.isdigit() and int(name) == tid:
            return external[1]
        return name

    # -- sections ----------------------------------------------------------------------------

    def read(self) -> TracyCapture:
        header = self._header()
        self._topology()
        self.reader.skip(28)  # crash event: u64 thread, i64 time, u64 message, u32 callstack
        frame_sets = self._frame_sets()
        self._strings_and_threads()
        frame_counts = {self._frame_set_name(pointer): count for pointer, count in frame_sets}
        source_locations = self._source_locations()
        lock_count = self._locks()
        messages = self._messages()
        extras = self._zone_extras()
        zone_count, zone_threads, zones = self._cpu_zones()
        gpu_zones = self._gpu_zones(source_locations)
        plots = self._plots()
        plots_end = self.reader.offset
        self._tail()
        threads = {int(tid): self._thread_name(int(tid)) for tid in self.local_threads[1:]}
        for thread in zone_threads:
            threads.setdefault(thread.tid, self._thread_name(thread.tid))
        return TracyCapture(
            path=self.reader.path,
            header=header,
            threads=threads,
            source_locations=source_locations,
            zones=self._zone_frame(zones, zone_threads, source_locations, extras),
            gpu_zones=gpu_zones,
            messages=self._message_frame(messages, zone_threads),
            plots=plots,
            zone_count=zone_count,
            lock_count=lock_count,
            frame_counts=frame_counts,
            plots_end_offset=plots_end,
            decompressed_size=self.reader.offset,
        )

    def _header(self) -> TracyHeader:
        magic = self.reader.read(8)
        if magic[:5] != b"tracy":
            raise self.reader.error(f"not a Tracy capture (data starts with {magic[:5]!r})", 0)
        version = tuple(magic[5:8])
        if not OLDEST_SUPPORTED <= version <= NEWEST_SUPPORTED:
            raise _version_error(self.reader.path, version)
        self.version = version
        (delay, resolution, timer_mul, last_time, frame_offset, pid, sampling_period, cpu_arch, cpu_id,
         manufacturer, on_demand) = self.reader.unpack(_MACHINE)
        capture_name = self._text("capture name")
        program = self._text("program name")
        capture_time, executable_time = self.reader.unpack(_U64_PAIR)
        host_info = self._text("host info")
        return TracyHeader(
            version=version, delay=delay, resolution=resolution, timer_mul=timer_mul, last_time=last_time,
            frame_offset=frame_offset, pid=pid, sampling_period=sampling_period, cpu_arch=cpu_arch,
            cpu_id=cpu_id, cpu_manufacturer=manufacturer.rstrip(b"\0").decode("latin-1"),
            on_demand=bool(on_demand), capture_name=capture_name, program=program,
            capture_time=capture_time, executable_time=executable_time, host_info=host_info,
            compression=self.compression, streams=self.streams,
        )

    def _text(self, what: str) -> str:
        """A ``u64`` length followed by that many bytes of text."""
        return self.reader.read(self.reader.count(1, what)).decode("utf-8", errors="replace")

    def _topology(self) -> None:
        """Skip the CPU topology: packages, (dies since 0.11.2,) cores, each a count then entries."""
        levels = 3 if self.version >= (0, 11, 2) else 2

        def skip_level(depth: int) -> None:
            if depth == levels:
                self.reader.skip(4 * self.reader.count(4, "hardware threads"))
                return
            for _ in range(self.reader.count(12, "topology entries")):
                self.reader.skip(4)  # the package / die / core id
                skip_level(depth + 1)

        skip_level(0)

    def _frame_sets(self) -> list[tuple[int, int]]:
        """Skip the frames, returning (name pointer, frame count) per frame set."""
        sets = []
        for _ in range(self.reader.count(_FRAME_SET.size + 8, "frame sets")):
            name, continuous = self.reader.unpack(_FRAME_SET)
            frame_size = 12 if continuous else 20  # start (, end), i32 frame image
            count = self.reader.count(frame_size, "frames")
            self.reader.skip(count * frame_size)
            sets.append((name, count))
        return sets

    def _frame_set_name(self, pointer: int) -> str:
        return "Frame" if pointer == 0 else self.pointer_strings.get(pointer, UNKNOWN)

    def _strings_and_threads(self) -> None:
        """The string table, the pointer map, thread names, external names and the thread tables."""
        headers, payloads = self.reader.read_prefixed(self.reader.count(16, "strings"), _U64_PAIR, 1)
        joined = b"\0".join(payloads)
        if joined.count(b"\0") == len(payloads) - 1:  # C strings, as Tracy writes: decode in one call
            self.strings = joined.decode("utf-8", errors="replace").split("\0")
        else:
            self.strings = [payload.decode("utf-8", errors="replace") for payload in payloads]
        by_key = {key: text for (key, _), text in zip(headers, self.strings)}
        for pointer, key in self._records(np.dtype([("p", "<u8"), ("k", "<u8")]), "string pointers").tolist():
            if key in by_key:
                self.pointer_strings[pointer] = by_key[key]
        for tid, key in self._records(np.dtype([("t", "<u8"), ("k", "<u8")]), "thread names").tolist():
            if key in by_key:
                self.thread_names[tid] = by_key[key]
        externals = self._records(np.dtype([("t", "<u8"), ("k1", "<u8"), ("k2", "<u8")]), "external names")
        for tid, key1, key2 in externals.tolist():
            if key1 in by_key and key2 in by_key:
                self.external_names[tid] = (by_key[key1], by_key[key2])
        # Position in the local table is the compressed thread id used by small thread fields.
        self.local_threads = self._records(np.dtype("<u8"), "local threads").copy()
        self._records(np.dtype("<u8"), "external threads")

    def _source_locations(self) -> pd.DataFrame:
        """Static locations (reached through the expand table) and dynamic ones, by Tracy's id."""
        static = self._records(_STATIC_SOURCE_LOCATION, "static source locations")
        expand = self._records(np.dtype("<u8"), "source location ids")
        dynamic = self._records(_SOURCE_LOCATION, "dynamic source locations")
        if max(len(expand), len(dynamic)) > _SRCLOC_IDS:  # ids are int16: >= 0 static, < 0 dynamic
            raise self.reader.error("corrupt data: more source locations than 16-bit ids can name")
        for _ in range(2):  # per-location zone counts (CPU, GPU): Tracy's reservation hints
            self._records(np.dtype([("id", "<i2"), ("count", "<u8")]), "source location counts")
        static_by_pointer = {int(p): i for i, p in enumerate(static["pointer"].tolist())}
        rows = []
        for srcloc_id, pointer in enumerate(expand.tolist()):
            if srcloc_id == 0:  # entry 0 is a placeholder
                continue
            if pointer not in static_by_pointer:
                raise self.reader.error(f"corrupt data: source location {srcloc_id} has no static entry")
            rows.append((srcloc_id, static["location"][static_by_pointer[pointer]]))
        rows += [(-index - 1, location) for index, location in enumerate(dynamic)]
        records = []
        for srcloc_id, location in rows:
            name = self._string_ref(int(location["name"]["value"]), int(location["name"]["flags"]))
            function = self._string_ref(int(location["function"]["value"]), int(location["function"]["flags"]))
            file = self._string_ref(int(location["file"]["value"]), int(location["file"]["flags"]))
            records.append(
                {
                    "id": srcloc_id,
                    "name": name,
                    "function": function if function is not None else UNKNOWN,
                    "file": file if file is not None else UNKNOWN,
                    "line": int(location["line"]),
                    "color": int(location["color"]),
                    # What Tracy's views and csvexport call the location.
                    "display_name": name if name is not None else (function if function is not None else UNKNOWN),
                }
            )
        frame = pd.DataFrame.from_records(
            records, columns=["id", "name", "function", "file", "line", "color", "display_name"]
        )
        frame = frame.astype({"id": "int16", "line": "uint32", "color": "uint32"})
        return frame.set_index("id")

    def _locks(self) -> int:
        count = self.reader.count(_LOCK.size + 16, "locks")
        for _ in range(count):
            self.reader.skip(_LOCK.size)
            self.reader.skip(8 * self.reader.count(8, "lock threads"))
            self.reader.skip(12 * self.reader.count(12, "lock events"))  # i64 time, i16 srcloc, u8 thread, u8 type
        return count

    def _messages(self) -> np.ndarray:
        return self._records(_MESSAGE, "messages")

    def _zone_extras(self) -> np.ndarray:
        """(n, 2) array of string indices (_EXTRA_TEXT, _EXTRA_NAME) per zone extra; -1 where none."""
        extras = self._records(_ZONE_EXTRA, "zone extras")
        pairs = (np.stack([_int24(extras["text"]), _int24(extras["name"])], axis=1) - 1).astype(np.int32)
        if pairs.size and pairs.max() >= len(self.strings):
            raise self.reader.error(f"corrupt data: zone extra string index {int(pairs.max())} out of range")
        return pairs

    def _cpu_zones(self) -> tuple[int, list[_ThreadZones], Timeline]:
        """The declared zone total, each thread's tid / zone count / message keys, and all zones."""
        zone_count, _ = self.reader.unpack(_U64_PAIR)  # total zones, child lists
        has_group_hint = self.version >= (0, 11, 1)
        thread_header = struct.Struct("<QQQB" + ("i" if has_group_hint else "") + "I")
        threads: list[_ThreadZones] = []
        timelines: list[Timeline] = []
        for _ in range(self.reader.count(thread_header.size + 24, "threads")):
            tid, *_, top_level = self.reader.unpack(thread_header)
            self.reader.check_count(top_level, LEAF_SIZE, "top-level zones", self.reader.offset - 4)
            timelines.append(read_timeline(self.reader, top_level))
            message_keys = self._records(np.dtype("<u8"), "thread messages").copy()
            for what in ("context switch samples", "samples"):
                self.reader.skip(11 * self.reader.count(11, what))  # i64 time, Int24 callstack
            threads.append(_ThreadZones(tid, len(timelines[-1].start), message_keys))
        return zone_count, threads, Timeline.concatenate(timelines)

    def _gpu_zones(self, source_locations: pd.DataFrame) -> pd.DataFrame:
        """GPU zones of every context and timeline; two running references (CPU, GPU) per timeline."""
        self.reader.unpack(_U64_PAIR)  # total zones, child lists
        rows: list[list[int]] = []
        for context in range(self.reader.count(_GPU_CONTEXT.size + 8, "GPU contexts")):
            self.reader.unpack(_GPU_CONTEXT)
            for _ in range(self.reader.count(16, "GPU timelines")):
                (tid,) = self.reader.unpack(_U64)
                self._gpu_timeline(context, tid, rows)
        columns = ["context", "tid", "srcloc", "depth", "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns"]
        frame = pd.DataFrame(rows, columns=columns).astype({"srcloc": "int16", "depth": "int32", "tid": "uint64"})
        names = source_locations["display_name"]
        frame.insert(0, "name", frame["srcloc"].map(names).astype("string"))
        return frame

    def _gpu_timeline(self, context: int, tid: int, rows: list[list[int]]) -> None:
        """Append the zones of one GPU timeline (depth first) to ``rows``."""
        cpu_ref = gpu_ref = 0
        zone_size = _GPU_ZONE_BEGIN.size + 8 + _GPU_ZONE_END.size
        remaining = self.reader.count(zone_size, "GPU zones")
        enclosing: list[tuple[list[int], int]] = []  # (row, remaining siblings) of the enclosing zones
        while remaining or enclosing:
            if remaining == 0:
                row, remaining = enclosing.pop()
                cpu_delta, gpu_delta = self.reader.unpack(_GPU_ZONE_END)
                cpu_ref += cpu_delta
                gpu_ref += gpu_delta
                row[5], row[7] = cpu_ref, gpu_ref
                continue
            cpu_delta, gpu_delta, srcloc, _, _ = self.reader.unpack(_GPU_ZONE_BEGIN)
            children = self.reader.count(zone_size, "GPU zone children")
            cpu_ref += cpu_delta
            gpu_ref += gpu_delta
            row = [context, tid, srcloc, len(enclosing), cpu_ref, -1, gpu_ref, -1]
            rows.append(row)
            enclosing.append((row, remaining - 1))
            remaining = children

    def _plots(self) -> dict[str, pd.DataFrame]:
        plots: dict[str, pd.DataFrame] = {}
        for _ in range(self.reader.count(_PLOT.size + 8, "plots")):
            *_, name_pointer, _, _, _ = self.reader.unpack(_PLOT)
            points = self._records(_PLOT_POINT, "plot points")
            name = self.pointer_strings.get(name_pointer, UNKNOWN)
            key, suffix = name, 2
            while key in plots:  # keep every plot even if two share a name
                key, suffix = f"{name} ({suffix})", suffix + 1
            # The file keeps arrival order (several threads feed one plot); Tracy sorts by time to show it.
            plot = pd.DataFrame({"time_ns": np.cumsum(points["time_delta"]), "value": points["value"]})
            plots[key] = plot.sort_values("time_ns", kind="stable", ignore_index=True)
        return plots

    def _tail(self) -> None:
        """Walk the sections after the plots (layouts as of 0.11.2) and check the stream ends there."""
        reader = self.reader
        at = reader.offset
        pools, _ = reader.unpack(_U64_PAIR)  # memory pools, total events
        for _ in range(reader.check_count(pools, 64, "memory pools", at)):
            (_, events, _, _) = reader.unpack(struct.Struct("<QQQQ"))  # name, events, active, frees
            reader.check_count(events, 42, "memory events", reader.offset)
            reader.skip(events * 42 + 32)  # events, then high, low, usage, name
        reader.skip_records(reader.count(2, "call stacks"), 2, _U16, 0, 8)
        reader.skip_records(reader.count(12, "call stack frames"), 12, _U8, 8, 18)
        reader.skip(9 * reader.count(9, "app info entries"))
        reader.skip(reader.unpack(_U32)[0])  # frame image compression dictionary
        for _ in range(reader.count(5, "frame images")):
            width, height, _ = reader.unpack(struct.Struct("<HHB"))
            reader.skip(width * height // 2)
        reader.skip_records(reader.count(16, "context switch threads"), 16, _U64, 8, 35)
        reader.skip(8)  # per-CPU context switch total
        reader.skip_records(256, 8, _U64, 0, 18)
        reader.skip(16 * reader.count(16, "thread to process entries"))
        reader.skip(24 * reader.count(24, "CPU thread entries"))
        reader.skip(16)  # symbol and inline symbol counts
        reader.skip(32 * reader.count(32, "symbols"))
        reader.skip_records(reader.count(12, "symbol code entries"), 12, _U32, 8, 1)
        reader.skip(16 * reader.count(16, "code symbol entries"))
        for _ in range(reader.count(56, "hardware sample addresses")):
            reader.skip(8)
            reader.skip_records(6, 8, _U64, 0, 8)
        reader.skip_records(2 * reader.count(8, "source cache entries"), 4, _U32, 0, 1)
        end = reader.offset
        left = reader.drain()
        if left:
            raise reader.error(f"corrupt data: {left} bytes after the last section", end)

    # -- tables ------------------------------------------------------------------------------

    def _zone_frame(
        self, zones: Timeline, threads: list[_ThreadZones], source_locations: pd.DataFrame, extras: np.ndarray
    ) -> pd.DataFrame:
        """One row per CPU zone with names resolved: categoricals (a few distinct values, many rows)
        and the narrowest integer types, built one column at a time so that millions of zones cost
        little more than the table itself."""
        per_thread = [thread.zone_count for thread in threads]
        code_type = np.int8 if len(threads) < 2**7 else np.int16 if len(threads) < 2**15 else np.int32
        thread_of_zone = np.repeat(np.arange(len(threads), dtype=code_type), per_thread)
        tids = np.array([thread.tid for thread in threads], dtype=np.uint64)

        # Source location id (int16) -> row of the table, through its uint16 bit pattern.
        row_of_id = np.full(1 << 16, -1, dtype=np.int16)
        ids = source_locations.index.to_numpy().astype(np.int16)
        row_of_id[ids.view(np.uint16)] = np.arange(len(ids), dtype=np.int16)
        row = row_of_id[zones.srcloc.view(np.uint16)]
        if len(row) and row.min() < 0:
            bad = int(zones.srcloc[np.argmax(row < 0)])
            raise self.reader.error(f"corrupt data: zone with unknown source location {bad}")
        if zones.extra.size and int(zones.extra.max()) >= len(extras):
            raise self.reader.error(f"corrupt data: zone extra index {int(zones.extra.max())} out of range")
        display = source_locations["display_name"].tolist()
        names = [self._thread_name(int(tid)) for tid in tids]
        columns = {
            # A zone's own name (IREE puts the dispatch name there) wins over its location's name.
            "name": self._extra_strings(extras, zones.extra, _EXTRA_NAME, fallback=(display, row)),
            "srcloc_name": _categorical(display, row),
            "function": _categorical(source_locations["function"].tolist(), row),
            "file": _categorical(source_locations["file"].tolist(), row),
            "line": source_locations["line"].to_numpy()[row],
            "srcloc": zones.srcloc,
            "thread": _categorical(names, thread_of_zone),
            "tid": _categorical(tids.tolist(), thread_of_zone),
            "thread_index": self._compressed_thread_ids(tids)[thread_of_zone],
            "start_ns": zones.start,
            "duration_ns": _durations(zones),  # unfinished: <NA>
            "depth": zones.depth,
            "text": self._extra_strings(extras, zones.extra, _EXTRA_TEXT),
        }
        return pd.DataFrame(columns, copy=False)  # the arrays are fresh: no need to copy them again

    def _extra_strings(
        self, extras: np.ndarray, extra: np.ndarray, field: int, fallback: tuple[list[str], np.ndarray] | None = None
    ) -> pd.Categorical:
        """Each zone's zone-extra string ``field`` as a categorical. Zones without one (extra 0 is
        the placeholder, whose strings are inactive) get ``fallback`` = (values, index), or missing."""
        if not len(extras):
            return _categorical(*fallback) if fallback else _categorical([], np.full(len(extra), -1, np.int8))
        strings_of_extra = extras[:, field]  # string index per zone extra, -1 where none
        # Only the strings some zone uses become categories: the extras are few, the zones many.
        in_use = np.zeros(len(extras), dtype=bool)
        in_use[extra] = True
        used = np.unique(strings_of_extra[in_use])
        used = used[used >= 0]
        values = [self.strings[i] for i in used.tolist()]
        offset = len(fallback[0]) if fallback else 0
        position = np.searchsorted(used, strings_of_extra) + offset
        code_of_extra = np.where(strings_of_extra >= 0, position, -1).astype(np.int32)
        codes = code_of_extra[extra]  # per zone: its string's position, -1 where none
        if fallback is None:
            return _categorical(values, codes)
        fallback_values, fallback_index = fallback
        missing = codes < 0
        codes[missing] = fallback_index[missing]
        return _categorical(fallback_values + values, codes)

    def _compressed_thread_ids(self, tids: np.ndarray) -> np.ndarray:
        """Tracy's compressed thread id (position in the local thread table) per tid; -1 if absent."""
        position = {int(tid): i for i, tid in enumerate(self.local_threads.tolist())}
        return np.array([position.get(int(tid), -1) for tid in tids], dtype=np.int16 if len(position) < 2**15 else np.int32)

    def _message_frame(self, messages: np.ndarray, threads: list[_ThreadZones]) -> pd.DataFrame:
        """Messages with times and threads (a message's thread is the one listing its key)."""
        thread_of_key = {key: thread.tid for thread in threads for key in thread.message_keys.tolist()}
        texts = [self._string_ref(int(v), int(f)) for v, f in zip(messages["text"]["value"], messages["text"]["flags"])]
        tids = [thread_of_key.get(int(key)) for key in messages["key"]]
        return pd.DataFrame(
            {
                "time_ns": np.cumsum(messages["time_delta"]),
                "text": pd.array(texts, dtype="string"),
                "thread": pd.array([self._thread_name(t) if t is not None else None for t in tids], dtype="string"),
                "tid": pd.array(tids, dtype="UInt64"),
                "color": messages["color"],
            }
        )


def _durations(zones: Timeline) -> pd.arrays.IntegerArray:
    """End minus start of every zone, <NA> for a zone that never ended; computed in place in the
    timeline's end array, which is not needed afterwards."""
    unfinished = zones.end < 0
    np.subtract(zones.end, zones.start, out=zones.end)
    return pd.arrays.IntegerArray(zones.end, mask=unfinished)


def _categorical(values: list, index: np.ndarray) -> pd.Categorical:
    """``values[index]`` as a categorical without one Python object per row; index -1 is missing."""
    categories, inverse = np.unique(np.array(values, dtype=object), return_inverse=True)
    # Codes as small as pandas would make them, built directly at that size.
    code_type = np.int8 if len(categories) < 2**7 else np.int16 if len(categories) < 2**15 else np.int32
    lookup = np.append(inverse, -1).astype(code_type)  # index -1 picks the trailing -1
    return pd.Categorical.from_codes(lookup[index], categories=categories)
