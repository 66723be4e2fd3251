"""The NVTX ranges engine processes emit, as Nsight Systems would see them (no nsys, no GPU).

``recorder_library()`` builds ``tests/tools/nvtx_recorder.c`` with ``cc`` from
NVTX's public headers (the ``include/`` of the ``nvtx`` package's sdist,
fetched once from PyPI into ``.cache/`` and checked against its sha256);
``environment(log_dir)`` is what a process needs to load it
(``NVTX_INJECTION64_PATH``); ``read(log_dir)`` turns every process's log into
ranges with their nesting: push/pop ranges per (process, thread, domain)
stack, start/end ranges by id. ``python tests/helpers/nvtx_log.py`` builds it
(``make nvtx-recorder``, part of ``make env``).
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "nvtx-recorder"
SOURCE = ROOT / "tests" / "tools" / "nvtx_recorder.c"
LIBRARY = CACHE / "libnvtx_recorder.so"
SDIST = ("https://files.pythonhosted.org/packages/7d/0b/7e9571ea963fd54bc0ac05184e735df7c4672c1a93cbb50d4fe3e7fa9f99/"
         "nvtx-0.2.16.tar.gz")
SDIST_SHA256 = "252fdb870308be4a2beecb3ed174b1d59099eeb63c883f269944a765ce5f7720"
HEADERS = CACHE / "include"


def _headers() -> Path:
    """NVTX v3's headers (``include/nvtx3``) from the nvtx 0.2.16 sdist, fetched once."""
    if (HEADERS / "nvtx3" / "nvToolsExt.h").exists():
        return HEADERS
    with urllib.request.urlopen(SDIST, timeout=120) as answer:
        data = answer.read()
    if hashlib.sha256(data).hexdigest() != SDIST_SHA256:
        raise RuntimeError(f"{SDIST}: sha256 differs from the pinned one")
    staging = CACHE / "include.partial"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if "/include/nvtx3/" in m.name and (m.isfile() or m.isdir())]
        for m in members:
            m.name = m.name.split("/include/", 1)[1]
        tar.extractall(staging, members=members, filter="data")
    staging.rename(HEADERS)
    return HEADERS


def recorder_library() -> Path:
    """The injection library, built when missing or older than its source."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return LIBRARY
    CACHE.mkdir(parents=True, exist_ok=True)
    include = _headers()
    partial = LIBRARY.with_suffix(".partial.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", f"-I{include}", "-o", str(partial),
                    str(SOURCE), "-lpthread"], check=True)
    partial.rename(LIBRARY)
    return LIBRARY


def environment(log_dir: Path) -> dict[str, str]:
    """What a process needs for its NVTX ranges to reach ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    return {"NVTX_INJECTION64_PATH": str(recorder_library()), "RLPROF_NVTX_LOG": str(log_dir)}


@dataclass
class Range:
    name: str
    domain: str
    pid: int
    tid: int
    start_ns: int
    end_ns: int | None = None
    kind: str = "push"  # "push" (push/pop, one thread) or "start" (start/end, process-wide)
    children: list["Range"] = field(default_factory=list)

    def contains(self, other: "Range") -> bool:
        return (self.pid == other.pid and self.start_ns <= other.start_ns and self.end_ns is not None
                and other.end_ns is not None and other.end_ns <= self.end_ns)


def read(log_dir: Path) -> list[Range]:
    """Every range in every process's log under ``log_dir``, closed ones with their end."""
    ranges: list[Range] = []
    for path in sorted(log_dir.glob("nvtx.*.log")):
        stacks: dict[tuple[int, str], list[Range]] = {}
        started: dict[int, Range] = {}
        for line in path.read_text().splitlines():
            ns, pid, tid, op, domain, rid, *message = line.split(" ", 6)
            name = message[0] if message else ""
            if op == "push":
                r = Range(name, domain, int(pid), int(tid), int(ns))
                stacks.setdefault((int(tid), domain), []).append(r)
                ranges.append(r)
            elif op == "pop":
                stack = stacks.get((int(tid), domain))
                if stack:
                    stack.pop().end_ns = int(ns)
            elif op == "start":
                r = Range(name, domain, int(pid), int(tid), int(ns), kind="start")
                started[int(rid)] = r
                ranges.append(r)
            elif op == "end" and int(rid) in started:
                started.pop(int(rid)).end_ns = int(ns)
    return ranges


def inside(ranges: list[Range], outer: Range, domain: str = "rlprof") -> list[Range]:
    """The ranges of ``domain`` that ``outer`` holds (same process, within its times)."""
    return [r for r in ranges if r is not outer and r.domain == domain and outer.contains(r)]


if __name__ == "__main__":
    print(recorder_library())
