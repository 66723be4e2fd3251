"""``rlprof report --ray`` on a Ray cluster whose driver and nodes run another Python than the test environments'.

Ray needs one Python across a cluster, so this makes a virtual environment of
that Python (``--python``, for example a 3.13 interpreter) with Ray 2.60 and
the wheel built from this tree, starts a two-node cluster of it on the loopback
(``tests/helpers/ray_cluster.py``), and runs ``rlprof report --ray`` there over
verl's replica layout (``tests/ray/test_report_on_ray.py``'s ``fleet``). Its JSON
must be the local report's, made by the vLLM environment's Python over the same
root. Exit 0 when it is. ``make ray-python`` runs it with Python 3.13.

Usage: ``python tests/tools/ray_on_python.py --python PATH [--work DIR]`` from the vLLM environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO))

from tests.helpers.installed import TEST_PATH  # noqa: E402
from tests.helpers.ray_cluster import RAY_ENV, comparable  # noqa: E402
from tests.ray.test_report_on_ray import fleet  # noqa: E402

RAY = "ray==2.60.0"


def environment(python: str, venv: Path) -> Path:
    """A virtual environment of ``python`` with Ray and this tree's wheel; its interpreter."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [RAY], check=True)
    subprocess.run(pip + ["--force-reinstall", "--no-deps", str(REPO)], check=True)
    subprocess.run(pip + [str(REPO)], check=True)  # the wheel's own dependencies
    return venv / "bin" / "python"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the interpreter of the cluster and its driver")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "ray-on-python")
    args = parser.parse_args()
    python = environment(args.python, args.work / "venv")
    version = subprocess.run([str(python), "-V"], capture_output=True, text=True, check=True).stdout.strip()
    base = args.work / "run"
    shutil.rmtree(base, ignore_errors=True)
    root = fleet(base, ["node0"])  # the whole layout under base/all (its copy for node0 unused here)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONPATH"}
    env.update(RAY_ENV, PYTHONPATH=str(TEST_PATH), PYTHONSAFEPATH="1")
    cluster = subprocess.Popen([str(python), "-m", "tests.helpers.ray_cluster", json.dumps({"head": {}, "a": {}})],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=base, env=env)
    try:
        address = next((line.split()[1] for line in cluster.stdout if line.startswith("ADDRESS ")), None)
        if address is None:
            print(f"the cluster ended before it was up (exit {cluster.wait()})")
            return 1
        on_ray = subprocess.run([str(python), "-m", "rlprof_plugins.cli", "report", str(root), "-q", "--json",
                                 str(base / "ray.json"), "-o", str(base / "ray.html"), "--ray", address],
                                env=env, capture_output=True, text=True, timeout=600)
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=120)
    local = subprocess.run([sys.executable, "-m", "rlprof_plugins.cli", "report", str(root), "-q", "--json",
                            str(base / "local.json"), "-o", str(base / "local.html")], capture_output=True, text=True,
                           timeout=600)
    if on_ray.returncode or local.returncode:
        print(f"--ray exit {on_ray.returncode}: {on_ray.stderr[-2000:]}\nlocal exit {local.returncode}: "
              f"{local.stderr[-2000:]}")
        return 1
    ray_json, local_json = (json.loads((base / f"{name}.json").read_text()) for name in ("ray", "local"))
    nodes = ray_json["analysis"]["nodes"]
    same = comparable(ray_json) == comparable(local_json)
    print(f"{version}: rlprof report --ray on {len(nodes)} node(s) "
          f"{'gives' if same else 'does not give'} the local report's JSON ({sys.version.split()[0]})")
    return 0 if same and len(nodes) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
