"""The user-visible features the patches serve: the rows of docs/compatibility.md.

A patch names its feature from here, so two patches that serve one feature
cannot spell it two ways (a typo would otherwise add a row to the table and
leave the feature marked available with half its patches).
"""

STEP_WINDOWS = "rlprof step windows and global-step folders"
STEP_WINDOWS_ON_ASCEND = STEP_WINDOWS + " on Ascend"
HTTP_ROUTES = "rlprof HTTP profiling routes"
CONFIG_KEYS = "rlprof profiler-config keys"  # vLLM's --profiler-config, extended
ENV_CONFIG = "RLPROF_PROFILER_CONFIG as the whole configuration (releases before --profiler-config)"
SERVER_ARGUMENT = "the --profiler-config server argument"  # SGLang
IN_PROCESS_CALLS = "rlprof sessions from SGLang's in-process calls"
# vLLM's "profiler": "cuda" where the platform has no CUDA (NVTX ranges only: backends.cuda_profiler)
CUDA_PROFILER_ANYWHERE = "the cuda profiler's NVTX ranges on a platform without CUDA"
TRAINER_STEPS = "global-step folders from the trainer's weights version (verl)"
RL_PHASES = "RL phases timed per step and rank (weight updates, cache resets, pause and resume, sleep and wake-up)"
LONGEST_REQUESTS = "the requests that held each step (the longest, timed by the frontend)"
