"""Model folders sesame must refuse without running anything in them, each in one error line with exit 2: a config
naming a model type transformers does not know, a config that needs the folder's own code (auto_map), and pickled
weights that name a code global. Before, each ended in a traceback and "internal error"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train

RAN = "sesame_model_folder_code_ran"


class RunsCode:
    """Pickled, it calls os.system when unpickled by an unsafe loader."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _folder(tiny_bert_dir: Path, tmp_path: Path, case: str) -> Path:
    folder = tmp_path / case
    shutil.copytree(tiny_bert_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    marker = tmp_path / RAN
    if case == "unknown-model-type":
        config["model_type"] = "notamodel"
    elif case == "custom-code":
        config.update(model_type="custommodel", auto_map={"AutoConfig": "modeling_custom.CustomConfig",
                                                          "AutoModel": "modeling_custom.CustomModel"})
        (folder / "modeling_custom.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    elif case == "pickled-code":
        from safetensors.torch import load_file

        weights = load_file(folder / "model.safetensors")
        (folder / "model.safetensors").unlink()
        torch.save({**weights, "payload": RunsCode(marker)}, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


CASES = [
    ("unknown-model-type", ["model type 'notamodel'", "correct model_type"]),
    ("custom-code", ["auto_map", "never runs"]),
    ("pickled-code", ["would run code (posix.system)", "safetensors"]),
]


@pytest.mark.parametrize("case, words", CASES, ids=[c[0] for c in CASES])
def test_a_model_folder_that_cannot_load_safely_is_one_error_line_and_runs_nothing(make_cfg, tiny_bert_dir, tmp_path,
                                                                                   capsys, case, words):
    folder = _folder(tiny_bert_dir, tmp_path, case)
    for command in (lambda: train(RunSettings.from_config(make_cfg(f"encoder.name_or_path={folder}")), tmp_path / "run"),
                    lambda: evaluate(RunSettings.from_config(make_cfg(f"++model={folder}")), tmp_path / "eval")):
        with pytest.raises(SystemExit) as ended, user_errors_are_messages():
            command()
        err = capsys.readouterr().err
        assert ended.value.code == 2, err[-2000:]
        assert f"error: encoder.name_or_path={folder}" in err and all(w in err for w in words), err[-2000:]
        assert "Traceback" not in err and "internal error" not in err
    assert not (tmp_path / RAN).exists()
