"""Columns of numbers a pass over a trace gathers, held a chunk at a time: memory flat in the trace's size.

A rank's pass keeps a few numbers per operator and per launch until the
iterations are known (a trace may list them after the work inside them):
millions of them in a large trace. ``SpilledColumns`` keeps them in
flat arrays and writes each full chunk (``CHUNK`` rows) to a temporary file,
then reads them back a chunk at a time, in the order they were added. The
arrays are cleared in place, so a caller may hold them and append to them
directly (the pass's hot loop), calling ``added()`` after each row.
"""

from __future__ import annotations

import tempfile
from array import array
from typing import BinaryIO, Iterator

CHUNK = 1 << 16


class SpilledColumns:
    def __init__(self, *typecodes: str, chunk: int | None = None) -> None:
        self.columns = tuple(array(t) for t in typecodes)
        self.chunk = chunk or CHUNK
        self._file: BinaryIO | None = None
        self._chunks = 0

    def added(self) -> None:
        """After each row appended: a full chunk goes to the file."""
        if len(self.columns[0]) >= self.chunk:
            if self._file is None:
                self._file = tempfile.TemporaryFile()
            for column in self.columns:
                column.tofile(self._file)
                del column[:]
            self._chunks += 1

    def __len__(self) -> int:
        return self._chunks * self.chunk + len(self.columns[0])

    def rows(self) -> Iterator[tuple]:
        """Every row, in the order added (the file is read a chunk at a time, and closed after)."""
        if self._file is not None:
            self._file.seek(0)
            for _ in range(self._chunks):
                chunk = tuple(array(column.typecode) for column in self.columns)
                for column in chunk:
                    column.fromfile(self._file, self.chunk)
                yield from zip(*chunk)
            self._file.close()
            self._file, self._chunks = None, 0
        yield from zip(*self.columns)
