"""Console scripts start fast: ``--help`` imports neither torch nor Lightning nor transformers (they take
seconds to import; each command imports them once it runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Packages a --help must not import.
HEAVY = ("torch", "lightning", "transformers", "datasets")

PROBE = """
import runpy, sys
sys.argv = [{prog!r}, "--help"]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit:
    pass
print("IMPORTED", *sorted(name for name in {heavy!r} if name in sys.modules))
"""


@pytest.mark.parametrize("prog, module", [
    ("sesame-train", "sesame.tasks.cli.train"),
    ("sesame-eval", "sesame.tasks.cli.eval"),
    ("sesame-predict", "sesame.tasks.cli.predict"),
])
def test_help_imports_no_torch(prog, module):
    out = subprocess.run([sys.executable, "-c", PROBE.format(prog=prog, module=module, heavy=HEAVY)],
                         capture_output=True, text=True, check=True).stdout
    assert "usage" in out.lower() or prog in out  # the help was printed
    assert out.strip().splitlines()[-1].split() == ["IMPORTED"], out.strip().splitlines()[-1]
