"""Multiple-choice exports: the ONNX graph (choices axis dynamic) and its int8 version give sesame's
predictions; a pooling that does not map is refused. transformers' AutoModelForMultipleChoice giving
sesame's logits on dev batches is every task's check (tests/conformance/test_export.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.export.hf import export_hf
from sesame.tasks.export.onnx import export_onnx
from sesame.tasks.inference.predictor import Predictor
from sesame.tasks.runs.runner import train
from tests.tasks.multiple_choice.conftest import RUN


def test_onnx_and_int8_graphs_take_any_number_of_choices(choice_run, tmp_path: Path):
    report = export_onnx(choice_run, tmp_path / "onnx", int8=True)
    assert report["max_abs_diff"] < 1e-4 and report["int8_agreement"] is not None
    inputs = [{"context": "He turns the key.", "endings": ["It starts.", "It sings."]},
              {"context": "She opens the box.", "endings": ["a cat.", "the sky.", "a hat.", "a dog.", "a shoe."]}]
    ours = Predictor.from_run(choice_run)(inputs)
    theirs = Predictor.from_run(tmp_path / "onnx")(inputs)
    for a, b in zip(ours, theirs, strict=True):
        assert a["choice"] == b["choice"] and a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-4)


def test_mean_pooling_is_refused_by_transformers_export_with_the_reason(make_cfg, tmp_path: Path):
    train(RunSettings.from_config(make_cfg(*RUN, "pooling=mean", "trainer.max_steps=1")), tmp_path / "run")
    with pytest.raises(ConfigError, match=r"pooling=mean: .*ForMultipleChoice scores each pair from its pooler"):
        export_hf(tmp_path / "run", tmp_path / "hf")
