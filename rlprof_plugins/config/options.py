"""The plugin's configuration keys, shared by every engine.

Users write our keys in the same JSON as the engine's native profiler keys
(``--profiler-config '{"profiler":"torch","step_start":2}'``). This module
knows only our keys: it splits them out of a mapping, validates them and
names the key at fault. Which native keys exist is the caller's (the engine
patch's) knowledge, passed in as ``native_keys``.

Every key accepted here does something: an accepted key that does nothing
would be a silent lie. Each backend declares its own keys (the NPU ones,
``npu_*``, in ``backends.npu_options``); they are read here from
``backends.registry`` and held in ``backend_keys``, flat in the JSON.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

from ..backends import memory_history
from ..backends.which_backend import check_backend
from ..backends.registry import KEYS as BACKEND_KEYS, KINDS, kind_of_key
from ..backends.torch_profiler import check_against_native
from ..errors import OptionsError
from ..store import object_store


# Chunks sized by what their stop costs (session/chunk_plan.py), each pause
# under the target by default: measured (docs/performance.md, "torch's own stop").
CHUNK_AUTO = "auto"
DEFAULT_MAX_PAUSE_MS = 200
DEFAULT_MAX_RECORDING_MB = 1024
# Where a start request without a global_step takes one (rlprof_plugins.step_sources.which_step).
STEP_SOURCES = ("request", "weight_version", "profile_prefix")
# The flight recorder's settings (``flight_recorder``: true, false or an object of these; the
# ``metrics.flight`` module runs them). Defaults measured: docs/performance.md, "Flight recorder".
FLIGHT_DEFAULT_ON = True  # on wherever a directory is configured: its costs held (docs/performance.md)
FLIGHT_DEFAULTS: dict[str, Any] = {
    "seconds": 60,  # the ring keeps this much of the past
    "slow_factor": 3.0,  # an iteration (or step) this many times its rolling median ...
    "floor_ms": 200,  # ... and longer than this (an iteration) is slow
    "stall_seconds": 2.0,  # no iteration for this long while the engine is not idle: a stall
    "sample_hz": 10,  # the engine thread's stack, read by the recorder's own thread
    "max_mb": 32,  # the ring's memory cap per process
    "after_seconds": 1.0,  # a dump holds this much after the event (the engine's recovery)
    "min_interval_seconds": 60,  # at most one dump per reason this often (``requested`` is not limited)
    "disk_mb": 256,  # the dumps below the directory stop here (one log line per dropped dump)
    "warmup_iterations": 20,  # a server's first iterations never trigger; after a weight sync or a
                              # profiler's pause a tenth of this (at least 2)
    "on_anomaly": "dump",  # what a trigger does: write the dump
}
FLIGHT_ON_ANOMALY = ("dump",)  # "trace_next" (a full trace of what follows) is not built yet


@dataclass(frozen=True)
class ProfileOptions:
    """Server-wide defaults for every profiling session.

    ``step_start``/``step_end`` count engine iterations (one model execution
    on a worker) from each start request; the window is half-open, so exactly
    ``step_end - step_start`` iterations are recorded. ``step_end=None``
    records until a stop request.

    ``by_stage`` writes one trace per stage (prefill, decode) instead of one
    per rank. ``operator_table`` also writes torch's operator table
    (``profiler_out.txt``); off by default because building it holds the
    GIL for seconds and slows the engine. ``keep_last_steps`` keeps only the
    newest N global-step folders. ``merge`` writes one merged trace of every
    rank (per stage) into each step folder once all ranks have exported.
    ``routes_require_api_key`` guards the
    profiling routes with the server's API key when one is configured.
    ``backend`` picks the recorder (``auto``: torch_npu on Ascend, else
    torch.profiler); ``backend_keys`` holds every backend's own keys (the
    ``npu_*`` keys configure torch_npu: ``backends.npu_options``, docs/npu.md),
    defaults filled in; ``to_dict`` lists them beside the others.

    ``stop_wait_seconds``: a stop returns once the session's files are
    written, as the engines' native stops do (clients move the files right
    after), waiting at most this long (0: answer at once); the engine keeps
    serving meanwhile: the caller polls the session's state.

    ``chunk_iterations``: record a window as consecutive torch sessions,
    stitched into one trace per rank after the stop, so each of torch's own
    stops (seconds with stacks on, on the engine's thread) post-processes one
    chunk, not the whole window. ``auto``: where the stop leaves the engine
    thread, one torch session until the process has grown by
    ``max_recording_mb`` (its stop costs the engine a moment, where a
    rotation would stop torch on the engine thread); elsewhere each chunk as
    long as keeps its stop under ``max_pause_ms`` (measured per rank as it
    records); N: N iterations; 0: one torch session. Not with ``operator_table`` (torch's
    table needs the whole session) or the npu backend (torch_npu's stop does
    not post-process on that thread).

    ``output_dir``: the root of the step folders for a profiler whose own
    configuration names none (vLLM's ``"profiler": "cuda"``, where vLLM refuses
    ``torch_profiler_dir``); unset: ``/tmp``, as SGLang's default.

    ``allowed_output_dirs``: directories besides the configured one that a
    start request's ``output_dir`` may name (SGLang's field, accepted on both
    engines); rlprof never writes anywhere else.

    ``trainer_step_offset``: where a trainer integration knows only the
    weights version its server holds (verl: ``rlprof_plugins.step_sources.trainer``),
    a start without a ``global_step`` writes ``global_step_<version + this>``;
    1 by default (verl syncs after step N, so step N's rollout holds N-1);
    negative where the version runs ahead (slime: -1).

    ``step_source``: ``request`` (a start without ``global_step`` has none,
    unless a trainer integration gives it) or ``weight_version`` (the
    engine's own weight version + ``trainer_step_offset``, for trainers that
    version the weights they sync: slime, miles; ``steps.which_step``) or
    ``profile_prefix`` (a ``global_step_<N>`` prefix, for frontends that
    forward nothing else: vLLM's Rust frontend, SGLang's gRPC mode).

    ``memory``: every session also records the device allocator's memory
    history over its window and writes each rank's snapshot
    (``backends.memory_history``; CUDA or Ascend only), with
    ``memory_stacks`` (``python``, or ``all`` with C++ frames: far slower to
    dump) and at most ``memory_max_entries`` events (the newest kept).

    ``step_metrics``: every engine iteration is timed, traced or not, into
    its RL step's numbers (the ``metrics`` room), written per rank to
    ``<dir>/steps/<rank>.jsonl`` and served on the engine's ``/metrics``.

    ``flight_recorder``: the settings of every rank's flight recorder (``FLIGHT_DEFAULTS`` filled in; None:
    off): the last ``seconds`` of iterations, pauses and sampled stacks kept, and written under the step's
    ``flight/`` when an iteration, a stall or a step is slow against the engine's own past
    (``metrics.flight``). On by default; it runs where step metrics run.

    ``server_name``: this server's identity (letters, digits, ``.``, ``_``,
    ``-``), also ``RLPROF_SERVER_NAME``; unset, one is derived from the host
    and the HTTP port. Servers sharing a directory keep their files apart by
    it (``store.servers``), and the report names each replica by it.
    """

    step_start: int = 0
    step_end: int | None = None
    by_stage: bool = False
    operator_table: bool = False
    keep_last_steps: int | None = None
    merge: bool = False
    routes_require_api_key: bool = True
    stop_wait_seconds: int = 120
    chunk_iterations: int | str = CHUNK_AUTO
    max_pause_ms: int = DEFAULT_MAX_PAUSE_MS
    max_recording_mb: int = DEFAULT_MAX_RECORDING_MB
    output_dir: str | None = None
    allowed_output_dirs: tuple[str, ...] = ()
    trainer_step_offset: int = 1
    step_source: str = "request"
    memory: bool = memory_history.DEFAULTS["memory"]
    memory_stacks: str = memory_history.DEFAULTS["memory_stacks"]
    memory_max_entries: int = memory_history.DEFAULTS["memory_max_entries"]
    step_metrics: bool = True
    flight_recorder: Mapping[str, Any] | None = field(default_factory=lambda: dict(FLIGHT_DEFAULTS))
    server_name: str | None = None
    backend: str = "auto"
    backend_keys: Mapping[str, Any] = field(default_factory=lambda: dict(BACKEND_KEYS))

    def to_dict(self) -> dict[str, Any]:
        """Every key and its value, flat, as users write them (``backend_keys`` spread out)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "backend_keys"}
        flight = self.flight_recorder
        out["flight_recorder"] = False if flight is None else dict(flight)
        return {**out, **dict(self.backend_keys)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "ProfileOptions":
        return parse_options(data or {})


OUR_KEYS: tuple[str, ...] = (*(f.name for f in fields(ProfileOptions) if f.name != "backend_keys"), *BACKEND_KEYS)


def check_count(key: str, value: Any, *, allow_none: bool = False, error=OptionsError) -> int | None:
    """An integer >= 0 (or None when allowed); ``error`` lets request
    parsing reuse it with ``RequestError``, naming the field the same way."""
    if value is None and allow_none:
        return None
    # bool is an int subclass; true/false for a step count is a typo.
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an integer >= 0 or null" if allow_none else "an integer >= 0"
        raise error(key, f"must be {kind}, got {value!r}")
    if value < 0:
        raise error(key, f"must be >= 0, got {value}")
    return value


def check_positive(key: str, value: Any, error=OptionsError) -> int:
    """An integer >= 1."""
    count = check_count(key, value, error=error)
    if count == 0:
        raise error(key, "must be >= 1, got 0")
    return count  # type: ignore[return-value]


def check_chunking(key: str, value: Any, error=OptionsError) -> int | str:
    """``"auto"`` (chunks sized by their stop's cost) or iterations per chunk (0: one torch session)."""
    if value == CHUNK_AUTO:
        return CHUNK_AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise error(key, f'must be "auto" or an integer >= 0, got {value!r}')
    return value


def check_integer(key: str, value: Any, error=OptionsError) -> int:
    """Any integer (negative too); not a bool, not a float."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(key, f"must be an integer, got {value!r}")
    return value


def check_choice(key: str, value: Any, choices: tuple[str, ...], error=OptionsError) -> str:
    if value not in choices:
        raise error(key, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_flag(key: str, value: Any, error=OptionsError) -> bool:
    if not isinstance(value, bool):
        raise error(key, f"must be true or false, got {value!r}")
    return value


def check_window(step_start: int, step_end: int | None, error=OptionsError) -> None:
    """Reject empty or inverted windows; ``error`` lets request parsing reuse it."""
    if step_end is not None and step_end <= step_start:
        raise error(
            "step_end",
            f"must be greater than step_start ({step_start}), got {step_end}: "
            "the window [step_start, step_end) would record no iteration",
        )


def check_directories(key: str, value: Any, error=OptionsError) -> tuple[str, ...]:
    """A list of local directories, as absolute paths (``~`` expanded)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(d, str) and d for d in value):
        raise error(key, f"must be a list of directory paths, got {value!r}")
    return tuple(check_directory(key, d, error) for d in value)


def check_server_name(key: str, value: Any, error=OptionsError) -> str | None:
    """A server's name: one folder name of letters, digits, ``.``, ``_`` and ``-`` (not ``.`` or ``..``)."""
    import re

    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", value) or value in (".", ".."):
        raise error(key, f"must be a name of letters, digits, '.', '_' and '-' (one folder name), got {value!r}")
    return value


def check_directory(key: str, value: Any, error=OptionsError) -> str | None:
    """A local directory as an absolute path (``~`` expanded), an object store URI as given (``s3://b/p``:
    written through a local spool, ``store.destination``), or None. A URI this install cannot reach fails
    naming the extra to install."""
    import os

    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise error(key, f"must be a directory path, got {value!r}")
    if object_store.is_uri(value):
        try:
            object_store.require(value)
        except object_store.MissingLibrary as e:
            raise error(key, str(e)) from None
        return value.rstrip("/")
    if value.startswith("file://"):
        value = value[len("file://"):]
    return os.path.abspath(os.path.expanduser(value))


def check_flight_recorder(key: str, value: Any, error=OptionsError) -> dict[str, Any] | None:
    """``true`` (the defaults), ``false``/``null`` (off: None) or an object of ``FLIGHT_DEFAULTS``' keys,
    each checked and named ``flight_recorder.<key>`` at fault; the settings with the defaults filled in."""
    if value is None or value is False:
        return None
    if value is True:
        return dict(FLIGHT_DEFAULTS)
    if not isinstance(value, Mapping):
        raise error(key, f"must be true, false or an object of {', '.join(FLIGHT_DEFAULTS)}, got {value!r}")
    unknown = [k for k in value if k not in FLIGHT_DEFAULTS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(FLIGHT_DEFAULTS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise error(f"{key}.{unknown[0]}", f"not a flight recorder setting{hint}; settings: {', '.join(FLIGHT_DEFAULTS)}")
    out = dict(FLIGHT_DEFAULTS)
    for name, given in value.items():
        where = f"{key}.{name}"
        if name == "on_anomaly":
            out[name] = check_choice(where, given, FLIGHT_ON_ANOMALY, error)
            continue
        number = isinstance(given, (int, float)) and not isinstance(given, bool)
        if not number or given <= 0 or given != given or given == float("inf"):
            raise error(where, f"must be a number > 0, got {given!r}")
        if name == "slow_factor" and given <= 1:
            raise error(where, f"must be > 1 (a multiple of the rolling median), got {given!r}")
        if name in ("sample_hz", "warmup_iterations", "max_mb", "disk_mb", "seconds") and given != int(given):
            raise error(where, f"must be a whole number, got {given!r}")
        out[name] = int(given) if name in ("sample_hz", "warmup_iterations", "max_mb", "disk_mb", "seconds") else given
    if out["sample_hz"] > 100:
        raise error(f"{key}.sample_hz", f"must be at most 100 (a low rate: the recorder runs all the time), "
                                        f"got {out['sample_hz']}")
    return out


def parse_options(data: Mapping[str, Any]) -> ProfileOptions:
    """Validate our keys from ``data`` (which must hold only our keys)."""
    unknown = [k for k in data if k not in OUR_KEYS]
    if unknown:
        raise OptionsError(unknown[0], "not an rlprof option")
    step_start = check_count("step_start", data.get("step_start", 0))
    step_end = check_count("step_end", data.get("step_end"), allow_none=True)
    assert step_start is not None
    check_window(step_start, step_end)
    keep = check_count("keep_last_steps", data.get("keep_last_steps"), allow_none=True)
    if keep == 0:
        raise OptionsError("keep_last_steps", "must be >= 1 (or null to keep every step)")
    if data.get("flight_recorder") not in (None, False) and data.get("step_metrics") is False:
        raise OptionsError("flight_recorder", "needs step_metrics (the step a dump is filed under, the steps a "
                                              "slow step is measured against): set step_metrics true, or drop "
                                              "flight_recorder")
    given = {key: kind_of_key(key).check(key, data[key], OptionsError) for key in BACKEND_KEYS if key in data}
    for kind in KINDS.values():
        kind.cross_check({**data, **given}, OptionsError)
    return ProfileOptions(
        step_start=step_start,
        step_end=step_end,
        by_stage=check_flag("by_stage", data.get("by_stage", False)),
        operator_table=check_flag("operator_table", data.get("operator_table", False)),
        keep_last_steps=keep,
        merge=check_flag("merge", data.get("merge", False)),
        routes_require_api_key=check_flag("routes_require_api_key", data.get("routes_require_api_key", True)),
        stop_wait_seconds=check_count("stop_wait_seconds", data.get("stop_wait_seconds", 120)),
        chunk_iterations=check_chunking("chunk_iterations", data.get("chunk_iterations", CHUNK_AUTO)),
        max_pause_ms=check_positive("max_pause_ms", data.get("max_pause_ms", DEFAULT_MAX_PAUSE_MS)),
        max_recording_mb=check_positive("max_recording_mb", data.get("max_recording_mb", DEFAULT_MAX_RECORDING_MB)),
        output_dir=check_directory("output_dir", data.get("output_dir")),
        allowed_output_dirs=check_directories("allowed_output_dirs", data.get("allowed_output_dirs", ())),
        trainer_step_offset=check_integer("trainer_step_offset", data.get("trainer_step_offset", 1)),
        step_source=check_choice("step_source", data.get("step_source", "request"), STEP_SOURCES),
        memory=check_flag("memory", data.get("memory", memory_history.DEFAULTS["memory"])),
        memory_stacks=check_choice("memory_stacks", data.get("memory_stacks", memory_history.DEFAULTS["memory_stacks"]),
                                   memory_history.STACKS),
        memory_max_entries=check_positive("memory_max_entries",
                                          data.get("memory_max_entries", memory_history.DEFAULTS["memory_max_entries"])),
        step_metrics=check_flag("step_metrics", data.get("step_metrics", True)),
        flight_recorder=check_flight_recorder("flight_recorder", data.get("flight_recorder", FLIGHT_DEFAULT_ON)),
        server_name=check_server_name("server_name", data.get("server_name")),
        backend=check_backend(data.get("backend", "auto")),
        backend_keys={**BACKEND_KEYS, **given},
    )


def split_options(
    data: Mapping[str, Any], native_keys: Iterable[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``data`` into (native keys, our keys).

    A key that is neither is rejected here, with a suggestion, so a typo such
    as ``step_strat`` fails at start-up instead of being ignored.
    """
    native = set(native_keys)
    ours: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in data.items():
        if key in OUR_KEYS:
            ours[key] = value
        elif key in native:
            rest[key] = value
        else:
            candidates = sorted(native | set(OUR_KEYS))
            close = difflib.get_close_matches(key, candidates, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise OptionsError(
                key,
                f"unknown key{hint}; rlprof keys: {', '.join(OUR_KEYS)}; "
                "the engine's own keys are listed in its profiler documentation",
            )
    check_against_native(rest, ours, OptionsError)
    return rest, ours
