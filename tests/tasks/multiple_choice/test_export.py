"""Multiple-choice exports: transformers' AutoModelForMultipleChoice gives sesame's logits; the ONNX graph
(choices axis dynamic) and its int8 version give them too; a pooling that does not map is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.export.hf import export_hf
from sesame.tasks.export.onnx import export_onnx
from sesame.tasks.inference.predictor import Predictor
from sesame.tasks.multiple_choice.data import choice_collator, encode_questions
from sesame.tasks.multiple_choice.readers import read_choices
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.checkpoints import load_trained
from tests.tasks.multiple_choice.conftest import RUN


def _dev_batches(trained, size: int = 6) -> list[dict]:
    questions = read_choices(shipped_path("multiple_choice/dev.csv"))
    collate = choice_collator(trained.tokenizer())
    return [collate(encode_questions(trained.tokenizer(), questions[i: i + size], 64)) for i in range(0, len(questions), size)]


def test_transformers_multiple_choice_model_gives_sesames_logits(choice_run, tmp_path: Path):
    from transformers import AutoModelForMultipleChoice

    report = export_hf(choice_run, tmp_path / "hf")
    assert report["architecture"] == "BertForMultipleChoice" and report["max_abs_diff"] < 1e-5
    hf = AutoModelForMultipleChoice.from_pretrained(tmp_path / "hf").eval()
    trained = load_trained(choice_run)
    with torch.inference_mode():
        for batch in _dev_batches(trained):
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
            torch.testing.assert_close(hf(**inputs).logits, trained.module.eval()(batch), atol=1e-5, rtol=0)
    assert "AutoModelForMultipleChoice" in (tmp_path / "hf" / "README.md").read_text()


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
    train(make_cfg(*RUN, "pooling=mean", "trainer.max_steps=1"), tmp_path / "run")
    with pytest.raises(ConfigError, match=r"pooling=mean: .*ForMultipleChoice scores each pair from its pooler"):
        export_hf(tmp_path / "run", tmp_path / "hf")
