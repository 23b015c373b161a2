"""benchmarks/holdout_overlap.py on made-up rows: which held-out texts a training part already holds, and the
accuracy split along that line."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def overlap():
    return load_benchmark("holdout_overlap")


def test_a_phrase_of_a_training_sentence_counts_as_contained_and_a_new_sentence_does_not(overlap):
    corpus = ["a gorgeous , witty , seductive movie . ", "the film is strictly routine"]
    texts = ["witty , seductive", "the film is strictly routine ", "a witty movie", "routine movie"]
    # white space at either end is the TSV's, not the text's; a phrase must occur as it is, not in pieces
    assert overlap.contained(texts, corpus) == [True, True, False, False]


def test_accuracy_is_split_into_contained_rows_and_the_rest(overlap):
    labels = {3: 1, 5: 0, 8: 1, 9: 0}
    predictions = {3: 1, 5: 1, 8: 1, 9: 0}
    overall, inside, rest = overlap.split_accuracy(labels, predictions, inside={3, 5})
    assert (overall, inside, rest) == (0.75, 0.5, 1.0)
