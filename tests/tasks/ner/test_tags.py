"""NER tags (tasks/ner/tags.py): IOB1 -> BIO2, the tag_scheme setting, the tag set and tag ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.ner.data import NerDataSettings
from sesame.tasks.ner.metrics import get_entities
from sesame.tasks.ner.readers import read_conll
from sesame.tasks.ner.data import load_tag_names
from sesame.tasks.ner.tags import apply_tag_scheme, build_tag_set, encode_tags, iob1_to_bio2, is_iob1
from sesame.tasks.core.paths import data_dir_path

CONLL2003_TRAIN = Path(data_dir_path("conll2003/eng.train"))


def test_iob1_to_bio2() -> None:
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG", "B-ORG", "I-ORG"]
    assert is_iob1([iob1])
    bio = iob1_to_bio2(iob1)
    assert bio == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG", "B-ORG", "I-ORG"]
    assert not is_iob1([bio])
    assert iob1_to_bio2(bio) == bio  # idempotent on BIO2
    # The conversion keeps the chunks conlleval reads.
    assert get_entities(iob1) == get_entities(bio)


def test_tag_scheme_settings(write_file) -> None:
    path = write_file("iob1.conll", "EU\tI-ORG\nrejects\tO\n\nPeter\tI-PER\n")
    assert apply_tag_scheme(read_conll(path), "auto").tags == [["B-ORG", "O"], ["B-PER"]]
    assert apply_tag_scheme(read_conll(path), "iob1").tags == [["B-ORG", "O"], ["B-PER"]]
    assert apply_tag_scheme(read_conll(path), "bio").tags == [["I-ORG", "O"], ["I-PER"]]
    with pytest.raises(ConfigError, match="tag_scheme"):
        apply_tag_scheme(read_conll(path), "bioes")


def test_encode_tags_names_the_line_of_an_unknown_tag(write_file) -> None:
    ex = read_conll(write_file("dev.conll", "Hi\tO\n\nParis\tO\nrocks\tB-LOC\n"))
    with pytest.raises(DataError, match=r"dev.conll:4: tag 'B-LOC' in the dev file is not in the training"):
        encode_tags(ex, ["O", "B-PER", "I-PER"], role="the dev")
    assert [t.tolist() for t in encode_tags(ex, ["O", "B-LOC", "I-LOC"])] == [[0], [0, 1]]


def test_load_tag_names_needs_a_training_file_or_valid_names(write_file) -> None:
    base = {
        "train_file": None, "validation_file": None, "format": "auto", "tag_column": -1, "tag_scheme": "auto",
        "max_seq_length": 16, "label_all_subwords": False, "batch_size": 2, "eval_batch_size": 2,
        "max_train_examples": None, "max_eval_examples": None, "num_workers": 0, "group_by_length": False, "pad_to_multiple_of": None, "max_tokens": None, "test_file": None,
        "tag_names": None,
    }
    with pytest.raises(ConfigError, match="set data.train_file.*or data.tag_names"):
        load_tag_names(NerDataSettings.from_config(base))
    with pytest.raises(ConfigError, match=r"data.tag_names: tag 'PER' is not BIO"):
        load_tag_names(NerDataSettings.from_config({**base, "tag_names": ["O", "PER"]}))
    assert load_tag_names(NerDataSettings.from_config({**base, "tag_names": ["O", "B-PER"]})) == ["O", "B-PER"]
    train = write_file("iob1.conll", "EU\tI-ORG\nrejects\tO\n")  # converted to BIO2 before the set is built
    assert load_tag_names(NerDataSettings.from_config({**base, "train_file": str(train)})) == ["O", "B-ORG", "I-ORG"]


@pytest.mark.skipif(not CONLL2003_TRAIN.is_file(), reason="CoNLL-2003 is not in $SESAME_DATA_DIR")
def test_conll2003_is_detected_as_iob1_and_converted() -> None:
    ex = read_conll(CONLL2003_TRAIN)
    assert len(ex) == 14041 and is_iob1(ex.tags)
    before = [get_entities(t) for t in ex.tags[:2000]]
    converted = apply_tag_scheme(ex, "auto")
    assert not is_iob1(converted.tags)
    assert [get_entities(t) for t in converted.tags[:2000]] == before
    assert build_tag_set(converted.tags) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
