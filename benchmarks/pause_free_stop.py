"""Can a stacks-on torch session end without its post-processing on the recording thread? (issue 43)

One session of ~300 thousand Python events (200 small matmuls, 100,000 ``sched_yield`` calls as
vLLM's idle worker makes) ended four ways; prints the seconds each cost the recording thread:
(a) ``prof.stop()`` in place; (b) a fork first, the child stopping and writing, the parent
stopping its own copy; (c) the stop with another Python thread working (that thread's longest
gap: how long the stop holds the GIL); (d) ``_ExperimentalConfig(trace_only=True)``.
Results in docs/performance.md, "A pause-free stop?". Usage: ``python benchmarks/pause_free_stop.py``.
"""
import os, time, json, torch, threading
from torch.profiler import profile, ProfilerActivity

def spin(n):
    for _ in range(n):
        os.sched_yield()

def session():
    p = profile(activities=[ProfilerActivity.CPU], with_stack=True)
    p.start()
    x = torch.ones(8, 8)
    for _ in range(200):
        x = torch.relu(x @ x / 8)
    spin(100_000)  # ~300k Python events, like 50 ms of vLLM's idle spin
    return p

# (a) plain stop on this thread
p = session(); t = time.perf_counter(); p.stop(); a = time.perf_counter() - t
# (b) fork at stop: the child stops and writes; the parent still has to stop its own copy
p = session(); t = time.perf_counter()
pid = os.fork()
if pid == 0:
    p.stop(); p.export_chrome_trace("os.devnull"); os._exit(0)
p.stop(); b_parent = time.perf_counter() - t; os.waitpid(pid, 0); b_total = time.perf_counter() - t
# (c) stop with another Python thread working: how long does it hold the GIL?
p = session(); ticks = []; done = threading.Event()
def worker():
    while not done.is_set():
        ticks.append(time.perf_counter()); time.sleep(0.001)
th = threading.Thread(target=worker); th.start(); time.sleep(0.05)
t = time.perf_counter(); p.stop(); c = time.perf_counter() - t; done.set(); th.join()
gap = max(b - a for a, b in zip(ticks, ticks[1:]))
# (d) trace_only experimental config
from torch._C._profiler import _ExperimentalConfig
def session_cfg(cfg):
    p = profile(activities=[ProfilerActivity.CPU], with_stack=True, experimental_config=cfg); p.start()
    spin(100_000); return p
try:
    p = session_cfg(_ExperimentalConfig(trace_only=True)); t = time.perf_counter(); p.stop(); d = time.perf_counter() - t
except Exception as e:
    d = repr(e)
print(json.dumps({"a_stop_s": round(a, 3), "b_fork_parent_stop_s": round(b_parent, 3), "b_fork_total_s": round(b_total, 3),
                  "c_stop_s": round(c, 3), "c_longest_gap_other_thread_s": round(gap, 3), "d_trace_only_stop_s": d if isinstance(d, str) else round(d, 3)}))
