"""What can go wrong on Ray, said in one line: no Ray here, no cluster there, or a task that gave no answer.

A task's exception is Ray's own (``RayTaskError`` wrapping the pass's error, or one of Ray's classes for
a node or worker that is gone); the report names the file it was reading with this one line, and a task
whose node went away can be asked again of another node that holds the same file.
"""

from __future__ import annotations

from typing import NamedTuple

NEEDS_RAY = "--ray needs Ray: pip install 'rlprof-plugins[ray]'"


class RayMissing(RuntimeError):
    """Ray is not installed where the command runs (said as ``NEEDS_RAY``)."""


class NoCluster(RuntimeError):
    """No Ray cluster could be joined at the address."""


# Ray's failures that mean the node (or its worker) went away mid-task, in plain words
NODE_GONE = {"TaskUnschedulableError": "its node left the cluster", "NodeDiedError": "its node died",
             "WorkerCrashedError": "the worker reading it died", "OwnerDiedError": "its owner died",
             "ObjectLostError": "its answer was lost with its node", "RaySystemError": "Ray failed"}


class TaskFailure(NamedTuple):
    """Why a task gave no answer, in one line, and whether its node (or the worker on it) went away: then
    another node holding the same file can be asked."""

    reason: str
    node_gone: bool


def why_failed(error: BaseException) -> TaskFailure:
    """A task's failure: what happened, then Ray's class (and the cause's first sentence)."""
    cause = getattr(error, "cause", None)
    source = cause if isinstance(cause, BaseException) else error
    name = type(source).__name__
    if name in NODE_GONE:
        return TaskFailure(f"{NODE_GONE[name]} ({name})", node_gone=True)
    lines = [line.strip() for line in str(source).splitlines()
             if line.strip() and not line.strip().startswith(("File ", "^", "Traceback", "ray::"))]
    text = lines[-1].split(". ")[0] if lines else ""
    return TaskFailure(f"{name}: {text[:200]}" if text else name, node_gone=False)
