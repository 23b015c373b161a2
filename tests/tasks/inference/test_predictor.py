"""The task-independent predictor (tasks/inference/predictor.py): which predictor and runner a model gets, input
order kept whatever the chunks and batches, errors that name the input line, the field and the fix.

Also the tiny trained runs every predictor test uses (:func:`trained_run`): trained once per test
session, whichever test file asks first (each takes one to two seconds).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.inference.predictor import ModelRunner, Predictor, TorchRunner, runner_for
from sesame.tasks.runs.runner import train
from tests.conftest import SST2_DEV

#: Every evaluation batch runs (trainer=debug stops after 2), so the prediction files cover the dev slice.
ALL_EVAL = ["trainer.limit_val_batches=null", "trainer.limit_test_batches=null"]
MULTILABEL = Path(__file__).resolve().parents[2] / "fixtures" / "multilabel"
QA = ["data.max_seq_length=96", "data.doc_stride=32", "data.batch_size=8", "data.eval_batch_size=16",
      "data.max_train_examples=32", "data.drop_train_overlap=false"]
RUNS: dict[str, list[str]] = {
    "sst2": ["data.max_eval_examples=40", "data.eval_batch_size=16", *ALL_EVAL],
    "stsb": ["data=stsb", "data.train_file={stsb}", "data.validation_file={stsb}", "data.eval_batch_size=8", *ALL_EVAL],
    # Synthetic multi-label reviews (tests/fixtures/multilabel): per-label thresholds tuned on dev, saved with the model.
    "multilabel": ["task=text_classification", f"data.train_file={MULTILABEL / 'train.tsv'}",
                   f"data.validation_file={MULTILABEL / 'dev.tsv'}", "data.text_column=text", "data.label_column=labels",
                   "data.multi_label=true", "data.metrics=[f1_micro,f1_macro]", "data.max_train_examples=64",
                   "data.eval_batch_size=16", *ALL_EVAL],
    # Dev contexts are longer than 96 tokens: several windows a question.
    "squad_v1": ["task=squad_v1", "data=squad_v1_slice", "data.train_file=${shipped:squad_v1/dev.slice.json}",
                 "data.max_eval_examples=12", *QA, *ALL_EVAL],
    "squad_v2": ["task=squad_v2", "data=squad_v2", "data.train_file=${shipped:squad_v2/dev.slice.json}",
                 "data.validation_file=${shipped:squad_v2/dev.slice.json}", "data.max_eval_examples=12", *QA,
                 "data.max_seq_length=192", "data.doc_stride=64", *ALL_EVAL],  # some questions are 70+ tiny-vocabulary tokens
    # Some dev sentences need two windows of 24 tokens.
    "ner": ["task=ner", "data.max_train_examples=48", "data.max_eval_examples=24", "data.batch_size=8",
            "data.eval_batch_size=16", "data.max_seq_length=24", *ALL_EVAL],
    "ner_crf": ["task=ner", "head.crf=true", "data.max_train_examples=48", "data.max_eval_examples=24",
                "data.batch_size=8", "data.eval_batch_size=16", "data.max_seq_length=24", *ALL_EVAL],
    # The shipped SWAG-format sample.
    "multiple_choice": ["task=multiple_choice", "trainer.max_steps=8", "trainer.limit_train_batches=4", "finetune.head_lr=1e-2"],
}
_TRAINED: dict[str, Path] = {}


def _stsb_file(folder: Path) -> Path:
    """30 STS-B sentence pairs with scores 0-4 (the layout of the GLUE TSV)."""
    path = folder / "stsb.tsv"
    words = ["running", "eating", "here", "away", "home", "up"] * 5
    rows = [f"{i}\tg\tf\t2012\t{i}\tn\tn\ta man is {w}\ta man {w} {'now ' * (i % 4)}\t{i % 5}.0" for i, w in enumerate(words)]
    path.write_text("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                    + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def trained_run(name: str, make_cfg: Callable, tmp_path_factory: pytest.TempPathFactory, encoder: Path | None = None) -> Path:
    """The run folder of the tiny model ``name`` of :data:`RUNS`, trained on first use in this session
    (on the tiny encoder in the folder ``encoder`` instead of the default one when given)."""
    key = name if encoder is None else f"{name}@{encoder}"
    if key not in _TRAINED:
        folder = tmp_path_factory.mktemp(f"predict_{name}")
        overrides = [o.replace("{stsb}", str(_stsb_file(folder))) if "{stsb}" in o else o for o in RUNS[name]]
        if encoder is None:
            cfg = make_cfg(*overrides)
        else:
            cfg = make_cfg(*overrides, f"encoder.name_or_path={encoder}", tiny=False)
        train(RunSettings.from_config(cfg), folder / "run")
        _TRAINED[key] = folder / "run"
    return _TRAINED[key]


def run_overrides(name: str) -> list[str]:
    """The overrides a run of :data:`RUNS` was trained with (for ``sesame-eval`` on the same data)."""
    assert "{stsb}" not in " ".join(RUNS[name]), "the STS-B run's data file is in its folder"
    return list(RUNS[name])


def sst2_texts(n: int = 40) -> list[str]:
    """The first ``n`` sentences of the shipped SST-2 dev set (the run's dev slice)."""
    return [row.split("\t")[0] for row in SST2_DEV.read_text(encoding="utf-8").splitlines()[1 : n + 1]]


@pytest.fixture(scope="module")
def sst2_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("sst2", make_cfg, tmp_path_factory)


@pytest.fixture(scope="module")
def sst2_runner(sst2_run) -> TorchRunner:
    return runner_for(sst2_run)


def test_a_run_folder_gets_a_torch_runner_and_its_tasks_predictor(sst2_run):
    runner = runner_for(sst2_run)
    assert isinstance(runner, TorchRunner) and isinstance(runner, ModelRunner)
    assert runner.cfg["task"]["name"] == "glue"
    predictor = Predictor.from_runner(runner)
    assert type(predictor).__name__ == "ClassificationPredictor"
    assert predictor.batch_size == 16  # the trained data.eval_batch_size
    assert type(Predictor.from_run(sst2_run / "checkpoints" / "best.ckpt", batch_size=3)).__name__ == "ClassificationPredictor"
    assert Predictor.from_run(sst2_run, batch_size=3).batch_size == 3


def test_a_task_predictor_refuses_another_tasks_model(sst2_runner):
    from sesame.tasks.qa.predict import QuestionAnsweringPredictor

    with pytest.raises(ConfigError, match="glue model.*Predictor.from_run"):
        QuestionAnsweringPredictor(sst2_runner)
    # The predictor is the class the model's task.predictor names (conf/task/*.yaml): one that names
    # no class, or a class that is no predictor, is a clear error.
    settings = sst2_runner.settings
    for path, words in (("sesame.tasks.pos.predict.TagPredictor", "names no class that can be imported"),
                        ("sesame.tasks.glue.module.SentenceClassificationModule", "is not a TaskPredictor")):
        runner = types.SimpleNamespace(settings=dataclasses.replace(
            settings, task=dataclasses.replace(settings.task, predictor=path)))
        with pytest.raises(ConfigError, match=f"task.predictor='{path}'.*{words}"):
            Predictor.from_runner(runner)


def test_outputs_keep_the_input_order_and_ids_whatever_the_chunks_and_batches(sst2_runner):
    texts = sst2_texts(11)
    inputs = [{"id": f"s{i}", "text": t} for i, t in enumerate(texts)]
    one_by_one = Predictor.from_runner(sst2_runner, batch_size=1, chunk_size=1)(inputs)
    sorted_in_chunks = Predictor.from_runner(sst2_runner, batch_size=2, chunk_size=4)(inputs)
    assert [o["id"] for o in sorted_in_chunks] == [f"s{i}" for i in range(11)]
    assert list(sorted_in_chunks[0]) == ["id", "label", "probabilities"]  # the id comes first
    for a, b in zip(one_by_one, sorted_in_chunks):
        assert a["label"] == b["label"]
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)  # padding differs, nothing else
    without_ids = Predictor.from_runner(sst2_runner)([{"text": t} for t in texts])
    assert "id" not in without_ids[0] and [o["label"] for o in without_ids] == [o["label"] for o in one_by_one]


def test_probabilities_are_the_softmax_of_the_modules_logits(sst2_runner):
    runner = sst2_runner
    predictor = Predictor.from_runner(runner)
    text = sst2_texts(1)[0]
    batch = dict(runner.tokenizer()([text], return_tensors="pt"))
    with torch.no_grad():
        want = torch.softmax(runner.module(batch).double(), dim=-1)[0].tolist()
    got = predictor([{"text": text}])[0]["probabilities"]
    assert list(got.values()) == pytest.approx(want, abs=1e-6)
    assert list(got) == runner.module.label_names and sum(got.values()) == pytest.approx(1.0)


def test_bad_lines_name_the_input_the_line_the_field_and_the_fix(sst2_runner):
    predictor = Predictor.from_runner(sst2_runner)

    def error(*lines: str) -> str:
        with pytest.raises(DataError) as info:
            list(predictor.predict_json_lines(lines, source="in.jsonl"))
        return str(info.value)

    message = error('{"text": "fine"}', "", '{"txt": "typo"}')
    assert message.startswith("in.jsonl, line 3: no 'text' field") and 'Fix: give each input as {"text"' in message
    assert error('{"text": "fine"}', "{not json").startswith("in.jsonl, line 2: not JSON")
    # Python's json reads NaN / Infinity, JSON has none: a copied id could not be written out (found by fuzzing)
    assert error('{"text": "fine", "id": {"": Infinity}}').startswith("in.jsonl, line 1: not JSON (Infinity is not a JSON value)")
    assert error('["a list"]').startswith("in.jsonl, line 1: expected a JSON object, got list")
    assert "'text' must be a string, got int" in error('{"text": 3}')
    # One rule for every task (tasks/inference/predictor.py string_field): a required field that is empty or blank is refused.
    assert error('{"text": "fine"}', '{"text": ""}') == "in.jsonl, line 2: 'text' is empty or only white space. Fix: give each input as {\"text\": \"a gripping film\"}"
    assert error('{"text": " \\t\\n"}').startswith("in.jsonl, line 1: 'text' is empty")
    with pytest.raises(DataError, match="input record 2: no 'text' field"):
        predictor([{"text": "ok"}, {"sentence": "wrong key"}])
    assert len(list(predictor.predict_json_lines(['{"text": "a"}', "  ", '{"text": "b"}']))) == 2  # blank lines skipped


def test_the_progress_bar_counts_inputs_on_stderr(sst2_runner, capsys):
    predictor = Predictor.from_runner(sst2_runner, chunk_size=2)
    outputs = list(predictor.predict_iter(({"text": t} for t in sst2_texts(5)), progress=True, total=5))
    assert len(outputs) == 5
    err = capsys.readouterr().err
    assert "predicting" in err and "5/5" in err


def test_an_onnx_folder_is_run_by_the_onnx_runner(sst2_runner, tmp_path, monkeypatch):
    """A folder with model.onnx goes to tasks/inference/onnx_runner.py's OnnxRunner.from_folder(path, overrides, int8=...);
    any ModelRunner then predicts (here a stand-in that runs the torch model)."""
    calls = []

    class FakeOnnxRunner:
        @classmethod
        def from_folder(cls, path, overrides, int8):
            calls.append((path, overrides, int8))
            return sst2_runner

    monkeypatch.setitem(sys.modules, "sesame.tasks.inference.onnx_runner", types.SimpleNamespace(OnnxRunner=FakeOnnxRunner))
    (tmp_path / "model.onnx").write_bytes(b"")
    predictor = Predictor.from_run(tmp_path, overrides={"data.eval_batch_size": 4})
    assert calls == [(tmp_path, {"data.eval_batch_size": 4}, False)]
    assert predictor([{"text": "good"}])[0]["label"] in ("0", "1")


def test_overrides_reach_the_trained_config(sst2_run):
    predictor = Predictor.from_run(sst2_run, overrides={"data.eval_batch_size": 5, "data.max_seq_length": 8})
    assert predictor.batch_size == 5 and predictor.max_seq_length == 8
    with pytest.raises(ConfigError, match="pooling"):
        Predictor.from_run(sst2_run, overrides={"pooling.name": "mean"})
    json.dumps(predictor([{"text": "a long sentence that is cut at eight tokens for sure"}]))  # plain JSON values


#: Raw inputs of each kind of run, for the network-only checks below.
RAW_INPUTS = {
    "sst2": [{"text": t} for t in sst2_texts(6)],
    "multilabel": [{"text": "great food but slow service"}, {"text": "the room was clean"}],
    "squad_v1": [{"question": "Which team won Super Bowl 50?", "context": "The Denver Broncos defeated the Carolina "
                  "Panthers 24-10 to earn their third Super Bowl title. The game was played in Santa Clara."}],
    "ner_crf": [{"text": "Angela Merkel met Emmanuel Macron in Paris on Monday ."}, {"text": "no names here"}],
}

#: Predicts in a fresh process (argv: a JSON list of [model, inputs], the packages to watch as JSON); for each
#: model in turn prints the outputs, then which of the watched packages it had imported by then.
FRESH_PROCESS_PROBE = """
import json, sys
from sesame.tasks.inference.predictor import Predictor
for model, inputs in json.loads(sys.argv[1]):
    print(json.dumps(Predictor.from_run(model)(inputs)))
    print(json.dumps(sorted(name for name in json.loads(sys.argv[2]) if name in sys.modules)))
"""


def predict_in_a_fresh_process(jobs: list[tuple[Path, list[dict]]], watched: tuple[str, ...]) -> list[tuple[list[dict], list[str]]]:
    """Per ``(model, inputs)`` of ``jobs``, in order, in one new one-thread process: ``(outputs, imported)``, the
    outputs of ``Predictor.from_run(model)(inputs)`` and which of the ``watched`` packages the process had imported
    once they were made (each costs start-up: README "Speed"). A job's list holds what the jobs before it imported."""
    import os
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", FRESH_PROCESS_PROBE, json.dumps([[str(m), i] for m, i in jobs]),
                          json.dumps(watched)], env=env, capture_output=True, text=True, check=True).stdout.strip().splitlines()
    lines = out[-2 * len(jobs):]
    return [(json.loads(lines[2 * k]), json.loads(lines[2 * k + 1])) for k in range(len(jobs))]


@pytest.fixture(scope="module")
def network_only_predictions(make_cfg, tmp_path_factory) -> dict[str, tuple[list[dict], list[str]]]:
    """Every run of :data:`RAW_INPUTS` predicting its inputs, all in one fresh process (its imports cost about four
    CPU seconds): ``{name: (outputs, the watched packages imported by then)}``."""
    names = list(RAW_INPUTS)
    jobs = [(trained_run(name, make_cfg, tmp_path_factory), RAW_INPUTS[name]) for name in names]
    return dict(zip(names, predict_in_a_fresh_process(jobs, ("lightning", "torchmetrics"))))


@pytest.mark.parametrize("name", list(RAW_INPUTS))
def test_a_run_folder_predicts_with_its_network_alone_as_the_lightning_module_does(name, make_cfg, tmp_path_factory,
                                                                                   network_only_predictions):
    """sesame-predict builds the task's network (``task.network``: plain torch) from the Lightning module's
    checkpoint, with the same predictions, and imports neither Lightning nor torchmetrics (about a second
    of start-up; README "Speed")."""
    import lightning as L

    from sesame.tasks.saved.checkpoints import load_trained

    run = trained_run(name, make_cfg, tmp_path_factory)
    network = runner_for(run).module
    assert not isinstance(network, L.LightningModule) and type(network).__name__.endswith("Network")
    module = load_trained(run).module
    assert isinstance(module, L.LightningModule) and isinstance(module, type(network))
    assert network.state_dict().keys() == module.state_dict().keys()
    inputs = RAW_INPUTS[name]
    expected = Predictor.from_runner(TorchRunner(load_trained(run)))(inputs)
    outputs, imported = network_only_predictions[name]
    assert outputs == json.loads(json.dumps(expected))
    assert imported == [], imported
