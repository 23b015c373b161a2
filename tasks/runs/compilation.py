"""``trainer.compile``: run the encoder through ``torch.compile`` (``conf/trainer/default.yaml``).

The encoder is compiled in place (``nn.Module.compile``), so parameter names, checkpoints and the
run's ``encoder/`` folder are those of the eager model. Shapes are dynamic: batches are padded to
their longest example, so every batch length would otherwise compile a graph of its own.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import Callback


class CompileEncoder(Callback):
    """Compiles the module's encoder once, when a trainer first sets it up (fit, validate or test)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        model = pl_module.encoder.model
        if getattr(model, "_compiled_call_impl", None) is None:
            model.compile(dynamic=True)
