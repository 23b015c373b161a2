"""TaggingPredictor: the tags evaluation wrote (softmax and CRF heads), raw text split into words with
char offsets that index the text (also text that is not space-separated English: CJK split by the
tokenizer, RTL, emoji and combining marks in whole grapheme clusters), long sentences in several
windows, empty inputs refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.core.errors import DataError
from sesame.tasks.core.graphemes import cluster_bounds
from sesame.tasks.ner.metrics import get_entities
from sesame.tasks.ner.predict import split_words
from sesame.tasks.ner.readers import read_conll
from sesame.tasks.inference.predictor import Predictor
from tests.conftest import UNICODE_LINES, read_conll_predictions
from tests.tasks.inference.test_predictor import trained_run

TEXTS = [
    "Marie Curie lived in Paris, didn't she?",
    "  state-of-the-art   NLP\tfrom O'Neil @ Google (2024)... 😀 done  ",
    "Redondo Beach Blvd . you were in the borderlines of Gardena / Compton",
]

#: The words of each of :data:`UNICODE_LINES` with the tiny unicode tokenizer (BERT's normaliser and
#: pre-tokeniser: each CJK character apart; the Japanese kana run after 住 stays one word).
UNICODE_WORDS = [
    ["我", "爱", "北", "京", "天", "安", "门", "。", "居", "里", "夫", "人", "住", "在", "巴", "黎", "。"],
    ["東", "京", "に", "住", "んでいます", "。"],
    ["مرحبا", "بالعالم", "،", "ماري", "كوري", "عاشت", "في", "باريس", "."],
    ["שלום", "עולם", ",", "מארי", "קירי", "גרה", "בפריז", "."],  # no word of the direction marks
    ["👨\u200d👩\u200d👧", "family", "🇫🇷", "flag", "👍🏽", "ok", "❤\ufe0f", "love"],
    ["Le", "cafe\u0301", "de", "Marie", "Curie", ",", "cre\u0300me-brûlée", "nai\u0308ve", "a", "b", "c", "d"],
    ["नमस्ते", "दुनिया"],
]


@pytest.fixture(scope="module", params=[False, True], ids=["softmax", "crf"])
def ner_run(request, make_cfg, tmp_path_factory) -> Path:
    return trained_run("ner_crf" if request.param else "ner", make_cfg, tmp_path_factory)


def test_tags_of_the_dev_words_equal_the_evaluation_file(ner_run):
    data = OmegaConf.load(ner_run / "config.yaml").data
    dev = read_conll(data.validation_file).head(data.max_eval_examples)
    assert max(len(s) for s in dev.tokens) > 20  # some sentences take two windows of 24 tokens
    outputs = Predictor.from_run(ner_run)([{"tokens": words} for words in dev.tokens])
    _, _, written = read_conll_predictions(ner_run / "val_predictions.conll")
    assert [o["tags"] for o in outputs] == written
    assert [o["tokens"] for o in outputs] == dev.tokens
    assert sum(len(o["entities"]) for o in outputs) > 0
    for o in outputs:  # the entities are the tags' chunks; offsets index the words joined by spaces
        joined = " ".join(o["tokens"])
        spans = get_entities(o["tags"], mode="conlleval")  # the run's task.entity_metric
        assert [(e["type"], e["text"]) for e in o["entities"]] == [(k, " ".join(o["tokens"][s:t + 1])) for k, s, t in spans]
        assert all(joined[e["char_start"]:e["char_end"]] == e["text"] and 0 < e["score"] <= 1 for e in o["entities"])


def test_raw_text_is_split_into_words_whose_offsets_index_it(ner_run):
    outputs = Predictor.from_run(ner_run)([{"id": i, "text": t} for i, t in enumerate(TEXTS)])
    for text, out in zip(TEXTS, outputs):
        words, offsets = split_words(text)
        assert out["tokens"] == words == [text[s:e] for s, e in offsets]
        assert len(out["tags"]) == len(words)
        for entity in out["entities"]:
            assert text[entity["char_start"]:entity["char_end"]] == entity["text"] and entity["text"].strip() == entity["text"]
    assert sum(len(o["entities"]) for o in outputs) > 0
    # Raw text and the same words given as tokens get the same tags.
    as_tokens = Predictor.from_run(ner_run)([{"tokens": o["tokens"]} for o in outputs])
    assert [o["tags"] for o in as_tokens] == [o["tags"] for o in outputs]


def test_the_word_pattern():
    words, offsets = split_words("state-of-the-art O'Neil didn't, e.g. U.S.A (x) 😀 ok")
    assert words == ["state-of-the-art", "O'Neil", "didn't", ",", "e", ".", "g", ".", "U", ".", "S", ".", "A",
                     "(", "x", ")", "😀", "ok"]
    assert offsets.shape == (len(words), 2) and offsets[0].tolist() == [0, 16]
    assert split_words("   ")[0] == [] and split_words("")[1].shape == (0, 2)


def test_unicode_text_is_split_by_the_tokenizer_into_whole_clusters(unicode_bert_dir):
    tokenizer = load_tokenizer(str(unicode_bert_dir))
    for text, want in zip(UNICODE_LINES, UNICODE_WORDS):
        words, offsets = split_words(text, tokenizer)
        assert words == want == [text[s:e] for s, e in offsets.tolist()]
        assert np.isin(offsets, cluster_bounds(text)).all()  # no word ends inside a cluster
    # Without a tokenizer (step 1 only) a Chinese clause is one word; ASCII words are never cut.
    assert split_words(UNICODE_LINES[0])[0][:2] == ["我爱北京天安门", "。"]
    assert split_words("COVID19 foo_bar", tokenizer)[0] == ["COVID19", "foo_bar"]


def test_japanese_words_end_where_katakana_hiragana_and_other_scripts_meet():
    # BERT's normaliser cuts Han characters, no tokenizer of the family cuts kana: 'タワーは1958' stayed one word
    tokenizer = load_tokenizer("minilm_l6")
    assert split_words("タワーは1958")[0] == ["タワー", "は", "1958"]
    assert split_words("東京タワーは1958年に完成した。", tokenizer)[0] == [
        "東", "京", "タワー", "は", "1958", "年", "に", "完", "成", "した", "。"]
    # the prolonged sound mark and the iteration marks stay with their run; Korean eojeol and ASCII are untouched
    assert split_words("ラーメンとゝ")[0] == ["ラーメン", "とゝ"]
    assert split_words("서울은 한국의 수도이다 state-of-the-art")[0] == ["서울은", "한국의", "수도이다", "state-of-the-art"]


def test_the_default_tokenizer_puts_cjk_characters_apart_and_leaves_english_words_as_they_were():
    tokenizer = load_tokenizer("minilm_l6")  # all-MiniLM-L6-v2's BertTokenizerFast, uncased, strips accents
    assert split_words("我爱北京。iPhone手机", tokenizer)[0] == ["我", "爱", "北", "京", "。", "iPhone", "手", "机"]
    assert split_words("東京に住んでいます", tokenizer)[0] == ["東", "京", "に", "住", "んでいます"]
    assert split_words("cafe\u0301 ❤\ufe0f \u200d x", tokenizer)[0] == ["cafe\u0301", "❤\ufe0f", "x"]
    for text in TEXTS:
        assert split_words(text, tokenizer)[0] == split_words(text)[0]


@pytest.fixture(scope="module")
def unicode_ner_run(make_cfg, tmp_path_factory, unicode_bert_dir) -> Path:
    return trained_run("ner", make_cfg, tmp_path_factory, encoder=unicode_bert_dir)


def test_unicode_text_gets_a_tag_per_word_and_entities_of_whole_clusters(unicode_ner_run):
    predictor = Predictor.from_run(unicode_ner_run)
    outputs = predictor([{"text": t} for t in UNICODE_LINES])
    assert [o["tokens"] for o in outputs] == UNICODE_WORDS
    for text, out in zip(UNICODE_LINES, outputs):
        assert len(out["tags"]) == len(out["tokens"])
        bounds = cluster_bounds(text)
        for entity in out["entities"]:
            assert text[entity["char_start"]:entity["char_end"]] == entity["text"]
            assert entity["char_start"] in bounds and entity["char_end"] in bounds
    assert sum(len(o["entities"]) for o in outputs) > 0
    as_tokens = predictor([{"tokens": words} for words in UNICODE_WORDS])
    assert [o["tags"] for o in as_tokens] == [o["tags"] for o in outputs]


def test_a_sentence_longer_than_a_window_and_one_without_words(ner_run):
    predictor = Predictor.from_run(ner_run)
    long_words = (TEXTS[2].split() * 7)[:80]  # more than 3 windows of 24 tokens
    long, invisible, short = predictor([{"tokens": long_words}, {"text": "\u200d \u200f\u0301"}, {"tokens": long_words[:10]}])
    assert len(long["tags"]) == 80 and long["tokens"] == long_words
    assert invisible == {"entities": [], "tokens": [], "tags": []}  # a joiner, a direction mark, a lone accent
    assert len(short["tags"]) == 10
    with pytest.raises(DataError, match="record 2: 'text' is empty"):  # every task's rule (predictor.string_field)
        predictor([{"tokens": long_words[:10]}, {"text": "   "}])


def test_empty_inputs_are_refused_naming_the_line_and_the_field(ner_run):
    predictor = Predictor.from_run(ner_run)
    with pytest.raises(DataError, match=r"record 2: 'tokens' is empty\. Fix: .*\{\"tokens\""):
        predictor([{"tokens": ["a"]}, {"tokens": []}])
    for text in ("", "  \t\n"):
        with pytest.raises(DataError, match=r"record 1: 'text' is empty or only white space\. Fix: "):
            predictor([{"text": text}])
    with pytest.raises(DataError, match=r"record 1: 'tokens' word 2 \(' '\) is empty or only white space\. Fix: leave it out"):
        predictor([{"tokens": ["a", " ", "b"]}])


def test_entity_scores_are_the_mean_probability_of_the_predicted_tags(ner_run):
    import torch

    from sesame.tasks.inference.predictor import runner_for

    runner = runner_for(ner_run)
    (out,) = Predictor.from_runner(runner)([{"tokens": ["Marie", "Curie", "lived", "in", "Paris"]}])
    enc = runner.tokenizer()([out["tokens"]], is_split_into_words=True, return_tensors="pt")
    word_ids = enc.word_ids(0)
    first = [i for i, w in enumerate(word_ids) if w is not None and word_ids[i - 1] != w]  # each word's first sub-token
    batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    names = list(runner.cfg["data"]["tag_names"])
    probs = torch.softmax(runner(batch)[0], dim=-1)[first]
    word_probs = [float(probs[i, names.index(tag)]) for i, tag in enumerate(out["tags"])]
    for entity, (_, s, e) in zip(out["entities"], get_entities(out["tags"])):
        assert entity["score"] == pytest.approx(np.mean(word_probs[s:e + 1]), abs=1e-6)
    assert out["entities"]


def test_bad_records_name_the_field(ner_run):
    predictor = Predictor.from_run(ner_run)
    with pytest.raises(DataError, match="record 1: both 'text' and 'tokens'"):
        predictor([{"text": "a", "tokens": ["a"]}])
    with pytest.raises(DataError, match="record 2: 'tokens' must be a list of strings"):
        predictor([{"text": "a"}, {"tokens": "a b"}])
    with pytest.raises(DataError, match=r"record 1: no 'text' field\. Fix: .*\{\"tokens\""):
        predictor([{"words": ["a"]}])
