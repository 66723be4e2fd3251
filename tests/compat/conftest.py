"""The contract modules run only in a child interpreter that has the
release under test first on ``sys.path`` (see test_releases.py)."""

import os

ENGINE = os.environ.get("RLPROF_CONTRACT_ENGINE")
collect_ignore = ["contract_vllm.py", "contract_sglang.py"] if not ENGINE else []

if ENGINE:
    from tests.compat.release_env import adapt

    adapt(ENGINE)
