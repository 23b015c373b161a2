"""Answers from window logits (tasks/qa/predictions.py): against a plain Python loop, on hand-made
ties and null scores, and round trip from real dev windows with gold-peaked logits."""

from __future__ import annotations

import random

import pytest
import torch

from sesame.tasks.qa.metrics import squad_v1, squad_v2
from sesame.tasks.qa.predictions import decode_predictions
from sesame.tasks.qa.readers import read_squad
from sesame.tasks.qa.windows import encode_windows, window_collator
from tests.heads.reference_span_decoder import random_windows, reference_decode


def assert_same(got, ref, allow_null):
    assert set(got) == set(ref)
    for qid, (answer, best_text, nbest, null, diff) in ref.items():
        pred = got[qid]
        assert pred.text == answer, qid
        assert pred.best_span_text == best_text
        spans = [c for c in pred.nbest if c["char_start"] >= 0]
        assert [(c["text"], c["score"], c["start_logit"], c["end_logit"]) for c in spans] == nbest
        assert sum(c["probability"] for c in pred.nbest) == pytest.approx(1.0)
        if allow_null:
            assert pred.null_score == null
            assert pred.null_score_diff == pytest.approx(diff)
            assert sum(c["text"] == "" and c["char_start"] == -1 for c in pred.nbest) == 1
        else:
            assert pred.null_score is None and len(spans) == len(pred.nbest)


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("allow_null", [False, True])
def test_matches_reference_loop(integer, allow_null):
    rng = random.Random(1234 + integer * 7 + allow_null)
    for trial in range(60):
        start, end, offsets, ex_index, contexts, ids = random_windows(rng, rng.randint(1, 5), integer)
        n_best, max_len = rng.randint(1, 6), rng.randint(1, 5)
        thresh = float(rng.choice([-2, 0, 1.5]))
        got = decode_predictions(
            start, end, offsets, ex_index, contexts, ids, n_best_size=n_best, max_answer_length=max_len,
            allow_null=allow_null, null_score_diff_threshold=thresh, chunk_size=rng.randint(1, 4),
        )
        ref = reference_decode(
            start.tolist(), end.tolist(), offsets.tolist(), ex_index, contexts, ids, n_best, max_len, allow_null, thresh
        )
        assert_same(got, ref, allow_null)


def test_all_equal_logits_prefers_earliest_shortest_span():
    # One question, two overlapping windows, every logit equal: the tie-break decides everything.
    context = "aa bb cc"
    offsets = torch.tensor([[[-1, -1], [0, 2], [3, 5], [-1, -1]], [[-1, -1], [3, 5], [6, 8], [-1, -1]]])
    zeros = torch.zeros(2, 4)
    pred = decode_predictions(zeros, zeros, offsets, [0, 0], [context], ["q"], n_best_size=10, max_answer_length=3)["q"]
    assert [c["text"] for c in pred.nbest] == ["aa", "aa bb", "bb", "bb cc", "cc"]  # deduplicated
    assert pred.text == "aa"
    assert all(c["probability"] == pytest.approx(0.2) for c in pred.nbest)


def test_span_cannot_cross_window_edge():
    # High start at the last context token of window 0, high end at the first of window 1: the
    # decoder must not join them; the answer lies within one window.
    context = "w0 w1 w2 w3"
    offsets = torch.tensor([
        [[-1, -1], [0, 2], [3, 5], [-1, -1]],
        [[-1, -1], [6, 8], [9, 11], [-1, -1]],
    ])
    start = torch.tensor([[0.0, 0.0, 9.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]])
    pred = decode_predictions(start, end, offsets, [0, 0], [context], ["q"], max_answer_length=4)["q"]
    assert pred.text == "w1"  # 9 + 0 beats 1 + 2; never "w1 w2 w3"
    assert all(c["text"] != "w1 w2 w3" for c in pred.nbest)


def test_best_window_wins_and_null_is_min_over_windows():
    context = "one two three"
    offsets = torch.tensor([
        [[-1, -1], [0, 3], [4, 7], [-1, -1]],
        [[-1, -1], [4, 7], [8, 13], [-1, -1]],
    ])
    start = torch.tensor([[5.0, 1.0, 0.0, -9.0], [1.0, 0.0, 3.0, -9.0]])
    end = torch.tensor([[5.0, 1.0, 0.0, -9.0], [2.0, 0.0, 3.0, -9.0]])
    preds = decode_predictions(start, end, offsets, [0, 0], [context], ["q"], allow_null=True, max_answer_length=5)
    pred = preds["q"]
    assert pred.best_span_text == "three" and pred.best_score == 6.0  # window 1 beats window 0's best (2.0)
    assert pred.null_score == 3.0  # min(10, 3)
    assert pred.null_score_diff == -3.0
    assert pred.text == "three"
    strict = decode_predictions(start, end, offsets, [0, 0], [context], ["q"], allow_null=True,
                                null_score_diff_threshold=-4.0)["q"]
    assert strict.text == "" and strict.best_span_text == "three"


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="offsets"):
        decode_predictions(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 5, 2), [0, 0], ["c"], ["q"])


@pytest.mark.parametrize("version", [1, 2])
def test_gold_logits_decode_to_gold_answers(write_json, real_dev_v1, real_dev_v2, tokenizer, version):
    """Windows + offsets + decoder round trip on real dev questions: logits peaked on the gold span
    (first answer, where a window holds it; [CLS] for no-answer) give EM = F1 = 100."""
    data = real_dev_v1 if version == 1 else real_dev_v2
    ds, _ = read_squad(write_json(data), allow_impossible=version == 2)
    train = encode_windows(ds, tokenizer, max_seq_length=96, doc_stride=32, train=True)
    evalw = encode_windows(ds, tokenizer, max_seq_length=96, doc_stride=32, train=False)
    assert [w["example_index"] for w in train] == [w["example_index"] for w in evalw]
    batch = window_collator(tokenizer.pad_token_id)(evalw)
    start = torch.zeros(batch["input_ids"].shape)
    end = torch.zeros_like(start)
    for row, w in enumerate(train):
        start[row, w["start_positions"]] += 10
        end[row, w["end_positions"]] += 10
    contexts, ids = list(ds["context"]), list(ds["id"])
    preds = decode_predictions(start, end, batch["offsets"], batch["example_index"], contexts, ids,
                               allow_null=version == 2)
    # The gold span widened to whole tokens (e.g. "gold" inside "golden"), from a window holding it.
    expected = {qid: "" for qid in ids}
    for row, w in enumerate(train):
        if w["start_positions"] > 0:
            off = evalw[row]["offsets"]
            expected[ids[w["example_index"]]] = contexts[w["example_index"]][off[w["start_positions"], 0]:off[w["end_positions"], 1]]
    answers = {qid: p.text for qid, p in preds.items()}
    assert answers == expected
    gold = {i: a["text"] for i, a in zip(ids, ds["answers"])}
    if version == 1:
        scores = squad_v1(gold, answers)
        assert all(expected.values()) and scores["f1"] > 90  # "golden" for "gold" costs a little
    else:
        scores = squad_v2(gold, answers)
        assert scores["NoAns_exact"] == 100.0 and scores["HasAns_f1"] > 95
