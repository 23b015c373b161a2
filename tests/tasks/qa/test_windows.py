"""Windowed tokenisation and batching of SQuAD questions (tasks/qa/windows.py), on real dev questions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.qa.readers import read_squad
from sesame.tasks.qa.windows import answer_token_span, check_question_lengths, encode_windows, window_collator

from .conftest import CTX, qa, squad_obj


def test_answer_token_span():
    offsets = np.array([[0, 0], [0, 4], [0, 0], [0, 5], [6, 11], [12, 14], [14, 17], [0, 0]])
    ctx = np.array([0, 0, 0, 1, 1, 1, 1, 0], bool)
    assert answer_token_span(offsets, ctx, 6, 11) == (4, 4)
    assert answer_token_span(offsets, ctx, 7, 15) == (4, 6)  # partial tokens widen to whole tokens
    assert answer_token_span(offsets, ctx, 12, 20) == (0, 0)  # runs past the window
    assert answer_token_span(offsets, np.zeros(8, bool), 0, 1) == (0, 0)


def brute_force_label(offsets, ctx, sc, ec):
    idx = [i for i in range(len(ctx)) if ctx[i]]
    if offsets[idx[0]][0] > sc or offsets[idx[-1]][1] < ec:
        return 0, 0
    s = max(i for i in idx if offsets[i][0] <= sc)
    e = min(i for i in idx if offsets[i][1] >= ec)
    return s, e


def test_train_windows_label_the_answer(write_json, real_dev_v1, tokenizer):
    ds, _ = read_squad(write_json(real_dev_v1), allow_impossible=False)
    windows = encode_windows(ds, tokenizer, max_seq_length=64, doc_stride=16, train=True, chunk_size=7)
    assert len(windows) > len(ds)  # contexts are longer than one 64-token window
    enc = tokenizer(list(ds["question"]), list(ds["context"]), truncation="only_second", max_length=64, stride=16,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    inside = 0
    for i, w in enumerate(windows):
        ex = ds[w["example_index"]]
        assert len(w["input_ids"]) <= 64 and w["feature_index"] == i
        sc = ex["answers"]["answer_start"][0]
        ec = sc + len(ex["answers"]["text"][0])
        offsets = enc["offset_mapping"][i]
        assert (w["start_positions"], w["end_positions"]) == brute_force_label(offsets, w["context_mask"], sc, ec)
        if w["start_positions"]:
            inside += 1
            text = ex["context"][offsets[w["start_positions"]][0] : offsets[w["end_positions"]][1]]
            assert ex["answers"]["text"][0] in text  # whole tokens: "gold" can only come as "golden"
    assert 0 < inside < len(windows)
    dropped = encode_windows(ds, tokenizer, max_seq_length=64, doc_stride=16, train=True, drop_windows_without_answer=True)
    assert len(dropped) == inside and all(w["start_positions"] > 0 for w in dropped)


def test_eval_windows_offsets_and_stride(write_json, real_dev_v1, tokenizer):
    ds, _ = read_squad(write_json(real_dev_v1), allow_impossible=False)
    windows = encode_windows(ds, tokenizer, max_seq_length=64, doc_stride=16, train=False)
    by_example: dict[int, list] = {}
    for w in windows:
        assert "start_positions" not in w
        ctx, offsets = w["context_mask"], w["offsets"]
        assert ctx[0] == False and (offsets[~ctx] == -1).all() and (offsets[ctx] >= 0).all()  # noqa: E712
        # token types mark the context for BERT: [SEP] closes it
        assert (w["token_type_ids"][ctx] == 1).all()
        by_example.setdefault(w["example_index"], []).append(w)
    assert sorted(by_example) == list(range(len(ds)))
    for ex, ws in by_example.items():
        spans = [tuple(map(tuple, w["offsets"][w["context_mask"]])) for w in ws]
        for a, b in zip(spans, spans[1:]):  # consecutive windows share exactly doc_stride tokens
            assert a[-16:] == b[:16]
        covered = sorted({s for sp in spans for s in sp})
        full = tokenizer(ds[ex]["context"], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert covered == [tuple(o) for o in full]  # every context token is in some window


@pytest.mark.parametrize("train", [True, False])
def test_collator_pads_to_the_longest_window(write_json, real_dev_v1, tokenizer, train):
    ds, _ = read_squad(write_json(real_dev_v1), allow_impossible=False)
    windows = encode_windows(ds, tokenizer, max_seq_length=64, doc_stride=16, train=train)
    short = {k: v[:20] if isinstance(v, np.ndarray) else v for k, v in windows[3].items()}  # one short window
    rows = [windows[0], short, windows[1]]
    batch = window_collator(tokenizer.pad_token_id)(rows)
    assert list(batch) == list(rows[0])  # every field, in the windows' order
    T = max(len(w["input_ids"]) for w in rows)
    scalars = ["example_index", "feature_index"] + (["start_positions", "end_positions"] if train else [])
    for key, value in batch.items():
        if key in scalars:
            assert value.dtype == torch.int64 and value.tolist() == [w[key] for w in rows]
            continue
        assert value.dtype == (torch.bool if key == "context_mask" else torch.int64), key
        assert value.shape[:2] == (3, T), key
        pad = {"input_ids": tokenizer.pad_token_id, "context_mask": False, "offsets": -1}.get(key, 0)
        for i, w in enumerate(rows):
            n = len(w[key])
            assert np.array_equal(value[i, :n].numpy(), w[key]) and (value[i, n:] == pad).all(), key
    if not train:
        assert batch["offsets"].shape == (3, T, 2)


def test_question_too_long(write_json, tokenizer):
    long_q = "why " * 40
    obj = squad_obj((CTX, [qa("short", "When?", CTX, "1903"), qa("long", long_q, CTX, "1911")]))
    ds, _ = read_squad(write_json(obj), allow_impossible=False)
    problems = check_question_lengths(ds, tokenizer, max_seq_length=48, doc_stride=8)
    assert [i for i, _ in problems] == [1] and "'long' has 40 tokens" in problems[0][1]
    with pytest.raises(ConfigError, match="leaves no room"):
        check_question_lengths(ds, tokenizer, max_seq_length=10, doc_stride=8)


def test_left_padding_tokenizer_is_a_config_error(write_json, tokenizer):
    ds, _ = read_squad(write_json(squad_obj((CTX, [qa("q1", "When?", CTX, "1903")]))), allow_impossible=False)
    tokenizer.padding_side = "left"
    try:
        with pytest.raises(ConfigError, match="padding_side='right'"):
            encode_windows(ds, tokenizer, max_seq_length=64, doc_stride=16, train=False)
    finally:
        tokenizer.padding_side = "right"


def test_context_offsets_hold_whole_grapheme_clusters(tokenizer):
    import datasets

    from sesame.tasks.core.graphemes import cluster_bounds
    from sesame.tasks.qa.predictions import decode_predictions
    from tests.conftest import UNICODE_LINES

    # MiniLM's normaliser strips the accent of "cafe\u0301" and the selector of "❤\ufe0f": their tokens
    # ("cafe", "❤") end one character early unless widened.
    context = " ".join(UNICODE_LINES)
    start = context.index("cafe\u0301")
    ds = datasets.Dataset.from_dict({"id": ["q"], "question": ["Where?"], "context": [context],
                                     "answers": [{"text": ["cafe\u0301"], "answer_start": [start]}]})
    (window,) = encode_windows(ds, tokenizer, max_seq_length=256, doc_stride=32, train=False)
    offsets = window["offsets"][window["context_mask"]]
    assert np.isin(offsets, cluster_bounds(context)).all()
    assert [context[s:e] for s, e in offsets if context[s] in "c❤"][:2] == ["❤\ufe0f", "cafe\u0301"]
    # The answer's text keeps its accent; the training label is the one token.
    token = int(np.flatnonzero(window["offsets"][:, 0] == start)[0])
    logits = torch.full((1, len(window["input_ids"])), -5.0)
    logits[0, token] = 5.0
    offsets = torch.from_numpy(window["offsets"]).unsqueeze(0)
    answer = decode_predictions(logits, logits.clone(), offsets, [0], [context], ["q"])["q"]
    assert (answer.text, answer.nbest[0]["char_start"], answer.nbest[0]["char_end"]) == ("cafe\u0301", start, start + 5)
    (train,) = encode_windows(ds, tokenizer, max_seq_length=256, doc_stride=32, train=True)
    assert train["start_positions"] == train["end_positions"] == token
