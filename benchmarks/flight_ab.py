"""In-process A/B for the flight recorder: one vLLM engine, rounds rotating between the worker's flight
recorder on (a fresh ``FlightRecorder`` with the default settings: its ring, its triggers and its sampling
thread), off (closed and removed: the step metrics alone) and the ring alone (its thread stopped: what the
engine thread pays, apart from what the sampling thread costs), each mode first in a third of the rounds. Same process, same engine, same prompts, so
the only difference is the recorder. Two kinds of round: continuous (8 generations of 64 tokens, all at once)
and bursty (3 bursts of 3 generations of 24 tokens, 0.5 s idle after each; timed over the bursts only, never
the idle gaps). Prints one JSON line.

Run by bench_flight_recorder.py; needs VLLM_ENABLE_V1_MULTIPROCESSING=0 so the worker lives in this process.
"""

import gc
import json
import statistics
import sys
import time


def main() -> None:
    from vllm import SamplingParams

    from idle_hook_ab import warm_engine  # this folder: the script's own
    from rlprof_plugins.metrics.flight import FlightRecorder
    from rlprof_plugins.metrics.recorder import StepRecorder

    model, trace_dir, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    llm, prompts, continuous = warm_engine(model, trace_dir)  # the warm-up built the worker's recorder
    burst = SamplingParams(max_tokens=24, ignore_eos=True)
    recorders = [o for o in gc.get_objects() if isinstance(o, StepRecorder)]
    assert len(recorders) == 1 and recorders[0].flight is not None, recorders
    recorder = recorders[0]
    settings, writer = recorder.flight.settings, recorder.flight._write
    modes = ("on", "off", "ring only")  # ring only: the recorder's thread stopped (no samples), the ring kept
    out = {"continuous": {m: [] for m in modes}, "bursty": {m: [] for m in modes}}
    iterations = {m: 0 for m in modes}
    thread_share: list[float] = []
    engine_iterations: list[float] = []
    order = [m for r in range(rounds) for m in (modes[r % 3:] + modes[:r % 3])]  # rotated: no mode always first
    for mode in order:
        if recorder.flight is not None:
            recorder.flight.close()
            recorder.flight = None
        if mode != "off":
            recorder.flight = FlightRecorder(settings, writer)
            if mode == "ring only":
                recorder.flight._stopped.set()
                recorder.flight._wake.set()
        round_began = time.perf_counter()
        cpu_before = _thread_cpu_ns(recorder.flight)
        t = time.perf_counter()
        outs = llm.generate(prompts, continuous, use_tqdm=False)
        seconds = time.perf_counter() - t
        out["continuous"][mode].append(sum(len(o.outputs[0].token_ids) for o in outs) / seconds)
        served = 0.0
        for _ in range(3):
            t = time.perf_counter()
            llm.generate(prompts[:3], burst, use_tqdm=False)
            served += time.perf_counter() - t
            time.sleep(0.5)  # idle: not timed
        out["bursty"][mode].append(served)
        if mode == "on":  # the recorder's own thread: its CPU time over the round's wall time (idle gaps too)
            thread_share.append((_thread_cpu_ns(recorder.flight) - cpu_before) / 1e9
                                / (time.perf_counter() - round_began))
            engine_iterations.append(recorder.flight.count / (time.perf_counter() - round_began))
        if recorder.flight is not None:
            iterations[mode] += recorder.flight.count
    dumps = (recorder.flight.dumps if recorder.flight is not None else 0)
    summary = {"continuous_tokens_per_s": {m: statistics.median(v) for m, v in out["continuous"].items()},
               "bursty_serving_s": {m: statistics.median(v) for m, v in out["bursty"].items()},
               "rounds": out, "dumps_last_on_round": dumps}
    # per round pair: on against the off round after it
    summary["continuous_ratio_per_pair"] = [off / on for on, off in zip(out["continuous"]["on"], out["continuous"]["off"])]
    summary["bursty_ratio_per_pair"] = [on / off for on, off in zip(out["bursty"]["on"], out["bursty"]["off"])]
    summary["continuous_ring_only_per_pair"] = [off / on for on, off in zip(out["continuous"]["ring only"],
                                                                            out["continuous"]["off"])]
    summary["recorder_thread_cpu_share"] = statistics.median(thread_share) if thread_share else None
    summary["iterations_per_s"] = statistics.median(engine_iterations) if engine_iterations else None
    print("AB " + json.dumps(summary))


def _thread_cpu_ns(flight) -> int:
    """The CPU time the recorder's thread has run (``/proc/self/task/<tid>/schedstat``, ns); 0 without one."""
    if flight is None or flight._thread.native_id is None:
        return 0
    try:
        with open(f"/proc/self/task/{flight._thread.native_id}/schedstat") as f:
            return int(f.read().split()[0])
    except OSError:
        return 0


if __name__ == "__main__":
    main()
