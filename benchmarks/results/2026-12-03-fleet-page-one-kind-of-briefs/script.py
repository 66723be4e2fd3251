"""Side by side, one run: the fleet page (alone, and with --json) of 64 replicas x 1,000 measured steps,
the tree before this change (/tmp/old at 3a76099) against this tree, alternating, cold and warm."""
import json, sys, shutil
from pathlib import Path
sys.path.append("/work/main")
from benchmarks.bench_report import page_numbers, rlprof_of_tree as cmd, write_fleet
from benchmarks.bench_trace_tools import run_child
SITE = "/work/main/.venv-vllm/lib/python3.11/site-packages"
root = Path("/tmp/fleetbench/fleet-64x1000")
if not root.exists():
    write_fleet(root, 64, 1000)
trees = {"before": "/tmp/old", "after": SITE}
out = {}
for label, extra in (("page alone, cold", ["--no-cache"]), ("page alone, warm", []), ("page and --json, warm", ["--json", "/tmp/fleetbench/r.json"])):
    for rnd in range(2):
        for name, tree in trees.items():
            if label.endswith("warm"):
                run_child(cmd(tree, "report", str(root), "-q", "-o", "/tmp/fleetbench/fill.html"))
            got = run_child(cmd(tree, "report", str(root), "-q", "-o", f"/tmp/fleetbench/{name}.html", *extra))
            out.setdefault(label, {}).setdefault(name, []).append(got)
            print(label, name, got, flush=True)
    same = Path("/tmp/fleetbench/before.html").read_bytes() == Path("/tmp/fleetbench/after.html").read_bytes()
    out[label]["same_page"] = same
    out[label]["page"] = page_numbers(Path("/tmp/fleetbench/after.html")) if label == "page alone, cold" else None
print(json.dumps(out))
Path("/tmp/fleetbench/result.json").write_text(json.dumps(out, indent=1))
