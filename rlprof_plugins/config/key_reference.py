"""Every configuration key in one line each: its type, its default and one sentence, declared once.

docs/configuration.md's key table is generated from ``KEYS`` (``key_table``; a unit test keeps the
page equal to it). Each default shown is what the parser gives an empty configuration
(``options.parse_options``): the table reads it from there, so the page cannot state a default the
code does not have. Where a default is better written another way (``flight_recorder``'s settings
object as ``true``), ``shown`` says how, and the same test parses it back to the same value.

The long explanations live on the pages each line links to; this module only holds what a reader
needs to find a key and decide whether to read on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .options import OUR_KEYS, parse_options


@dataclass(frozen=True)
class See:
    """Where a key is explained: a page of docs/ and, optionally, one of its headings."""

    page: str
    heading: str = ""

    def markdown(self) -> str:
        return f"[{self.page}]({self.page})" + (f', "{self.heading}"' if self.heading else "")


@dataclass(frozen=True)
class KeyDoc:
    """One key of ``--profiler-config``: as users write it, in one line."""

    key: str
    kind: str  # the values it takes, as users write them
    meaning: str  # one sentence
    see: See  # where the key is explained at length
    shown: Any = None  # the default as the table writes it, where not the parsed value itself


WINDOW = See("configuration.md", "The window")
CHUNKS = See("recording.md", "Chunks: where the profiler stops")
MEMORY = See("recording.md", "Memory snapshots")
STACKS = See("python-stacks.md", "Which setting wins")
STEP_SOURCE = See("trainer.md", "Trainers that version their weights: slime, miles (`step_source: weight_version`)")
NPU = See("npu.md", "NPU keys")

KEYS: tuple[KeyDoc, ...] = (
    KeyDoc("step_start", "int >= 0", "first engine iteration recorded, counted from each start request", WINDOW),
    KeyDoc("step_end", "int or `null`", "the window ends before this iteration and the trace is written; `null`: at "
           "the stop", WINDOW),
    KeyDoc("by_stage", "bool", "one trace per stage (prefill, decode) per rank", See("recording.md", "Stages")),
    KeyDoc("operator_table", "bool", "also write torch's operator table `<rank>.profiler_out.txt`",
           See("recording.md", "Why the operator table is opt-in")),
    KeyDoc("keep_last_steps", "int >= 1 or `null`",
           "keep only the newest N `global_step_*` folders; older ones are removed once complete",
           See("files.md", "Access and disk")),
    KeyDoc("merge", "bool", "once every rank has exported, write one `merged[.<stage>]` trace of all ranks",
           See("cli.md", "Merge")),
    KeyDoc("routes_require_api_key", "bool", "the profiling routes require the server's API key when it has one",
           See("api.md", "HTTP")),
    KeyDoc("stop_wait_seconds", "int >= 0",
           "a stop answers once the files are written, waiting at most this long (`0`: at once)",
           See("api.md", "HTTP")),
    KeyDoc("chunk_iterations", "`\"auto\"` or int >= 0",
           "where a recording's torch sessions end: `auto` where the engine waits for work", CHUNKS),
    KeyDoc("max_pause_ms", "int >= 1",
           "under traffic that never waits, the longest pause one chunk's stop should cost", CHUNKS),
    KeyDoc("max_recording_mb", "int >= 1",
           "how much the engine process may grow while one chunk records: the recording's memory bound", CHUNKS),
    KeyDoc("output_dir", "path or `null`", "the step folders' root where the profiler config names none "
           "(vLLM's `\"profiler\": \"cuda\"`; `null`: `/tmp`)", See("nsys.md")),
    KeyDoc("allowed_output_dirs", "list of paths",
           "folders besides the configured one a start request's `output_dir` may name",
           See("api.md", "Start requests: one model for both engines")),
    KeyDoc("trainer_step_offset", "int", "a step taken from a weights version is `version + this` (verl 1, slime -1)",
           STEP_SOURCE),
    KeyDoc("step_source", "`request`, `weight_version` or `profile_prefix`",
           "where a start that names no `global_step` takes one", STEP_SOURCE),
    KeyDoc("memory", "bool", "also record the device allocator's memory history (CUDA or Ascend)", MEMORY),
    KeyDoc("memory_stacks", "`\"python\"` or `\"all\"`",
           "the frames kept with each allocation (`all` adds C++ frames, far slower to dump)", MEMORY),
    KeyDoc("memory_max_entries", "int >= 1", "the most allocation and free events the history keeps (the newest)",
           MEMORY),
    KeyDoc("step_metrics", "bool", "every iteration timed into its RL step's numbers, traced or not",
           See("step-metrics.md", "Step metrics")),
    KeyDoc("flight_recorder", "bool or an object of settings",
           "every rank keeps its last minute and writes it when something is slow",
           See("step-metrics.md", "Flight recorder"), shown=True),
    KeyDoc("server_name", "string or `null`", "this server's identity (`null`: `<host>-<port>`)",
           See("multi-node.md", "Several servers, one directory")),
    KeyDoc("backend", "`\"auto\"`, `\"torch\"`, `\"npu\"` or `\"cuda\"`",
           "the recorder: torch_npu on Ascend, torch.profiler elsewhere, or NVTX for Nsight Systems",
           See("npu.md", "Choosing the recorder: `backend`")),
    KeyDoc("python_stacks", "`\"sampled\"`, `\"exact\"`, `\"off\"` or `null`",
           "which Python stacks a session records (`null`: as `torch_profiler_with_stack` says; `sampled` where "
           "neither is written)", STACKS),
    KeyDoc("sample_hz", "int 1..10000 or `null`",
           "samples a second of sampled stacks (`null`: 200 at most, within 1% of the engine thread)", STACKS),
    KeyDoc("npu_profiler_level", "torch_npu's `ProfilerLevel` name",
           "how much torch_npu records (`Level0`: operators and kernels, no AscendCL layer)", NPU),
    KeyDoc("npu_aic_metrics", "torch_npu's `AiCMetrics` name", "the AI-core counters torch_npu collects", NPU),
    KeyDoc("npu_export_type", "list of `text`, `db`", "what torch_npu writes: `text` (`trace_view.json`), `db`", NPU),
    KeyDoc("npu_data_simplification", "bool", "torch_npu deletes its raw intermediate files after analysing them", NPU),
    KeyDoc("npu_with_modules", "bool", "record the module hierarchy", NPU),
    KeyDoc("npu_with_stack", "bool", "record torch_npu's Python stacks", NPU),
    KeyDoc("npu_with_memory", "bool", "record each operator's memory", NPU),
    KeyDoc("npu_record_shapes", "bool", "record operators' input shapes", NPU),
    KeyDoc("npu_analyse", "bool", "write `ASCEND_PROFILER_OUTPUT` (`trace_view.json`) before the files are published",
           NPU),
)

BY_KEY = {doc.key: doc for doc in KEYS}


def defaults() -> dict[str, Any]:
    """What an empty configuration gives every key, as JSON writes it."""
    return {key: list(value) if isinstance(value, tuple) else value
            for key, value in parse_options({}).to_dict().items()}


def key_table() -> str:
    """The Markdown table of every key: type, default, one sentence."""
    missing = [k for k in OUR_KEYS if k not in BY_KEY]
    stale = [k for k in BY_KEY if k not in OUR_KEYS]
    if missing or stale:
        raise KeyError(f"config.key_reference: keys without a line: {', '.join(missing) or 'none'}; "
                       f"lines of keys the parser no longer takes: {', '.join(stale) or 'none'}")
    parsed = defaults()
    lines = ["| key | type | default | what it does |", "| --- | --- | --- | --- |"]
    for key in OUR_KEYS:
        doc = BY_KEY[key]
        default = json.dumps(parsed[key] if doc.shown is None else doc.shown)
        lines.append(f"| `{key}` | {doc.kind} | `{default}` | {doc.meaning}; {doc.see.markdown()} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(key_table(), end="")
