"""``python scripted_run.py RUN_DIR OVERRIDE...``: one training run (``runner.train``) with test hooks.

A file, not ``python -c``: Lightning's DDP launcher starts the other ranks by running this same
command line again. Environment:

- ``KILL=train|validation:STEP:SIGNAL``: every rank sends itself SIGNAL after that training step, or
  during the validation after it (never during the sanity check).
- ``RECORD_BATCHES=1``: each rank writes ``train_batches_rank<R>.json`` into RUN_DIR at the end of fit:
  per training step, the real tokens (``input_ids`` where ``attention_mask``) of each of its examples
  (of each member of a group of sequences).
"""

import json
import os
import signal
import sys
from pathlib import Path

import lightning as L
from hydra import compose, initialize_config_module

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs import runner
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.cli.resolvers import register_resolvers

SCRIPTED_RUN = __file__  # for tests: [sys.executable, SCRIPTED_RUN, run_dir, *overrides]


class Kill(L.Callback):
    def __init__(self, spec: str) -> None:
        self.where, step, self.signal = spec.split(":")
        self.step = int(step)

    def _kill(self, trainer: L.Trainer, at: str) -> None:
        if at == self.where and trainer.global_step == self.step and not trainer.sanity_checking:
            os.kill(os.getpid(), getattr(signal, self.signal))

    def on_train_batch_end(self, trainer, *args):
        self._kill(trainer, "train")

    def on_validation_batch_end(self, trainer, *args):
        self._kill(trainer, "validation")


def real_tokens(ids: list, mask: list) -> list:
    """An example's tokens where ``mask`` is set: ``[T]`` -> the real tokens; a group of sequences
    ``[G][T]`` (multiple choice) -> those of each member that has any (a batch pads groups to its largest)."""
    if ids and isinstance(ids[0], list):
        return [members for members in (real_tokens(i, m) for i, m in zip(ids, mask)) if members]
    return [t for t, real in zip(ids, mask) if real]


class RecordBatches(L.Callback):
    def __init__(self, run_dir: str) -> None:
        self.run_dir, self.batches = Path(run_dir), []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        rows = zip(batch["input_ids"].tolist(), batch["attention_mask"].bool().tolist())
        self.batches.append([real_tokens(ids, mask) for ids, mask in rows])

    def on_train_end(self, trainer, pl_module):
        path = self.run_dir / f"train_batches_rank{trainer.global_rank}.json"
        path.write_text(json.dumps(self.batches))


def main() -> None:
    run_dir, overrides = sys.argv[1], sys.argv[2:]
    hooks = [Kill(os.environ["KILL"])] if os.environ.get("KILL") else []
    # Ctrl-C as at a terminal, also when the tests were started in the background (a shell's `cmd &` ignores SIGINT,
    # and Python then installs no KeyboardInterrupt handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("RECORD_BATCHES"):
        hooks.append(RecordBatches(run_dir))
    build = runner.build_trainer
    runner.build_trainer = lambda cfg, run_dir, monitor, extra=None, **kw: build(cfg, run_dir, monitor, [*(extra or []), *hooks], **kw)
    register_resolvers()
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    with user_errors_are_messages():  # as sesame-train ends: exit 2 for user errors, 143 after SIGTERM
        runner.train(RunSettings.from_config(cfg), run_dir)


if __name__ == "__main__":
    main()
