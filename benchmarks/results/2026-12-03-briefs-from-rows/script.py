"""Side by side, one run: the fleet page (alone, and with --json) of 64 replicas x 1,000 measured steps,
the tree before this change (/tmp/old at 5f12735) against this tree (/tmp/new, a copy of it), alternating:
without the cache, the first run that fills it, and warm. The change: a brief is taken from its row (no
list between), and the memory snapshot's reader moved to trace/analysis."""
import json, sys, shutil
from pathlib import Path
sys.path.append("/work/main")
from benchmarks.bench_report import page_numbers, rlprof_of_tree as cmd, write_fleet
from benchmarks.bench_trace_tools import run_child
root = Path("/tmp/fleetbench/fleet-64x1000")
if not root.exists():
    write_fleet(root, 64, 1000)
def forget():
    for cache in root.glob("*/.rlprof-report-cache"):
        shutil.rmtree(cache)
trees = {"before": "/tmp/old", "after": "/tmp/new"}
out = {}
for label, extra in (("page alone, no cache", ["--no-cache"]), ("page alone, filling the cache", []),
                     ("page alone, warm", []), ("page and --json, warm", ["--json", "/tmp/fleetbench/r.json"])):
    for rnd in range(2):
        for name, tree in trees.items():
            if label.endswith("filling the cache"):
                forget()
            if label.endswith("warm"):
                run_child(cmd(tree, "report", str(root), "-q", "-o", "/tmp/fleetbench/fill.html"))
            got = run_child(cmd(tree, "report", str(root), "-q", "-o", f"/tmp/fleetbench/{name}.html", *extra))
            out.setdefault(label, {}).setdefault(name, []).append(got)
            print(label, name, got, flush=True)
    same = Path("/tmp/fleetbench/before.html").read_bytes() == Path("/tmp/fleetbench/after.html").read_bytes()
    out[label]["same_page"] = same
    out[label]["page"] = page_numbers(Path("/tmp/fleetbench/after.html")) if label == "page alone, no cache" else None
print(json.dumps(out))
Path(__file__).with_name("result.json").write_text(json.dumps(out, indent=1))
