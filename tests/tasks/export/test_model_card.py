"""The model card says what the export is: how long the run trained, which checkpoint was exported, the
temperature only where it is applied; and every code snippet it prints runs, as printed, against the
exported folder (from the folder's parent, as a reader who just exported it would)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.export.hf import export_hf
from sesame.tasks.qa.export import QuestionAnsweringExport
from sesame.tasks.runs.runner import train
from tests.conftest import require

SNIPPET = re.compile(r"```(python|bash)\n(.*?)```", re.DOTALL)


def run_snippets(folder: Path) -> list[str]:
    """Run each code block of ``folder/README.md`` from the folder's parent (but the export command of
    "How it was made"); their outputs."""
    card = (folder / "README.md").read_text(encoding="utf-8")
    code = SNIPPET.findall(card.split("## How it was made")[0])
    assert code, "the model card shows no code"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    outputs = []
    for lang, text in code:
        argv = [sys.executable, "-c", text] if lang == "python" else ["bash", "-euo", "pipefail", "-c", text]
        done = subprocess.run(argv, cwd=folder.parent, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{lang} snippet failed:\n{text}\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"{lang} snippet printed nothing:\n{text}"
        outputs.append(done.stdout)
    return outputs


@pytest.mark.parametrize("name", ["glue", "qa", "ner"])
def test_every_snippet_of_a_hugging_face_card_runs(trained_run, tmp_path: Path, name: str) -> None:
    folder = tmp_path / f"{name}-hf"
    export_hf(trained_run(name), folder)
    outputs = run_snippets(folder)
    if name == "qa":  # the answer is a span of the example's context
        answer = outputs[0].strip()
        assert answer and answer in QuestionAnsweringExport.example["context"]


def test_every_snippet_of_an_onnx_card_runs(trained_run, tmp_path: Path) -> None:
    require("onnxruntime")
    require("onnxscript")
    from sesame.tasks.export.onnx import export_onnx

    folder = tmp_path / "glue-onnx"
    export_onnx(trained_run("glue"), folder, exporter="torchscript")
    bash, python = run_snippets(folder)
    assert json.loads(bash.splitlines()[0])["label"] in {"0", "1"}
    assert "label" in python


def test_a_short_calibrated_run_card_says_how_far_it_trained_and_what_it_applies(make_cfg, tmp_path: Path) -> None:
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg("pooling=pooler", "calibrate=true", "trainer.max_steps=3")), run)  # of 4 a epoch
    export_hf(run, tmp_path / "best")
    card = (tmp_path / "best" / "README.md").read_text()
    assert "| trained | 3 optimiser steps, 4 per epoch: 0.75 epochs |" in card
    assert ("| settings | trainer.max_epochs=1, trainer.max_steps=3, trainer.limit_train_batches=4, "
            "data.max_train_examples=null, data.max_eval_examples=null, calibrate=true |") in card
    assert "| exported checkpoint | best.ckpt (step 3, the run's best validation" in card
    assert f"| calibration | temperature {metrics['val_temperature']:.6g} applied" in card
    assert f"| val_temperature | {metrics['val_temperature']:.6g} |" in card
    assert "not of the exported checkpoint" not in card

    # last.ckpt of the same run (also step 3) holds no temperature: the card does not claim one.
    export_hf(run / "checkpoints" / "last.ckpt", tmp_path / "last")
    card = (tmp_path / "last" / "README.md").read_text()
    assert float(torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]["calibration.temperature"]) == 1
    assert "| exported checkpoint | last.ckpt (step 3" in card
    assert "none applied" in card and "val_temperature" not in card
