"""Where a recorded rollout's time goes on SGLang TP=2. Per round, on an rlprof server: an unrecorded step
(marked 2k through /profile_step) and a recorded one (2k+1, stacks off); then the same on a server with
SGLang's own profiler. The rlprof server's step logs (TP-0.jsonl, TP-1.jsonl here) give each step's
iterations by stage and their summed time (busy_ms) and the time between them (idle_ms); rounds.json the
generation times. Run from the checkout: .venv-sglang/bin/python benchmarks/results/<this folder>/script.py 5"""
import json, sys, tempfile, time
from pathlib import Path
import requests
REPO = Path(__file__).resolve().parents[3]
sys.path.append(str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_rollout import launcher, recorded_step, rollout, rollout_plan
from tests.helpers.bursty import engine_pid

tmp = Path(tempfile.mkdtemp(prefix="diag-"))
launch = launcher(tmp, "sglang", 2)
srv = launch("rlprof", tmp / "rl")
nat = launch("native", tmp / "nat")
plan = rollout_plan()
out = []
try:
    for k in range(int(sys.argv[1])):
        requests.post(srv.url + "/profile_step", json={"global_step": 10 + 2 * k}, timeout=60).raise_for_status()
        u = rollout(srv, "sglang", plan)
        body = {"global_step": 11 + 2 * k, "python_stacks": "off"}
        r = recorded_step(srv, "sglang", engine_pid(srv, ("sglang::schedul",)), body, srv.folder, plan)
        nu = rollout(nat, "sglang", plan)
        nr = recorded_step(nat, "sglang", engine_pid(nat, ("sglang::schedul",)), {"activities": ["CPU"], "with_stack": False}, nat.folder, plan)
        out.append({"rl_unrec": u, "rl_rec": r["generation_s"], "nat_unrec": nu, "nat_rec": nr["generation_s"]})
        print(k, {a: round(b, 2) for a, b in out[-1].items()}, flush=True)
    requests.post(srv.url + "/profile_step", json={"global_step": 999}, timeout=60)
    time.sleep(3)
finally:
    srv.stop(); nat.stop()
print("folder", srv.folder)
for f in sorted((srv.folder).rglob("steps/*.jsonl")):
    print("==", f)
    for line in f.read_text().splitlines():
        d = json.loads(line)
        st = {s: (v["iterations"], round(v["total_ms"]), round(v["max_ms"])) for s, v in d.get("stages", {}).items()}
        print(d.get("global_step"), {k2: d[k2] for k2 in d if k2 not in ("stages", "tail", "phases", "counts")} , st)
json.dump(out, open(tmp / "out.json", "w"))
