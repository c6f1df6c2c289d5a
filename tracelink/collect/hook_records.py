"""The hook's record files: reading ``hook-<pid>.tlhk`` (format in ``native/hook_output.h``).

One file per hooked process: a preamble, then chunks (header, exports, threads, records, push
constants, notices, end) appended during the run, so a crashed or killed run keeps every chunk
written so far (records are buffered per thread, 8192 at a time, and flushed at thread exit, normal
exit and fatal signals such as SIGTERM/SIGSEGV/SIGABRT when the program left them at their default
action; SIGKILL and ``_exit`` lose the unflushed part, and calls still running on other threads when
the process exits are not recorded). A child forked without exec runs unhooked; exec'd children are
hooked and write their own file.

Times: the hook records TSC ticks (or CLOCK_MONOTONIC ns where the TSC is not the kernel's
clocksource) with calibration pairs; :func:`times_ns` converts them to ns since the hook loaded.

Push constants: once per dispatch, at its workgroup (0, 0, 0), the hook records the dispatch's push
constant values (:class:`DispatchConstants`), keyed like that workgroup's record (binding-table
address, start ticks, export): a dispatch of a program with dynamic shapes gets its sizes there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np

from tracelink.errors import TracelinkError

RECORD_FILE_GLOB = "hook-*.tlhk"
SUPPORTED_ABI_VERSION = 6

_MAGIC = b"TLHOOK\0\0"
_FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sII")
_CHUNK = struct.Struct("<II")
_HEADER = struct.Struct("<IIIIIIQQQ")
_CALIBRATION = struct.Struct("<QQ")
_EXPORT = struct.Struct("<IIII")
_THREAD = struct.Struct("<Ii")
_NOTICE = struct.Struct("<II")
_NOT_HOOKED = 0xFFFFFFFF
_MAX_EVENTS = 16  # TL_MAX_EVENTS in native/hook_events.h
_CONSTANTS_ENTRY = struct.Struct("<QQIHH")  # tl_constants_entry_t in native/hook_constants.h
COUNTER_MISSING = np.uint64(0xFFFFFFFFFFFFFFFF)


class _Chunk(IntEnum):
    """Chunk tags (tl_chunk_tag_t)."""

    HEADER = 1
    EXPORT = 2
    THREAD = 3
    RECORDS = 4
    NOTICE = 5
    END = 6
    CONSTANTS = 7


class Notice(IntEnum):
    """Notice kinds (tl_notice_kind_t)."""

    UNSUPPORTED_ABI = 1
    EXPORT_LIMIT = 2
    QUERY_LIMIT = 3
    EVENT_DROPPED = 4
    SIGNAL = 5
    CONFIG_ERROR = 6
    COUNTER_FAILED = 7
    FAULT_IN_EXPORT = 8  # value: the export id whose workgroup call took the fault that ended the process


_RECORD_FIELDS: list[tuple[str, str]] = [
    ("dispatch_key", "<u8"),
    ("start_ticks", "<u8"),
    ("duration_ticks", "<u8"),
    ("export_id", "<u4"),
    ("thread", "<u4"),
    ("workgroup_x", "<u4"),
    ("workgroup_y", "<u4"),
    ("workgroup_count_x", "<u4"),
    ("workgroup_count_y", "<u4"),
    ("workgroup_z", "<u2"),
    ("workgroup_count_z", "<u2"),
    ("cpu", "<i4"),
]


@dataclass(frozen=True)
class HookExport:
    """One export of a queried executable library, hooked or not."""

    export_id: int | None  # None when not hooked (filtered out or over the limit)
    ordinal: int
    abi_version: int
    library: str
    name: str


@dataclass(frozen=True)
class HookNotice:
    """Something the hook reported in the record file (see ``tl_notice_kind_t``)."""

    kind: int
    value: int
    text: str


@dataclass(frozen=True)
class DispatchConstants:
    """One dispatch's push constants, and the key of its workgroup (0, 0, 0) record."""

    dispatch_key: int
    start_ticks: int
    export_id: int
    values: tuple[int, ...]  # as the dispatch got them (u32 each); fewer than its count when the hook capped them
    count: int  # the dispatch's push_constant_count


@dataclass
class HookFile:
    """The parsed content of one record file (one process)."""

    path: Path
    pid: int = 0
    tsc_clock: bool = False  # ticks are TSC ticks (else CLOCK_MONOTONIC ns)
    origin_ticks: int = 0
    origin_ns: int = 0  # CLOCK_MONOTONIC when the hook loaded
    skip_ns: int = 0
    calibration: list[tuple[int, int]] = field(default_factory=list)  # (ticks, ns) pairs
    event_names: list[str] = field(default_factory=list)
    filter: str = ""
    exports: list[HookExport] = field(default_factory=list)
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)  # index -> (tid, name)
    notices: list[HookNotice] = field(default_factory=list)
    records: np.ndarray | None = None
    constants: list[DispatchConstants] = field(default_factory=list)
    complete: bool = False  # an END chunk was written (clean exit)


def _split_strings(payload: bytes, count: int | None = None) -> list[str]:
    """Split NUL-terminated strings (all of them, or the first ``count``)."""
    parts = payload.split(b"\0")
    parts = parts[:-1] if count is None else parts[:count]
    return [part.decode("utf-8", "replace") for part in parts]


def _record_dtype(event_count: int) -> np.dtype:
    """The numpy layout of one record with ``event_count`` counters."""
    return np.dtype(_RECORD_FIELDS + [(f"counter_{i}", "<u8") for i in range(event_count)])


def _parse_header(hook_file: HookFile, payload: bytes) -> np.dtype:
    fields = _HEADER.unpack_from(payload)
    pid, event_count, record_size, _max_exports, clock, _, origin_ticks, origin_ns, skip_ns = fields
    if event_count > _MAX_EVENTS:
        raise TracelinkError(f"{hook_file.path}: corrupt header ({event_count} counters)")
    strings = _split_strings(payload[_HEADER.size :], event_count + 1)
    hook_file.pid, hook_file.tsc_clock, hook_file.skip_ns = pid, bool(clock), skip_ns
    hook_file.origin_ticks, hook_file.origin_ns = origin_ticks, origin_ns
    hook_file.event_names, hook_file.filter = strings[:event_count], strings[event_count]
    dtype = _record_dtype(event_count)
    if dtype.itemsize != record_size:
        raise TracelinkError(f"{hook_file.path}: record size {record_size} does not match this tracelink")
    return dtype


def _parse_export(payload: bytes) -> HookExport:
    export_id, ordinal, flags, abi_version = _EXPORT.unpack_from(payload)
    library, name = _split_strings(payload[_EXPORT.size :], 2)
    hooked = bool(flags & 1) and export_id != _NOT_HOOKED
    return HookExport(export_id if hooked else None, ordinal, abi_version, library, name)


def _parse_constants(payload: bytes) -> list[DispatchConstants]:
    """The entries of a CONSTANTS chunk (written whole: a short tail is a damaged chunk)."""
    entries: list[DispatchConstants] = []
    offset = 0
    while offset < len(payload):
        key, start_ticks, export_id, count, stored = _CONSTANTS_ENTRY.unpack_from(payload, offset)
        offset += _CONSTANTS_ENTRY.size
        values = struct.unpack_from(f"<{stored}I", payload, offset)
        offset += 4 * stored
        entries.append(DispatchConstants(key, start_ticks, export_id, values, count))
    return entries


def read_hook_file(path: Path) -> HookFile:
    """Parse one record file; a truncated last chunk (killed process) is ignored, a damaged one refused."""
    data = Path(path).read_bytes()
    try:
        return _check_times(_parse_hook_file(Path(path), data))
    except (struct.error, ValueError, IndexError, KeyError, OverflowError, MemoryError) as error:
        raise TracelinkError(f"{path}: corrupt hook record file ({type(error).__name__}: {error})") from None


def _parse_hook_file(path: Path, data: bytes) -> HookFile:
    """The chunks of a record file's bytes; malformed chunks raise what struct/numpy raise."""
    hook_file = HookFile(path=path)
    if len(data) < _PREAMBLE.size:
        return hook_file
    magic, version, _ = _PREAMBLE.unpack_from(data)
    if magic != _MAGIC or version != _FORMAT_VERSION:
        raise TracelinkError(f"{path} is not a tracelink hook record file of format {_FORMAT_VERSION}")
    dtype: np.dtype | None = None
    record_chunks: list[bytes] = []
    offset = _PREAMBLE.size
    while offset + _CHUNK.size <= len(data):
        tag, length = _CHUNK.unpack_from(data, offset)
        start, offset = offset + _CHUNK.size, offset + _CHUNK.size + length
        if offset > len(data):
            break
        payload = data[start:offset]
        if tag == _Chunk.HEADER:
            dtype = _parse_header(hook_file, payload)
        elif tag == _Chunk.EXPORT:
            hook_file.exports.append(_parse_export(payload))
        elif tag == _Chunk.THREAD:
            index, tid = _THREAD.unpack_from(payload)
            hook_file.threads[index] = (tid, _split_strings(payload[_THREAD.size :], 1)[0])
        elif tag == _Chunk.RECORDS and dtype is not None:
            hook_file.calibration.append(_CALIBRATION.unpack_from(payload))
            records = payload[_CALIBRATION.size :]
            record_chunks.append(records[: len(records) - len(records) % dtype.itemsize])
        elif tag == _Chunk.CONSTANTS:
            hook_file.constants.extend(_parse_constants(payload))
        elif tag == _Chunk.NOTICE:
            kind, value = _NOTICE.unpack_from(payload)
            hook_file.notices.append(HookNotice(kind, value, _split_strings(payload[_NOTICE.size :], 1)[0]))
        elif tag == _Chunk.END:
            hook_file.calibration.append(_CALIBRATION.unpack_from(payload))
            hook_file.complete = True
    if dtype is not None:
        hook_file.records = np.frombuffer(b"".join(record_chunks), dtype=dtype)
    return hook_file


def record_paths(path: Path) -> list[Path]:
    """A record file, or every record file in a directory."""
    path = Path(path)
    return sorted(path.glob(RECORD_FILE_GLOB)) if path.is_dir() else [path]


MAX_NS = 2.0**61  # 73 years: any time or duration beyond is a damaged field


def _ns_per_tick(hook_file: HookFile) -> float:
    """The tick length, from the load-time clock pair and the latest later pair."""
    if not hook_file.tsc_clock:
        return 1.0
    ticks, ns = max(hook_file.calibration, default=(hook_file.origin_ticks, hook_file.origin_ns))
    if ticks <= hook_file.origin_ticks or ns <= hook_file.origin_ns:
        raise TracelinkError(f"{hook_file.path}: no clock calibration after the hook loaded")
    return (ns - hook_file.origin_ns) / (ticks - hook_file.origin_ticks)


def times_ns(hook_file: HookFile) -> tuple[np.ndarray, np.ndarray]:
    """Each record's start since the hook loaded and its duration, in ns (floats)."""
    records = hook_file.records
    assert records is not None
    ns_per_tick = _ns_per_tick(hook_file)
    since_load = (records["start_ticks"].astype(np.int64) - hook_file.origin_ticks) * ns_per_tick
    return since_load, records["duration_ticks"] * ns_per_tick


def _check_times(hook_file: HookFile) -> HookFile:
    """Refuse clock fields that give times no run has (a damaged file): cast to int64 later, they would be garbage."""
    if hook_file.records is not None and len(hook_file.records):
        since_load, durations = times_ns(hook_file)
        if not (np.all(np.abs(since_load) < MAX_NS) and np.all(np.abs(durations) < MAX_NS)):
            raise TracelinkError(f"{hook_file.path}: corrupt hook record file (clock values out of range)")
    return hook_file

