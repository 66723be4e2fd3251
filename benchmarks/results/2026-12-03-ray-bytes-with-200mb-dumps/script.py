"""What ``rlprof report --ray`` brings back against what its passes read, with a 200 MB flight recorder
window in every replica: verl's layout of three replicas (steps 5 and 6 of real vLLM TP=2 CPU traces), each
on a node of its own on a 3-node loopback Ray cluster, each replica's step 6 holding a real dump whose
rank window is padded to 200 MB of random text. The local report of the whole root beside it, in one run:
the same JSON (``comparable``), and the bytes that came back. Run from the checkout, with the venv's
Python: ``.venv-vllm/bin/python benchmarks/results/2026-12-03-ray-bytes-with-200mb-dumps/script.py``."""
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.helpers.ray_cluster import RayCluster, comparable  # noqa: E402
from tests.ray.test_report_on_ray import NODE_ROOT, REPLICAS, fleet, large_flight_dump, report_json  # noqa: E402

base = Path(tempfile.mkdtemp(prefix="rlprof-ray-dumps-"))
nodes = ["node0", "node1", "node2"]
try:
    whole = fleet(base, nodes)
    windows = []
    for i, replica in enumerate(REPLICAS):
        windows.append(large_flight_dump(whole / replica, 6, 200).stat().st_size)
        mine = base / nodes[i % len(nodes)] / "save_path" / replica
        shutil.rmtree(mine)
        shutil.copytree(whole / replica, mine, copy_function=shutil.copy2)
    started = time.monotonic()
    local, local_json = report_json(str(whole), base, "local", "--no-cache")
    local_s = time.monotonic() - started
    spec = {name: {"env": {"FLEET_NODE": name}} for name in nodes}
    with RayCluster(spec, base) as cluster:
        started = time.monotonic()
        done, on_ray = report_json(f"{base}/{NODE_ROOT}", base, "ray", "--ray", cluster.address)
        ray_s = time.monotonic() - started
    a = on_ray.get("analysis", {})
    out = {"exit": [local.returncode, done.returncode], "windows_bytes": windows,
           "trace_bytes": a.get("trace_bytes"), "bytes_returned": a.get("bytes_returned"),
           "returned_share_pct": round(100.0 * a["bytes_returned"] / a["trace_bytes"], 4) if a else None,
           "traces_per_node": a.get("traces_per_node"), "same_json": comparable(on_ray) == comparable(local_json),
           "anomalies_at_step_6": [len(s.get("anomalies", [])) for s in on_ray.get("steps", [])
                                   if s["global_step"] == 6],
           "seconds": {"local": round(local_s, 1), "ray": round(ray_s, 1)}, "stderr": done.stderr[-2000:]}
    print(json.dumps(out, indent=1))
    Path(__file__).with_name("result.json").write_text(json.dumps(out, indent=1) + "\n")
finally:
    shutil.rmtree(base, ignore_errors=True)
