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


#: A bad setting, as each console script that reads a run config is given one.
BAD_SETTINGS = {
    "sesame.tasks.cli.train": ("sesame-train", ["finetune.head_lr=-1"], "finetune.head_lr=-1.0: must be positive"),
    "sesame.tasks.cli.eval": ("sesame-eval", ["model=somewhere", "data.max_seq_length=0"], "data.max_seq_length=0"),
}

ERROR_PROBE = """
import os, runpy, sys
os.chdir({folder!r})
sys.argv = [{prog!r}, *{args!r}, "hydra.run.dir=run"]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit as stop:
    print("EXIT", stop.code)
print("IMPORTED", *sorted(name for name in {heavy!r} if name in sys.modules))
"""


@pytest.mark.parametrize("module", sorted(BAD_SETTINGS))
def test_a_bad_setting_is_reported_before_torch_is_imported(module, tmp_path):
    """The run's settings are read once, where the command starts, by plain-data classes: a bad one ends the
    command (one error line, exit 2, no folder left) in the time --help takes, with no heavy import."""
    prog, args, message = BAD_SETTINGS[module]
    done = subprocess.run([sys.executable, "-c", ERROR_PROBE.format(folder=str(tmp_path), prog=prog, args=args,
                                                                     module=module, heavy=HEAVY)],
                          capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert lines[-2:] == ["EXIT 2", "IMPORTED"], done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert not (tmp_path / "run").exists(), "the run folder Hydra made was left behind"
