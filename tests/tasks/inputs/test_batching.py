"""Training samplers: the length-grouped shuffle is a permutation, deterministic per (seed, epoch),
groups similar lengths, and resumes mid-epoch where it stopped."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.inputs.batching import (
    LengthGroupedShuffleSampler,
    LengthSortedSampler,
    PaddingCollator,
    ResumableShuffleSampler,
    TokenBudgetBatchSampler,
    make_loader,
)

LENGTHS = np.random.default_rng(0).integers(5, 300, size=1003).tolist()


def batches_of(order: list[int], size: int) -> list[list[int]]:
    return [order[i : i + size] for i in range(0, len(order), size)]


def padded_tokens(order: list[int], size: int) -> int:
    return sum(len(b) * max(LENGTHS[i] for i in b) for b in batches_of(order, size))


def training_masks(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The ``attention_mask`` [B, T] of every training batch the GLUE module steps on, as it happens (a list that
    fills up; clear it between runs)."""
    import sesame.tasks.glue.module as glue_module

    seen: list[torch.Tensor] = []
    original = glue_module.SentenceClassificationModule.training_step

    def spy(self, batch, batch_idx):
        seen.append(batch["attention_mask"].clone())
        return original(self, batch, batch_idx)

    monkeypatch.setattr(glue_module.SentenceClassificationModule, "training_step", spy)
    return seen


def test_length_grouped_shuffle_is_a_deterministic_permutation_with_less_padding():
    grouped = list(LengthGroupedShuffleSampler(LENGTHS, batch_size=16, seed=3, mega_batches=8))
    assert sorted(grouped) == list(range(len(LENGTHS)))
    assert grouped == list(LengthGroupedShuffleSampler(LENGTHS, batch_size=16, seed=3, mega_batches=8))
    other_epoch = LengthGroupedShuffleSampler(LENGTHS, batch_size=16, seed=3, mega_batches=8)
    other_epoch.set_epoch(1)
    assert list(other_epoch) != grouped
    plain = list(ResumableShuffleSampler(len(LENGTHS), seed=3))
    # uniform lengths in [5, 300): random batches of 16 pad to ~285 each, grouped ones to about their own length
    assert padded_tokens(grouped, 16) < 0.7 * padded_tokens(plain, 16)
    # the batches are shuffled, not sorted: neither order of lengths
    firsts = [LENGTHS[b[0]] for b in batches_of(grouped, 16)]
    assert firsts != sorted(firsts) and firsts != sorted(firsts, reverse=True)
    # every batch but the last is full, so the loader cuts them where the sampler made them
    assert all(len(b) == 16 for b in batches_of(grouped, 16)[:-1]) and len(batches_of(grouped, 16)[-1]) == 1003 % 16


def test_length_grouped_loader_resumes_mid_epoch_with_the_same_batches():
    data = [{"input_ids": np.arange(n), "index": i} for i, n in enumerate(LENGTHS)]
    collate = PaddingCollator({})

    def loader(resume_at=None):
        return make_loader(data, train=True, batch_size=16, collate_fn=collate, lengths=LENGTHS, seed=5,
                           resume_at=resume_at, group_by_length=True)

    full = [b["index"].tolist() for b in loader()]
    resumed = [b["index"].tolist() for b in loader(resume_at=(0, 7))]
    assert resumed == full[7:]
    assert all(b.shape[1] == max(LENGTHS[i] for i in idx) for b, idx in zip((b["input_ids"] for b in loader()), full))


def test_grouping_without_lengths_is_refused():
    with pytest.raises(ValueError, match="need per-example lengths"):
        make_loader([{"x": 1}], train=True, batch_size=1, collate_fn=PaddingCollator({}), group_by_length=True)


def test_a_run_with_group_by_length_trains_on_grouped_batches_and_counts_its_tokens(make_cfg, tmp_path, monkeypatch):
    """Grouped batches span a narrow band of lengths, and train_throughput.json counts exactly the
    examples, real tokens and padded tokens the training steps saw: fewer padded ones when grouped."""
    from sesame.tasks.runs.runner import train
    from sesame.tasks.runs.throughput import THROUGHPUT_FILE

    seen = training_masks(monkeypatch)
    counts = {}
    for grouped in (True, False):
        seen.clear()
        run = tmp_path / str(grouped)
        train(RunSettings.from_config(make_cfg(f"data.group_by_length={str(grouped).lower()}", "data.batch_size=8", "trainer.limit_train_batches=6")), run)
        counts[grouped] = json.loads((run / THROUGHPUT_FILE).read_text())
        assert counts[grouped]["steps"] == len(seen) == 6
        assert counts[grouped]["examples"] == 48
        assert counts[grouped]["tokens"] == sum(int(m.sum()) for m in seen)
        assert counts[grouped]["padded_tokens"] == sum(m.numel() for m in seen)
        spread = max(int(m.sum(1).max() - m.sum(1).min()) for m in seen)
        # SST-2 sentences range from 2 to 50+ tokens: a random batch of 8 spreads far wider
        assert (spread <= 4) == grouped
    assert counts[True]["padding_fraction"] < counts[False]["padding_fraction"]


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("grouped", [False, True], ids=["shuffled", "grouped"])
@pytest.mark.parametrize("done", [0, 7], ids=["whole_epoch", "resumed"])
def test_ddp_ranks_take_slices_of_the_single_process_batches(world_size, grouped, done):
    """Rank r's k-th batch is the r-th slice of one process's k-th batch of world_size x 4, from the
    first batch or after a resume; the last partial global batch is one process's only."""
    data = [{"input_ids": np.arange(n), "index": i} for i, n in enumerate(LENGTHS)]

    def batches(rank, size, world):
        loader = make_loader(data, train=True, batch_size=size, collate_fn=PaddingCollator({}), lengths=LENGTHS,
                             seed=5, resume_at=(1, done), group_by_length=grouped, rank=rank, world_size=world)
        assert loader.sampler.epoch == 1
        return [b["index"].tolist() for b in loader]

    single = batches(0, 4 * world_size, 1)
    ranks = [batches(rank, 4, world_size) for rank in range(world_size)]
    remaining = len(LENGTHS) - done * 4 * world_size
    full, left_out = divmod(remaining, 4 * world_size)  # 1003 examples: 3, 7 and 11 left over
    assert len(single) == full + 1 and len(single[-1]) == left_out
    # one process keeps its last partial batch; under DDP every rank runs the full ones only, so no
    # rank waits at a gradient sync another never reaches, and nothing is trained twice
    assert all(len(r) == (full + 1 if world_size == 1 else full) for r in ranks)
    assert [sum(parts, []) for parts in zip(*ranks)] == single[: len(ranks[0])]
    assert sorted(sum(single, [])) == sorted(set(sum(single, [])))  # nothing twice


def test_ddp_length_of_an_epoch_counts_full_global_batches_only():
    assert len(ResumableShuffleSampler(1003, seed=1)) == 1003  # one process: every example, as before
    assert len(ResumableShuffleSampler(1003, seed=1, batch_size=4, rank=1, world_size=3)) == 1003 // 12 * 4
    assert len(list(ResumableShuffleSampler(1003, seed=1, batch_size=4, rank=1, world_size=3))) == 1003 // 12 * 4


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ddp_evaluation_ranks_cover_every_example_with_equal_counts(world_size):
    lengths = LENGTHS[:41]
    parts = [list(LengthSortedSampler(lengths, rank=r, world_size=world_size)) for r in range(world_size)]
    assert len({len(p) for p in parts}) == 1  # as many batches on every rank
    assert sorted(set(sum(parts, []))) == list(range(41))
    assert len(sum(parts, [])) - 41 == -41 % world_size  # the padding repeats, scored once (gather_rows)
    assert parts[0][0] == int(np.argmax(lengths))  # still longest first


def test_ddp_with_fewer_training_examples_than_one_global_batch_is_refused(make_cfg):
    from types import SimpleNamespace

    from sesame.tasks.core.errors import ConfigError
    from sesame.tasks.runs.runner import build_datamodule

    datamodule = build_datamodule(RunSettings.from_config(make_cfg("data.max_train_examples=12", "data.batch_size=8")))
    datamodule.setup("fit")
    datamodule.trainer = SimpleNamespace(global_rank=1, world_size=2)
    with pytest.raises(ConfigError, match=r"data.batch_size=8 on 2 processes makes global batches of 16, more than the 12"):
        datamodule.train_dataloader()


def test_ddp_warns_about_the_examples_a_partial_global_batch_leaves_out(caplog):
    with caplog.at_level(logging.WARNING, logger="sesame.tasks.inputs.batching"):
        make_loader([{"x": i} for i in range(20)], train=True, batch_size=4, collate_fn=PaddingCollator({}),
                    rank=0, world_size=2)
    assert "4 of the 20 training examples fall in a last partial global batch" in caplog.text


def test_padding_to_a_multiple_rounds_the_batch_length_up_but_never_past_the_maximum():
    collate = PaddingCollator({"input_ids": 7, "labels": -100})
    examples = [{"input_ids": [1, 2, 3], "labels": [0, 1, 0], "y": 1}, {"input_ids": [4, 5, 6, 8, 9], "labels": [1] * 5, "y": 0}]
    assert collate(examples)["input_ids"].shape == (2, 5)
    batch = collate.padded_to(4, max_length=16)(examples)
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 8)
    assert batch["input_ids"][0].tolist() == [1, 2, 3, 7, 7, 7, 7, 7] and batch["labels"][1, 5:].tolist() == [-100] * 3
    assert batch["y"].tolist() == [1, 0]
    assert collate.padded_to(4, max_length=6)(examples)["input_ids"].shape == (2, 6)  # capped at the maximum
    assert collate.padded_to(4, max_length=4)(examples)["input_ids"].shape == (2, 5)  # never cut
    assert collate.padded_to(None, max_length=16)(examples)["input_ids"].shape == (2, 5)


def test_a_run_pads_its_batches_to_a_multiple_and_learns_the_same(make_cfg, tmp_path, monkeypatch):
    """data.pad_to_multiple_of reaches every loader of a run; the extra padding is masked, so the
    logits are those of the unpadded batches. With layers that run on padding (padding-free layers never see it)."""
    from sesame.tasks.runs.runner import train

    seen = training_masks(monkeypatch)
    metrics = {}
    for multiple in (None, 16):
        seen.clear()
        setting = "null" if multiple is None else multiple
        metrics[multiple] = train(RunSettings.from_config(make_cfg(f"data.pad_to_multiple_of={setting}", "data.batch_size=8",
                                           "trainer.limit_train_batches=3", "data.group_by_length=true",
                                           "encoder.padding_free=false")), tmp_path / str(multiple))
        lengths = {m.shape[1] for m in seen}
        assert all(n % 16 == 0 for n in lengths) == (multiple == 16), lengths
    keys = [k for k in metrics[None] if k.startswith("val_") and isinstance(metrics[None][k], float)]
    assert keys and all(metrics[16][k] == pytest.approx(metrics[None][k], abs=1e-4) for k in keys)


def test_a_bad_pad_multiple_is_refused(make_cfg, tmp_path):
    from sesame.tasks.core.errors import ConfigError
    from sesame.tasks.runs.runner import train

    with pytest.raises(ConfigError, match=r"data.pad_to_multiple_of=0: use a positive number"):
        train(RunSettings.from_config(make_cfg("data.pad_to_multiple_of=0")), tmp_path / "run")


# --- data.max_tokens: batches by token budget ------------------------------------------------------------------


@pytest.mark.parametrize("multiple", [None, 32])
def test_token_budget_batches_hold_every_example_once_within_the_budget(multiple):
    """Each epoch is a deterministic cut of a permutation: every example once, each batch's padded tokens (examples x
    the longest's padded length) within the budget; batches of short examples hold more of them; another epoch
    shuffles again."""
    collator = PaddingCollator({}, multiple_of=multiple, max_length=320)
    sampler = TokenBudgetBatchSampler(LENGTHS, 1024, seed=5, padded_length=collator.padded_length)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    assert len(sampler) == len(batches)
    sizes = [len(b) * collator.padded_length(max(LENGTHS[i] for i in b)) for b in batches]
    assert max(sizes) <= 1024
    assert sum(sizes) / len(sizes) > 0.8 * 1024  # the greedy cut fills its batches
    longest = next(b for b in batches if int(np.argmax(LENGTHS)) in b)
    assert max(len(b) for b in batches) > 4 * len(longest)
    assert [list(b) for b in TokenBudgetBatchSampler(LENGTHS, 1024, seed=5, padded_length=collator.padded_length)] == batches
    sampler.set_epoch(1)
    assert list(sampler) != batches and sorted(i for b in sampler for i in b) == list(range(len(LENGTHS)))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("done", [0, 5], ids=["whole_epoch", "resumed"])
def test_token_budget_ranks_take_rounds_of_batches_and_a_resume_skips_its_own(world_size, done):
    """Under DDP rank r takes the r-th batch of every whole round of ``world_size`` batches (so every rank runs as many
    steps); a resumed loader (``resume_at`` = (epoch, batches done)) skips exactly the batches this rank trained on."""
    whole = list(TokenBudgetBatchSampler(LENGTHS, 2048, seed=9, epoch=2))
    rounds = len(whole) // world_size
    per_rank = []
    for rank in range(world_size):
        loader = make_loader(list(range(len(LENGTHS))), train=True, batch_size=1, collate_fn=list, lengths=LENGTHS,
                             seed=9, resume_at=(2, done), max_tokens=2048, rank=rank, world_size=world_size)
        got = list(loader)
        assert got == whole[rank : rounds * world_size : world_size][done:]
        assert len(loader) == rounds  # the epoch's length counts what was skipped too
        per_rank.append(len(got))
        assert list(loader) == whole[rank : rounds * world_size : world_size]  # the next pass is the whole epoch
    assert len(set(per_rank)) == 1


def test_a_token_budget_too_small_for_the_longest_example_or_the_processes_is_refused(make_cfg):
    from sesame.tasks.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"data.max_tokens=100: the longest training example takes 299 tokens.*"
                                          r"Fix: data.max_tokens=299 or more"):
        TokenBudgetBatchSampler(LENGTHS, 100, seed=0)
    with pytest.raises(ConfigError, match=r"data.max_tokens=32 is below data.max_seq_length=64.*Fix"):
        RunSettings.from_config(make_cfg("data.max_tokens=32"))
    with pytest.raises(ConfigError, match=r"into 1 batch\(es\), fewer than the 2 processes.*Fix: lower data.max_tokens"):
        make_loader(list(range(3)), train=True, batch_size=1, collate_fn=list, lengths=[5, 5, 5], max_tokens=64,
                    rank=0, world_size=2)


def test_a_run_with_max_tokens_trains_on_batches_within_the_budget(make_cfg, tmp_path, monkeypatch):
    """data.max_tokens reaches the training loader of a run: batch sizes vary, none passes the budget, every
    training sentence is seen once an epoch; evaluation batches stay data.eval_batch_size."""
    from sesame.tasks.runs.runner import train

    seen = training_masks(monkeypatch)
    metrics = train(RunSettings.from_config(make_cfg("data.max_tokens=256", "data.max_train_examples=200",
                                                     "trainer.limit_train_batches=null", "data.pad_to_multiple_of=8")),
                    tmp_path / "run")
    assert max(m.numel() for m in seen) <= 256 and all(m.shape[1] % 8 == 0 for m in seen)
    assert len({m.shape[0] for m in seen}) > 2  # short sentences come in bigger batches
    assert sum(m.shape[0] for m in seen) == 200
    assert metrics["train_steps"] == len(seen) == metrics["train_steps_per_epoch"]


def test_lightning_reaches_the_token_budget_epoch_so_each_epoch_draws_other_batches():
    """Lightning calls ``set_epoch`` on a loader's ``sampler`` and ``batch_sampler.sampler``, not on the batch sampler:
    the shuffle it draws from must be the one that hears it."""
    from lightning.fabric.utilities.data import _set_sampler_epoch

    loader = make_loader(list(range(len(LENGTHS))), train=True, batch_size=1, collate_fn=list, lengths=LENGTHS, seed=4,
                         max_tokens=2048)
    first = list(loader)
    _set_sampler_epoch(loader, 1)
    second = list(loader)
    assert second != first and sorted(i for b in second for i in b) == list(range(len(LENGTHS)))
    assert second == list(TokenBudgetBatchSampler(LENGTHS, 2048, seed=4, epoch=1))
