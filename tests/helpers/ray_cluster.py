"""A real Ray cluster of several nodes on this machine (``ray.cluster_utils.Cluster``), all on the loopback.

Ray is the one verl's test folder installs (``.cache/verl-0.9.1``, Ray 2.60,
``tests/verl/site.py``): the cluster runs in a process of its own with that
folder on ``PYTHONPATH``, so the test process never imports Ray, and each
node's environment (``env_vars``) can differ: the folder it keeps its traces
in (``FLEET_NODE``), or a ``PYTHONPATH`` under which rlprof cannot be
imported; ``held_by_trainer`` gives a node an actor holding its one CPU, as a
trainer holds a node's CPUs. Every node is ``127.0.0.2`` (Ray rewrites ``127.0.0.1``), and so is
every driver that joins it (``rlprof report --ray 127.0.0.2:PORT`` joins from
that address).

    with RayCluster({"head": {...}, "a": {"held_by_trainer": True}}) as cluster:
        cluster.address; cluster.remove("a")

As a script (what ``RayCluster`` runs): ``python -m tests.helpers.ray_cluster
CONFIG_JSON`` prints ``ADDRESS <addr>`` once every node is up, then reads
``remove NAME`` lines from stdin (answering ``REMOVED NAME``); end of input
shuts the cluster down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.installed import TEST_PATH
from tests.verl.site import SITE

NODE_IP = "127.0.0.2"
# Ray's usage report and dashboard stay off (no network); a dead node is found in about 3 s, not 30
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}
SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
                 "health_check_timeout_ms": 500, "health_check_initial_delay_ms": 0}


RAY_PATH = f"{TEST_PATH}{os.pathsep}{SITE}"  # this checkout's tests alone (verl's folder ships a ``tests`` too), then Ray


def ray_environment(**extra: str) -> dict[str, str]:
    """The environment of a process that imports Ray: verl's folder on its path, of this checkout only its tests
    (rlprof is the installed wheel)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_ENV, PYTHONPATH=RAY_PATH, PYTHONSAFEPATH="1", **extra)
    return env


def comparable(report: dict) -> dict:
    """A report's or summary's JSON apart from where it was read: ``analysis`` dropped, the root's path as
    ``ROOT`` (a run on Ray and a local run over the same files must give the same)."""
    root = report["root"]

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items() if k != "analysis"}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x.replace(root, "ROOT") if isinstance(x, str) else x

    return walk(report)


class RayCluster:
    """The cluster's process; nodes named by the config's keys (the first is the head)."""

    def __init__(self, nodes: dict[str, dict], cwd: Path) -> None:
        self.nodes = nodes
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.ray_cluster", json.dumps(nodes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd,
                                     env=ray_environment())  # this checkout's tests by the venv's .pth, after the wheel
        self.address = self._expect("ADDRESS")

    def _expect(self, word: str) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the Ray cluster ended before {word} (exit {self.proc.wait()})")
            if line.startswith(word + " "):
                return line.split(" ", 1)[1].strip()
        raise TimeoutError(word)

    def remove(self, name: str) -> None:
        """Kill the node's processes (its raylet, its workers), as a node that dies."""
        self.proc.stdin.write(f"remove {name}\n")
        self.proc.stdin.flush()
        self._expect("REMOVED")

    def __enter__(self) -> "RayCluster":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def hold_cpus(cluster, handles: dict) -> list:
    """On each node of ``handles``, an actor holding every CPU the node offers, as a trainer's workers hold
    them: a task asking Ray for a CPU there waits for good. Returns the actors (kept alive by the caller)."""
    if not handles:
        return []
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=cluster.address, log_to_driver=False)

    @ray.remote
    class Trainer:
        def ready(self) -> bool:
            return True

    actors = [Trainer.options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(
        handle.node_id, soft=False)).remote() for handle in handles.values()]
    ray.get([a.ready.remote() for a in actors], timeout=120)
    return actors


def main() -> None:
    from ray.cluster_utils import Cluster

    nodes = json.loads(sys.argv[1])
    names = list(nodes)

    def args(name: str) -> dict:
        spec = dict(nodes[name])
        env = dict(spec.pop("env", {}))
        spec.pop("held_by_trainer", None)
        return {"node_ip_address": NODE_IP, "num_cpus": spec.pop("num_cpus", 1), "env_vars": env, **spec}

    cluster = Cluster(initialize_head=True, head_node_args={**args(names[0]), "include_dashboard": False,
                                                            "_system_config": SYSTEM_CONFIG})
    handles = {names[0]: cluster.head_node}
    for name in names[1:]:
        handles[name] = cluster.add_node(**args(name))
    cluster.wait_for_nodes()
    trainers = {name: handles[name] for name in names if nodes[name].get("held_by_trainer")}
    held = hold_cpus(cluster, trainers)  # alive until the cluster ends
    print(f"ADDRESS {cluster.address}", flush=True)
    try:
        for line in sys.stdin:
            word, _, name = line.strip().partition(" ")
            if word == "remove":
                cluster.remove_node(handles.pop(name), allow_graceful=False)
                print(f"REMOVED {name}", flush=True)
    finally:
        if held:  # the trainers' driver leaves first: Ray refuses to remove a node a driver is connected to
            import ray

            del held[:]
            ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
