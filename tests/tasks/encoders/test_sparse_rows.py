"""``finetune.sparse_embeddings``: off, the optimiser and the embedding are as before; on, the rows a batch
reads get the very update dense AdamW gives them, clipping scales by the same factor, and the rows it
does not read stay as they were."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.encoders.finetune import build_optimizer
from sesame.tasks.encoders.finetune_settings import FinetuneSettings
from sesame.tasks.encoders.sparse_rows import SPARSE_ROWS, AdamWWithSparseRows, clip_gradients


def _module(make_cfg, *overrides: str):
    from sesame.tasks.saved.checkpoints import build_module

    torch.manual_seed(0)  # the same head weights in every module built
    return build_module(RunSettings.from_config(make_cfg(*overrides))).eval()  # eval: no dropout draws


def _backward(module) -> set[int]:
    """One batch's loss backward; the ids of the embedding rows it read."""
    batch = dict(load_tokenizer(module.settings.encoder.name_or_path)(["a good film", "bad , very bad"], padding=True,
                                                                  return_tensors="pt"))
    module(batch).logsumexp(-1).sum().backward()
    return set(batch["input_ids"].flatten().tolist())


def _settings(module, sparse: bool) -> FinetuneSettings:
    return dataclasses.replace(module.settings.finetune, sparse_embeddings=sparse, warmup_ratio=0.0, encoder_lr=1e-2,
                               weight_decay=0.1)


def test_off_the_optimiser_and_the_embedding_are_as_before(make_cfg):
    module = _module(make_cfg)
    assert module.finetune.sparse_embeddings is False
    optimizer, _ = build_optimizer(module.encoder, module.head_named_parameters(), module.finetune, 10)
    assert type(optimizer) is torch.optim.AdamW
    assert not module.encoder.model.get_input_embeddings().sparse
    assert not any(g.get(SPARSE_ROWS) for g in optimizer.param_groups)


@pytest.mark.parametrize("fused", [True, False])
def test_the_rows_read_get_dense_adamws_update_and_the_others_none(make_cfg, fused):
    dense, sparse = _module(make_cfg), _module(make_cfg)
    # no warm-up, a large rate: every step moves every weight AdamW moves
    dense_opt, dense_lr = build_optimizer(dense.encoder, dense.head_named_parameters(), _settings(dense, False), 1000,
                                          fused)
    sparse_opt, sparse_lr = build_optimizer(sparse.encoder, sparse.head_named_parameters(), _settings(sparse, True),
                                            1000, fused)
    assert isinstance(sparse_opt, AdamWWithSparseRows) and sparse.encoder.model.get_input_embeddings().sparse
    before = sparse.encoder.model.get_input_embeddings().weight.detach().clone()
    for step in range(3):  # the same rows each step: lazy and dense Adam agree on them throughout
        for module in (dense, sparse):
            rows = _backward(module)
        for optimizer, module, schedule in ((dense_opt, dense, dense_lr), (sparse_opt, sparse, sparse_lr)):
            params = [p for g in optimizer.param_groups for p in g["params"]]
            if module is dense:
                torch.nn.utils.clip_grad_norm_(params, 0.5)
            else:
                assert sparse.encoder.model.get_input_embeddings().weight.grad.is_sparse
                clip_gradients(params, 0.5)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
    read = sorted(rows - {sparse.encoder.model.get_input_embeddings().padding_idx})  # [PAD]'s row has no gradient
    unread = sorted(set(range(before.shape[0])) - rows)
    dense_weights, sparse_weights = dict(dense.named_parameters()), dict(sparse.named_parameters())
    embedding = next(n for n, p in sparse.named_parameters() if p is sparse.encoder.model.get_input_embeddings().weight)
    for name, weight in sparse_weights.items():
        expected = dense_weights[name].detach()
        if name == embedding:
            torch.testing.assert_close(weight.detach()[read], expected[read], rtol=0, atol=1e-6)
            assert (weight.detach()[read] - before[read]).abs().amax(dim=1).min() > 1e-4  # every row moved
            assert torch.equal(weight.detach()[unread], before[unread])  # lazy: untouched rows stay
            assert not torch.equal(expected[unread], before[unread])  # dense AdamW decays them
        else:
            torch.testing.assert_close(weight.detach(), expected, rtol=0, atol=1e-6, msg=name)


def test_clipping_sparse_gradients_scales_as_torch_does():
    weight = torch.nn.Parameter(torch.randn(6, 3))
    other = torch.nn.Parameter(torch.randn(4))
    ids = torch.tensor([1, 4, 1])
    (torch.nn.functional.embedding(ids, weight, sparse=True).sum() * 3 + (other ** 2).sum()).backward()
    dense_grads = [weight.grad.to_dense(), other.grad.clone()]
    expected_norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in dense_grads]))
    clip_gradients([weight, other], 1.0)
    scale = 1.0 / (expected_norm + 1e-6)
    assert scale < 1
    torch.testing.assert_close(weight.grad.to_dense(), dense_grads[0] * scale)
    torch.testing.assert_close(other.grad, dense_grads[1] * scale)


def test_a_run_trains_with_sparse_embeddings(make_cfg, tmp_path):
    from sesame.tasks.runs.runner import train

    metrics = train(RunSettings.from_config(make_cfg("finetune.sparse_embeddings=true", "trainer.precision=bf16-mixed")), tmp_path)
    assert metrics["val_accuracy"] is not None


def test_frozen_embeddings_stay_dense(make_cfg):
    module = _module(make_cfg, "finetune=top_k", "finetune.sparse_embeddings=true")
    optimizer, _ = build_optimizer(module.encoder, module.head_named_parameters(), module.finetune, 10)
    assert not any(g.get(SPARSE_ROWS) for g in optimizer.param_groups)
    assert not module.encoder.model.get_input_embeddings().sparse
