"""SQuAD metrics: hand-checked values on tricky strings, and the evaluate modules agree."""

from __future__ import annotations

import pytest

from sesame.tasks.qa.metrics import (
    compute,
    f1_score_v1,
    f1_score_v2,
    gold_from_dataset,
    load_metric,
    normalize_answer,
    squad_v1,
    squad_v2,
)


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("The  Cat's, hat!", "cats hat"),
        ("An apple a day", "apple day"),
        ("theater of the absurd", "theater of absurd"),  # articles only as whole words
        ("the-end", "theend"),  # punctuation goes before articles are matched
        ("A", ""),
        ("  Café\tau  lait ", "café au lait"),  # no accent folding, whitespace collapsed
        ("1,000.5 %", "10005"),
    ],
)
def test_normalize(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_token_f1_by_hand():
    assert f1_score_v1("the cat sat", "cat sat on the mat") == pytest.approx(2 * 1 * 0.5 / 1.5)  # p=1, r=1/2
    assert f1_score_v1("cat cat", "cat") == pytest.approx(2 / 3)  # counts are clipped: p=1/2, r=1
    assert f1_score_v1("", "cat") == 0 and f1_score_v1("dog", "cat") == 0
    assert f1_score_v1("", "") == 0  # v1: nothing shared scores 0
    assert f1_score_v2("", "") == 1 and f1_score_v2("the", "") == 1  # both normalise to no tokens
    assert f1_score_v2("a cat", "") == 0


def test_v1_by_hand():
    gold = {"a": ["Denver Broncos", "The Broncos"], "b": ["Santa Clara, California"], "c": ["golden"]}
    preds = {"a": "broncos", "b": "Santa Clara"}  # c is missing: counts as 0
    # a: EM 1 ("broncos" == "broncos"); b: EM 0, F1 = 2 * (1 * 2/3) / (1 + 2/3) = 0.8
    assert squad_v1(gold, preds) == pytest.approx({"exact_match": 100 / 3, "f1": 100 * 1.8 / 3})


V2_GOLD = {"a": ["Paris"], "b": [], "c": ["blue whale", "whale"], "d": []}
V2_PREDS = {"a": "paris", "b": "something", "c": "the whale", "d": ""}
V2_NA = {"a": 0.1, "b": 0.8, "c": 0.5, "d": 0.9}


def test_v2_by_hand():
    out = squad_v2(V2_GOLD, V2_PREDS, V2_NA)
    assert out == pytest.approx({
        "exact_match": 75.0, "f1": 75.0, "total": 4,
        "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
        # walk by na_prob: start 2 (all NoAns right), a +1, c +1 (best, 4/4 at 0.5), b -1, d 0
        "best_exact": 100.0, "best_exact_thresh": 0.5, "best_f1": 100.0, "best_f1_thresh": 0.5,
    })
    assert squad_v2(V2_GOLD, V2_PREDS, V2_NA, na_prob_thresh=0.6)["exact_match"] == 100.0  # b, d -> ""
    assert squad_v2(V2_GOLD, V2_PREDS, V2_NA, na_prob_thresh=0.3)["exact_match"] == 75.0  # c -> "" too
    no_probs = squad_v2(V2_GOLD, V2_PREDS)
    assert no_probs["best_exact"] == 75.0 and no_probs["best_exact_thresh"] == 0.0


def test_v2_drops_gold_answers_that_normalise_to_nothing():
    assert squad_v2({"q": ["The", "cat"]}, {"q": "cat"})["exact_match"] == 100.0
    assert squad_v2({"q": ["the"]}, {"q": ""})["exact_match"] == 100.0  # only "" left: counts as no-answer gold


def test_compute_dispatch_and_errors():
    assert compute("v1", {"q": ["x"]}, {"q": "x"}) == {"exact_match": 100.0, "f1": 100.0}
    with pytest.raises(ValueError, match="unknown SQuAD version"):
        compute("squad_v3", {"q": ["x"]}, {"q": "x"})
    with pytest.raises(ValueError, match="no questions"):
        squad_v1({}, {})


def test_evaluate_modules_agree(real_dev_v1, real_dev_v2):
    for version, data in (("squad_v1", real_dev_v1), ("squad_v2", real_dev_v2)):
        gold = gold_from_dataset(data)
        # deterministic, varied predictions: right, truncated, wrong, empty
        preds = {}
        for i, (qid, answers) in enumerate(gold.items()):
            text = answers[0] if answers else "nothing"
            preds[qid] = [text, " ".join(text.split()[:1]), "the answer", ""][i % 4]
        na = {qid: (i % 7) / 7 for i, qid in enumerate(gold)}
        ours = compute(version, gold, preds, na if version == "squad_v2" else None)
        metric = load_metric(version)
        references = [{"id": q, "answers": {"text": a, "answer_start": [0] * len(a)}} for q, a in gold.items()]
        predictions = [{"id": q, "prediction_text": p} | ({"no_answer_probability": na[q]} if version == "squad_v2" else {})
                       for q, p in preds.items()]
        theirs = metric.compute(predictions=predictions, references=references)
        assert theirs == pytest.approx(ours)
        assert 0 < ours["f1"] < 100
