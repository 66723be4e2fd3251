"""Kineto's writer in a forked child (``backends.forked_export``): the same
file as an in-process write, the writing process's other threads keep
running, and any failure of the child falls back to writing in-process."""

import json
import logging
import os
import threading

import torch

from rlprof_plugins.backends.forked_export import IN_PROCESS_ENV, export_chrome_trace


def recorded(iterations: int = 60) -> torch.profiler.profile:
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True)
    prof.start()
    x = torch.ones(8, 8)
    for i in range(iterations):
        with torch.profiler.record_function(f"rlprof::iteration {i}"):
            for _ in range(20):
                x = torch.relu(x @ x / 8)
    prof.stop()
    return prof


def events(path) -> list:
    return json.loads(path.read_text())["traceEvents"]


def test_the_forked_write_is_the_in_process_write_and_leaves_other_threads_running(tmp_path):
    prof = recorded()
    ticks, done = [], threading.Event()

    def beside():  # a thread of the writing process, as the engine thread is
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    thread = threading.Thread(target=beside)
    thread.start()
    before = len(ticks)
    try:
        assert export_chrome_trace(prof, tmp_path / "forked.json") == "fork"
        during = len(ticks) - before
    finally:
        done.set()
        thread.join()
    prof.export_chrome_trace(str(tmp_path / "here.json"))
    forked, here = events(tmp_path / "forked.json"), events(tmp_path / "here.json")
    assert len(forked) > 100 and forked == here
    assert during >= 5, during  # the writer waited without the GIL


class ChildFails:
    """The real profile, whose write fails in any process but the one that recorded."""

    def __init__(self, prof):
        self._prof, self._pid = prof, os.getpid()

    def export_chrome_trace(self, path: str) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError("no writing in a child")
        self._prof.export_chrome_trace(path)


def test_a_failed_child_falls_back_to_writing_here(tmp_path, caplog):
    prof = recorded(5)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert export_chrome_trace(ChildFails(prof), tmp_path / "t.json") == "in-process"
    assert events(tmp_path / "t.json") and "forked trace writer ended with status 1" in caplog.text


def test_in_process_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv(IN_PROCESS_ENV, "1")
    assert export_chrome_trace(recorded(3), tmp_path / "t.json") == "in-process"
    assert events(tmp_path / "t.json")
