"""tests/conftest.py ``require``: a missing optional package skips a test locally and fails it in CI."""

import pytest

from tests.conftest import require

MISSING = "sesame_no_such_optional_package"


def test_a_missing_package_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require(MISSING)


def test_a_missing_package_fails_in_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    try:
        require(MISSING)
    except pytest.skip.Exception:  # a BaseException: pytest.raises would let it skip this test
        pytest.fail("require() skipped in CI instead of failing")
    except ModuleNotFoundError as error:
        assert MISSING in str(error)
    else:
        pytest.fail("require() imported a package that does not exist")


@pytest.mark.parametrize("ci", [None, "1"])
def test_an_installed_package_is_returned(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert require("json").dumps([1]) == "[1]"
