"""Early stopping on the task's main metric (``trainer.early_stopping`` in ``conf/trainer/default.yaml``,
read by ``tasks/base/run_settings.py``'s ``EarlyStoppingSettings``, part of ``TrainerSettings``).

Training stops once ``task.main_metric`` has not improved by more than ``min_delta`` for ``patience``
validations in a row. The run then validates, tests and exports ``checkpoints/best.ckpt`` (the
best validation so far), not the weights it stopped with: the runner's usual path, since the
checkpoint callback keeps the best by the same metric.

The callback's state (best score, validations without improvement) is saved in every checkpoint by
Lightning, so a resumed run counts on; a run resumed after it had already stopped does not train
again, unless ``patience`` was raised for the resumed run.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, EarlyStopping

from sesame.tasks.base.run_settings import EarlyStoppingSettings

__all__ = ["EarlyStoppingSettings", "MainMetricEarlyStopping", "early_stopping_callbacks"]


class MainMetricEarlyStopping(EarlyStopping):
    """Lightning's ``EarlyStopping`` (mode ``max``, as ``checkpoints/best.ckpt`` is chosen) with two changes:

    * a NaN or infinite metric (e.g. nothing scored) counts as no improvement instead of stopping at once;
    * on resume, ``patience`` is this run's setting, not the checkpoint's, and a run whose checkpoint
      records that it had already stopped (killed during its final evaluation) ends its fit at once.
    """

    def __init__(self, monitor: str, patience: int, min_delta: float) -> None:
        super().__init__(monitor=monitor, mode="max", patience=patience, min_delta=min_delta,
                         check_finite=False, strict=True, verbose=True)
        self._stopped_before_resume = False

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience
        self._stopped_before_resume = self.wait_count >= self.patience

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._stopped_before_resume:
            # The fit loop checks should_stop before each epoch: the restored run ends here, and the
            # runner validates and tests its best checkpoint as after an uninterrupted early stop.
            trainer.should_stop = True
            self._stopped_before_resume = False


def early_stopping_callbacks(settings: EarlyStoppingSettings | None, monitor: str | None) -> list[Callback]:
    """The callback for the trainer (none when early stopping is off or not configured); ``monitor`` is
    the task's main metric, or None when there is no validation split."""
    if settings is None or not settings.enabled or monitor is None:  # train() refuses it without validation data
        return []
    return [MainMetricEarlyStopping(monitor, settings.patience, settings.min_delta)]
