"""rlprof's one door into torch's C++ profiler: ``torch_shim.cpp``, compiled against the installed torch's own
headers, with its gate, its canary and its cache in this module.

Why a compiled shim and not ``ctypes`` on torch's mangled symbols: a C++ exception cannot cross ``ctypes`` (it
ends the process, and an engine process is a rollout server hours into an RL run), and how a C++ function
returns a ``std::unique_ptr`` differs by machine (a hidden first argument on x86-64, register x8 on aarch64).
In the shim every call catches what torch throws where it is thrown and hands back a message, and the compiler
handles the ABI. Its functions are ``extern "C"``: ``ctypes`` calls them with the GIL free.

It is used only where it is proven (``why_not``), else torch's own stop runs as torch does it:

- the machine: ``VERIFIED_MACHINES`` (x86-64 Linux, 64-bit; an aarch64 build is untested);
- torch: a release build (``2.13.0``, ``2.13.0+cpu``, ``+cuXYZ``, ``+rocmX.Y``; not a pre-release such as
  ``2.13.0a0+git…`` or a vendor's own label) of a release among ``VERIFIED_TORCH``, built with the C++11 ABI;
- the shim: built for this torch build (``cache_folder``: per torch version, commit and machine, and the
  shim's own source), its version the one this module speaks;
- the canary: once per built shim, a child process starts a profiler, runs operators on two threads, stops it
  off the recording thread, writes the trace and frees it (``canary``, ``shim_canary``); only a child that exits cleanly having
  read its trace back proves the shim. An abort there ends the child, never the engine.

Built by ``rlprof build-shim`` (ahead of time: a cluster image, ``make env``), or once by the first session that
could use it, in a child process at the lowest priority while torch's own stop serves that session
(``build_in_background``). Where no compiler is at hand, torch's own stop runs and ``rlprof doctor`` says so.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._log import logger

SHIM_VERSION = 2  # rlprof_shim_version() of the source this module speaks to
SOURCE = Path(__file__).with_name("torch_shim.cpp")
VERIFIED_TORCH = ("2.13",)  # torch releases (major.minor) whose profiler the shim's two halves were proven on
VERIFIED_MACHINES = ("x86_64",)  # platform.machine() values the shim and its canary were proven on
# PyTorch's own release wheels: a version and at most the label of the device build it is for
RELEASE = re.compile(r"^\d+\.\d+\.\d+(\+(cpu|cu\d+|rocm[\d.]+|xpu))?$")
CACHE_ENV = "RLPROF_CACHE_DIR"  # where built shims are kept (default: $XDG_CACHE_HOME/rlprof, ~/.cache/rlprof)
CANARY_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 600


class ShimError(RuntimeError):
    """A call into torch through the shim failed, with what torch (or the shim) said."""


def torch_facts(torch: Any) -> dict[str, Any]:
    """What the gate reads of this process and its torch (``why_not(facts=...)`` takes others: the tests)."""
    return {"machine": platform.machine(), "system": platform.system(), "pointer_bits": 8 * struct.calcsize("P"),
            "torch": str(torch.__version__), "git": str(getattr(getattr(torch, "version", None), "git_version", "")),
            "cxx11_abi": bool(getattr(torch, "compiled_with_cxx11_abi", lambda: False)()),
            "include": str(Path(torch.__file__).parent / "include")}


def gate(facts: dict[str, Any]) -> str | None:
    """Why the shim may not be used with these facts, before anything is built (None: it may)."""
    if facts["system"] != "Linux" or facts["pointer_bits"] != 64:
        return f"{facts['system']} with {facts['pointer_bits']}-bit pointers (proven: 64-bit Linux)"
    if facts["machine"] not in VERIFIED_MACHINES:
        return f"machine {facts['machine']} (proven: {', '.join(VERIFIED_MACHINES)})"
    version = facts["torch"]
    if not RELEASE.match(version):
        return f"torch {version} is not a release build (proven on PyTorch's own release wheels only)"
    if ".".join(version.split("+")[0].split(".")[:2]) not in VERIFIED_TORCH:
        return f"torch {version} is not among the proven releases ({', '.join(VERIFIED_TORCH)})"
    if not facts["cxx11_abi"]:
        return "torch is built without the C++11 ABI"
    return None


def cache_root() -> Path:
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlprof"


def cache_folder(facts: dict[str, Any]) -> Path:
    """Where the shim for this torch build lives: one folder per torch version, commit, machine and shim source."""
    source = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    name = f"torch-{facts['torch']}-{(facts['git'] or 'nogit')[:12]}-{facts['machine']}-shim{SHIM_VERSION}-{source}"
    return cache_root() / "torch-shim" / re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def compiler() -> str | None:
    """The C++ compiler to build with (``CXX``, else ``c++``/``g++``/``clang++`` on the path)."""
    for name in filter(None, (os.environ.get("CXX"), "c++", "g++", "clang++")):
        found = shutil.which(name)
        if found:
            return found
    return None


def build(torch: Any) -> Path:
    """Compile the shim for this torch build into its cache folder (atomically: a half-written library is never
    loaded) and return its path; raises ``ShimError`` naming what failed. Not in an engine's process: ``rlprof
    build-shim``, ``build_in_background``'s child."""
    facts = torch_facts(torch)
    why = gate(facts)
    if why:
        raise ShimError(f"not built: {why}")
    cxx = compiler()
    if cxx is None:
        raise ShimError("not built: no C++ compiler (c++, g++ or clang++; or CXX) on the path")
    folder = cache_folder(facts)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "torch_shim.so"
    include = Path(facts["include"])
    lib = include.parent / "lib"
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = Path(tmp) / "torch_shim.so"
        cmd = [cxx, "-O2", "-shared", "-fPIC", "-std=c++20", "-w", "-D_GLIBCXX_USE_CXX11_ABI=1",
               f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}", str(SOURCE),
               f"-L{lib}", "-ltorch_cpu", "-lc10", "-o", str(out)]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ShimError(f"not built: {type(e).__name__}: {e}") from e
        if run.returncode != 0:
            raise ShimError(f"not built: {Path(cxx).name} exited {run.returncode}: {run.stderr.strip()[-1500:]}")
        (folder / "canary.json").unlink(missing_ok=True)  # the old proof goes first: a new library is proven anew
        os.replace(out, target)
    return target


def canary(torch: Any, attempt: int = 1) -> dict[str, Any]:
    """Prove the built shim once, in a child process (this Python, this torch): start, stop off the recording
    thread, save, free. Kept beside the library (``canary.json``): ``{"ok": bool, "detail": str}``, and
    ``timed_out`` with ``attempts`` where the child did not finish in time (run again: ``CANARY_ATTEMPTS``)."""
    folder = cache_folder(torch_facts(torch))
    library = folder / "torch_shim.so"
    if not library.is_file():
        return {"ok": False, "detail": f"no shim built at {library}"}
    answer = folder / f".canary-answer.{os.getpid()}.json"  # the child writes what it found here
    answer.unlink(missing_ok=True)
    try:
        run = subprocess.run([sys.executable, "-m", "rlprof_plugins.backends.shim_canary", str(library), str(answer)],
                             capture_output=True, text=True, timeout=CANARY_TIMEOUT_S)
        if run.returncode == 0 and answer.is_file():
            result = json.loads(answer.read_text())
        else:
            result = {"ok": False, "detail": f"the canary exited {run.returncode}: "
                                             f"{(run.stderr or run.stdout).strip()[-800:]}"}
    except subprocess.TimeoutExpired as e:
        result = {"ok": False, "detail": f"the canary did not finish in {CANARY_TIMEOUT_S} s (attempt {attempt} of "
                                         f"{CANARY_ATTEMPTS}): {e}", "timed_out": True}
    except (OSError, ValueError) as e:
        result = {"ok": False, "detail": f"the canary did not finish: {type(e).__name__}: {e}"}
    finally:
        answer.unlink(missing_ok=True)
    result["attempts"] = attempt
    result["library"] = str(library)
    tmp = folder / f".canary.{os.getpid()}.json"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, folder / "canary.json")
    return result


class Shim:
    """The loaded library: each call raises ``ShimError`` with torch's message where torch failed."""

    ERR = 1024

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        c_long, c_void, c_char, size = ctypes.c_long, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        for name, restype, argtypes in (
                ("rlprof_shim_version", ctypes.c_int, []),
                ("rlprof_owners", c_long, [c_char, size]),
                ("rlprof_has_session", ctypes.c_int, []),
                ("rlprof_detach", c_void, [c_long, c_char, size]),
                ("rlprof_other_owners", c_long, [c_void]),
                ("rlprof_finish", c_void, [c_void, c_long, c_char, size]),
                ("rlprof_drop", None, [c_void]),
                ("rlprof_save", ctypes.c_int, [c_void, c_char, c_char, size]),
                ("rlprof_free", None, [c_void]),
                ("rlprof_live_results", c_long, []),
                ("rlprof_live_detached", c_long, [])):
            f = getattr(lib, name)
            f.restype, f.argtypes = restype, argtypes
        self._lib = lib
        self.path = path
        version = lib.rlprof_shim_version()
        if version != SHIM_VERSION:
            raise ShimError(f"the shim at {path} is version {version}, this rlprof speaks {SHIM_VERSION}")

    def _error(self) -> Any:
        return ctypes.create_string_buffer(self.ERR)

    def owners(self) -> int:
        """The recording thread, right after its profiler started: how many own the session."""
        err = self._error()
        n = self._lib.rlprof_owners(err, self.ERR)
        if n < 0:
            raise ShimError(err.value.decode(errors="replace") or "rlprof_owners failed")
        return n

    def has_session(self) -> bool:
        """Whether this thread has a profiler session (torch's own stop must never run where it has none: torch
        2.13's ``disableProfiler`` ends the process then)."""
        return self._lib.rlprof_has_session() == 1

    def detach(self, owners: int) -> int:
        """The recording thread, in place of torch's ``_disable_profiler()``: the session off it, its callbacks off."""
        err = self._error()
        handle = self._lib.rlprof_detach(owners, err, self.ERR)
        if not handle:
            raise ShimError(err.value.decode(errors="replace") or "rlprof_detach failed")
        return handle

    def finish(self, handle: int, timeout_s: float) -> int:
        """Any thread: torch's post-processing once nothing else owns the session; the recording (consumes
        ``handle``)."""
        err = self._error()
        result = self._lib.rlprof_finish(handle, int(timeout_s * 1000), err, self.ERR)
        if not result:
            raise ShimError(err.value.decode(errors="replace") or "rlprof_finish failed")
        return result

    def drop(self, handle: int) -> None:
        self._lib.rlprof_drop(handle)

    def save(self, result: int, path: Path) -> None:
        err = self._error()
        if self._lib.rlprof_save(result, os.fsencode(str(path)), err, self.ERR) != 0:
            raise ShimError(err.value.decode(errors="replace") or "rlprof_save failed")

    def free(self, result: int) -> None:
        self._lib.rlprof_free(result)

    def live(self) -> dict[str, int]:
        """Recordings not freed and sessions detached but not finished, in this process."""
        return {"results": self._lib.rlprof_live_results(), "detached": self._lib.rlprof_live_detached()}


@dataclass
class ShimState:
    """What this process knows of the shim: the loaded library, or why it runs without one (``why``), and
    whether a build it started is still running. A refusal that a build elsewhere can lift (not built yet, a
    canary that has not passed) is looked at again ``RECHECK_S`` after it was decided, so every process of a
    host picks up the shim one of them built."""

    shim: "Shim | None" = None
    why: str | None = None
    decided_at: float | None = None  # (time.monotonic) None: not decided yet
    lifted_by_a_build: bool = False  # ``why`` is of the kind a build or a canary's retry lifts
    building: bool = False  # a build this process started runs now
    warned: bool = False  # the one warning line for this process was written


RECHECK_S = 10.0
CANARY_ATTEMPTS = 3  # a canary that timed out (a busy host) is run again, this many times in all
_STATE = ShimState()
_LOCK = threading.Lock()


def why_not(torch: Any, facts: dict[str, Any] | None = None) -> str | None:
    """Why the shim cannot serve this process (None: ``loaded()`` gives it). Decided for this process's own
    facts, again after ``RECHECK_S`` where a build could lift the refusal; ``facts`` (the tests': another
    machine, another torch version) is decided afresh."""
    if facts is not None:
        return gate(facts) or _built_and_proven(facts)
    with _LOCK:
        state = _STATE
        stale = (state.decided_at is None or (state.lifted_by_a_build and not state.building
                                              and time.monotonic() - state.decided_at >= RECHECK_S))
        if stale:
            facts = torch_facts(torch)
            refused = gate(facts)
            why = refused or _built_and_proven(facts)
            state.shim = None
            if why is None:
                try:
                    state.shim = Shim(cache_folder(facts) / "torch_shim.so")
                except (OSError, AttributeError, ShimError) as e:
                    why = f"the shim does not load: {type(e).__name__}: {e}"
            state.why, state.decided_at = why, time.monotonic()
            state.lifted_by_a_build = why is not None and refused is None and _needs_work(facts)
        if state.building:
            return f"the shim for this torch is being built in the background; sessions after it is proven stop " \
                   f"off the engine thread"
        return state.why


def needs_build(torch: Any) -> bool:
    """Whether building the shim (or running its canary again) could let this process stop torch off the engine
    thread: a shim this machine and torch allow, not built yet or not yet proven."""
    facts = torch_facts(torch)
    return gate(facts) is None and compiler() is not None and _needs_work(facts)


def _needs_work(facts: dict[str, Any]) -> bool:
    folder = cache_folder(facts)
    if not (folder / "torch_shim.so").is_file():
        return True
    proof = _proof(folder)
    return proof is None or (not proof.get("ok") and _retried_canary(proof))


def _retried_canary(proof: dict[str, Any]) -> bool:
    """Whether a failed canary is run again: one that timed out (a busy host), fewer than ``CANARY_ATTEMPTS``
    times."""
    return bool(proof.get("timed_out")) and int(proof.get("attempts", 1)) < CANARY_ATTEMPTS


def _proof(folder: Path) -> dict[str, Any] | None:
    try:
        proof = json.loads((folder / "canary.json").read_text())
    except (OSError, ValueError):
        return None
    return proof if isinstance(proof, dict) else None


def loaded() -> Shim:
    shim = _STATE.shim
    if shim is None:
        raise ShimError("the shim is not loaded in this process")
    return shim


def _built_and_proven(facts: dict[str, Any]) -> str | None:
    folder = cache_folder(facts)
    if not (folder / "torch_shim.so").is_file():
        how = "no C++ compiler here" if compiler() is None else "run `rlprof build-shim`"
        return f"the shim is not built for torch {facts['torch']} ({how})"
    proof = _proof(folder)
    if proof is None:
        return "the shim's canary has not run (run `rlprof build-shim`)"
    if not proof.get("ok"):
        return f"the shim's canary failed: {proof.get('detail')}"
    return None


def build_in_background(torch: Any) -> bool:
    """Where a session could use the shim and it is not built or proven yet: build it (or run its canary
    again) in a child at the lowest priority; a lock file keeps the processes of one host from building it
    together, and one that loses the lock finds the winner's shim when it looks again (``why_not``). This
    session keeps torch's own stop; this process's later sessions use the shim once it is proven. Returns
    whether a build started."""
    with _LOCK:
        if _STATE.building or os.environ.get("RLPROF_NO_SHIM_BUILD") == "1":
            return False
        if not needs_build(torch):
            return False
        _STATE.building = True

    nice = shutil.which("nice")  # the lowest priority; no preexec_fn in an engine's threaded process
    command = [*([nice, "-n", "19"] if nice else []), sys.executable, "-m", "rlprof_plugins.backends.torch_shim",
               "build", "--if-unlocked"]

    def run() -> None:
        try:
            done = subprocess.run(command, capture_output=True, timeout=BUILD_TIMEOUT_S + CANARY_TIMEOUT_S)
            if done.returncode != 0:
                logger.info("rlprof: the torch shim was not built in the background: %s",
                            done.stdout.decode(errors="replace").strip()[-500:])
        except Exception as e:  # never into the engine: this session and the next keep torch's own stop
            logger.info("rlprof: building the torch shim in the background failed: %s: %s", type(e).__name__, e)
        finally:
            with _LOCK:
                _STATE.building = False
            reload()  # decided afresh by the next session: built and proven here or by another process

    try:
        threading.Thread(target=run, name="rlprof-shim-build", daemon=True).start()
    except RuntimeError:  # no thread to be had: nothing started
        with _LOCK:
            _STATE.building = False
        return False
    return True


def warn_once(why: str) -> None:
    """The one line a process writes about running without the shim: why, and what to do."""
    with _LOCK:
        if _STATE.warned:
            return
        _STATE.warned = True
    logger.warning("rlprof: torch's stop runs on the engine thread in this process: %s", why)


def reload() -> None:
    """Decide afresh (after a build)."""
    with _LOCK:
        _STATE.shim, _STATE.why, _STATE.decided_at, _STATE.lifted_by_a_build = None, None, None, False


def build_and_prove(torch: Any, *, if_unlocked: bool = False, again: bool = False) -> dict[str, Any]:
    """``rlprof build-shim``: build the shim for this torch and run its canary (not again where this torch build's
    shim is built and proven, unless ``again``); what happened, for the command to print. ``if_unlocked``: give
    up at once where another process holds the build lock."""
    import fcntl

    facts = torch_facts(torch)
    why = gate(facts)
    if why:
        return {"ok": False, "detail": f"not built: {why}"}
    folder = cache_folder(facts)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if if_unlocked else 0))
        except OSError:
            return {"ok": False, "detail": "another process is building it"}
        if not again and _built_and_proven(facts) is None:
            proof = json.loads((folder / "canary.json").read_text())
            return {**proof, "library": str(folder / "torch_shim.so"), "build_seconds": 0.0,
                    "detail": f"already built and proven ({proof.get('detail')})"}
        earlier = _proof(folder)
        if not again and (folder / "torch_shim.so").is_file() and earlier is not None and _retried_canary(earlier):
            # the library is built; its canary timed out on a busy host: proven again, not rebuilt
            return {**canary(torch, attempt=int(earlier.get("attempts", 1)) + 1), "build_seconds": 0.0}
        started = time.monotonic()
        try:
            library = build(torch)
        except ShimError as e:
            return {"ok": False, "detail": str(e)}
        built_s = time.monotonic() - started
        proof = canary(torch)
    return {**proof, "library": str(library), "build_seconds": round(built_s, 1)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        import torch

        result = build_and_prove(torch, if_unlocked="--if-unlocked" in argv)
        print(json.dumps(result))
        return 0 if result.get("ok") else 1
    print("usage: python -m rlprof_plugins.backends.torch_shim build [--if-unlocked]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
