from rlprof_plugins.session.window import StepWindow


def recorded(window: StepWindow, iterations: int) -> list[int]:
    return [i for i in range(iterations) if window.records(i)]


def test_half_open_window_records_exactly_end_minus_start():
    w = StepWindow(2, 6)
    assert recorded(w, 20) == [2, 3, 4, 5]
    assert w.length == 4
    assert w.starts_at(2) and not w.starts_at(1)
    assert w.over_after(5) and not w.over_after(4)


def test_open_window_never_ends():
    w = StepWindow(3, None)
    assert recorded(w, 6) == [3, 4, 5]
    assert not w.over_after(10_000)
    assert w.length is None
