"""Every task's reader refuses a damaged training file as ``sesame-train`` ends on a user error: exit code
2, one ``error:`` line naming the file (and the damaged line, where the reader counts lines), no
traceback, and the run folder Hydra made for the command taken away again. The damage is made from the
task's own training file, whatever its format; a task may give the bad file itself (``bad_lines:``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.runs.failed_start import no_folder_left_by_a_failed_start
from sesame.tasks.runs.runner import train
from tests.conformance.specs import CORRUPTIONS, SPECS

GARBAGE = "this line is no record of any data file"


def corrupted(text: str, how: str) -> tuple[str, int]:
    """``text`` damaged in its middle, and the (1-based) line of the damage: a line of garbage put
    before the middle line, or the file cut in the middle of the first line from there that has text."""
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    if how == "garbage_line":
        return "".join([*lines[:middle], GARBAGE + "\n", *lines[middle:]]), middle + 1
    assert how == "truncated"
    cut = next(i for i in range(middle, len(lines)) if len(lines[i].strip()) > 1)
    line = lines[cut].rstrip("\r\n")
    return "".join(lines[:cut]) + line[: len(line) // 2], cut + 1


@pytest.mark.parametrize("how", CORRUPTIONS)
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_a_damaged_training_file_ends_sesame_train_with_exit_2_and_one_line_naming_it(spec, how, task_cfg, tmp_path,
                                                                                       capsys):
    source = Path(task_cfg(spec).data.train_file)
    if how in spec.bad_lines:
        text, line = spec.bad_lines[how], None
    else:
        text, line = corrupted(source.read_text(encoding="utf-8"), how)
    bad = tmp_path / f"damaged_{source.name}"  # the suffix says the format
    bad.write_text(text, encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()  # as Hydra makes it before the command runs
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop, user_errors_are_messages(), no_folder_left_by_a_failed_start(run):
        train(RunSettings.from_config(task_cfg(spec, f"data.train_file={bad}")), run)  # as sesame-train runs it (tasks/cli/train.py)
    err = capsys.readouterr().err
    assert stop.value.code == 2, err[-3000:]
    errors = [row for row in err.splitlines() if row.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert str(bad) in errors[0], errors[0]
    named = re.search(re.escape(str(bad)) + r":(\d+)", errors[0])
    if named and line is not None:
        assert int(named.group(1)) == line, errors[0]
    assert not run.exists()
