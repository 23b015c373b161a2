"""drop-layers: layer selection, the student encoder folder, and the student task model with the teacher's head."""

import json
import sys

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.compression.drop_layers import drop_layers, select_layers
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train
from tests.conftest import prediction_accuracy, read_conll_predictions
from tests import preloaded_commands as preloaded

PREDICTIONS = {"glue": "val_SST-2.tsv", "ner": "val_predictions.conll"}
MAIN_METRIC = {"glue": "val_accuracy", "ner": "val_f1"}


def _score_of_prediction_file(task, folder):
    """The main metric recomputed from the written predictions, without sesame's scoring code."""
    if task == "glue":
        return prediction_accuracy(folder / PREDICTIONS[task])
    from seqeval.metrics import f1_score

    _, gold, pred = read_conll_predictions(folder / PREDICTIONS[task])
    return f1_score(gold, pred)


@pytest.mark.parametrize(
    ("num_layers", "keep", "k", "want"),
    [
        (6, "every_other", None, [1, 3, 5]),
        (12, "every_other", 6, [1, 3, 5, 7, 9, 11]),
        (5, "every_other", None, [0, 2, 4]),
        (6, "bottom", 3, [0, 1, 2]),
        (6, "top", 2, [4, 5]),
        (6, "4,0,2", None, [0, 2, 4]),
    ],
)
def test_select_layers(num_layers, keep, k, want):
    assert select_layers(num_layers, keep, k) == want


@pytest.mark.parametrize(("keep", "k"), [("bottom", None), ("top", 7), ("0,6", None), ("every_other", 2), ("a,b", None), ("0,1", 3)])
def test_bad_selections_are_errors(keep, k):
    with pytest.raises(ValueError):
        select_layers(6, keep, k)


def _layer_weights(model, index):
    prefix = f"encoder.layer.{index}."
    return {k[len(prefix):]: v for k, v in model.state_dict().items() if k.startswith(prefix)}


def test_the_student_folder_loads_with_k_layers_and_the_kept_weights(tiny_bert_dir, tmp_path):
    report = drop_layers(tiny_bert_dir, tmp_path / "student", keep="0,3")
    assert report["kept_layers"] == [0, 3] and "checkpoint" not in report
    teacher = AutoModel.from_pretrained(tiny_bert_dir)
    student = AutoModel.from_pretrained(tmp_path / "student" / "encoder")
    assert student.config.num_hidden_layers == 2 and len(student.encoder.layer) == 2
    for new, old in enumerate([0, 3]):
        want, got = _layer_weights(teacher, old), _layer_weights(student, new)
        assert want.keys() == got.keys() and want
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
    # Everything outside the layer stack is unchanged.
    for name, value in teacher.state_dict().items():
        if not name.startswith("encoder.layer."):
            torch.testing.assert_close(student.state_dict()[name], value, rtol=0, atol=0)
    assert AutoTokenizer.from_pretrained(tmp_path / "student" / "encoder").get_vocab() == AutoTokenizer.from_pretrained(tiny_bert_dir).get_vocab()


@pytest.mark.parametrize("task", ["glue", "ner"])
def test_from_a_run_the_student_takes_the_fine_tuned_layers_and_the_head(make_cfg, tmp_path, task):
    run = tmp_path / "run"
    trained = train(RunSettings.from_config(make_cfg(f"task={task}", "data.max_eval_examples=32")), run)
    teacher = load_trained(run).module
    out = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.compress", "drop-layers", str(run), str(tmp_path / "s"), "--keep", "bottom", "--num-layers", "3"],
        capture_output=True, text=True, check=True,
    )
    report = json.loads(out.stdout)
    assert report["kept_layers"] == [0, 1, 2] and report["source_num_layers"] == 4
    student_model = load_trained(tmp_path / "s")
    student, cfg = student_model.module, student_model.cfg
    assert cfg["encoder"]["name_or_path"] == str((tmp_path / "s" / "encoder").resolve())
    assert student.encoder.num_hidden_states == 4
    # The fine-tuned (not the pretrained) layer 2, and the teacher's head.
    teacher_sd, student_sd = teacher.state_dict(), student.state_dict()
    key = "encoder.model.encoder.layer.2.output.dense.weight"
    torch.testing.assert_close(student_sd[key], teacher_sd[key], rtol=0, atol=0)
    heads = [k for k in teacher_sd if not k.startswith("encoder.")]
    assert heads
    for k in heads:
        torch.testing.assert_close(student_sd[k], teacher_sd[k], rtol=0, atol=0)
    metric = MAIN_METRIC[task]
    metrics = evaluate(RunSettings.from_config(make_cfg(f"task={task}", "data.max_eval_examples=32", f"++model={tmp_path / 's'}")), tmp_path / "eval")
    assert metrics[metric] == pytest.approx(_score_of_prediction_file(task, tmp_path / "eval"), rel=1e-6)
    # Keeping every layer gives back the fine-tuned model: its run's predictions and metrics exactly.
    drop_layers(run, tmp_path / "all", keep="0,1,2,3")
    same = evaluate(RunSettings.from_config(make_cfg(f"task={task}", "data.max_eval_examples=32", f"++model={tmp_path / 'all'}")), tmp_path / "eval_all")
    assert (tmp_path / "eval_all" / PREDICTIONS[task]).read_text() == (run / PREDICTIONS[task]).read_text()
    assert same[metric] == trained[metric]
    assert same["val_loss"] == pytest.approx(trained["val_loss"], rel=1e-6)  # the predictions may all be one class


def test_a_head_that_does_not_fit_is_a_clear_error(make_cfg, tmp_path):
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg("fusion=scalar_mix", "data.max_eval_examples=32")), run)  # one weight per teacher layer
    with pytest.raises(ValueError, match="--encoder-only"):
        drop_layers(run, tmp_path / "s", keep="every_other")
    report = drop_layers(run, tmp_path / "s2", keep="every_other", encoder_only=True)
    assert report["kept_layers"] == [1, 3] and AutoModel.from_pretrained(tmp_path / "s2" / "encoder").config.num_hidden_layers == 2


def test_a_pooler_pooled_run_gives_a_student_that_starts_from_its_trained_pooler_and_trains(make_cfg, tmp_path):
    # pooling=pooler keeps the trained pooler in the head (the encoder's is dropped); the student's head is
    # built from its encoder's pooler, so the student encoder must carry the teacher's trained one.
    tiny = ["data.max_train_examples=16", "data.max_eval_examples=16"]
    train(RunSettings.from_config(make_cfg("pooling=pooler", *tiny)), tmp_path / "teacher")
    drop_layers(tmp_path / "teacher", tmp_path / "student", keep="bottom", num_keep=2)
    teacher = load_trained(tmp_path / "teacher").module
    student_encoder = AutoModel.from_pretrained(tmp_path / "student" / "encoder")
    assert torch.equal(student_encoder.pooler.dense.weight, teacher.pooling.dense.weight)
    student = load_trained(tmp_path / "student").module
    assert torch.equal(student.pooling.dense.weight, teacher.pooling.dense.weight)
    metrics = train(RunSettings.from_config(make_cfg("pooling=pooler", *tiny, f"encoder.name_or_path={tmp_path / 'student' / 'encoder'}",
                             f"distill.teacher={tmp_path / 'teacher'}")), tmp_path / "distilled")
    assert "val_accuracy" in metrics
