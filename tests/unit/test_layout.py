import os

import pytest

from rlprof_plugins.errors import RequestError
from rlprof_plugins.store.layout import contained, session_dir
from rlprof_plugins.atomic_files import write_text_atomic
from rlprof_plugins.trace.format.naming import trace_file


def test_without_global_step_layout_is_native(tmp_path):
    assert session_dir(tmp_path, None) == tmp_path.resolve()


def test_global_step_folder(tmp_path):
    assert session_dir(tmp_path, 37) == tmp_path.resolve() / "global_step_37"


@pytest.mark.parametrize("bad", [-1, "1", "../x", 1.0, True])
def test_bad_global_step(tmp_path, bad):
    with pytest.raises(RequestError):
        session_dir(tmp_path, bad)


def test_names_that_escape_are_refused(tmp_path):
    for name in ("..", "../x", "/etc", "a/../.."):
        with pytest.raises(RequestError):
            contained(tmp_path.resolve(), name, field="x")


def test_symlinked_step_folder_pointing_outside_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "global_step_3")
    with pytest.raises(RequestError):
        session_dir(root, 3)


def test_trace_name_matches_torch_handler():
    assert trace_file("rank0", 12, gzip=True) == "rank0.12.pt.trace.json.gz"
    assert trace_file("p_rank1", 12, gzip=False) == "p_rank1.12.pt.trace.json"


def test_atomic_write_leaves_no_temporary(tmp_path):
    write_text_atomic(tmp_path / "a.txt", "hello")
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "hello"
