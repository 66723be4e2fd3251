"""Gzip for traces: zlib-ng when installed, built from parts made in parallel.

Two jobs the ``gzip`` module does not do:

- **Speed.** zlib-ng's deflate at the same level writes the same size as
  zlib's in about half the time, and inflates twice as fast (measured on
  real Kineto traces: docs/performance.md, "Which libraries"). It is
  optional (the ``fast`` extra); ``zlib`` is used without it.
- **Parts.** A merge compresses each rank in its own process. Each part is
  a raw deflate stream ended by a sync flush (byte-aligned, not final), so
  parts concatenate into one deflate stream, as pigz does; the member's
  CRC-32 is combined from the parts' (``crc32_combine``). The result is one
  ordinary gzip member that every reader opens.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from .codec import allowed

try:
    if not allowed("zlib-ng"):
        raise ImportError
    from zlib_ng import zlib_ng as _z

    GZIP_LIBRARY = "zlib-ng"
except ImportError:
    _z = zlib
    GZIP_LIBRARY = "zlib"

CHUNK = 1 << 20
MAGIC = b"\x1f\x8b"
# magic, deflate, no flags, mtime 0 (reproducible output), no extra flags, OS unknown
HEADER = MAGIC + b"\x08\x00" + b"\x00\x00\x00\x00" + b"\x00\xff"


class Inflated:
    """The file's bytes, inflated when it is gzip (every member of it), in
    pieces of at most ``size`` (a highly compressed block stays bounded).
    ``consumed`` counts the file's own bytes read so far (for progress)."""

    def __init__(self, path: Path, size: int = CHUNK) -> None:
        self._file = open(path, "rb")
        self._size = size
        self.consumed = 0
        self._pieces = self._read()

    def _raw(self) -> bytes:
        data = self._file.read(self._size)
        self.consumed += len(data)
        return data

    def _read(self) -> Iterator[bytes]:
        if self._file.read(2) != MAGIC:
            self._file.seek(0)
            while chunk := self._raw():
                yield chunk
            return
        self._file.seek(0)
        inflater, started = _z.decompressobj(31), False
        while data := self._raw():
            while data:
                if not started and data.strip(b"\x00") == b"":
                    break  # zero padding after the last member, as gzip allows
                started = True
                out = inflater.decompress(data, self._size)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if inflater.eof:  # another member may follow
                    data = inflater.unused_data
                    inflater, started = _z.decompressobj(31), False
        if started:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")

    def __iter__(self) -> Iterator[bytes]:
        return self._pieces

    def __next__(self) -> bytes:
        return next(self._pieces)

    def close(self) -> None:
        self._pieces.close()
        self._file.close()


def read_chunks(path: Path, size: int = CHUNK) -> Iterator[bytes]:
    """``Inflated`` as a plain iterator that closes the file when done."""
    source = Inflated(path, size)
    try:
        yield from source
    finally:
        source.close()


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, row) for row in matrix]


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """zlib's crc32_combine (which Python's zlib does not expose): the CRC
    of A+B from crc(A), crc(B) and len(B), by shifting crc(A) over len(B)
    zero bytes in GF(2)."""
    if len2 <= 0:
        return crc1
    one_bit = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    op = _gf2_square(_gf2_square(_gf2_square(one_bit)))  # one zero byte
    while len2:
        if len2 & 1:
            crc1 = _gf2_times(op, crc1)
        len2 >>= 1
        if len2:
            op = _gf2_square(op)  # twice as many zero bytes
    return crc1 ^ crc2


crc32_combine = getattr(_z, "crc32_combine", _crc32_combine)
crc32 = _z.crc32


class DeflatePart:
    """Raw deflate of what is written, with its CRC-32 and length; ``end()``
    leaves the stream byte-aligned and open, so another part may follow."""

    def __init__(self, out: BinaryIO, level: int) -> None:
        self._out = out
        self._deflate = _z.compressobj(level, _z.DEFLATED, -15)
        self.crc = 0
        self.size = 0

    def write(self, data: bytes) -> None:
        if data:
            self.crc = crc32(data, self.crc)
            self.size += len(data)
            self._out.write(self._deflate.compress(data))

    def end(self, final: bool = False) -> None:
        self._out.write(self._deflate.flush(_z.Z_FINISH if final else _z.Z_SYNC_FLUSH))


class GzipWriter:
    """One gzip member written in order: text compressed here (``write``),
    and parts compressed elsewhere (``append_part``)."""

    def __init__(self, out: BinaryIO, level: int) -> None:
        self._out = out
        self._level = level
        self._crc = 0
        self._size = 0
        out.write(HEADER)
        self._part = DeflatePart(out, level)

    def write(self, data: bytes) -> None:
        self._part.write(data)

    def _settle(self) -> None:
        self._part.end()
        self._crc = crc32_combine(self._crc, self._part.crc, self._part.size)
        self._size += self._part.size

    def append_part(self, path: Path, crc: int, size: int) -> None:
        """A part file written by ``DeflatePart`` (ended, not final)."""
        self._settle()
        with open(path, "rb") as src:
            while block := src.read(CHUNK):
                self._out.write(block)
        self._crc = crc32_combine(self._crc, crc, size)
        self._size += size
        self._part = DeflatePart(self._out, self._level)  # no back-references across the part

    def close(self) -> None:
        self._part.end(final=True)
        self._crc = crc32_combine(self._crc, self._part.crc, self._part.size)
        self._size += self._part.size
        self._out.write(struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF))


def file_size(path: Path) -> int:
    try:
        return os.path.getsize(path) if isinstance(path, (str, os.PathLike)) else path.stat().st_size
    except OSError:
        return 0
