"""The Lightning module every task builds on: its network (encoder -> LayerFusion -> task head,
``tasks/base/task_network.py``), the optimiser, and the one evaluation path: collect rows per batch ->
gather across ranks by a per-task key -> ``score(stage, rows)`` -> logged metrics and prediction files.

Task modules subclass their task's network and :class:`EncoderTaskModule`, and implement
``training_step``, ``eval_rows`` and ``score``. The whole resolved config is
saved as the checkpoint's hyper-parameters, so ``load_trained(path)`` (``tasks/saved/checkpoints.py``, in place of
Lightning's ``load_from_checkpoint``) and ``sesame-eval`` rebuild the same module from it alone.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import lightning as L
import numpy as np
import torch
from torch import nn

from sesame.tasks.base.task_network import EncoderTaskNetwork
from sesame.tasks.core.atomic_files import write_json_atomic, write_text_atomic
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.distributed import Rows, concat_rows, gather_rows
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.finetune import build_optimizer
from sesame.tasks.encoders.sparse_rows import clip_gradients, coalesced_gradients, has_sparse_gradients, total_gradient_norm
from sesame.tasks.encoders.store import FROZEN_KEY, weights_digest

if TYPE_CHECKING:
    from sesame.tasks.base.run_settings import RunSettings

log = logging.getLogger(__name__)

#: A distiller (``tasks/compression/distill.py``): ``(gold_loss, logits, batch, mask) -> (loss, kl)``.
Distiller = Callable[..., tuple[torch.Tensor, torch.Tensor]]

#: Evaluation stage -> the data module split it reads.
STAGE_SPLITS = {"val": "validation", "val_mm": "validation_mismatched", "test": "test"}



class EncoderTaskModule(EncoderTaskNetwork, L.LightningModule):
    """The task network (``tasks/base/task_network.py``) trained and evaluated: the optimiser, the
    evaluation path and the checkpoint record. A task's module subclasses its network and this class
    (``class SquadModule(SquadNetwork, EncoderTaskModule)``) and adds ``training_step``, ``eval_rows``
    and ``score``.
    """

    #: Columns of ``eval_rows`` that identify one prediction (repeats across ranks count once).
    eval_key: ClassVar[tuple[str, ...]] = ("index",)
    #: The column of ``eval_rows`` naming the example (sentence, question, sentence pair) a row belongs
    #: to: an example is scored only when all its rows were evaluated (``SplitDataModule.eval_units``).
    eval_unit: ClassVar[str] = "index"
    #: Fill values for per-token eval columns padded to a common length (default 0).
    eval_pad_values: ClassVar[dict[str, Any]] = {}

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        self.save_hyperparameters({"cfg": settings.config})  # the record; read back by load_from_checkpoint
        self.main_metric = self.task.main_metric
        self._frozen_digest: str | None = None
        self.output_dir: Path | None = None
        self.distiller: Distiller | None = None  # set by the runner when distill.teacher is set
        self._eval_rows: dict[str, list[Rows]] = {}
        #: The metrics of the latest evaluation of each stage, exactly as computed (float64 values,
        #: integer counts): what metrics.json holds, where Lightning's logged copies are float32.
        self.evaluated: dict[str, float | int | None] = {}
        #: The gradients' total norm on_before_optimizer_step measured this step, for clipping to reuse.
        self._measured_grad_norm: torch.Tensor | None = None

    def unintended_eval_modules(self) -> list[str]:
        """Submodules in eval mode that the finetune mode does not keep there (Lightning warns of every
        module in eval mode when training starts; the frozen parts are meant to be)."""
        kept = {id(m) for part in self._eval_only_parts for m in part.modules()}
        return [name for name, m in self.named_modules() if not m.training and id(m) not in kept]

    # Frozen encoder weights: stored once in the run's encoder/ folder, not in every checkpoint ---------
    def stored_once_keys(self) -> list[str]:
        """State-dict keys of the encoder weights this run never trains, which checkpoints leave out
        (``tasks/encoders/store.py``): none under full fine-tuning, where the checkpoint holds them all."""
        if self.finetune.mode == "full":
            return []
        return [f"encoder.{name}" for name, p in self.encoder.named_parameters() if not p.requires_grad]

    def stored_once_digest(self) -> str:
        if self._frozen_digest is None:  # they never change during a run: hashed once
            params = dict(self.named_parameters())
            self._frozen_digest = weights_digest((k, params[k]) for k in self.stored_once_keys())
        return self._frozen_digest

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> EncoderTaskModule:
        """Not Lightning's: it would call ``cls(**hyper_parameters)`` with the raw config, where a module is built
        from settings read once. A sesame checkpoint loads with ``load_trained`` (``tasks/saved/checkpoints.py``)."""
        raise TypeError(f"{cls.__name__} is built from RunSettings, not from a checkpoint's raw config: load "
                        f"{checkpoint_path} with sesame.tasks.saved.checkpoints.load_trained(path).module")

    def resolved_settings(self) -> dict[str, Any]:
        """Settings the module resolved from the data while training (``{"head.class_weights": [...]}``):
        the checkpoint's config records them, so the model reloads as it trained; the module's own
        config is never changed. None resolved by default."""
        return {}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        resolved = self.resolved_settings()
        if resolved:
            cfg = copy.deepcopy(checkpoint["hyper_parameters"]["cfg"])
            for dotted, value in resolved.items():
                block, key = dotted.split(".")
                cfg[block][key] = value
            checkpoint["hyper_parameters"] = {**checkpoint["hyper_parameters"], "cfg": cfg}
        keys = self.stored_once_keys()
        if not keys:
            return
        state = checkpoint["state_dict"]
        for key in keys:
            state.pop(key, None)
        checkpoint[FROZEN_KEY] = {"keys": keys, "digest": self.stored_once_digest(),
                                  "encoder": str(self.encoder.name_or_path)}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.complete_checkpoint(checkpoint, source="the pretrained encoder")

    def head_named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """Every parameter outside the encoder (fusion weights and the task head)."""
        for name, param in self.named_parameters():
            if not name.startswith("encoder."):
                yield name, param

    def configure_optimizers(self) -> dict[str, Any]:
        if self.finetune.sparse_embeddings and (self.gradients_scaled() or self.trainer.world_size > 1):
            raise ConfigError("finetune.sparse_embeddings=true trains on one device without fp16's loss scaling. "
                              "Fix: finetune.sparse_embeddings=false, or trainer.precision=bf16-mixed / 32-true "
                              "on one device")
        optimizer, scheduler = build_optimizer(
            self.encoder, self.head_named_parameters(), self.finetune, int(self.trainer.estimated_stepping_batches),
            allow_fused=not self.gradients_scaled(),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def gradients_scaled(self) -> bool:
        """Whether the precision plugin scales the loss (fp16 ``16-mixed``'s GradScaler). bf16 autocast has no scaler."""
        return getattr(self.trainer.precision_plugin, "scaler", None) is not None

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip as Lightning does, also for the fused AdamW under bf16 autocast. Lightning's mixed-precision plugin
        refuses to clip a fused optimiser's gradients because, under fp16's GradScaler, they are still scaled until its
        step; bf16 has no scaler, so they are already the true gradients. Without this, bf16 runs fell back to the
        per-tensor AdamW: on CPU its step cost a fixed 0.1-0.3 s more than the fused kernel's."""
        inner = getattr(optimizer, "optimizer", optimizer)  # Lightning's LightningOptimizer wraps the torch one
        norm, self._measured_grad_norm = self._measured_grad_norm, None
        algorithm = gradient_clip_algorithm or "norm"
        reuse_norm = norm is not None and algorithm == "norm" and not self.gradients_scaled()
        if gradient_clip_val and (reuse_norm or has_sparse_gradients(inner)):  # torch's clipping: dense alone
            # the norm on_before_optimizer_step measured for grad_norm: one pass over the gradients, not two
            clip_gradients((p for g in inner.param_groups for p in g["params"]), float(gradient_clip_val),
                           algorithm, norm if reuse_norm else None)
            return
        if gradient_clip_val and not self.gradients_scaled() and getattr(inner, "_step_supports_amp_scaling", False):
            from lightning.pytorch.plugins.precision import Precision
            from lightning.pytorch.utilities import GradClipAlgorithmType

            Precision.clip_gradients(self.trainer.precision_plugin, inner, gradient_clip_val,
                                     GradClipAlgorithmType(algorithm))
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """Log what the Hugging Face Trainer logs at each step: the learning rate of each parameter group
        (``lr_encoder``, ``lr_head``) and the gradients' total L2 norm before clipping (``grad_norm``), into
        every logger, at ``trainer.log_every_n_steps``."""
        rates: dict[str, float] = {}
        for index, group in enumerate(optimizer.param_groups):
            # A group without a name: an optimiser state saved before groups were named (a resumed run).
            rates.setdefault(f"lr_{group.get('name', f'group{index}')}", float(group["lr"]))
        for name, rate in rates.items():
            self.log(name, rate, on_step=True, on_epoch=False, batch_size=1)
        grads = coalesced_gradients(p for group in optimizer.param_groups for p in group["params"])
        if grads:
            norm = total_gradient_norm(grads)  # what clipping measures (gradient_clip_val), and reuses
            self._measured_grad_norm = norm
            self.log("grad_norm", norm, on_step=True, on_epoch=False, batch_size=1)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Callable | None = None) -> None:
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        # Free the gradients at once: Lightning clears them only before the next step's forward, so
        # they (one float per trained weight, 87 MiB for MiniLM-L6) would sit through its activations
        # and raise peak memory above the Hugging Face Trainer's. Accumulation is unaffected: this
        # runs only after an optimiser step.
        optimizer.zero_grad(set_to_none=True)

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
        if self.distiller is None:
            return gold_loss
        loss, kl = self.distiller(gold_loss, logits, batch, mask)
        self.log("train_distill_kl", kl, batch_size=batch["input_ids"].shape[0])
        return loss

    # Evaluation: collect -> gather -> score -------------------------------------------------------
    def eval_rows(self, batch: Mapping[str, torch.Tensor], stage: str) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """``(rows, loss)`` of one evaluation batch: equal-length columns (tensors [N, ...]) holding the
        ``eval_key`` columns and whatever ``score`` needs, and the batch loss (None without labels)."""
        raise NotImplementedError

    def score(self, stage: str, rows: Rows) -> dict[str, float]:
        """Metrics (unprefixed names) from every rank's rows of ``stage``, each key once and sorted by
        key; writes the stage's prediction files (through ``write_json`` / ``write_text``)."""
        raise NotImplementedError

    def final_metrics(self) -> dict[str, float]:
        """What the module learned that ``metrics.json`` reports after training (e.g. scalar-mix
        weights). Default: nothing."""
        return {}

    # sesame-report ---------------------------------------------------------------------------------
    @classmethod
    def example_scores(cls, run_dir: Path, settings: RunSettings,
                       metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
        """A finished run's dev examples and ``metric`` on any resample of them, for ``sesame-report``'s paired
        bootstrap (``tasks/runs/sweep_comparisons.py``): ``(keys, score)``, ``keys`` [N] the ids of the examples
        the run scored (the same ids in every run of that dev set), ``score(indices)`` the metric on the examples
        at ``indices`` [n] (positions in ``keys``, repeats allowed), read from the prediction files the run
        wrote and recomputed by the task's own metric functions; a ``UserError`` saying why where it cannot
        (a metric that is not recomputable per example, a missing file). Default: the task cannot."""
        raise ConfigError(f"task={settings.task.name} cannot recompute {metric} example by example (its module "
                          f"{cls.__name__} has no example_scores)")

    # calibrate=true --------------------------------------------------------------------------------
    def calibration_refusal(self) -> str | None:
        """Why ``calibrate=true`` cannot apply to this model, in one sentence; None where the task fits a
        temperature (:meth:`calibrate`). Default: it cannot."""
        return (f"calibrate=true fits a softmax temperature to the dev logits of single-label classification, which "
                f"task={self.task.name} does not have")

    def calibrate(self) -> dict[str, float | str]:
        """Fit the calibration on the latest validation's outputs (after training); the metrics it reports."""
        raise NotImplementedError(self.calibration_refusal())

    def calibrated_state(self) -> dict[str, torch.Tensor]:
        """The state-dict entries :meth:`calibrate` fitted, which ``best.ckpt`` then holds."""
        return {}

    def eval_stage(self, stage: str, dataloader_idx: int) -> str:
        """The stage name of an evaluation loader (tasks with a second dev set override this)."""
        return stage

    def _collect(self, batch: Mapping[str, torch.Tensor], stage: str) -> None:
        rows, loss = self.eval_rows(batch, stage)
        if loss is not None:
            # sync_dist: under DDP each rank saw part of the data; the logged loss is over all of it
            self.log(f"{stage}_loss", loss, batch_size=batch["input_ids"].shape[0], add_dataloader_idx=False, sync_dist=True)
        self._eval_rows.setdefault(stage, []).append({k: v.detach().cpu().numpy() for k, v in rows.items()})

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._collect(batch, self.eval_stage("val", dataloader_idx))

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._collect(batch, self.eval_stage("test", dataloader_idx))

    def on_validation_epoch_end(self) -> None:
        self._score_collected()

    def on_test_epoch_end(self) -> None:
        self._score_collected()

    def _score_collected(self) -> None:
        collected, self._eval_rows = self._eval_rows, {}
        if self._trainer is not None and self.trainer.sanity_checking:
            return  # a few batches to catch crashes early: no metrics, no prediction files
        for stage, parts in collected.items():
            rows = gather_rows(concat_rows(parts, self.eval_pad_values), self.eval_key, self.eval_pad_values)
            rows, scored, total = self._complete_examples(stage, rows)
            # Nothing whole to score: the main metric is NaN (worst for checkpoint choice), not missing.
            metrics = self.score(stage, rows) if scored else {self.main_metric.removeprefix(f"{stage}_"): float("nan")}
            for name, value in metrics.items():
                name = f"{stage}_{name}"
                if isinstance(value, (int, np.integer)) and not isinstance(value, bool):  # a count (e.g. v2's NoAns_total)
                    self.evaluated[name] = int(value)
                else:
                    self.evaluated[name] = float(value) if math.isfinite(value) else None
                self.log(name, float(value), prog_bar=name == self.main_metric, sync_dist=False, rank_zero_only=False)
            self.evaluated[f"{stage}_examples_scored"] = scored
            self.evaluated[f"{stage}_examples_total"] = total

    def _complete_examples(self, stage: str, rows: Rows) -> tuple[Rows, int, int]:
        """The rows of the examples all of whose rows were evaluated, and how many examples that is of
        how many the split has. An evaluation cut short (``trainer.limit_val_batches``) sees only some
        windows of a question or some words of a sentence; scoring those would be wrong."""
        expected = np.bincount(np.asarray(self.split_data().eval_units(STAGE_SPLITS[stage]), dtype=np.int64))
        units = rows[self.eval_unit].astype(np.int64)
        seen = np.bincount(units, minlength=len(expected))
        complete = (seen == expected) & (expected > 0)
        scored, total = int(complete.sum()), int((expected > 0).sum())
        if scored < total:
            log.warning("%s: scoring %d of %d examples; the others were not (fully) evaluated "
                        "(trainer.limit_val_batches / limit_test_batches?)", stage, scored, total)
        keep = complete[units]
        return {k: v[keep] for k, v in rows.items()}, scored, total

    def split_data(self) -> Any:
        """The data module attached to the trainer (its examples give contexts, sentences, gold answers)."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is None:
            raise RuntimeError(f"{type(self).__name__} needs its data module at evaluation: "
                               "trainer.validate(module, datamodule=dm)")
        return datamodule

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

