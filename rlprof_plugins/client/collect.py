"""``rlprof collect``: one global step's files from a server, whichever nodes wrote them.

A server spanning nodes writes each node's ranks where that node's disk is;
the trainer reaches only the server's HTTP address. The server's status
names every rank with its files, and ``GET /profile_file`` streams each one
(on vLLM read by the rank's own worker, wherever its node is; guarded by the
server's API key). Collected here into ``<out>/global_step_<N>/``, laid out as
the nodes wrote them, with one manifest combining the nodes' manifests: then
``rlprof merge`` makes one trace of every rank, and says which are missing.

Standard library only, like the rest of the client. Every file is written
atomically; a failed download leaves what was collected before it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlencode

from ..store.layout import STEPS_DIR, session_dir
from ..store.manifest import write_collected
from ..metrics.log import SUFFIX as STEP_LOG
from .http import DEFAULT_TIMEOUT_S, call, headers

FINISHED = ("done", "failed")
MANIFEST = "manifest.json"


class CollectError(RuntimeError):
    """Why a step could not be collected (printed by ``rlprof collect``, exit 1)."""


@dataclass
class Collected:
    directory: Path
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    nodes: list[dict] = field(default_factory=list)
    state: str | None = None
    steps: list[str] = field(default_factory=list)  # the ranks' step metrics (steps/<rank>.jsonl), refreshed

    def to_json(self) -> dict:
        return {"directory": str(self.directory), "files": self.files, "bytes": self.bytes, "nodes": self.nodes,
                "state": self.state, "steps": self.steps}


def _relative(path: str, directory: str) -> str:
    """``path`` inside ``directory`` as a safe relative path (never leaves the output folder)."""
    rel = PurePosixPath(os.path.relpath(path, directory))
    if rel.is_absolute() or ".." in rel.parts:
        raise CollectError(f"the server listed {path} outside its step folder {directory}")
    return str(rel)


def _download(url: str, query: dict, target: Path, api_key: str | None, timeout: float) -> int:
    """``GET /profile_file`` into ``target``, atomically; returns the bytes written."""
    request = urllib.request.Request(f"{url.rstrip('/')}/profile_file?{urlencode(query)}", headers=headers(api_key))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(tmp, "wb") as out:
            size = 0
            while piece := response.read(1 << 20):
                out.write(piece)
                size += len(piece)
        os.replace(tmp, target)
        return size
    except urllib.error.HTTPError as e:
        with e:
            detail = e.read().decode("utf-8", "replace")[:500]
        raise CollectError(f"{query['rank']} {query['path']}: HTTP {e.code}: {detail}") from None
    except OSError as e:
        raise CollectError(f"{query['rank']} {query['path']}: {e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def collect(url: str, global_step: int, output: str | os.PathLike, *, api_key: str | None = None,
            timeout: float = DEFAULT_TIMEOUT_S) -> Collected:
    """Every file of ``global_step`` the server at ``url`` lists, into ``<output>/global_step_<N>/``."""
    reply = call(url, "GET", "/profile_status", query={"global_step": global_step}, api_key=api_key, timeout=timeout)
    status = reply.body if isinstance(reply.body, dict) else {}
    if reply.status != 200:
        raise CollectError(f"{url}: status: {reply.error or status or f'HTTP {reply.status}'}")
    if status.get("global_step") != global_step or not status.get("ranks"):
        raise CollectError(f"{url}: no session of global step {global_step}")
    if status.get("state") not in FINISHED:
        raise CollectError(f"{url}: global step {global_step} is still {status.get('state')}; "
                           f"wait for it (rlprof status --wait --global-step {global_step}) and collect again")
    target = session_dir(output, global_step)  # the step folder, named as every writer names it
    out = Collected(target, nodes=status.get("nodes") or [], state=status.get("state"))

    def fetch(rank: str, path: str) -> Path:
        dest = target / path
        out.bytes += _download(url, {"global_step": global_step, "rank": rank, "path": path}, dest, api_key, timeout)
        return dest

    manifests = []
    for node in out.nodes:  # each node's folder manifest, through one of its ranks
        dest = fetch(node["ranks"][0], MANIFEST)
        manifests.append(json.loads(dest.read_text()))
        dest.unlink()  # replaced by the combined one below
    for rank in status["ranks"]:
        for path in rank.get("files", []):
            out.files.append(str(fetch(rank["rank"], _relative(path, rank["directory"]))))
    for path in (status.get("frontend") or {}).get("files", []):
        out.files.append(str(fetch("frontend", _relative(path, status["directory"]))))
    if manifests:
        write_collected(target, manifests, [{k: n.get(k) for k in ("node", "host", "directory", "ranks")}
                                            for n in out.nodes])
    for rank in status["ranks"]:  # each rank's step metrics, every step it ran, into <output>/steps/
        name = f"{STEPS_DIR}/{rank['rank']}{STEP_LOG}"
        query = {"global_step": global_step, "rank": rank["rank"], "path": name}
        try:
            out.bytes += _download(url, query, Path(output) / name, api_key, timeout)
            out.steps.append(str(Path(output) / name))
        except CollectError as e:  # step metrics off there, or a release without them: the traces stand
            if "HTTP 404" not in str(e):
                raise
    return out
