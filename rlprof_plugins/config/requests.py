"""One start request for both engines: parsed once, wherever it arrives.

A session can be asked for at five entry points: vLLM's HTTP route, vLLM's
``LLM``/``AsyncLLM`` methods, vLLM's own ``EngineCore.profile`` chain down to
the worker, SGLang's HTTP route and SGLang's ``TokenizerManager``/``Engine``
methods. Each hands the fields it received to ``parse_start`` together with
what the receiving server contributes (``Server``: its defaults, its output
directory, its device) and passes the typed ``StartRequest`` down. Clients
written for either engine keep working on both: the fields are rlprof's,
vLLM's and SGLang's, each with one meaning (``request_fields.FIELDS``, from
which the docs' table is generated); the window translation is
``_window``, and nothing else translates fields.

Errors name the field (``RequestError``: HTTP 400, or the exception an
in-process caller sees) before anything is written.
"""

from __future__ import annotations

import difflib
import os
import uuid
from dataclasses import asdict, dataclass, field, fields as dataclass_fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..backends import memory_history
from ..errors import RequestError
from ..store import destination, object_store, servers
from ..store.layout import session_dir
from .options import DEFAULT_MAX_PAUSE_MS, DEFAULT_MAX_RECORDING_MB, ProfileOptions, check_chunking, check_count, check_flag, check_positive, check_window
from .recorded import parse_recorded
from .request_fields import BY_NAME, END_KEYS, FIELD_NAMES, SGLANG, START_KEYS, VLLM, needs_rlprof
from ..step_sources.which_step import choose


TYPO_CUTOFF = 0.8  # an unknown field this close to a field's name is taken for a typo of it (difflib's ratio)


@dataclass(frozen=True)
class StartRequest:
    """Everything a worker needs to run one session."""

    global_step: int | None
    step_start: int
    step_end: int | None
    profile_prefix: str | None = None
    by_stage: bool = False
    operator_table: bool = False
    keep_last_steps: int | None = None
    merge: bool = False
    # Iterations per torch session ("auto": sized so each stop stays under max_pause_ms;
    # 0: one for the whole window); stitched per rank after the stop.
    chunk_iterations: int | str = 0
    max_pause_ms: int = DEFAULT_MAX_PAUSE_MS
    # An "auto" session whose stop leaves the engine thread: the memory its chunk may grow the process by.
    max_recording_mb: int = DEFAULT_MAX_RECORDING_MB
    # Where this session's folders go (an allowed ``output_dir``); None: the configured directory.
    output_dir: str | None = None
    # Per-request torch.profiler settings, as TorchSettings field names.
    torch_overrides: dict[str, Any] | None = None
    trace: bool = True  # a trace is recorded (SGLang's activities ["MEM"]: the memory history alone)
    backend: str | None = None  # the backend this session asks for (SGLang's CUDA_PROFILER: cuda); None: the server's
    # The allocator's memory history over the window (``memory``, SGLang's MEM), and how.
    memory: bool = False
    memory_stacks: str = memory_history.DEFAULTS["memory_stacks"]
    memory_max_entries: int = memory_history.DEFAULTS["memory_max_entries"]
    # SGLang's ``start_step``: the absolute forward-pass number the window
    # begins with; each worker shifts the window by its own count (``shifted``).
    start_at: int | None = None
    step_source: str | None = None  # where global_step came from ("request", "weight_version 4 + offset 1")
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    # For the caller's answer only (e.g. an output_dir ignored on vLLM); not sent to workers.
    warnings: tuple[str, ...] = ()
    # The caller gave only fields the engine's own profiler defines (or none): where the session state refuses
    # the start and the engine's own route answers it as done (SGLang), so does rlprof
    # (``session.protocol.ignored_as_native``). Not sent to the workers.
    engine_fields_only: bool = field(default=False, compare=False)

    def to_command(self) -> dict[str, Any]:
        """The wire form: a plain dict that crosses collective_rpc and SGLang's IPC unchanged."""
        command = {"op": "start", **asdict(self)}
        del command["warnings"], command["engine_fields_only"]
        return command

    @classmethod
    def from_command(cls, command: Mapping[str, Any], forwards_done: int = 0) -> "StartRequest":
        """The request back from its wire form, where a worker receives it
        (it was checked by ``parse_start`` where it arrived; absent keys take
        their defaults), with ``start_at`` made a window from now given the
        worker's forward passes so far (``shifted``)."""
        known = {f.name for f in dataclass_fields(cls)} - {"warnings", "engine_fields_only"}
        given = {k: v for k, v in command.items() if k in known and v is not None}
        given.setdefault("global_step", None)
        given.setdefault("step_start", 0)
        given.setdefault("step_end", None)
        return cls(**given).shifted(forwards_done)

    def shifted(self, forwards_done: int) -> "StartRequest":
        """``start_at`` as a window counted from now, given the forward passes
        this worker has run (SGLang's rule: recording begins with pass number
        ``start_at``, or with the next pass when that one is past)."""
        if self.start_at is None:
            return self
        offset = max(self.start_at - forwards_done - 1, 0)
        end = None if self.step_end is None else self.step_end + offset
        return replace(self, start_at=None, step_start=self.step_start + offset, step_end=end)


@dataclass(frozen=True)
class Server:
    """What the server receiving a request contributes to its meaning."""

    engine: str  # "vllm" or "sglang"
    defaults: ProfileOptions
    # The configured directory; None: SGLang without rlprof configuration
    # (files go where SGLang would put them: ``output_dir`` or its default).
    output_root: str | None
    device: str = "cpu"  # the host's device type, for ``activities``
    # The engine's rule for a trace-name prefix (raises ValueError); None: a plain file-name part.
    check_prefix: Callable[[Any], None] | None = None
    # Reads the engine's weight version now (step_source weight_version); None: it keeps none.
    weight_version: Callable[[], Any] | None = None


ORIGIN_OF = {"vllm": VLLM, "sglang": SGLANG}  # a server's engine -> the origin its own request fields carry


def parse_start(fields: Any, server: Server) -> StartRequest:
    """One start request from any entry point's fields (a body, keyword arguments)."""
    if not isinstance(fields, Mapping):
        raise RequestError("body", f"must be a JSON object, got {type(fields).__name__}")
    # both engines' routes ignore the fields they do not define (a completion request sent to /start_profile
    # starts a profile): so does rlprof, saying so in the answer; a near miss of a field's name is a typo,
    # refused naming the field it meant (a session without its global step would land in the wrong place)
    ignored = []
    for key in (str(k) for k in fields if k not in BY_NAME):
        typo = difflib.get_close_matches(key, FIELD_NAMES, n=1, cutoff=TYPO_CUTOFF)
        if typo:
            raise RequestError(key, f"unknown field (did you mean '{typo[0]}'?); accepted: {', '.join(FIELD_NAMES)}")
        ignored.append(f"unknown field {key!r} ignored")
    # null means absent (both engines' request types default every field to None),
    # except step_end, whose null says "until the stop"
    given = {k: v for k, v in fields.items() if k in BY_NAME and (v is not None or k == "step_end")}
    for key, value in given.items():
        why = BY_NAME[key].refused
        if why and value not in (False, 0, [], ""):
            raise RequestError(key, why)
    start, end, start_at = _window(given, server.defaults)
    warnings: list[str] = ignored
    output_dir = _output_dir(given.get("output_dir"), server, warnings)
    recorded = parse_recorded(given, device=server.device, memory_default=server.defaults.memory)
    chosen = choose(given.get("global_step"), offset=server.defaults.trainer_step_offset,
                    source=server.defaults.step_source, weight_version=server.weight_version,
                    prefix=given.get("profile_prefix"))
    warnings += [chosen.warning] if chosen.warning else []
    global_step = check_count("global_step", chosen.global_step, allow_none=True, error=RequestError)
    request = StartRequest(
        global_step=global_step,
        step_start=start,
        step_end=end,
        profile_prefix=_prefix(given.get("profile_prefix"), server),
        by_stage=_same_flag(given, "by_stage", "profile_by_stage", server.defaults.by_stage),
        operator_table=server.defaults.operator_table,
        keep_last_steps=server.defaults.keep_last_steps,
        chunk_iterations=_chunk_iterations(given, server),
        max_pause_ms=check_positive("max_pause_ms", given.get("max_pause_ms", server.defaults.max_pause_ms),
                                    error=RequestError),
        max_recording_mb=server.defaults.max_recording_mb,
        merge=check_flag("merge_profiles", given["merge_profiles"], error=RequestError)
        if "merge_profiles" in given else server.defaults.merge,
        output_dir=output_dir,
        torch_overrides=recorded.torch_overrides or None,
        trace=recorded.trace,
        backend=recorded.backend,
        memory=recorded.memory,
        memory_stacks=server.defaults.memory_stacks,
        memory_max_entries=server.defaults.memory_max_entries,
        start_at=start_at,
        step_source=chosen.source if global_step is not None else None,
        warnings=tuple(warnings),
        engine_fields_only=not needs_rlprof(ORIGIN_OF.get(server.engine, server.engine), given),
        **({"session_id": _profile_id(given["profile_id"])} if "profile_id" in given else {}),
    )
    root = output_dir or server.output_root
    if root is not None:
        session_dir(root, request.global_step)  # the containment check, before anything is sent
    return request


def _window(given: dict[str, Any], defaults: ProfileOptions) -> tuple[int, int | None, int | None]:
    """The session's window ``[start, end)`` in iterations counted from the
    request, and SGLang's absolute ``start_at`` (the worker shifts the window).

    Where it starts: ``step_start`` (rlprof), ``delay_iterations`` (vLLM) or
    ``start_step`` (SGLang: an absolute forward-pass number), else the
    server's ``step_start``. Where it ends: ``step_end`` (rlprof: counted
    from the request, null until the stop), ``max_iterations`` (vLLM: that
    many from the start, 0 until the stop) or ``num_steps`` (SGLang: that
    many from the start). Without an end: the server's ``step_end``; with a
    vLLM or SGLang start, the configured length from that start (vLLM's
    rule: an unset ``max_iterations`` is the configured one). SGLang treats
    ``start_step``/``num_steps`` of 0 as unset, and so does this.
    """
    given = {k: v for k, v in given.items()
             if not (k in ("start_step", "num_steps") and v == 0 and not isinstance(v, bool))}
    for group, what in ((START_KEYS, "where the window starts"), (END_KEYS, "where the window ends")):
        named = [k for k in group if k in given]
        if len(named) > 1:
            raise RequestError(named[1], f"cannot be combined with {named[0]}: both say {what}")
    for key in START_KEYS + END_KEYS:
        if key in given:
            check_count(key, given[key], allow_none=key == "step_end", error=RequestError)
    start_key = next((k for k in START_KEYS if k in given), None)
    end_key = next((k for k in END_KEYS if k in given), None)
    start_at = given["start_step"] if start_key == "start_step" else None
    if start_at is not None and end_key == "step_end":
        raise RequestError("step_end", "counts from the request; with start_step (a forward-pass number) "
                                       "give the length as num_steps")
    start = defaults.step_start if start_key is None else (0 if start_at is not None else given[start_key])
    if end_key == "step_end":
        end = given["step_end"]
    elif end_key is not None:
        end = start + given[end_key] if given[end_key] else None
    elif start_key in (None, "step_start"):
        end = defaults.step_end
    else:
        end = None if defaults.step_end is None else start + defaults.step_end - defaults.step_start
    check_window(start, end, error=RequestError)
    return start, end, start_at


def _chunk_iterations(given: dict[str, Any], server: Server) -> int | str:
    """Iterations per torch session (or ``auto``); 0 where the whole session
    must be one (the operator table is built from one torch session)."""
    value = check_chunking("chunk_iterations", given.get("chunk_iterations", server.defaults.chunk_iterations),
                           error=RequestError)
    return 0 if server.defaults.operator_table else value


def _output_dir(value: Any, server: Server, warnings: list[str]) -> str | None:
    """An ``output_dir`` inside the directories the operator allowed (the
    configured one and ``allowed_output_dirs``). Outside them: refused on
    SGLang (its own field: the client would look there), ignored with a
    warning on vLLM (native vLLM ignores the field: files go where they would
    have gone)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RequestError("output_dir", f"must be a path, got {value!r}")
    if destination.is_uri(value):  # an object store folder (verl's save_path): written through its spool
        uri = value.rstrip("/")
        if server.output_root is not None and not _inside(destination.spool_folder(uri), server):
            return _outside(value, server, warnings)
        try:
            return str(servers.spooled(uri))
        except object_store.MissingLibrary as e:
            raise RequestError("output_dir", str(e)) from None
    if server.output_root is None:
        return os.path.abspath(os.path.expanduser(value))
    wanted = Path(os.path.expanduser(value)).resolve()
    return str(wanted) if _inside(wanted, server) else _outside(value, server, warnings)


def _allowed_roots(server: Server) -> list[Path]:
    """The configured root and ``allowed_output_dirs``, each as the local folder written (a URI's spool)."""
    return [Path(server.output_root).resolve()] + [
        destination.spool_folder(d) if destination.is_uri(d) else Path(d).resolve()
        for d in server.defaults.allowed_output_dirs]


def _inside(wanted: Path, server: Server) -> bool:
    return any(wanted == root or root in wanted.parents for root in _allowed_roots(server))


def _outside(value: str, server: Server, warnings: list[str]) -> None:
    """An ``output_dir`` outside the allowed directories: ignored with a warning on vLLM, refused on SGLang."""
    roots = _allowed_roots(server)
    where = ", ".join(repr(str(r)) for r in roots)
    if server.engine == "vllm":
        warnings.append(f"output_dir {value!r} ignored: not inside the allowed directories ({where}); files go to "
                        f"{server.output_root!r} (allowed_output_dirs in --profiler-config adds directories)")
        return None
    raise RequestError("output_dir", f"must be inside the allowed directories ({where}), got {value!r}; the "
                                     "operator may add directories with allowed_output_dirs in --profiler-config")


def _prefix(value: Any, server: Server) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError("profile_prefix", f"must be a string, got {value!r}")
    if server.check_prefix is not None:
        try:
            server.check_prefix(value)
        except ValueError as e:
            raise RequestError("profile_prefix", str(e)) from None
    elif not value or value.startswith(".") or any(c in value for c in "/\\\0"):
        # it becomes part of a file name inside the step folder
        raise RequestError("profile_prefix", f"must be a plain file-name part (no '/', not starting with '.'), "
                                             f"got {value!r}")
    return value


def _same_flag(given: dict[str, Any], ours: str, theirs: str, default: bool) -> bool:
    """A flag rlprof and SGLang both name (``by_stage``/``profile_by_stage``)."""
    values = {k: check_flag(k, given[k], error=RequestError) for k in (ours, theirs) if k in given}
    if len(set(values.values())) > 1:
        raise RequestError(theirs, f"contradicts {ours}")
    return next(iter(values.values()), default)


def _profile_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise RequestError("profile_id", f"must be a non-empty string, got {value!r}")
    return value


def parse_mark_step(body: Any) -> int:
    """``POST /profile_step {"global_step": N}``: the RL step every rank's step metrics count from now
    on (trainers that version nothing); N an integer >= 0, else a 400 naming the field."""
    step = body.get("global_step") if isinstance(body, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RequestError("global_step", f"an integer >= 0 is required, got {step!r}")
    return step

