"""Files written whole or not at all.

Every file rlprof writes goes to a temporary name in its target folder and is
renamed into place, so a reader (a user's viewer, another rank, the report)
never sees a half-written trace, manifest or page under its final name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp's 0600 hides traces from teammates


def atomic_target(final: Path) -> Path:
    """A fresh temporary path beside ``final`` (same filesystem, so rename is atomic)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
    finally:
        os.close(fd)
    return Path(tmp)


def publish(tmp: Path, final: Path) -> None:
    """Move a finished temporary file to its final name."""
    os.replace(tmp, final)


def write_text_atomic(final: Path, text: str | Iterable[str]) -> None:
    """``text`` as UTF-8 (what the pages declare and JSON is), whatever the locale; given in parts, each
    is written as it comes (a page of megabytes is never held whole, nor twice)."""
    write_bytes_atomic(final, [text.encode("utf-8")] if isinstance(text, str) else
                       (part.encode("utf-8") for part in text))


# Parts are gathered into pieces this large before each write. Every write lets go of Python's lock and
# takes it back at once; a thread writing many small parts that way can keep a thread waiting for the lock
# (an engine's, beside a flight recorder's dump) from getting it for far longer than the switch interval.
PIECE_BYTES = 1 << 20


def write_bytes_atomic(final: Path, data: bytes | Iterable[bytes]) -> None:
    tmp = atomic_target(final)
    try:
        with open(tmp, "wb", buffering=-1 if isinstance(data, bytes) else PIECE_BYTES) as f:
            for chunk in [data] if isinstance(data, bytes) else data:
                f.write(chunk)
        publish(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
