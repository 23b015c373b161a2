"""frozen / full / top_k: which weights change, and the optimiser groups."""

import lightning as L
import pytest
import torch

from omegaconf import OmegaConf
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.finetune import parameter_groups
from sesame.tasks.encoders.finetune_settings import FinetuneSettings
from sesame.tasks.glue.module import SentenceClassificationModule
from sesame.tasks.runs.runner import build_datamodule, settings_with_data
from tests.conftest import require


def _fit(cfg, steps: int = 3):
    L.seed_everything(0)
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    cfg = OmegaConf.merge(cfg, dm.config_updates())  # what the data decides (label sets)
    module = SentenceClassificationModule(RunSettings.from_config(cfg))
    before = {k: v.detach().clone() for k, v in module.state_dict().items()}
    trainer = L.Trainer(
        max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(module, train_dataloaders=dm.train_dataloader())
    return module, before


def _changed(module, before, prefix):
    after = module.state_dict()
    return {k for k in before if k.startswith(prefix) and not torch.equal(before[k], after[k])}


def test_frozen_keeps_every_encoder_tensor_bit_identical(make_cfg):
    module, before = _fit(make_cfg("finetune=frozen"))
    assert _changed(module, before, "encoder.") == set()
    assert _changed(module, before, "head.") == {"head.classifier.weight", "head.classifier.bias"}
    assert all(p.grad is None for p in module.encoder.parameters())


def test_full_changes_the_encoder(make_cfg):
    module, before = _fit(make_cfg("finetune=full"))
    changed = _changed(module, before, "encoder.")
    assert any(".layer.0." in k for k in changed) and any("embeddings" in k for k in changed)


def test_freeze_embeddings_leaves_the_word_embeddings_alone_and_trains_the_rest(make_cfg):
    module, before = _fit(make_cfg("finetune=full", "finetune.freeze_embeddings=true"))
    changed = _changed(module, before, "encoder.")
    words = "encoder.model.embeddings.word_embeddings.weight"
    assert words not in changed and module.encoder.model.get_input_embeddings().weight.grad is None
    assert {"encoder.model.embeddings.position_embeddings.weight", "encoder.model.embeddings.LayerNorm.weight"} <= changed
    assert any(".layer.0." in k for k in changed)
    optimised = {id(p) for group in module.trainer.optimizers[0].param_groups for p in group["params"]}
    assert id(module.encoder.model.get_input_embeddings().weight) not in optimised  # no AdamW state for it either
    with pytest.raises(ConfigError, match="freeze_embeddings"):
        FinetuneSettings.from_config(make_cfg("finetune.freeze_embeddings=true", "finetune.sparse_embeddings=true").finetune)


def test_top_k_trains_only_the_top_layers(make_cfg):
    module, before = _fit(make_cfg("finetune=top_k", "finetune.top_k=1"))
    changed = _changed(module, before, "encoder.")
    assert changed and all(".layer.3." in k or "pooler" in k for k in changed)


def test_frozen_encoder_keeps_dropout_off_while_the_head_trains(make_cfg):
    cfg = make_cfg("finetune=frozen")
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    module = SentenceClassificationModule(settings_with_data(RunSettings.from_config(cfg), dm))
    module.train()
    assert module.head.training and not module.encoder.training
    assert not any(m.training for m in module.encoder.modules())
    full = SentenceClassificationModule(settings_with_data(RunSettings.from_config(make_cfg("finetune=full")), dm))
    assert full.encoder.model.training, "full fine-tuning must train with dropout on"


def test_no_decay_for_biases_and_norms():
    layer = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    decay, no_decay = parameter_groups(layer.named_parameters(), lr=1e-3, weight_decay=0.1)
    assert [p.shape for p in decay["params"]] == [torch.Size([3, 3])]
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_bad_settings_are_named(make_cfg):
    with pytest.raises(ConfigError, match="finetune.mode"):
        FinetuneSettings.from_config(make_cfg("finetune.mode=partial").finetune)
    with pytest.raises(ConfigError, match="top_k"):
        FinetuneSettings.from_config(make_cfg("finetune=top_k", "finetune.top_k=0").finetune)
    with pytest.raises(ConfigError, match=r"finetune\.lr\b"):  # a misspelt key is named, not ignored
        FinetuneSettings.from_config(make_cfg("+finetune.lr=1e-3").finetune)
    with pytest.raises(ConfigError, match="finetune.head_lr"):  # defaults live in conf/ only
        FinetuneSettings.from_config({k: v for k, v in make_cfg().finetune.items() if k != "head_lr"})


def test_bitfit_trains_only_the_encoder_biases(make_cfg):
    module, before = _fit(make_cfg("finetune=bitfit"))
    changed = _changed(module, before, "encoder.")
    assert changed and all(k.endswith(".bias") for k in changed)
    assert any(".layer.0." in k for k in changed)  # every layer's biases, not only the top ones
    trainable = {n for n, p in module.encoder.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(".bias") for n in trainable)


def test_lora_trains_only_adapters_on_the_attention_projections(make_cfg):
    require("peft")
    module, before = _fit(make_cfg("finetune=lora", "finetune.lora_rank=2"))
    changed = _changed(module, before, "encoder.")
    assert changed and all("lora_" in k for k in changed), "the pretrained weights stay frozen"
    trainable = [n for n, p in module.encoder.named_parameters() if p.requires_grad]
    # BERT's default targets: query and value of every layer, lora_A and lora_B each.
    assert len(trainable) == 4 * 2 * 2 and all("lora_" in n and (".query." in n or ".value." in n) for n in trainable)
    after = dict(module.encoder.named_parameters())
    # lora_B starts at zero, so a trained adapter is one whose B moved.
    assert any(after[n].abs().sum() > 0 for n in trainable if "lora_B" in n)
    with pytest.raises(ConfigError, match="lora_target_modules"):
        SentenceClassificationModule(settings_with_data(RunSettings.from_config(make_cfg("finetune=lora", "finetune.lora_target_modules=[q_lin]")),
                                                      _datamodule(make_cfg())))


def _datamodule(cfg):
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    return dm


def test_the_optimizer_is_torchs_fused_adamw_and_steps_like_the_plain_one():
    """Fused AdamW (what the Hugging Face Trainer uses by default) is the same update as the for-each one."""
    from sesame.tasks.encoders.finetune import build_optimizer

    settings = FinetuneSettings(mode="full", top_k=0, encoder_lr=1e-2, head_lr=2e-2, weight_decay=0.01,
                                warmup_ratio=0.0, adam_epsilon=1e-8)
    torch.manual_seed(0)
    encoder, head = torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)
    twin_encoder, twin_head = torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)
    twin_encoder.load_state_dict(encoder.state_dict())
    twin_head.load_state_dict(head.state_dict())
    fused, _ = build_optimizer(encoder, head.named_parameters(), settings, total_steps=10)
    assert fused.defaults["fused"] is True
    twin_of = {id(p): q for p, q in zip([*encoder.parameters(), *head.parameters()],
                                        [*twin_encoder.parameters(), *twin_head.parameters()])}
    plain = torch.optim.AdamW([{"params": [twin_of[id(p)] for p in g["params"]], "lr": g["lr"],
                                "weight_decay": g["weight_decay"]} for g in fused.param_groups], eps=1e-8, foreach=False)
    x = torch.randn(8, 6)
    for _ in range(3):
        for (enc, hd, opt) in ((encoder, head, fused), (twin_encoder, twin_head, plain)):
            hd(enc(x)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    torch.testing.assert_close(head.weight, twin_head.weight)
    torch.testing.assert_close(encoder.weight, twin_encoder.weight)
    assert not torch.equal(encoder.weight, torch.nn.Linear(6, 5).weight)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_gradients_are_freed_right_after_each_optimiser_step(make_cfg, tmp_path, monkeypatch, accumulate):
    """No gradient outlives its optimiser step (they would sit through the next forward pass and raise
    peak memory); with accumulation they survive the batches between steps."""
    from sesame.tasks.runs.runner import train

    seen = []
    original = SentenceClassificationModule.training_step

    def spy(self, batch, batch_idx):
        seen.append(sum(p.grad is not None for p in self.parameters()))
        return original(self, batch, batch_idx)

    monkeypatch.setattr(SentenceClassificationModule, "training_step", spy)
    train(RunSettings.from_config(make_cfg(f"trainer.accumulate_grad_batches={accumulate}")), tmp_path)
    assert len(seen) == 4
    expected = [0, 0, 0, 0] if accumulate == 1 else [0, 1, 0, 1]
    assert [int(n > 0) for n in seen] == expected
