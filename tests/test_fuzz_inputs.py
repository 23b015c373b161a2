"""Fuzzed user input beyond data files (``tests/fuzz_targets.py``): every task's ``sesame-predict`` input,
``sesame-score``'s files and the numeric settings. Each case is read correctly (one output per input
line, in order; a QA answer is the context's text at its offsets; NER entities cover whole words) or
refused with one line naming the file, the line and the field (or the setting). Derandomised and
small, so CI sees the same cases every run; ``benchmarks/fuzz_readers.py`` runs thousands of random ones.

Also the invariants on random Unicode text with random model outputs (not only those of a tiny model):
QA answers decoded from random logits, NER entities from random tags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from sesame.tasks.inference.predictor import Predictor  # noqa: E402
from tests.fuzz_targets import (  # noqa: E402
    PREDICT_FIELDS, PREDICT_RUNS, READ, REFUSED, UNICODE_TEXT, FuzzContext, TARGETS, check_entity_spans,
)
from tests.tasks.inference.test_predictor import trained_run  # noqa: E402


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


BY_NAME = {t.name: t for t in TARGETS}


@pytest.fixture(scope="module")
def context(make_cfg, tmp_path_factory) -> FuzzContext:
    runs = {task: trained_run(name, make_cfg, tmp_path_factory) for task, name in PREDICT_RUNS.items()}
    # Chunks and batches of 2: a file's inputs span several, and order must survive the length sorting.
    return FuzzContext(predictors={task: Predictor.from_run(run, batch_size=2, chunk_size=3) for task, run in runs.items()},
                       compose=make_cfg)


@pytest.mark.parametrize("task", list(PREDICT_FIELDS))
@fuzz(20)
@given(data=st.data())
def test_predict_input_is_predicted_in_order_or_refused_naming_line_and_field(context, task, data):
    target = BY_NAME[f"predict_{task}"]
    assert target.check(context, data.draw(target.strategy)) in (READ, REFUSED)


@fuzz(30)
@given(data=st.data())
def test_score_files_are_scored_or_refused_naming_the_file(context, data):
    target = BY_NAME["score"]
    assert target.check(context, data.draw(target.strategy)) in (READ, REFUSED)


@fuzz(15)
@given(data=st.data())
def test_a_numeric_setting_is_taken_as_given_or_refused_naming_the_key(context, data):
    target = BY_NAME["settings"]
    assert target.check(context, data.draw(target.strategy)) in (READ, REFUSED)


@pytest.fixture(scope="module")
def unicode_tokenizer(unicode_bert_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(unicode_bert_dir))


@fuzz(30)
@given(context_text=UNICODE_TEXT.filter(str.strip), question=UNICODE_TEXT.filter(str.strip),
       seed=st.integers(0, 2**31 - 1), version_2=st.booleans())
def test_a_decoded_answer_is_the_contexts_text_at_its_offsets(unicode_tokenizer, context_text, question, seed, version_2):
    import datasets
    import torch

    from sesame.tasks.qa.predictions import decode_predictions
    from sesame.tasks.qa.windows import encode_windows, window_collator

    examples = datasets.Dataset.from_dict({"id": ["q"], "question": [question], "context": [context_text]})
    windows = encode_windows(examples, unicode_tokenizer, max_seq_length=48, doc_stride=16, train=False)
    batch = window_collator(unicode_tokenizer.pad_token_id)(windows)
    generator = torch.Generator().manual_seed(seed)
    shape = batch["input_ids"].shape
    start, end = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
    preds = decode_predictions(start, end, batch["offsets"], batch["example_index"], [context_text], ["q"],
                               n_best_size=5, max_answer_length=8, allow_null=version_2)
    for entry in preds["q"].nbest:
        if entry["char_start"] >= 0:
            assert context_text[entry["char_start"]:entry["char_end"]] == entry["text"]
    best = next((e for e in preds["q"].nbest if e["text"] == preds["q"].text), None)
    assert preds["q"].text == "" or (best is not None and context_text[best["char_start"]:best["char_end"]] == best["text"])


class _RandomTags:
    """A stand-in for an NER predictor's tokenizer (``check_entity_spans`` only splits words with it)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer


@fuzz(30)
@given(text=UNICODE_TEXT, data=st.data())
def test_ner_entities_of_random_tags_cover_whole_words(context, text, data):
    predictor = context.predictors["ner"]
    sentence = predictor.prepare({"text": text}, "input record 1") if text.strip() else None
    if sentence is None or not sentence.words:
        return
    names = list(predictor.tag_names)
    tags = data.draw(st.lists(st.sampled_from(names), min_size=len(sentence.words), max_size=len(sentence.words)))
    output = predictor._output(sentence, tags, np.full(len(tags), 0.5))
    check_entity_spans(predictor, {"text": text}, output)


def test_sesame_predict_writes_one_line_per_input_line_in_order(context, tmp_path):
    from sesame.tasks.cli.predict import main

    for task, fields in PREDICT_FIELDS.items():
        run = context.predictors["ner" if task == "ner_tokens" else task].runner.trained
        inputs = [{**fields, "id": i} for i in range(7)]
        source = tmp_path / f"{task}.jsonl"
        source.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in inputs) + "\n\n", encoding="utf-8")
        out = tmp_path / f"{task}.out.jsonl"
        main([str(run.checkpoint), str(source), "-o", str(out), "--batch-size", "2", "--no-progress"])
        written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert [w["id"] for w in written] == list(range(7)), task
