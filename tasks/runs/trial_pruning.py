"""A pruning search's job reports each validation to its Optuna trial and stops when the pruner says so.

``optuna.ledger`` / ``optuna.trial`` (``tasks/base/optuna_settings.py``, set by ``hydra/sweeper=pruning_optuna``)
name the trial. After each validation (not the sanity check) the callback records ``task.main_metric`` as the
trial's intermediate value at step ``n`` (the ``n``-th validation of the run) in the ledger and asks the
search's pruner (``tasks/runs/trial_ledger.py``). A pruned trial stops training there
(``trainer.should_stop``); the run then evaluates its best checkpoint and writes its folder as any run does,
with ``optuna_trial.json`` (trial, reported values, ``pruned_at``) and ``metrics.json``'s ``optuna_pruned``
saying it was pruned.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from sesame.tasks.base.optuna_settings import OptunaTrialSettings
from sesame.tasks.core.atomic_files import write_json_atomic
from sesame.tasks.core.distributed import is_main_process
from sesame.tasks.runs.trial_ledger import PrunerSpec, TrialLedger, replay, trial_record

#: The record a trial's run folder keeps of what it reported.
TRIAL_FILE = "optuna_trial.json"


class ReportToTrial(Callback):
    """Reports ``monitor`` after each validation to the trial and stops training when it is pruned."""

    def __init__(self, settings: OptunaTrialSettings, monitor: str, run_dir: Path) -> None:
        self.ledger = TrialLedger(settings.ledger, settings.lock_timeout_s)
        self.number = int(settings.trial)
        self.monitor = monitor
        self.run_dir = Path(run_dir)
        self.reported: dict[int, float] = {}
        self.pruned_at: int | None = None
        if is_main_process():  # a missing or damaged ledger, or a trial it lacks, is named before training starts
            with self.ledger.open() as content:
                trial_record(content, self.number)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # only the fit's validations are steps: not the sanity check, nor the best checkpoint's evaluation after it
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self.pruned_at is not None:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        step = len(self.reported) + 1
        value = float(value)
        self.reported[step] = value
        # rank 0 asks; under DDP every rank would stop alike only by a broadcast, so the decision is shared
        prune = self._report(step, value) if is_main_process() else False
        prune = bool(trainer.strategy.broadcast(prune, src=0))
        if prune:
            self.pruned_at = step
            trainer.should_stop = True
        self._write_record()

    def _report(self, step: int, value: float) -> bool:
        if not math.isfinite(value):  # nothing scored: Optuna's trial.report would skip it too
            return False
        with self.ledger.open() as content:
            record = trial_record(content, self.number)
            record["intermediate"][str(step)] = value
            pruner = PrunerSpec.from_config(content["pruner"]).build()
            study = replay(content, pruner=pruner)
            trial = study.trials[self.number]
            prune = bool(pruner.prune(study, trial))
            # the pruner's own records of this trial (successive halving's rungs) go back into the ledger
            record["system_attrs"] = dict(study._storage.get_trial(trial._trial_id).system_attrs)
            if prune:
                record["pruned_at"] = step
        return prune

    def _write_record(self) -> None:
        if is_main_process():
            write_json_atomic(self.run_dir / TRIAL_FILE, self.summary())

    def summary(self) -> dict[str, Any]:
        """What this run reported to its trial: number, ledger, values by validation, where it was pruned."""
        return {"trial": self.number, "ledger": str(self.ledger.path), "monitor": self.monitor,
                "reported": {str(k): v for k, v in self.reported.items()}, "pruned_at": self.pruned_at}

    def final_metrics(self) -> dict[str, int]:
        """For ``metrics.json``: the trial's number and whether it was pruned (1) or ran to its end (0)."""
        return {"optuna_trial": self.number, "optuna_pruned": int(self.pruned_at is not None)}

    def state_dict(self) -> dict[str, Any]:
        return {"reported": dict(self.reported), "pruned_at": self.pruned_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # a resumed job counts its validations on, so its steps match the ledger's
        self.reported = {int(k): float(v) for k, v in state_dict.get("reported", {}).items()}
        self.pruned_at = state_dict.get("pruned_at")


def trial_callbacks(settings: OptunaTrialSettings | None, monitor: str | None, run_dir: Path) -> list[Callback]:
    """The reporting callback for a trial of a pruning search (none outside one, or without validation data)."""
    if settings is None or not settings.enabled or monitor is None:
        return []
    return [ReportToTrial(settings, monitor, run_dir)]
