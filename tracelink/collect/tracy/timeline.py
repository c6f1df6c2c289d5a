"""Reading a thread's CPU zone timeline: the hot loop of the decoder.

A timeline is written depth-first: per zone ``i16 srcloc, i64 start delta, u32 extra, u32 child
count``, the children, then ``i64 end delta``; one running time reference per thread is advanced by
every delta in stream order. Record positions depend on child counts, so finding them is sequential;
everything else is vectorised. The Python loop only records where each record starts and what kind it
is (leaf zone, parent zone, parent end); whenever the reader's window moves, numpy gathers the fields
of the records seen so far from the window, and at the end of the thread the times, ends and depths
come from cumulative sums over the deltas in stream order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from tracelink.collect.tracy.container import ByteReader

LEAF, PARENT, PARENT_END = 0, 1, 2
HEADER_SIZE = 18  # i16 srcloc, i64 start delta, u32 extra, u32 child count
LEAF_SIZE = HEADER_SIZE + 8  # a header with no children followed by its end delta
_RECORD = np.dtype(
    [("srcloc", "<i2"), ("start", "<i8"), ("extra", "<u4"), ("children", "<u4"), ("end", "<i8")]
)
_CHILD_COUNT = struct.Struct("<I")


@dataclass
class Timeline:
    """The zones of one thread, in depth-first (pre-)order."""

    srcloc: np.ndarray  # int16 source location id
    extra: np.ndarray  # uint32 zone-extra index (0 = none)
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns, -1 for a zone that never ended
    depth: np.ndarray  # int16 (int32 if nested deeper), 0 for top-level zones

    @classmethod
    def concatenate(cls, timelines: list[Timeline]) -> Timeline:
        """All zones of ``timelines``, one after the other (an empty timeline for an empty list).

        Empties ``timelines`` field by field as it goes, so at most one field is held twice.
        """
        dtypes = ("<i2", "<u4", "<i8", "<i8", "<i2")
        columns = []
        for name, dtype in zip(cls.__dataclass_fields__, dtypes):
            columns.append(np.concatenate([np.empty(0, dtype)] + [getattr(t, name) for t in timelines]))
            for timeline in timelines:
                setattr(timeline, name, columns[-1][:0])
        return cls(*columns)


@dataclass
class _Records:
    """Fields gathered from one window: one entry per record, in stream order."""

    kind: np.ndarray  # uint8 LEAF / PARENT / PARENT_END
    first_delta: np.ndarray  # start delta of a zone, end delta of a PARENT_END
    leaf_end_delta: np.ndarray  # end delta of a LEAF, 0 otherwise
    srcloc: np.ndarray
    extra: np.ndarray


def _gather(buf: bytes, codes: list[int]) -> _Records:
    """Decode the records listed in ``codes`` (``offset << 2 | kind``) from one window."""
    code_array = np.array(codes, dtype=np.int64)
    kind = (code_array & 3).astype(np.uint8)
    # Every offset as the start of a 26-byte row (a view, no copy), padded so a short record near
    # the end still has a row; the loop guaranteed the bytes each kind actually uses.
    window = np.frombuffer(buf + bytes(LEAF_SIZE), dtype=np.uint8)
    raw = np.lib.stride_tricks.sliding_window_view(window, LEAF_SIZE)[code_array >> 2]
    records = raw.view(_RECORD).ravel()
    is_end = kind == PARENT_END
    first_delta = records["start"].copy()
    if is_end.any():
        first_delta[is_end] = raw[is_end, :8].copy().view("<i8").ravel()
    return _Records(
        kind=kind,
        first_delta=first_delta,
        leaf_end_delta=np.where(kind == LEAF, records["end"], 0),
        srcloc=records["srcloc"].copy(),
        extra=records["extra"].copy(),
    )


def read_timeline(reader: ByteReader, top_level: int) -> Timeline:
    """Read ``top_level`` zones and their descendants from ``reader``."""
    if top_level == 0:
        return Timeline.concatenate([])
    return _assemble(_concat(_scan(reader, top_level)))


def _parent_flags(buf: bytes) -> bytes:
    """Byte ``p`` is 1 when a zone header at ``p`` would have a non-zero child count.

    Computed for the whole window at once, so the loop tells leaves from parents by indexing bytes
    instead of unpacking every record.
    """
    window = np.frombuffer(buf, dtype=np.uint8)
    usable = len(window) - HEADER_SIZE + 1  # offsets with a whole header in the window
    if usable <= 0:
        return b""
    field = window[14:]  # the child count of a header at p is bytes p+14 .. p+17
    return ((field[:usable] | field[1 : usable + 1] | field[2 : usable + 2] | field[3 : usable + 3]) != 0).tobytes()


def _move_window(reader: ByteReader, pos: int, need: int, codes: list[int], chunks: list[_Records]) -> bytes:
    """Gather the records noted in the current window (emptying ``codes``), then move the window so
    ``need`` bytes are available at offset 0 of the new one, which is returned."""
    if codes:
        chunks.append(_gather(reader.buf, codes))
        codes.clear()
    reader.pos = pos
    return reader.refill(need)


def _scan(reader: ByteReader, top_level: int) -> list[_Records]:
    """Walk the records, noting each one's offset and kind; gather fields whenever the window moves."""
    chunks: list[_Records] = []
    buf, pos = reader.buf, reader.pos
    is_parent = _parent_flags(buf)
    last_leaf = len(buf) - LEAF_SIZE  # the last offset where a whole leaf record is in the window
    codes: list[int] = []
    add = codes.append
    child_count = _CHILD_COUNT.unpack_from
    remaining = top_level
    enclosing: list[int] = []  # remaining sibling counts of the enclosing levels
    # A corrupt child count could claim more zones than the stream holds: bound it.
    limit = reader.remaining_bound() // LEAF_SIZE
    while True:
        if pos > last_leaf:
            # In a valid file every record starts at least 26 bytes before the end of the stream
            # (the sections after the zones are longer than that), so asking for 26 bytes only fails
            # on a truncated stream.
            buf, pos = _move_window(reader, pos, LEAF_SIZE, codes, chunks), 0
            is_parent, last_leaf = _parent_flags(buf), len(buf) - LEAF_SIZE
        if is_parent[pos]:
            (children,) = child_count(buf, pos + 14)
            if children > limit:
                reader.pos = pos
                raise reader.error(f"corrupt data: zone with {children:,} children")
            add(pos << 2 | PARENT)
            enclosing.append(remaining)
            remaining = children
            pos += HEADER_SIZE
            continue
        add(pos << 2)  # LEAF
        pos += LEAF_SIZE
        remaining -= 1
        while remaining == 0:
            if not enclosing:
                chunks.append(_gather(buf, codes))
                reader.pos = pos
                return chunks
            if pos > last_leaf:  # (a parent end, too, is always followed by 18 more bytes)
                buf, pos = _move_window(reader, pos, LEAF_SIZE, codes, chunks), 0
                is_parent, last_leaf = _parent_flags(buf), len(buf) - LEAF_SIZE
            add(pos << 2 | PARENT_END)
            pos += 8
            remaining = enclosing.pop() - 1


def _concat(chunks: list[_Records]) -> _Records:
    """One set of records from the windows' sets, in stream order."""
    return _Records(*(np.concatenate([getattr(c, f) for c in chunks]) for f in _Records.__dataclass_fields__))


def _assemble(records: _Records) -> Timeline:
    """Turn the records of one thread into zones with absolute times, ends and depths."""
    kind = records.kind
    # The running reference after each record: a leaf advances it by its start and end deltas.
    after = np.cumsum(records.first_delta + records.leaf_end_delta)  # wraps like the C++ int64 it mirrors
    zone_record = np.flatnonzero(kind != PARENT_END)
    start = (after - records.leaf_end_delta)[zone_record]
    end = after[zone_record]  # right for leaves; parents get their PARENT_END's time below

    is_parent, is_end = kind == PARENT, kind == PARENT_END
    step = is_parent.astype(np.int32) - is_end
    open_after = np.cumsum(step)  # parents open after each record
    depth = open_after[zone_record] - is_parent[zone_record]

    # Parents and parent ends nest like parentheses (the scan closes them in order): a stable sort
    # by nesting level puts each parent right before its own end.
    bracket_record = np.flatnonzero(kind != LEAF)
    level = open_after[bracket_record] + is_end[bracket_record]
    if len(level) and level.max() < np.iinfo(np.int16).max:
        level = level.astype(np.int16)  # numpy sorts 16-bit keys with a radix sort
    order = np.argsort(level, kind="stable")
    parents, ends = bracket_record[order[0::2]], bracket_record[order[1::2]]
    zone_of_record = np.cumsum(~is_end) - 1
    end[zone_of_record[parents]] = after[ends]
    return Timeline(
        srcloc=records.srcloc[zone_record],
        extra=records.extra[zone_record],
        start=start,
        end=end,
        depth=depth.astype(np.int16 if len(depth) == 0 or depth.max() < 2**15 else np.int32),
    )
