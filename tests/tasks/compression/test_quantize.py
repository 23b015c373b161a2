"""Dynamic int8 quantisation: close logits, every linear layer converted, evaluation through sesame-eval."""

import json
import sys

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.saved.int8 import count_quantized_linear, is_quantized
from sesame.tasks.compression.quantize import quantize_checkpoint
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train
from tests import preloaded_commands as preloaded

# Every linear layer converted, the outputs close to the float model's and not equal to them, for every
# task's trained run: tests/conformance/test_compression.py.


@pytest.fixture(scope="module")
def glue_run(make_cfg, tmp_path_factory):
    run = tmp_path_factory.mktemp("glue_run")
    metrics = train(RunSettings.from_config(make_cfg("data.max_eval_examples=64")), run)
    return run, metrics


def test_a_quantized_checkpoint_evaluates_through_sesame_eval(make_cfg, glue_run, tmp_path):
    run, trained = glue_run
    report = quantize_checkpoint(run, tmp_path / "int8")
    assert report["quantized_linear_layers"] > 0 and report["float_linear_layers"] == 0
    int8 = load_trained(tmp_path / "int8")
    module, cfg = int8.module, int8.cfg
    assert is_quantized(cfg) and count_quantized_linear(module)[1] == 0
    got = evaluate(RunSettings.from_config(make_cfg("data.max_eval_examples=64", f"++model={tmp_path / 'int8'}")), tmp_path / "eval")
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text()) == got
    assert abs(got["val_accuracy"] - trained["val_accuracy"]) <= 0.1
    float_preds = (run / "val_SST-2.tsv").read_text().splitlines()
    int8_preds = (tmp_path / "eval" / "val_SST-2.tsv").read_text().splitlines()
    assert len(int8_preds) == len(float_preds) == 65  # header + 64 predictions
    assert sum(a == b for a, b in zip(float_preds, int8_preds)) >= 0.9 * len(float_preds)


def test_the_console_script_quantizes_and_refuses_twice(glue_run, tmp_path):
    run, _ = glue_run
    cmd = [sys.executable, "-m", "sesame.tasks.cli.compress", "quantize"]
    out = preloaded.run([*cmd, str(run), str(tmp_path / "q")], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["method"] == "dynamic_int8" and (tmp_path / "q" / "checkpoints" / "best.ckpt").is_file()
    assert json.loads((tmp_path / "q" / "compression.json").read_text()) == report
    again = preloaded.run([*cmd, str(tmp_path / "q"), str(tmp_path / "qq")], capture_output=True, text=True)
    assert again.returncode == 2 and "already quantised" in again.stderr


@pytest.mark.parametrize(("task", "files"), [("ner", ["val_predictions.conll"]), ("squad_v1", ["predictions.json", "nbest_predictions.json"])])
def test_quantized_ner_and_qa_checkpoints_evaluate_and_predict(make_cfg, tmp_path, task, files):
    overrides = (f"task={task}", "data.max_eval_examples=16")
    trained = train(RunSettings.from_config(make_cfg(*overrides)), tmp_path / "run")
    quantize_checkpoint(tmp_path / "run", tmp_path / "int8")
    got = evaluate(RunSettings.from_config(make_cfg(*overrides, f"++model={tmp_path / 'int8'}")), tmp_path / "eval")
    scale = 100 if task == "squad_v1" else 1  # SQuAD's F1 is in percent
    assert abs(got["val_f1"] - trained["val_f1"]) <= 0.2 * scale
    for name in files:
        assert (tmp_path / "eval" / name).stat().st_size > 0
