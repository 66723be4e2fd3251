"""The driver's count of the traces the nodes hold after planning (``ClusterSession.plan``), before and after
this change, on a view of 64 replicas x 10 traced steps x 8 ranks (5,120 traces): the list of every pass
was made again for each file the nodes listed (the old expression, timed on 200 files and scaled), against
once (the new one, over all files)."""
import json
import time
from pathlib import Path

from rlprof_plugins.report.plan.view import GroupView, RootView, ServerView, StepView
from rlprof_plugins.trace.analysis.trace_stats import TraceJob

servers = []
for r in range(64):
    steps = []
    for s in range(10):
        jobs = [TraceJob(Path(f"rep{r}/global_step_{s}/rank{k}.pt.trace.json.gz"), f"rank{k}", None) for k in range(8)]
        steps.append(StepView(s, f"rep{r}/global_step_{s}", "done", {}, None, [GroupView(None, jobs)], [], [], [], 0,
                              [], True))
    server = ServerView(f"rep{r}", f"rep{r}", [], {}, {}, [], {}, [])
    server.steps = steps
    servers.append(server)
view = RootView("/x", servers, [s.name for s in servers], True)
sizes = {str(j.path): 1 for j in view.trace_jobs()}
started = time.perf_counter()
before = [rel for rel in list(sizes)[:200] if rel in {str(j.path) for j in view.trace_jobs()}]
before_s = (time.perf_counter() - started) * len(sizes) / 200
started = time.perf_counter()
wanted = {str(j.path) for j in view.trace_jobs()}
after = [rel for rel in sizes if rel in wanted]
after_s = time.perf_counter() - started
out = {"traces": len(sizes), "before_s_scaled": round(before_s, 2), "after_s": round(after_s, 4)}
print(json.dumps(out))
Path(__file__).with_name("result.json").write_text(json.dumps(out, indent=1) + "\n")
