"""SQuAD reading/validation, windowing and the data module, on tmp files and real dev questions."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from sesame.heads.span_decode import decode_predictions
from sesame.tasks.qa.data import (
    SquadDataError,
    SquadDataModule,
    WindowCollator,
    answer_token_span,
    check_question_lengths,
    encode_windows,
    read_squad,
)
from sesame.tasks.qa.metrics import squad_v1, squad_v2

from .conftest import qa, squad_obj

CTX = "Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911."


def good_v1():
    return squad_obj((CTX, [qa("q1", "When did she win physics?", CTX, "1903"), qa("q2", "Who?", CTX, "Marie Curie", "Curie")]))


# Reading ---------------------------------------------------------------------------------------------
def test_reads_v1_rows(write_json):
    ds, report = read_squad(write_json(good_v1()), allow_impossible=False)
    assert ds.column_names == ["id", "title", "context", "question", "answers"]
    assert ds["id"] == ["q1", "q2"] and report.kept == 2 and report.skipped == 0
    assert ds[1]["answers"] == {"text": ["Marie Curie", "Curie"], "answer_start": [0, 6]}


def test_reads_real_v2_with_unanswerable(write_json, real_dev_v2):
    ds, _ = read_squad(write_json(real_dev_v2), allow_impossible=True)
    n_questions = sum(len(p["qas"]) for p in real_dev_v2["data"][0]["paragraphs"])
    assert len(ds) == n_questions
    impossible = [not a["text"] for a in ds["answers"]]
    assert 0 < sum(impossible) < len(ds)
    with pytest.raises(SquadDataError, match="no answers; SQuAD v1.1 needs at least one"):
        read_squad(write_json(real_dev_v2), allow_impossible=False)


def bad_cases():
    wrong_start = squad_obj((CTX, [{"id": "q1", "question": "When?", "answers": [{"text": "1903", "answer_start": 3}]}]))
    str_start = squad_obj((CTX, [{"id": "q1", "question": "When?", "answers": [{"text": "1903", "answer_start": "46"}]},
                                 qa("q2", "Who?", CTX, "Curie")]))
    return {
        "malformed": ('{"data": [ {"title": "x", ', r"not valid JSON: .* line 1, column"),
        "no_data": ({"version": "1.1"}, r"missing top-level field 'data'"),
        "wrong_start": (wrong_start, r"'q1'.*answer_start=3 points at .*Fix: set answer_start to 46"),
        "absent_text": (squad_obj((CTX, [qa("q1", "?", CTX, "1903")]))
                        | {"data": [{"title": "T", "paragraphs": [{"context": CTX, "qas": [
                            {"id": "q1", "question": "?", "answers": [{"text": "1904", "answer_start": 46}]}]}]}]},
                        r"does not occur in the context"),
        "string_start": (str_start, r"'q1'.*answer_start must be an integer, got '46'"),
        "empty_context": (squad_obj(("  ", [qa("q1", "?", "x", "x")])), r"empty context"),
        "missing_context": ({"data": [{"title": "T", "paragraphs": [{"qas": [qa("q1", "?", "x", "x")]}]}]},
                            r"missing field 'context'"),
        "missing_question": (squad_obj((CTX, [{"id": "q1", "answers": [{"text": "1903", "answer_start": 46}]}])),
                             r"'q1'.*missing or empty field 'question'"),
        "missing_answers": (squad_obj((CTX, [{"id": "q1", "question": "?"}])), r"'q1'.*missing field 'answers'"),
        "missing_id": (squad_obj((CTX, [{"question": "?", "answers": []}])), r"missing field 'id'"),
        "duplicate_id": (squad_obj((CTX, [qa("q1", "?", CTX, "1903"), qa("q1", "?", CTX, "1911")])), r"'q1'.*duplicate id"),
        "impossible_with_answers": (squad_obj((CTX, [qa("q1", "?", CTX, "1903", impossible=True)])),
                                    r"is_impossible is true but 'answers' is not empty"),
    }


@pytest.mark.parametrize("case", sorted(bad_cases()))
def test_bad_input_is_a_clear_error(write_json, case):
    obj, pattern = bad_cases()[case]
    path = write_json(obj, f"{case}.json")
    with pytest.raises(SquadDataError, match=pattern) as info:
        read_squad(path, allow_impossible=True)
    assert str(path) in str(info.value)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="SQuAD file not found"):
        read_squad("/nonexistent/dev.json", allow_impossible=False)


def test_skip_mode_counts_and_logs(write_json, caplog):
    obj = squad_obj(
        (CTX, [qa("ok1", "?", CTX, "1903"),
               {"id": "bad1", "question": "?", "answers": [{"text": "1903", "answer_start": 0}]},
               {"id": "bad2", "question": "", "answers": [{"text": "1903", "answer_start": 46}]}]),
        ("", [qa("bad3", "?", "x", "x"), qa("bad4", "?", "x", "x")]),
    )
    with caplog.at_level(logging.WARNING):
        ds, report = read_squad(write_json(obj), allow_impossible=False, on_bad_example="skip")
    assert ds["id"] == ["ok1"]
    assert (report.kept, report.skipped, len(report.problems)) == (1, 4, 3)
    assert "skipped 4 question(s)" in caplog.text and "bad1" in caplog.text
    with pytest.raises(ValueError, match="on_bad_example"):
        read_squad(write_json(obj), allow_impossible=False, on_bad_example="ignore")


# Windows ---------------------------------------------------------------------------------------------
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


def normalize(s: str) -> str:
    return " ".join(s.lower().split())


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


@pytest.mark.parametrize("version", [1, 2])
def test_gold_logits_decode_to_gold_answers(write_json, real_dev_v1, real_dev_v2, tokenizer, version):
    """Windows + offsets + decoder round trip on real dev questions: logits peaked on the gold span
    (first answer, where a window holds it; [CLS] for no-answer) give EM = F1 = 100."""
    data = real_dev_v1 if version == 1 else real_dev_v2
    ds, _ = read_squad(write_json(data), allow_impossible=version == 2)
    train = encode_windows(ds, tokenizer, max_seq_length=96, doc_stride=32, train=True)
    evalw = encode_windows(ds, tokenizer, max_seq_length=96, doc_stride=32, train=False)
    assert [w["example_index"] for w in train] == [w["example_index"] for w in evalw]
    batch = WindowCollator(tokenizer.pad_token_id)(evalw)
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


def test_question_too_long(write_json, tokenizer):
    long_q = "why " * 40
    obj = squad_obj((CTX, [qa("short", "When?", CTX, "1903"), qa("long", long_q, CTX, "1911")]))
    ds, _ = read_squad(write_json(obj), allow_impossible=False)
    problems = check_question_lengths(ds, tokenizer, max_seq_length=48, doc_stride=8)
    assert [i for i, _ in problems] == [1] and "'long' has 40 tokens" in problems[0][1]
    with pytest.raises(SquadDataError, match="leaves no room"):
        check_question_lengths(ds, tokenizer, max_seq_length=10, doc_stride=8)

    cfg = {"data": {"validation_file": str(write_json(obj)), "max_seq_length": 48, "doc_stride": 8}}
    with pytest.raises(SquadDataError, match="'long' has 40 tokens.*raise data.max_seq_length"):
        SquadDataModule(cfg, tokenizer).setup("validate")
    dm = SquadDataModule({"data": {**cfg["data"], "on_bad_example": "skip"}}, tokenizer)
    dm.setup("validate")
    assert dm.examples("validation")["id"] == ["short"] and dm.reports["validation"].skipped == 1


# DataModule ------------------------------------------------------------------------------------------
def test_datamodule_batches(write_json, real_dev_v1, tokenizer):
    path = str(write_json(real_dev_v1))
    cfg = {"data": {"train_file": path, "validation_file": path, "max_seq_length": 128, "doc_stride": 32,
                    "batch_size": 4, "eval_batch_size": 8, "max_train_examples": 10, "max_eval_examples": None,
                    "drop_train_overlap": False}}
    dm = SquadDataModule(cfg, tokenizer)
    dm.setup("fit")
    assert len(dm.examples("train")) == 10
    assert len(dm.examples("validation")) == sum(len(p["qas"]) for p in real_dev_v1["data"][0]["paragraphs"])
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "context_mask", "example_index",
                          "feature_index", "start_positions", "end_positions"}
    assert (batch["start_positions"] > 0).all()  # v1: windows without their answer are left out
    lengths = []
    for batch in dm.val_dataloader():
        T = batch["input_ids"].shape[1]
        assert batch["offsets"].shape == (batch["input_ids"].shape[0], T, 2)
        assert batch["attention_mask"].sum(1).max() == T  # padded to the batch's longest, not to 128
        assert (batch["input_ids"][batch["attention_mask"] == 0] == tokenizer.pad_token_id).all()
        assert (batch["offsets"][batch["attention_mask"] == 0] == -1).all()
        lengths += batch["attention_mask"].sum(1).tolist()
    assert lengths == sorted(lengths, reverse=True) and len(set(lengths)) > 1
    assert len(lengths) == len(dm.windows("validation"))


def test_datamodule_v2_keeps_null_windows(write_json, real_dev_v2, tokenizer):
    path = str(write_json(real_dev_v2))
    dm = SquadDataModule({"data": {"train_file": path, "version_2_with_negative": True, "max_seq_length": 96,
                                   "doc_stride": 32, "batch_size": 1000}}, tokenizer)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    impossible = torch.tensor([not dm.examples("train")[i]["answers"]["text"] for i in batch["example_index"].tolist()])
    assert (batch["start_positions"][impossible] == 0).all() and impossible.any()
    assert (batch["start_positions"][~impossible] == 0).any() and (batch["start_positions"][~impossible] > 0).any()
    assert not dm.has_split("validation")


def test_datamodule_drops_training_paragraphs_that_are_evaluated(write_json, real_dev_v1, tokenizer, caplog):
    paragraphs = real_dev_v1["data"][0]["paragraphs"]
    held_out = {**real_dev_v1, "data": [{**real_dev_v1["data"][0], "paragraphs": paragraphs[2:]}]}
    cfg = {"data": {"train_file": str(write_json(real_dev_v1, "train.json")), "validation_file": str(write_json(held_out, "dev.json")),
                    "max_seq_length": 128, "doc_stride": 32}}
    with caplog.at_level(logging.WARNING):
        dm = SquadDataModule(cfg, tokenizer)
        dm.setup("fit")
    kept = dm.examples("train")
    assert len(kept) == len(paragraphs[0]["qas"]) + len(paragraphs[1]["qas"])
    assert not set(kept["context"]) & set(dm.examples("validation")["context"])
    assert f"left out {len(paragraphs[2]['qas'])} of" in caplog.text
    cfg["data"]["drop_train_overlap"] = False
    dm = SquadDataModule(cfg, tokenizer)
    dm.setup("fit")
    assert len(dm.examples("train")) == sum(len(p["qas"]) for p in paragraphs)


def test_datamodule_rejects_windows_longer_than_the_encoder(tokenizer):
    with pytest.raises(ValueError, match="exceeds the encoder's 512 positions"):
        SquadDataModule({"data": {"max_seq_length": 1024}}, tokenizer)
