"""The torch shim's canary, in a process of its own: the production stop (``detached_stop``) through a freshly
built shim (``torch_shim``) on a real session, operators on another thread throughout, the trace written, read
back and freed. ``torch_shim.canary`` runs it as ``python -m rlprof_plugins.backends.shim_canary LIBRARY RESULT``
and reads the JSON object it writes to the file ``RESULT`` (``ok``, ``detail``); an abort here ends this child,
never an engine.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from pathlib import Path

from . import detached_stop
from .torch_shim import Shim


def canary_child(library: str, result: str) -> int:
    """The canary's own process: the production stop (``detached_stop``) through ``library`` on a real session,
    with operators on another thread throughout; what it found goes to the file ``result`` as JSON."""
    import torch

    shim = Shim(Path(library))
    busy = threading.Event()

    def other_thread() -> None:
        y = torch.randn(32, 32)
        while not busy.is_set():
            y = torch.relu(y @ y)
            y = y / (y.norm() + 1)

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                  experimental_config=detached_stop.config(torch))
    prof.start()
    owners = shim.owners()
    neighbour = threading.Thread(target=other_thread)
    neighbour.start()
    x = torch.randn(64, 64)
    for i in range(20):
        with torch.profiler.record_function(f"rlprof::iteration {i}"):
            x = torch.relu(x @ x)
            x = x / (x.norm() + 1)
    stopped = detached_stop.stop(torch, prof, shim, owners)
    busy.set()
    neighbour.join()
    if not stopped.detached:
        Path(result).write_text(json.dumps({"ok": False, "detail": f"the stop did not detach: {stopped.error}"}))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "canary.pt.trace.json"
        stopped.save(path)
        stopped.release()
        events = json.loads(path.read_text())["traceEvents"]
    iterations = sum(1 for e in events if str(e.get("name", "")).startswith("rlprof::iteration"))
    live = shim.live()
    ok = iterations == 20 and live == {"results": 0, "detached": 0}
    Path(result).write_text(json.dumps({"ok": ok, "detail": f"{iterations} of 20 iterations read back, {live} alive",
                                        "torch": str(torch.__version__)}))
    return 0


if __name__ == "__main__":
    sys.exit(canary_child(sys.argv[1], sys.argv[2]) if len(sys.argv) == 3 else 2)
