"""verl's rollout profiling through ``RolloutReplica``, on a real Ray actor; run as a script.

A one-node Ray cluster of one CPU on ``127.0.0.2`` (``ray.cluster_utils.Cluster``), one server actor (``vllm_actor``/``sglang_actor``:
verl's class, verl's profiling methods), and verl's own
``RolloutReplica.start_profile``/``stop_profile`` driving it, as the trainer's
``LLMServerManager`` does, in the order a run makes them:

1. before any weight sync (no weights version): ``start_profile()``;
2. ``set_global_steps(4)`` (verl's weight sync after step 4), ``start_profile()``;
3. ``start_profile(global_step=9)`` (a caller that passes the step).

Each session records a short rollout. Prints ``RESULT {json}``: each
session's files under ``save_path`` when its stop returned.

With ``--no-profile``, verl's sequence when no profile is asked for: a weight
sync (``set_global_steps(N)``), a rollout, the calls verl makes of the server
between rollouts (``BETWEEN_ROLLOUTS``: verl's own methods that run on a CPU),
the next sync, and so on, with no start or stop at all; the result holds every
step log line written under ``save_path`` (``steps/<rank>.jsonl``), as the
engine wrote them.

With ``--two-replicas``, two server actors with verl's defaults (replica 0
traced, replica 1 not) through three synced steps, the middle one profiled;
the result lists every file under ``save_path`` and every step log line.

    python -m tests.verl.replica_replay vllm|sglang MODEL SAVE_PATH [--relocate | --no-profile | --two-replicas]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def server_classes(engine: str):
    if engine == "vllm":
        from tests.verl.vllm_actor import TestVllmServer
        from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica

        return TestVllmServer, vLLMReplica
    from tests.verl.sglang_actor import TestSGLangServer
    from verl.workers.rollout.sglang_rollout.async_sglang_server import SGLangReplica

    return TestSGLangServer, SGLangReplica


async def replay(engine: str, model: str, save_path: Path, relocate: bool) -> dict:
    import ray

    server_class, replica_class = server_classes(engine)
    actor = ray.remote(server_class).options(max_concurrency=8).remote(str(save_path), model, relocate)
    await actor.launch.remote()
    # verl's replica methods on the real actor; the replica's own start-up (launch_servers) stands aside
    replica = object.__new__(replica_class)
    replica.servers = [actor]
    sessions = {}
    try:
        for name, sync, kwargs in (("before_sync", None, {}), ("after_sync_4", 4, {}),
                                   ("caller_step_9", None, {"global_step": 9})):
            if sync is not None:
                await actor.set_global_steps.remote(sync)
            before = set(listing(save_path))
            await replica.start_profile(**kwargs)
            tokens = await actor.rollout.remote(2)
            await replica.stop_profile()
            sessions[name] = {"tokens": tokens, "new": sorted(set(listing(save_path)) - before)}
    finally:
        await actor.close.remote()
    return {"sessions": sessions, "patched_in_driver": _patched(engine)}


NODE_IP = "127.0.0.2"
# verl's server methods a trainer calls between rollouts, each as (method, args), that run on a CPU: on vLLM a
# weight reload through verl's collective_rpc and its cache reset (its abort_all_requests passes vLLM 0.32 an
# argument it no longer takes; sleep and wake-up need a GPU); on SGLang the pause (mode "abort": the tokenizer
# manager aborts the requests, no scheduler pauses), cache flush and resume around a weight sync
BETWEEN_ROLLOUTS = {"vllm": (("collective_rpc", ("reload_weights",)), ("clear_kv_cache", ())),
                    "sglang": (("abort_all_requests", ()), ("clear_kv_cache", ()), ("resume_generation", ()))}
SYNCED_VERSIONS = (1, 2, 3)  # weights versions verl syncs, one rollout after each (steps 2, 3, 4 at offset 1)


async def replay_without_profile(engine: str, model: str, save_path: Path) -> dict:
    """verl's steps with no profile: sync, roll out, repeated; then one more sync ends the last step."""
    import ray

    server_class, _ = server_classes(engine)
    actor = ray.remote(server_class).options(max_concurrency=8).remote(str(save_path), model, False)
    await actor.launch.remote()
    tokens = {}
    try:
        for version in SYNCED_VERSIONS:
            await actor.set_global_steps.remote(version)
            tokens[version] = await actor.rollout.remote(2)
            for method, args in BETWEEN_ROLLOUTS[engine]:
                await getattr(actor, method).remote(*args)
        await actor.set_global_steps.remote(SYNCED_VERSIONS[-1] + 1)  # the next sync: the last step is written
        for _ in range(100):  # the step log is appended off the engine thread
            if len(step_lines(save_path)) >= len(SYNCED_VERSIONS):
                break
            await asyncio.sleep(0.1)
    finally:
        await actor.close.remote()
    return {"tokens": tokens, "step_lines": step_lines(save_path), "patched_in_driver": _patched(engine)}


async def replay_two_replicas(engine: str, model: str, save_path: Path) -> dict:
    """Two replicas with verl's defaults (``all_ranks=False``: replica 0 alone traced), driven as the trainer
    drives them: a weight sync on both, verl's ``start_profile()`` on each replica (verl's server profiles
    only replica 0), a rollout on both, ``stop_profile()``; three steps, the middle one profiled; then one
    more sync ends the last step."""
    import ray

    server_class, replica_class = server_classes(engine)
    actors = [ray.remote(server_class).options(max_concurrency=8, num_cpus=0).remote(str(save_path), model, False, r)
              for r in (0, 1)]
    await asyncio.gather(*[a.launch.remote() for a in actors])
    replicas = []
    for actor in actors:
        replica = object.__new__(replica_class)
        replica.servers = [actor]
        replicas.append(replica)
    try:
        for version in SYNCED_VERSIONS:
            await asyncio.gather(*[a.set_global_steps.remote(version) for a in actors])
            profiled = version == SYNCED_VERSIONS[1]
            if profiled:
                for replica in replicas:
                    await replica.start_profile()
            await asyncio.gather(*[a.rollout.remote(2) for a in actors])
            if profiled:
                for replica in replicas:
                    await replica.stop_profile()
        await asyncio.gather(*[a.set_global_steps.remote(SYNCED_VERSIONS[-1] + 1) for a in actors])
        for _ in range(100):  # the step logs are appended off the engine thread
            lines = step_lines(save_path)
            if all(sum(str(save_path / f"agent_loop_rollout_replica_{r}") in line["_log"] for line in lines)
                   >= len(SYNCED_VERSIONS) for r in (0, 1)):
                break
            await asyncio.sleep(0.1)
    finally:
        await asyncio.gather(*[a.close.remote() for a in actors])
    return {"files": listing(save_path), "step_lines": step_lines(save_path), "patched_in_driver": _patched(engine)}


def step_lines(save_path: Path) -> list[dict]:
    """Every step log line below ``save_path``, each with ``_log``: the log it was read from."""
    return [{**json.loads(line), "_log": str(path)} for path in sorted(save_path.rglob("steps/*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def _patched(engine: str) -> bool:
    from rlprof_plugins.patches import VERL_PATCHES

    return any(p.applied for p in VERL_PATCHES if p.name == f"verl.servers.{engine}")


def main() -> None:
    import ray

    engine, model, save_path = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    relocate = "--relocate" in sys.argv[4:]
    run = (replay_without_profile(engine, model, save_path) if "--no-profile" in sys.argv[4:]
           else replay_two_replicas(engine, model, save_path) if "--two-replicas" in sys.argv[4:]
           else replay(engine, model, save_path, relocate))
    save_path.mkdir(parents=True, exist_ok=True)
    # the documented line: rlprof's keys reach every server actor through Ray's runtime_env
    env_vars = {k: os.environ[k] for k in ("RLPROF_PROFILER_CONFIG",) if k in os.environ}
    # on the loopback only: Ray binds its node to the machine's network address unless told (127.0.0.1 it
    # rewrites to that address); the test reads every connection with ss (test_verl_replica)
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"node_ip_address": NODE_IP, "num_cpus": 1,
                                                            "include_dashboard": False})
    try:
        ray.init(address=cluster.address, runtime_env={"env_vars": env_vars})
        try:
            result = asyncio.run(run)
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
