"""Examples that are groups of sequences ([B, G, T], multiple choice): padded on both axes, sized for
sorting, flattened for the encoder, keyed per sequence by the feature cache and per example by the
teacher-logit cache. Every task of one sequence per example sees exactly what it saw before."""

from __future__ import annotations

import numpy as np
import torch

from sesame.tasks.encoders.encoder import Encoder, encoder_inputs
from sesame.tasks.encoders.encoder_settings import EncoderSettings
from sesame.tasks.inputs.batching import PaddingCollator, example_size
from sesame.tasks.inputs.feature_cache import build_or_open, example_keys, sequence_keys


def _group(*lengths: int, start: int = 5) -> list[list[int]]:
    return [list(range(start, start + n)) for n in lengths]


def test_grouped_fields_are_padded_on_both_axes_and_absent_members_are_all_padding():
    collate = PaddingCollator({"input_ids": 0}, grouped=("input_ids", "attention_mask"))
    examples = [{"input_ids": _group(3, 5), "attention_mask": [[1] * 3, [1] * 5], "label": 1},
                {"input_ids": _group(2, 2, 4), "attention_mask": [[1] * 2, [1] * 2, [1] * 4], "label": 0}]
    batch = collate(examples)
    assert batch["input_ids"].shape == (2, 3, 5) and batch["label"].tolist() == [1, 0]
    assert batch["input_ids"][0, 1].tolist() == [5, 6, 7, 8, 9] and batch["input_ids"][0, 0].tolist() == [5, 6, 7, 0, 0]
    assert batch["attention_mask"][0, 2].tolist() == [0] * 5  # the first example has no third member
    assert batch["attention_mask"].sum().item() == 3 + 5 + 2 + 2 + 4
    # A pad multiple rounds the token axis only.
    assert collate.padded_to(4, 16)(examples)["input_ids"].shape == (2, 3, 8)


def test_example_size_is_the_padded_cost_of_a_group_and_the_length_of_a_sequence():
    assert example_size([7, 8, 9]) == 3
    assert example_size(_group(3, 5)) == 2 * 5
    assert example_size(np.zeros((4, 6), dtype=np.int64)) == 24


def test_encoder_inputs_flatten_groups_and_leave_sequences_as_they_are():
    ids = torch.arange(2 * 3 * 4).reshape(2, 3, 4)
    mask = torch.ones(2, 3, 4, dtype=torch.long)
    mask[1, 2] = 0  # an absent member
    flat = encoder_inputs({"input_ids": ids, "attention_mask": mask, "label": torch.tensor([0, 1])})
    assert set(flat) == {"input_ids", "attention_mask"}
    assert torch.equal(flat["input_ids"], ids.reshape(6, 4)) and torch.equal(flat["attention_mask"], mask.reshape(6, 4))
    plain = {"input_ids": ids[0], "attention_mask": mask[0]}
    assert all(encoder_inputs(plain)[k] is plain[k] for k in plain)


def test_example_keys_are_one_per_example_and_ignore_padding():
    collate = PaddingCollator({"input_ids": 0}, grouped=("input_ids", "attention_mask"))
    a = {"input_ids": _group(3, 2), "attention_mask": [[1] * 3, [1] * 2]}
    b = {"input_ids": _group(3, 2, start=9), "attention_mask": [[1] * 3, [1] * 2]}
    long = {"input_ids": _group(6, 6, start=20), "attention_mask": [[1] * 6, [1] * 6]}
    alone, padded = collate([a, b]), collate([a, long, b])
    assert len(example_keys(alone)) == 2 and example_keys(alone)[0] != example_keys(alone)[1]
    assert example_keys(padded)[0] == example_keys(alone)[0] and example_keys(padded)[2] == example_keys(alone)[1]
    # Member order is part of an example: the same endings in another order are another example.
    swapped = collate([{"input_ids": a["input_ids"][::-1], "attention_mask": a["attention_mask"][::-1]}])
    assert example_keys(swapped)[0] != example_keys(alone)[0]
    # One sequence per example: the key of the example is the key of its sequence.
    flat = PaddingCollator({"input_ids": 0})([{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1]}])
    assert example_keys(flat) == sequence_keys(flat)


def test_feature_cache_of_grouped_batches_gives_the_encoder_output_of_every_member(tiny_bert_dir, tmp_path):
    torch.manual_seed(0)
    encoder = Encoder.from_settings(EncoderSettings(name_or_path=str(tiny_bert_dir), tokenizer=None, dtype=None, attn_implementation=None, init="pretrained")).eval()
    collate = PaddingCollator({"input_ids": 0}, grouped=("input_ids", "attention_mask", "token_type_ids"))
    rng = np.random.default_rng(0)

    def example(*lengths: int) -> dict:
        ids = [[2, *rng.integers(5, 60, n - 2).tolist(), 3] for n in lengths]
        return {"input_ids": ids, "attention_mask": [[1] * n for n in lengths], "token_type_ids": [[0] * n for n in lengths]}

    loader = [collate([example(5, 7), example(4, 6, 9)]), collate([example(8, 3, 3)])]
    cache = build_or_open(encoder, [loader], tmp_path, progress=False)
    for batch in loader:
        got = cache.lookup(batch)
        with torch.no_grad():
            expected = encoder(**encoder_inputs(batch))
        real = batch["attention_mask"].reshape(-1, batch["attention_mask"].shape[-1]).bool()
        assert got[0].shape == expected[0].shape == (*real.shape, encoder.hidden_size)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g[real], e[real], rtol=1e-4, atol=1e-5)
    assert cache.misses == 0
