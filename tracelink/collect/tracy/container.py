"""The .tracy container: compressed blocks of several interleaved streams, read back as one byte stream.

Layout (Tracy 0.11): magic ``tr\\xFDP``, a compression byte (0 = LZ4, 1 = zstd) and a stream count
(1-255); older single-stream files start with ``tlZ\\x04`` (LZ4) or ``tZst`` (zstd) instead. Then
blocks, each a ``u32`` compressed size and the data. Block ``i`` belongs to stream ``i mod N``; each
stream is one continuous compression context, and the logical byte stream is every decompressed block
in file order. Every decompressed block is 65,536 bytes except the last.

:class:`ByteReader` serves that logical stream through a small window that refills from the next
block, so memory stays bounded whatever the size of the file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import lz4.block
import zstandard

from tracelink.errors import TracelinkError

MAGIC = b"tr\xfdP"
LEGACY_MAGICS: dict[bytes, str] = {b"tlZ\x04": "lz4", b"tZst": "zstd"}
COMPRESSIONS: dict[int, str] = {0: "lz4", 1: "zstd"}
BLOCK_SIZE = 65_536
# Above LZ4_COMPRESSBOUND and ZSTD_COMPRESSBOUND of one 64 KiB block (65,809 and 65,824 bytes):
# anything bigger is not a block Tracy wrote.
MAX_COMPRESSED_BLOCK = BLOCK_SIZE + BLOCK_SIZE // 255 + 1024
# zstd allocates the window a frame header asks for; zstd's strongest level needs 128 MiB, so a
# larger request can only come from a corrupt header.
MAX_ZSTD_WINDOW = 1 << 27

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class TracyFormatError(TracelinkError):
    """A .tracy file this reader cannot decode: wrong magic, unsupported version, truncated or corrupt."""


@dataclass(frozen=True)
class Container:
    """Where the blocks of a .tracy file are and how they are compressed."""

    path: Path
    compression: str  # "lz4" or "zstd"
    streams: int
    blocks: int
    first_block_offset: int  # byte offset of the first block header in the file

    @property
    def decompressed_bound(self) -> int:
        """An upper bound on the logical stream's length (every block at most 64 KiB)."""
        return self.blocks * BLOCK_SIZE


def container_error(path: Path, problem: str, offset: int) -> TracyFormatError:
    """An error located in the compressed file."""
    return TracyFormatError(f"{path}: {problem} at byte {offset} of the compressed file")


def open_container(path: Path) -> Container:
    """Read the container header and walk the block headers (not their data) to count the blocks.

    Walking first finds a truncated file before any decompression, and gives the block count that
    bounds every count read later.
    """
    try:
        file_size = path.stat().st_size
        with path.open("rb") as handle:
            magic = handle.read(4)
            if magic == MAGIC:
                header = handle.read(2)
                if len(header) < 2:
                    raise container_error(path, "truncated file header", len(magic) + len(header))
                if header[0] not in COMPRESSIONS:
                    raise container_error(path, f"unknown compression type {header[0]}", 4)
                if header[1] == 0:
                    raise container_error(path, "stream count 0", 5)
                compression, streams, offset = COMPRESSIONS[header[0]], header[1], 6
            elif magic in LEGACY_MAGICS:
                compression, streams, offset = LEGACY_MAGICS[magic], 1, 4
            else:
                raise container_error(path, f"not a Tracy capture (magic {magic!r})", 0)
            blocks = _count_blocks(path, handle, offset, file_size)
    except OSError as error:
        raise TracelinkError(f"cannot read {path}: {error.strerror or error}") from error
    return Container(path, compression, streams, blocks, offset)


def _count_blocks(path: Path, handle, offset: int, file_size: int) -> int:
    """Count the blocks from ``offset``, checking each size header against the file's end."""
    blocks = 0
    while offset < file_size:
        handle.seek(offset)
        size_bytes = handle.read(4)
        if len(size_bytes) < 4:
            raise container_error(path, "truncated file: incomplete block header", offset)
        (size,) = _U32.unpack(size_bytes)
        if size == 0 or size > MAX_COMPRESSED_BLOCK:
            raise container_error(path, f"corrupt block: compressed size {size}", offset)
        if offset + 4 + size > file_size:
            raise container_error(path, f"truncated file: block of {size} bytes runs past the end", offset)
        offset += 4 + size
        blocks += 1
    if blocks == 0:
        raise container_error(path, "truncated file: no data blocks", offset)
    return blocks


class _BoundedSink:
    """Collects one block's zstd output and stops a corrupt block that expands past 64 KiB."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > BLOCK_SIZE:
            raise OverflowError("block expands past 64 KiB")
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        """Return and forget what was written since the last call."""
        out = b"".join(self.parts)
        self.parts, self.size = [], 0
        return out


class _ZstdStream:
    """One zstd stream: a frame that is flushed at every block but never ended."""

    def __init__(self) -> None:
        self._sink = _BoundedSink()
        decompressor = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW)
        self._writer = decompressor.stream_writer(self._sink, write_size=BLOCK_SIZE)

    def decompress(self, block: bytes) -> bytes:
        self._writer.write(block)
        return self._sink.take()


class _Lz4Stream:
    """One LZ4 stream: block mode, the previous block of the same stream as dictionary."""

    def __init__(self) -> None:
        self._previous = b""

    def decompress(self, block: bytes) -> bytes:
        out = lz4.block.decompress(block, uncompressed_size=BLOCK_SIZE, dict=self._previous)
        self._previous = out
        return out


def iter_blocks(container: Container) -> Iterator[bytes]:
    """Yield the decompressed blocks in file order (the logical byte stream, one block at a time)."""
    stream_type = _ZstdStream if container.compression == "zstd" else _Lz4Stream
    streams = [stream_type() for _ in range(container.streams)]
    path = container.path
    with path.open("rb") as handle:
        handle.seek(container.first_block_offset)
        offset = container.first_block_offset
        for index in range(container.blocks):
            header = handle.read(4)
            size = _U32.unpack(header)[0] if len(header) == 4 else 0
            data = handle.read(size)
            if size == 0 or len(data) != size:  # the file changed since open_container walked it
                raise container_error(path, "truncated file: block missing", offset)
            try:
                block = streams[index % container.streams].decompress(data)
            except (zstandard.ZstdError, lz4.block.LZ4BlockError, OverflowError) as error:
                raise container_error(path, f"corrupt block {index} ({error})", offset) from error
            # Tracy writes full 64 KiB blocks until the last one; a short one is damaged (LZ4 has no
            # checksum, so this is often the only sign).
            if len(block) != BLOCK_SIZE and index != container.blocks - 1:
                raise container_error(path, f"corrupt block {index} (decompresses to {len(block)} bytes)", offset)
            yield block
            offset += 4 + size


class ByteReader:
    """Sequential reads over the logical byte stream, holding one window of it at a time.

    ``buf[pos:]`` is the unread part of the window; hot loops may read ``buf``/``pos`` directly and
    call :meth:`refill` when they need more than the window holds.
    """

    def __init__(self, container: Container) -> None:
        self.path = container.path
        self._blocks = iter_blocks(container)
        self._bound = container.decompressed_bound
        self.buf = b""
        self.pos = 0
        self._base = 0  # logical offset of buf[0]
        self._exhausted = False

    @property
    def offset(self) -> int:
        """Logical offset of the next unread byte."""
        return self._base + self.pos

    def remaining_bound(self) -> int:
        """An upper bound on the bytes still unread (exact once the last block is in the window)."""
        if self._exhausted:
            return len(self.buf) - self.pos
        return self._bound - self.offset

    def error(self, problem: str, offset: int | None = None) -> TracyFormatError:
        """An error located in the decompressed stream (at the read position unless given)."""
        where = self.offset if offset is None else offset
        return TracyFormatError(f"{self.path}: {problem} at decompressed byte {where}")

    def refill(self, need: int) -> bytes:
        """Make ``need`` bytes available at ``pos``; drops the consumed part of the window.

        Returns the new ``buf`` (``pos`` is 0 afterwards). Raises :class:`TracyFormatError` when the
        stream ends first.
        """
        parts = [self.buf[self.pos :]]
        available = len(parts[0])
        self._base += self.pos
        while available < need:
            block = self._next_block()
            if block is None:
                self.buf, self.pos = b"".join(parts), 0
                raise self.error(f"truncated data: the stream ends {available} bytes into a {need}-byte read")
            parts.append(block)
            available += len(block)
        self.buf, self.pos = b"".join(parts), 0
        return self.buf

    def _next_block(self) -> bytes | None:
        block = next(self._blocks, None)
        if block is None:
            self._exhausted = True
        return block

    def read(self, size: int) -> bytes:
        """Return the next ``size`` bytes."""
        if len(self.buf) - self.pos < size:
            self.refill(size)
        start = self.pos
        self.pos = start + size
        return self.buf[start : self.pos]

    def unpack(self, layout: struct.Struct) -> tuple:
        """Unpack the next ``layout.size`` bytes."""
        if len(self.buf) - self.pos < layout.size:
            self.refill(layout.size)
        values = layout.unpack_from(self.buf, self.pos)
        self.pos += layout.size
        return values

    def skip(self, size: int) -> None:
        """Skip ``size`` bytes without holding them all at once."""
        start, left = self.offset, size
        while left > len(self.buf) - self.pos:
            left -= len(self.buf) - self.pos
            self._base += len(self.buf)
            self.buf, self.pos = b"", 0
            block = self._next_block()
            if block is None:
                raise self.error(f"truncated data: the stream ends {size - left} bytes into a {size}-byte skip", start)
            self.buf = block
        self.pos += left

    def count(self, record_size: int, what: str) -> int:
        """Read a ``u64`` count of records of at least ``record_size`` bytes (see :meth:`check_count`)."""
        at = self.offset
        (value,) = self.unpack(_U64)
        return self.check_count(value, record_size, what, at)

    def check_count(self, value: int, record_size: int, what: str, at: int) -> int:
        """Refuse a count read at ``at`` whose records cannot fit in what is left of the stream, so
        corrupt data never triggers a huge allocation or loop."""
        if value * record_size > self.remaining_bound():
            raise self.error(f"corrupt or truncated data: {value:,} {what} cannot fit in the rest of the stream", at)
        return value

    def read_prefixed(self, count: int, header: struct.Struct, length_index: int) -> tuple[list[tuple], list[bytes]]:
        """Read ``count`` records of a ``header`` whose field ``length_index`` is the byte length of
        the payload that follows; return the headers and the payloads."""
        headers: list[tuple] = []
        payloads: list[bytes] = []
        unpack = header.unpack_from
        buf, pos = self.buf, self.pos
        for _ in range(count):
            if pos + header.size > len(buf):
                self.pos = pos
                buf, pos = self.refill(header.size), 0
            fields = unpack(buf, pos)
            length = fields[length_index]
            pos += header.size
            if pos + length > len(buf):
                self.pos = pos
                self.check_count(length, 1, "payload bytes", self.offset - header.size)
                buf, pos = self.refill(length), 0
            headers.append(fields)
            payloads.append(buf[pos : pos + length])
            pos += length
        self.pos = pos
        return headers, payloads

    def skip_records(self, count: int, header_size: int, length: struct.Struct, length_at: int, unit: int) -> None:
        """Skip ``count`` records of a ``header_size``-byte header, whose field ``length`` at
        ``length_at`` counts the ``unit``-byte items that follow it."""
        read_length = length.unpack_from
        buf, pos = self.buf, self.pos
        for _ in range(count):
            if pos + header_size > len(buf):
                self.pos = pos
                buf, pos = self.refill(header_size), 0
            size = header_size + read_length(buf, pos + length_at)[0] * unit
            if pos + size > len(buf):
                self.pos = pos
                self.skip(size)
                buf, pos = self.buf, self.pos
            else:
                pos += size
        self.pos = pos

    def drain(self) -> int:
        """Decompress the rest of the stream without keeping it; return how many bytes it held."""
        size = len(self.buf) - self.pos
        self._base, self.buf, self.pos = self._base + len(self.buf), b"", 0
        while (block := self._next_block()) is not None:
            size += len(block)
            self._base += len(block)
        return size
