"""The Lightning module every task builds on: encoder -> LayerFusion -> (task head), plus the optimiser.

Task modules subclass :class:`EncoderTaskModule`, build their head from ``self.feature_size`` and
implement the steps. The whole resolved config is saved as the checkpoint's hyper-parameters, so
``Module.load_from_checkpoint(path)`` (and ``sesame-eval``) rebuild the same module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sesame.heads.fusion import LayerFusion
from sesame.tasks.atomic_files import write_json_atomic, write_text_atomic
from sesame.tasks.encoder import Encoder
from sesame.tasks.feature_cache import FeatureCache
from sesame.tasks.finetune import FinetuneSettings, apply_finetune_mode, build_optimizer

if TYPE_CHECKING:
    from sesame.tasks.compression.distill import Distiller

ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def as_config(cfg: Mapping[str, Any] | DictConfig) -> DictConfig:
    """A resolved, plain-data copy of ``cfg`` (what the checkpoint stores)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    return OmegaConf.create(dict(cfg))


class EncoderTaskModule(L.LightningModule):
    """Encoder + layer fusion + finetune policy. Subclasses add a head, losses and metrics.

    ``encode(batch)`` -> fused features [B, T, feature_size].
    """

    #: The logged metric that picks the best checkpoint (higher is better); tasks set it.
    main_metric: str | None = None

    def __init__(self, cfg: Mapping[str, Any] | DictConfig) -> None:
        super().__init__()
        self.cfg = as_config(cfg)
        self.save_hyperparameters({"cfg": OmegaConf.to_container(self.cfg)})
        self.encoder = Encoder.from_config(self.cfg.encoder)
        fusion = self.cfg.fusion
        self.fusion = LayerFusion(
            self.encoder.num_hidden_states,
            self.encoder.hidden_size,
            mode=fusion.mode,
            layers=fusion.get("layers"),
            combine=fusion.get("combine", "mean"),
        )
        self.feature_size = self.fusion.output_size
        self.finetune = FinetuneSettings(**OmegaConf.to_container(self.cfg.finetune))
        self._eval_only_parts = apply_finetune_mode(self.encoder, self.finetune)
        self.output_dir: Path | None = None
        self.feature_cache: FeatureCache | None = None  # set by the runner when cache.enabled
        self._distiller: Distiller | None = None  # the teacher, loaded on first use (see `distiller`)
        # from_pretrained leaves the encoder in eval mode and Lightning keeps modes as it finds them:
        # without this, full fine-tuning would silently train with dropout off.
        self.train()

    @property
    def encoder_frozen(self) -> bool:
        return self.finetune.mode == "frozen"

    def train(self, mode: bool = True) -> EncoderTaskModule:
        super().train(mode)
        for part in self._eval_only_parts:  # frozen parts keep dropout off while the head trains
            part.eval()
        return self

    def encoder_inputs(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: batch[k] for k in ENCODER_INPUTS if k in batch}

    def hidden_states(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """All hidden states, each [B, T, H]; no graph is kept for a frozen encoder."""
        if self.feature_cache is not None:
            cached = self.feature_cache.lookup(batch)
            if cached is not None:
                return cached
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.encoder_frozen):
            return self.encoder(**self.encoder_inputs(batch))

    def encode(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Fused per-token features [B, T, feature_size]."""
        return self.fusion(self.hidden_states(batch))

    def head_named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """Every parameter outside the encoder (fusion weights and the task head)."""
        for name, param in self.named_parameters():
            if not name.startswith("encoder."):
                yield name, param

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer, scheduler = build_optimizer(
            self.encoder, self.head_named_parameters(), self.finetune, int(self.trainer.estimated_stepping_batches)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # Distillation (cfg.distill; sesame/tasks/compression/distill.py) ------------------------------
    @property
    def distiller(self) -> Distiller | None:
        """The frozen teacher and the loss when ``cfg.distill.teacher`` is set, else None. Loaded on first
        use, so evaluating a distilled student needs neither the teacher nor its files."""
        if self._distiller is None and (self.cfg.get("distill") or {}).get("teacher"):
            from sesame.tasks.compression.distill import Distiller  # imported late: it reads checkpoints

            self._distiller = Distiller.from_config(self.cfg, self)
        return self._distiller

    def distill(
        self, gold_loss: torch.Tensor, logits: torch.Tensor | tuple[torch.Tensor, ...],
        batch: Mapping[str, torch.Tensor], mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The training loss: ``gold_loss`` as it is, or with a teacher ``alpha * gold_loss + (1 - alpha) * kl``.

        Args:
            gold_loss: the task's own loss (scalar).
            logits: this module's ``forward(batch)`` output, a tensor [..., C] or a tuple of them, with
                the distribution over the last dim (GLUE [B, C]; NER [B, T, C]; QA start/end [B, T]).
            batch: the batch both models read.
            mask: [...] bool, the rows of ``logits`` that count (NER: the word positions); None = all.
        """
        distiller = self.distiller
        if distiller is None:
            return gold_loss
        loss, kl = distiller(gold_loss, logits, batch, mask)
        self.log("train_distill_kl", kl, batch_size=batch["input_ids"].shape[0])
        return loss

    def configure_callbacks(self) -> list[L.Callback]:
        if not (self.cfg.get("distill") or {}).get("teacher"):
            return []
        from sesame.tasks.compression.distill import DistillationCallback

        return [DistillationCallback()]

    # Output files --------------------------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> Path | None:
        """Write ``obj`` atomically into the run folder (only on rank 0; no-op without a run folder)."""
        if self.output_dir is None or not self._is_global_zero():
            return None
        return write_json_atomic(self.output_dir / name, obj)

    def write_text(self, name: str, text: str) -> Path | None:
        if self.output_dir is None or not self._is_global_zero():
            return None
        return write_text_atomic(self.output_dir / name, text)

    def _is_global_zero(self) -> bool:
        return self._trainer is None or self.trainer.is_global_zero
