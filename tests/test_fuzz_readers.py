"""Fuzzed data files: whatever bytes a user's file holds, every reader either reads it or raises a
``UserError`` (the one-line message of exit 2), never an internal error. Each case starts from a real
file of the task's format (a few lines of a shipped slice) and mutates it: characters deleted, replaced
or inserted (control characters, quotes, tabs, commas, braces, invalid UTF-8, other scripts), lines
duplicated, dropped or cut short (``tests/fuzz_targets.py``). Derandomised, so CI sees the same cases
every run; ``benchmarks/fuzz_readers.py`` runs thousands of random ones."""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from tests.fuzz_targets import FILE_TARGETS, READ, REFUSED  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("target", FILE_TARGETS, ids=[t.name for t in FILE_TARGETS])
@FUZZ
@given(data=st.data())
def test_a_data_file_is_read_or_refused(tmp_path_factory, target, data):
    example = data.draw(target.strategy)
    assert target.check(tmp_path_factory.mktemp("f"), example) in (READ, REFUSED)
