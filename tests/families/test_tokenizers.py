"""Each family's tokenizer with sesame's input encoding: SQuAD labels round-trip to the gold answer,
pre-split words (NER) are encoded as in running text, and pairs keep their segments."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.encoders.families import offsets_include_spaces, trim_space_offsets, words_tokenizer
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.qa.readers import read_squad
from sesame.tasks.qa.windows import encode_windows
from tests.families.builders import FAMILY_SPECS

FAMILIES = list(FAMILY_SPECS)
#: Real SQuAD train questions (the shipped slice's first ones) and a window size that cuts most
#: contexts into several windows, so answers also sit near window edges.
QUESTIONS, MAX_LENGTH, STRIDE = 300, 128, 48


@pytest.fixture(scope="module")
def squad_questions():
    questions, _ = read_squad(shipped_path("squad_v1/train.slice.json"), allow_impossible=False, on_bad_example="error",
                              key="train_file")
    return questions.select(range(QUESTIONS))


@pytest.mark.parametrize("name", FAMILIES)
def test_qa_labels_round_trip_to_the_gold_answer(name, family_dir, squad_questions):
    """Of the training windows holding their answer, >= 99 % give back exactly the gold answer text
    from the labelled token span's char offsets (BERT's WordPiece: 99.6 %). The misses are answers
    that end inside a token (SQuAD's "Rober" of "Roberson"; byte-level BPE's '",' after a quote)."""
    tokenizer = load_tokenizer(str(family_dir(name)))
    labelled = encode_windows(squad_questions, tokenizer, max_seq_length=MAX_LENGTH, doc_stride=STRIDE, train=True)
    located = encode_windows(squad_questions, tokenizer, max_seq_length=MAX_LENGTH, doc_stride=STRIDE, train=False)
    assert len(labelled) == len(located)
    hits, total = 0, 0
    for window, offsets in zip(labelled, located):
        start, end = window["start_positions"], window["end_positions"]
        assert not window["context_mask"][0]  # position 0, the no-answer pointer, is never context
        if start == 0:
            continue
        question = squad_questions[int(window["example_index"])]
        got = question["context"][offsets["offsets"][start][0] : offsets["offsets"][end][1]]
        hits += got == question["answers"]["text"][0]
        total += 1
    assert total > 0.8 * QUESTIONS
    assert hits / total >= 0.99, f"{name}: {hits}/{total} answers recovered"


def test_offsets_are_trimmed_of_the_space_a_token_takes_in(family_dir):
    """DeBERTa-v2/v3's fast tokenizer gives ``▁word`` the span " word"; windows narrow it to "word"."""
    deberta, bert = load_tokenizer(str(family_dir("deberta-v2"))), load_tokenizer(str(family_dir("bert")))
    assert offsets_include_spaces(deberta) and not offsets_include_spaces(bert)
    offsets = np.array([[0, 0], [0, 3], [3, 7], [7, 9], [0, 0]])
    keep = np.array([False, True, True, True, False])
    trimmed = trim_space_offsets(offsets, keep, "Who  won? ")
    assert trimmed.tolist() == [[0, 0], [0, 3], [5, 7], [7, 9], [0, 0]]


@pytest.mark.parametrize("name", ["roberta", "longformer", "bart", "modernbert"])
def test_pre_split_words_get_the_prefix_space_of_running_text(name, family_dir):
    """Byte-level BPE encodes a word after a space as ``Ġword``; NER's pre-split words get that form
    (transformers 5 would encode each as if it began the text)."""
    tokenizer = load_tokenizer(str(family_dir(name)))
    words = words_tokenizer(tokenizer)
    tokens = words.convert_ids_to_tokens(words([["Marie", "lived", "in", "Paris"]], is_split_into_words=True)["input_ids"][0])
    running = tokenizer.convert_ids_to_tokens(tokenizer(" Marie lived in Paris")["input_ids"])
    assert tokens == running


@pytest.mark.parametrize("name", ["bert", "albert", "xlnet", "deberta-v2", "t5"])
def test_other_tokenizers_are_used_for_words_as_they_are(name, family_dir):
    tokenizer = load_tokenizer(str(family_dir(name)))
    assert words_tokenizer(tokenizer) is tokenizer


@pytest.mark.parametrize("name", FAMILIES)
def test_tokenizers_pad_on_the_right_and_give_segments_their_template_assigns(name, family_dir):
    """XLNet's tokenizer pads on the left by default; sesame's collators pad on the right, and so does
    every tokenizer it loads. ALBERT's and XLNet's templates give segment B its ids, which
    transformers 5 leaves out of their inputs: sesame asks for them."""
    tokenizer = load_tokenizer(str(family_dir(name)))
    assert tokenizer.padding_side == "right"
    enc = tokenizer("a b", "c", return_token_type_ids=True)
    assert ("token_type_ids" in tokenizer("a b", "c")) == any(t != 0 for t in enc["token_type_ids"])


@pytest.mark.parametrize("name", FAMILIES)
def test_raw_text_words_are_whole_clusters_and_english_words_stay_whole(name, family_dir):
    """NER's raw-text words with each family's pre-tokeniser (byte-level BPE, SentencePiece, WordPiece):
    pre-token spans in the text's own coordinates, no word ends inside a grapheme cluster or is only
    invisible characters, and ASCII text is split as without a tokenizer."""
    from sesame.tasks.encoders.families import pre_token_spans
    from sesame.tasks.core.graphemes import cluster_bounds
    from sesame.tasks.ner.predict import split_words
    from tests.conftest import UNICODE_LINES

    tokenizer = load_tokenizer(str(family_dir(name)))
    for text in UNICODE_LINES:
        spans = pre_token_spans(tokenizer, text)
        assert len(spans) and (spans[:, 0] <= spans[:, 1]).all() and spans.min() >= 0 and spans.max() <= len(text)
        words, offsets = split_words(text, tokenizer)
        assert words == [text[s:e] for s, e in offsets.tolist()] and np.isin(offsets, cluster_bounds(text)).all()
        assert all(any(unicodedata.category(c)[0] not in "MCZ" for c in w) for w in words), words  # a visible base
    english = "Marie Curie's state-of-the-art lab (COVID19, foo_bar) didn't close."
    assert split_words(english, tokenizer)[0] == split_words(english)[0]
