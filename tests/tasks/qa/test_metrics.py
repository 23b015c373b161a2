"""SQuAD metrics: hand-checked values on tricky strings, agreement with an independent rendering of the
official v1.1 / v2.0 evaluation scripts on real dev questions, and the evaluate wrappers' plumbing."""

from __future__ import annotations

import random
import re
import string
from collections import Counter

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


# --- The official evaluation scripts (evaluate-v1.1.py, evaluate-v2.0.py), restated here -----------
# Independent of sesame.tasks.qa.metrics: they read the SQuAD JSON themselves and keep the official
# names, loops and edge cases, so a change in sesame's scoring shows up as a disagreement.


def _official_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _official_v1(dataset, predictions):
    def f1_score(prediction, ground_truth):
        prediction_tokens = _official_normalize(prediction).split()
        ground_truth_tokens = _official_normalize(ground_truth).split()
        common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
        num_same = sum(common.values())
        if num_same == 0:
            return 0
        precision = 1.0 * num_same / len(prediction_tokens)
        recall = 1.0 * num_same / len(ground_truth_tokens)
        return (2 * precision * recall) / (precision + recall)

    def exact_match_score(prediction, ground_truth):
        return _official_normalize(prediction) == _official_normalize(ground_truth)

    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:  # unanswered: counts, scores 0
                    continue
                ground_truths = [x["text"] for x in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += max(exact_match_score(prediction, gt) for gt in ground_truths)
                f1 += max(f1_score(prediction, gt) for gt in ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _official_v2(dataset, preds, na_probs, na_prob_thresh=1.0):
    def get_tokens(s):
        return _official_normalize(s).split() if s else []

    def compute_exact(a_gold, a_pred):
        return int(_official_normalize(a_gold) == _official_normalize(a_pred))

    def compute_f1(a_gold, a_pred):
        gold_toks, pred_toks = get_tokens(a_gold), get_tokens(a_pred)
        common = Counter(gold_toks) & Counter(pred_toks)
        num_same = sum(common.values())
        if len(gold_toks) == 0 or len(pred_toks) == 0:
            return int(gold_toks == pred_toks)  # both empty: 1, else 0
        if num_same == 0:
            return 0
        precision = 1.0 * num_same / len(pred_toks)
        recall = 1.0 * num_same / len(gold_toks)
        return (2 * precision * recall) / (precision + recall)

    qid_to_has_ans = {}
    exact_raw, f1_raw = {}, {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                qid_to_has_ans[qid] = bool(qa["answers"])
                gold_answers = [a["text"] for a in qa["answers"] if _official_normalize(a["text"])]
                if not gold_answers:
                    gold_answers = [""]  # unanswerable: the only right answer is no answer
                a_pred = preds[qid]
                exact_raw[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
                f1_raw[qid] = max(compute_f1(a, a_pred) for a in gold_answers)

    def apply_no_ans_threshold(scores):
        return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s for qid, s in scores.items()}

    def make_eval_dict(exact_scores, f1_scores, qid_list):
        total = len(qid_list)
        return {"exact": 100.0 * sum(exact_scores[k] for k in qid_list) / total,
                "f1": 100.0 * sum(f1_scores[k] for k in qid_list) / total, "total": total}

    def find_best_thresh(scores):
        num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
        cur_score = best_score = num_no_ans  # threshold below every na_prob: answer nothing
        best_thresh = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            if qid not in scores:
                continue
            if qid_to_has_ans[qid]:
                diff = scores[qid]
            else:
                diff = -1 if preds[qid] else 0
            cur_score += diff
            if cur_score > best_score:
                best_score, best_thresh = cur_score, na_probs[qid]
        return 100.0 * best_score / len(scores), best_thresh

    exact_thresh, f1_thresh = apply_no_ans_threshold(exact_raw), apply_no_ans_threshold(f1_raw)
    out = make_eval_dict(exact_thresh, f1_thresh, list(qid_to_has_ans))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [k for k, v in qid_to_has_ans.items() if v is wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in make_eval_dict(exact_thresh, f1_thresh, qids).items()})
    out["best_exact"], out["best_exact_thresh"] = find_best_thresh(exact_raw)
    out["best_f1"], out["best_f1_thresh"] = find_best_thresh(f1_raw)
    return out


def _varied_predictions(data: dict, seed: int) -> tuple[dict[str, str], dict[str, float]]:
    """Per question one of: a gold answer (first or last), the gold with an article or punctuation
    around it, its first or last word, the gold plus context words, words of the context, a wrong
    string, or no answer; and a no-answer probability on a coarse grid (so there are ties)."""
    rng = random.Random(seed)
    preds, na = {}, {}
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            context_words = paragraph["context"].split()
            for qa in paragraph["qas"]:
                answers = [a["text"] for a in qa["answers"]] or [a["text"] for a in qa.get("plausible_answers", [])]
                gold = rng.choice(answers) if answers else "nothing"
                start = rng.randrange(len(context_words))
                decorated = rng.choice(["The ", "An ", "a ", "(", "an-"]) + gold + rng.choice([".", "!", " -", ")", "'s", ""])
                preds[qa["id"]] = rng.choice([
                    gold, answers[-1] if answers else gold, decorated, gold.split()[0], gold.split()[-1],
                    f"{gold} {' '.join(context_words[start:start + 2])}", " ".join(context_words[start:start + 4]),
                    "the answer", "",
                ])
                na[qa["id"]] = rng.randrange(8) / 8
    return preds, na


@pytest.mark.parametrize("seed", range(4))
def test_v1_agrees_with_the_official_script_on_real_dev_questions(real_dev_v1, seed):
    preds, _ = _varied_predictions(real_dev_v1, seed)
    preds.pop(next(iter(preds)))  # one question unanswered
    ours = compute("squad_v1", gold_from_dataset(real_dev_v1), preds)
    official = _official_v1(real_dev_v1["data"], preds)
    assert ours == pytest.approx(official, rel=1e-12)
    assert 0 < official["exact_match"] < official["f1"] < 100  # the predictions exercise partial credit


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("na_prob_thresh", [1.0, 0.5])
def test_v2_agrees_with_the_official_script_on_real_dev_questions(real_dev_v2, seed, na_prob_thresh):
    preds, na = _varied_predictions(real_dev_v2, seed)
    ours = compute("squad_v2", gold_from_dataset(real_dev_v2), preds, na, na_prob_thresh)
    official = _official_v2(real_dev_v2["data"], preds, na, na_prob_thresh)
    official["exact_match"] = official.pop("exact")  # sesame's name for the overall exact score
    assert ours == pytest.approx(official, rel=1e-12)
    assert official["HasAns_total"] > 0 and official["NoAns_total"] > 0
    assert official["best_f1"] > official["f1"]  # the threshold search has something to find


def test_the_evaluate_modules_give_sesames_scores(real_dev_v1, real_dev_v2):
    """tasks/qa/evaluate_metrics: evaluate's input format in, the same scores as compute() out."""
    for version, data in (("squad_v1", real_dev_v1), ("squad_v2", real_dev_v2)):
        gold = gold_from_dataset(data)
        preds, na = _varied_predictions(data, seed=0)
        v2 = version == "squad_v2"
        ours = compute(version, gold, preds, na if v2 else None, 0.5 if v2 else 1.0)
        references = [{"id": q, "answers": {"text": a, "answer_start": [0] * len(a)}} for q, a in gold.items()]
        predictions = [{"id": q, "prediction_text": p} | ({"no_answer_probability": na[q]} if v2 else {})
                       for q, p in preds.items()]
        kwargs = {"no_answer_threshold": 0.5} if v2 else {}
        theirs = load_metric(version).compute(predictions=predictions, references=references, **kwargs)
        assert theirs == pytest.approx(ours, rel=1e-12)
