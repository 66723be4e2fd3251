"""The fields of a start request, declared once: who defined each, what it means.

``requests.parse_start`` accepts exactly these fields at every entry point
where the engine's own signature lets them through (``ENTRY_POINTS``), and
docs/api.md's table of fields x engines x entry points is generated
from this module (``field_table``; a unit test keeps the docs equal to it).
"""

from __future__ import annotations

from dataclasses import dataclass

RLPROF, VLLM, SGLANG = "rlprof", "vLLM", "SGLang"


@dataclass(frozen=True)
class Field:
    name: str
    origin: tuple[str, ...]  # who defined it: rlprof, vLLM, SGLang
    kind: str
    meaning: str
    refused: str | None = None  # a known field rlprof cannot honour: why (400 when set)


FIELDS = (
    Field("global_step", (RLPROF,), "int >= 0",
          "write the session to `<dir>/global_step_<N>/` with a manifest; without it files go where the engine "
          "writes them"),
    Field("step_start", (RLPROF,), "int >= 0",
          "first iteration recorded, counted from this request (default: the server's `step_start`)"),
    Field("step_end", (RLPROF,), "int or null",
          "the window ends before this iteration, counted from this request; `null`: at the stop (default: the "
          "server's `step_end`)"),
    Field("by_stage", (RLPROF,), "bool", "one trace per stage (prefill, decode)"),
    Field("chunk_iterations", (RLPROF,), "`auto` or int >= 0",
          "record in torch sessions, stitched into one trace per rank after the stop: `auto` ends one when "
          "the engine waits for work or the process grew by `max_recording_mb` (by `max_pause_ms` too where "
          "the session began under traffic), N every N iterations, 0 one torch session "
          "(default: the server's `chunk_iterations`)"),
    Field("max_pause_ms", (RLPROF,), "int >= 1",
          "with `chunk_iterations` `auto` on an engine that has not waited for work since the start, the "
          "longest pause a chunk's stop may cost the engine thread (default: the server's `max_pause_ms`)"),
    Field("memory", (RLPROF,), "bool",
          "also record the device allocator's memory history over the window: each rank's snapshot in "
          "`memory/<rank>.pickle` (CUDA or Ascend; elsewhere 400 naming `memory`; default: the server's `memory`)"),
    Field("python_stacks", (RLPROF,), "`sampled`, `exact` or `off`",
          "this session's Python stacks: `sampled` (the engine thread's stack read `sample_hz` times a second, "
          "torch's stacks off), `exact` (torch's `with_stack`), `off` (default: the server's `python_stacks`: "
          "`sampled` where its configuration writes no stack key); with `with_stack` or `profiler_kwargs.with_stack` saying "
          "otherwise: 400 naming `python_stacks`"),
    Field("sample_hz", (RLPROF,), "int 1-10000",
          "samples a second of this session's sampled Python stacks, kept as asked (default: the server's "
          "`sample_hz`; unset there: 200 at most, within 1% of the engine thread's time); used where the session "
          "samples"),
    Field("profile_prefix", (VLLM, SGLANG), "string",
          "trace-name prefix (`<prefix>_<rank>...`); vLLM's character rule on vLLM, a plain file-name part on SGLang"),
    Field("delay_iterations", (VLLM,), "int >= 0",
          "iterations to skip before recording, as `step_start` (default: the configured one)"),
    Field("max_iterations", (VLLM,), "int >= 0",
          "iterations to record from the start; 0: until the stop (default: the configured one)"),
    Field("profiler_kwargs", (VLLM,), "object",
          "per-session torch.profiler settings `record_shapes`, `profile_memory`, `with_stack`, `with_flops`, "
          "`with_modules` (true/false); any other key is refused naming it"),
    Field("output_dir", (SGLANG,), "path",
          "where the session's files go, inside the configured directory or `allowed_output_dirs`; elsewhere: "
          "400 on SGLang, ignored with a warning in the answer on vLLM (native vLLM ignores the field)"),
    Field("start_step", (SGLANG,), "int >= 0",
          "the forward-pass number (counted from server start, SGLang's meaning) recording begins with; one "
          "already past: the next pass. 0: unset"),
    Field("num_steps", (SGLANG,), "int >= 0",
          "iterations to record from the start (with `profile_by_stage`: that many iterations in all, split by "
          "stage, where SGLang counts that many of each stage). 0: unset"),
    Field("activities", (SGLANG,), "list",
          "`CPU`, `GPU`/`CUDA`, `XPU` for this session, `MEM` the memory history (as `memory`; `[\"MEM\"]` "
          "alone: no trace, as on SGLang), `CUDA_PROFILER` Nsight Systems (the cuda backend: NVTX ranges and "
          "one capture range; alone or with `MEM`); a device this host lacks or a mix: 400 naming `activities`"),
    Field("with_stack", (SGLANG,), "bool", "Python stacks for this session"),
    Field("record_shapes", (SGLANG,), "bool", "operator input shapes for this session"),
    Field("profile_by_stage", (SGLANG,), "bool", "as `by_stage`"),
    Field("merge_profiles", (SGLANG,), "bool", "one merged trace of every rank (the `merge` option) for this session"),
    Field("profile_id", (SGLANG,), "string", "the session's id in status answers and the manifest"),
    Field("profile_stages", (SGLANG,), "list", "stages to record",
          refused="is not supported by rlprof sessions; by_stage writes one trace per stage"),
    Field("detailed_annotations", (SGLANG,), "bool", "SGLang's per-layer annotations",
          refused="is not supported by rlprof sessions"),
)

BY_NAME = {f.name: f for f in FIELDS}
FIELD_NAMES = tuple(BY_NAME)
# Window fields, by what they say; at most one of each group per request.
START_KEYS = ("step_start", "delay_iterations", "start_step")
END_KEYS = ("step_end", "max_iterations", "num_steps")


def native_to(engine: str) -> tuple[str, ...]:
    """The fields the engine itself defines (``vLLM`` or ``SGLang``)."""
    return tuple(f.name for f in FIELDS if engine in f.origin)


def needs_rlprof(engine: str, fields) -> bool:
    """Whether a call names a field ``engine`` itself does not define (rlprof's,
    or the other engine's): only rlprof can run it. A field no one defines is
    ignored, as the engines' routes ignore it."""
    native = native_to(engine)
    return any(k in BY_NAME and k not in native for k in fields)


@dataclass(frozen=True)
class EntryPoint:
    engine: str
    name: str
    takes: tuple[str, ...]  # the origins of the fields it lets through
    note: str = ""


ENTRY_POINTS = (
    EntryPoint(VLLM, "`POST /start_profile`", (RLPROF, VLLM, SGLANG)),
    EntryPoint(VLLM, "`LLM`/`AsyncLLM.start_profile`", (RLPROF, VLLM, SGLANG)),
    EntryPoint(VLLM, "`LLMEngine.start_profile`, `EngineCore.profile`", (VLLM,),
               "vLLM's own signature down to `Worker.profile`, where rlprof parses them"),
    EntryPoint(SGLANG, "`POST /start_profile`", (RLPROF, VLLM, SGLANG)),
    EntryPoint(SGLANG, "`TokenizerManager`/`Engine.start_profile`", (RLPROF, VLLM, SGLANG),
               "keyword or `ProfileReq` form on every release"),
)


def field_table() -> str:
    """The Markdown table of request fields x engines x entry points."""
    import textwrap

    heads = [f"{e.engine} {e.name}" for e in ENTRY_POINTS]
    lines = ["| field | from | " + " | ".join(heads) + " |",
             "| --- | --- | " + " | ".join("---" for _ in heads) + " |"]
    for f in FIELDS:
        marks = ["400" if f.refused else ("yes" if any(o in e.takes for o in f.origin) else "—")
                 for e in ENTRY_POINTS]
        lines.append(f"| `{f.name}` | {', '.join(f.origin)} | " + " | ".join(marks) + " |")
    notes = [f"- {e.engine} {e.name}: {e.note}." for e in ENTRY_POINTS if e.note]
    meanings = []
    for f in FIELDS:
        meaning = f"- `{f.name}` ({f.kind}): {f.meaning}" + (f" — refused: {f.refused}" if f.refused else "")
        meanings += textwrap.wrap(meaning, width=104, subsequent_indent="  ", break_long_words=False,
                                  break_on_hyphens=False)
    return "\n".join(lines + [""] + notes + ["", "What each field means:", ""] + meanings) + "\n"


if __name__ == "__main__":
    print(field_table(), end="")
