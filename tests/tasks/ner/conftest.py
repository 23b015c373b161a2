"""Fixtures of the NER tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """``write_file(name, text)``: a UTF-8 file in the test's ``tmp_path``."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
