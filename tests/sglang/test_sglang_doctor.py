"""rlprof doctor where SGLang is installed (run in .venv-sglang; the vLLM case is in tests/unit)."""

import pytest

from tests.unit.test_doctor import check_no_import_answers_from_the_declarations

pytest.importorskip("sglang")


def test_no_import_answers_from_the_declarations_sglang(capsys):
    check_no_import_answers_from_the_declarations("sglang", capsys)
