"""The warm page alone again, the order of the two trees swapped each round (the first script always ran
the tree before this change first): 3 rounds."""
import sys, json
from pathlib import Path
sys.path.append("/work/main")
from benchmarks.bench_report import rlprof_of_tree as cmd
from benchmarks.bench_trace_tools import run_child
root = "/tmp/fleetbench/fleet-64x1000"
out = {"before": [], "after": []}
for rnd in range(3):
    for name, tree in ((("after", "/tmp/new"), ("before", "/tmp/old")) if rnd % 2 == 0 else (("before", "/tmp/old"), ("after", "/tmp/new"))):
        got = run_child(cmd(tree, "report", root, "-q", "-o", f"/tmp/fleetbench/{name}.html"))
        out[name].append(got["seconds"])
        print(name, got, flush=True)
print(json.dumps(out))
Path(__file__).with_name("warm_reversed.json").write_text(json.dumps(out, indent=1))
