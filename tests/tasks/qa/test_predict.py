"""QuestionAnsweringPredictor: the answers and n-best lists evaluation wrote (v1, and v2 with null
answers against sesame-eval), char offsets into the context, contexts of many windows, answers of
whole grapheme clusters in CJK, RTL, emoji and combining-mark text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import DataError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.core.graphemes import cluster_bounds
from sesame.tasks.inference.predictor import Predictor, runner_for
from sesame.tasks.qa.readers import read_squad
from sesame.tasks.qa.windows import encode_windows
from tests.conftest import UNICODE_LINES
from tests.tasks.qa.conftest import CTX
from tests.tasks.inference.test_predictor import run_overrides, trained_run


@pytest.fixture(scope="module")
def v1_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("squad_v1", make_cfg, tmp_path_factory)


@pytest.fixture(scope="module")
def v1_runner(v1_run):
    return runner_for(v1_run)


@pytest.fixture(scope="module")
def v2_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("squad_v2", make_cfg, tmp_path_factory)


def _dev_questions(run: Path) -> list[dict]:
    """The questions the run evaluated, as predictor inputs."""
    data = OmegaConf.load(run / "config.yaml").data
    rows, _ = read_squad(data.validation_file, allow_impossible=bool(data.version_2_with_negative))
    return [{"id": r["id"], "question": r["question"], "context": r["context"]} for r in rows.select(range(data.max_eval_examples))]


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _as_dataset(questions: list[dict]):
    import datasets

    return datasets.Dataset.from_list(questions)


def test_v1_answers_and_nbest_equal_the_evaluation_files(v1_run, v1_runner):
    questions = _dev_questions(v1_run)
    predictor = Predictor.from_runner(v1_runner, n_best=20)  # the run's head.n_best_size
    windows = encode_windows(_as_dataset(questions), predictor.tokenizer,
                             max_seq_length=96, doc_stride=32, train=False)
    assert len(windows) > len(questions)  # several windows a question
    outputs = predictor(questions)
    answers, nbest = _read(v1_run / "predictions.json"), _read(v1_run / "nbest_predictions.json")
    assert {o["id"]: o["answer"] for o in outputs} == answers
    contexts = {q["id"]: q["context"] for q in questions}
    for o in outputs:
        assert list(o) == ["id", "answer", "char_start", "char_end", "score", "probability", "nbest"]
        assert contexts[o["id"]][o["char_start"]:o["char_end"]] == o["answer"] != ""
        assert o["nbest"] == nbest[o["id"]]  # texts, order, offsets, scores and probabilities
        assert (o["score"], o["probability"]) == (o["nbest"][0]["score"], o["nbest"][0]["probability"])
    short = Predictor.from_runner(v1_runner, n_best=3)(questions[:2])
    assert [len(o["nbest"]) for o in short] == [3, 3] and short[0]["nbest"] == nbest[questions[0]["id"]][:3]
    assert "nbest" not in Predictor.from_runner(v1_runner)(questions[:1])[0]


def test_a_context_of_many_windows_gives_offsets_into_it(v1_runner):
    context = " ".join([CTX] * 12)  # about 250 tokens: many windows of 96
    question = {"question": "When did Marie Curie win the Nobel Prize in Chemistry?", "context": context}
    predictor = Predictor.from_runner(v1_runner, n_best=10)
    assert len(encode_windows(_as_dataset([question]), predictor.tokenizer, max_seq_length=96, doc_stride=32, train=False)) >= 4
    (out,) = predictor([question])
    assert out["answer"] and context[out["char_start"]:out["char_end"]] == out["answer"]
    assert all(context[c["char_start"]:c["char_end"]] == c["text"] for c in out["nbest"])
    assert len({(c["char_start"], c["char_end"]) for c in out["nbest"]}) == 10  # each span once, across windows
    assert [c["score"] for c in out["nbest"]] == sorted((c["score"] for c in out["nbest"]), reverse=True)
    assert max(c["char_start"] for c in out["nbest"]) > 0


def test_v2_null_answers_equal_sesame_eval_with_the_same_threshold(v2_run, make_cfg, tmp_path):
    questions = _dev_questions(v2_run)
    written = _read(v2_run / "predictions.json")
    outputs = Predictor.from_run(v2_run, n_best=20)(questions)
    assert {o["id"]: o["answer"] for o in outputs} == written
    assert {o["id"]: o["null_score_diff"] for o in outputs} == pytest.approx(_read(v2_run / "null_odds.json"), abs=1e-9)
    assert {o["id"]: o["nbest"] for o in outputs} == _read(v2_run / "nbest_predictions.json")

    # A threshold at the median null odds: some questions get no answer. sesame-eval with it writes what the predictor says.
    odds = sorted(o["null_score_diff"] for o in outputs)
    threshold = (odds[len(odds) // 2 - 1] + odds[len(odds) // 2]) / 2
    override = f"head.null_score_diff_threshold={threshold}"
    evaluate(RunSettings.from_config(make_cfg(*run_overrides("squad_v2"), override, f"++model={v2_run}")), tmp_path / "eval", overrides=[override])
    evaluated = _read(tmp_path / "eval" / "predictions.json")
    predicted = Predictor.from_run(v2_run, overrides={"head.null_score_diff_threshold": threshold})(questions)
    assert {o["id"]: o["answer"] for o in predicted} == evaluated
    assert 0 < sum(a == "" for a in evaluated.values()) < len(evaluated)
    for o in predicted:
        assert (o["answer"] == "") == (o["null_score_diff"] > threshold)
        if o["answer"] == "":  # the null entry: no offsets
            assert (o["char_start"], o["char_end"]) == (-1, -1) and 0 < o["probability"] < 1
        else:
            context = next(q["context"] for q in questions if q["id"] == o["id"])
            assert context[o["char_start"]:o["char_end"]] == o["answer"]


def test_bad_questions_name_the_line_and_the_field(v1_runner):
    predictor = Predictor.from_runner(v1_runner)
    with pytest.raises(DataError, match=r"q\.jsonl, line 2: no 'context' field\. Fix: give each input as \{\"question\""):
        list(predictor.predict_json_lines(['{"question": "q", "context": "c c"}', '{"question": "q"}'], source="q.jsonl"))
    with pytest.raises(DataError, match="record 1: 'context' is empty"):
        predictor([{"question": "who?", "context": "  "}])
    with pytest.raises(DataError, match=r"question 'record 1' has \d+ tokens.*--set data.max_seq_length"):
        predictor.predict_numbered([("record 1", {"question": "why " * 90, "context": CTX})]).__next__()


def test_answers_in_unicode_contexts_are_whole_grapheme_clusters(make_cfg, tmp_path_factory, unicode_bert_dir):
    run = trained_run("squad_v1", make_cfg, tmp_path_factory, encoder=unicode_bert_dir)
    questions = [{"question": "Where did Marie Curie live?", "context": line} for line in UNICODE_LINES]
    outputs = Predictor.from_run(run, n_best=20)(questions)
    for q, out in zip(questions, outputs):
        context, bounds = q["context"], cluster_bounds(q["context"])
        assert context[out["char_start"]:out["char_end"]] == out["answer"]
        assert len(out["nbest"]) > 1
        for entry in out["nbest"]:  # no span starts or ends inside a cluster (cafe\u0301 is never cafe)
            assert entry["char_start"] in bounds and entry["char_end"] in bounds, entry
            assert context[entry["char_start"]:entry["char_end"]] == entry["text"] and entry["text"].strip()
