"""A long run's worth of profiling (``tests/helpers/soak.py``): 100 global steps back to back on each engine, with
sampled and with exact Python stacks, each on a fresh server under steady streaming traffic. Every step ``done``,
the server healthy and every request answered, its process tree's memory after step 100 within 64 MB of after
step 10, no crash and no ``EINTR`` in its log. About 20 minutes: ``make test-extended``; CI runs the short
variants on the TP=1 servers (``test_vllm_server_tp1.py``, ``test_sglang_server_tp1.py``, 10 steps each)."""

import pytest

from tests.helpers.soak import on_fresh_server, summary, verdict

pytestmark = pytest.mark.extended


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("stacks", ["sampled", "exact"])
def test_a_hundred_steps_in_a_row_leave_the_server_as_it_was(tmp_path, engine, stacks):
    result = on_fresh_server(engine, stacks, 100, 0.3, tmp_path)
    print(engine, stacks, summary(result))
    assert not verdict(result), verdict(result)
