"""Entity metrics against seqeval on random (often malformed) BIO sequences, and the CoNLL writer."""

from __future__ import annotations

import random
import warnings

import pytest
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities
from seqeval.scheme import IOB2

from sesame.tasks.ner.metrics import entity_scores, format_conll_predictions, format_report, get_entities, write_conll_predictions

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-creative-work", "I-creative-work"]


def _random_corpus(rng: random.Random, n: int) -> list[list[str]]:
    # Uniform tags give many invalid transitions (O -> I-X, B-X -> I-Y, I-X at the start).
    return [[rng.choice(TAGS) for _ in range(rng.randint(0, 12))] for _ in range(n)]


def _perturb(rng: random.Random, corpus: list[list[str]]) -> list[list[str]]:
    # Predictions that agree with gold most of the time, so there are true positives to count.
    return [[t if rng.random() < 0.7 else rng.choice(TAGS) for t in sent] for sent in corpus]


def _seqeval(gold: list[list[str]], pred: list[list[str]], strict: bool) -> dict:
    kwargs = {"mode": "strict", "scheme": IOB2} if strict else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division warnings for absent types
        report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
        overall = (
            precision_score(gold, pred, zero_division=0, **kwargs),
            recall_score(gold, pred, zero_division=0, **kwargs),
            f1_score(gold, pred, zero_division=0, **kwargs),
        )
    return {"report": report, "overall": overall}


@pytest.mark.parametrize("mode", ["conlleval", "strict"])
@pytest.mark.parametrize("seed", range(6))
def test_matches_seqeval_on_random_sequences(mode: str, seed: int) -> None:
    rng = random.Random(seed)
    gold = _random_corpus(rng, 40)
    pred = _perturb(rng, gold)
    ours = entity_scores(gold, pred, mode=mode)
    ref = _seqeval(gold, pred, strict=mode == "strict")
    assert ours.overall.support > 0 and ours.overall.correct > 0  # the comparison is not vacuous
    assert ours.overall.precision == pytest.approx(ref["overall"][0], abs=1e-12)
    assert ours.overall.recall == pytest.approx(ref["overall"][1], abs=1e-12)
    assert ours.overall.f1 == pytest.approx(ref["overall"][2], abs=1e-12)
    report = ref["report"]
    ref_types = {k for k in report if not k.endswith(" avg")}
    # seqeval lists types with gold or predicted entities; so do we.
    assert set(ours.per_type) == ref_types
    for name in ref_types:
        score = ours.per_type[name]
        assert score.precision == pytest.approx(report[name]["precision"], abs=1e-12), name
        assert score.recall == pytest.approx(report[name]["recall"], abs=1e-12), name
        assert score.f1 == pytest.approx(report[name]["f1-score"], abs=1e-12), name
        assert score.support == report[name]["support"], name
    assert ours.overall.support == report["micro avg"]["support"]


@pytest.mark.parametrize("seed", range(20))
def test_conlleval_spans_equal_seqeval_get_entities(seed: int) -> None:
    rng = random.Random(100 + seed)
    tags = [rng.choice(TAGS) for _ in range(rng.randint(0, 15))]
    assert get_entities(tags) == seqeval_entities(tags)


def test_modes_differ_on_invalid_transitions() -> None:
    tags = ["O", "I-PER", "I-PER", "B-LOC", "I-PER", "B-creative-work", "I-creative-work"]
    assert get_entities(tags) == [("PER", 1, 2), ("LOC", 3, 3), ("PER", 4, 4), ("creative-work", 5, 6)]
    assert get_entities(tags, mode="strict") == [("LOC", 3, 3), ("creative-work", 5, 6)]


def test_perfect_and_empty_predictions() -> None:
    gold = [["B-PER", "I-PER", "O"], ["B-LOC"]]
    perfect = entity_scores(gold, gold)
    assert (perfect.overall.precision, perfect.overall.recall, perfect.overall.f1) == (1.0, 1.0, 1.0)
    empty = entity_scores(gold, [["O"] * 3, ["O"]])
    assert (empty.overall.precision, empty.overall.recall, empty.overall.f1, empty.overall.support) == (0.0, 0.0, 0.0, 2)
    # Entities never cross sentence boundaries.
    split = entity_scores([["B-PER"], ["I-PER"]], [["B-PER"], ["I-PER"]])
    assert split.overall.support == 2
    flat = perfect.as_flat_dict("val_")
    assert flat["val_f1"] == 1.0 and flat["val_PER_f1"] == 1.0
    assert "overall" in format_report(perfect)


def test_input_errors() -> None:
    with pytest.raises(ValueError, match="2 gold tags but 1 predicted"):
        entity_scores([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="1 gold sentences but 2"):
        entity_scores([["O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="not BIO"):
        entity_scores([["PER"]], [["O"]])
    with pytest.raises(ValueError, match="mode"):
        entity_scores([["O"]], [["O"]], mode="lenient")


def test_conll_prediction_writer(tmp_path) -> None:
    tokens = [["New", "York"], ["a b", "x"]]
    gold = [["B-LOC", "I-LOC"], ["O", "O"]]
    pred = [["B-LOC", "O"], ["O", "B-PER"]]
    path = write_conll_predictions(tmp_path / "out" / "predictions.conll", tokens, gold, pred)
    text = path.read_text(encoding="utf-8")
    assert text == "New B-LOC B-LOC\nYork I-LOC O\n\na_b O O\nx O B-PER\n\n"
    # Round trip: every non-blank line has three columns and the conlleval reading gives the scores.
    rows = [line.split() for line in text.splitlines() if line]
    assert all(len(r) == 3 for r in rows)
    with pytest.raises(ValueError, match="sentence 0"):
        format_conll_predictions([["a"]], [["O", "O"]], [["O"]])
