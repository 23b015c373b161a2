"""Every task trains, evaluates, resumes, shards over DDP and caches frozen features as every other does
(the checks are listed in ``tests/conformance/__init__.py``)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.inputs.feature_cache import list_entries
from sesame.tasks.runs import runner
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import build_datamodule, train
from tests.conformance.checks import assert_same_metrics, assert_same_text, metrics_of, prediction_files
from tests.conformance.conftest import MAKE_CFG_BASE
from tests.conformance.specs import SPECS, TINY_RUN
from tests.tasks.runs.scripted_run import SCRIPTED_RUN, RecordBatches
from tests import preloaded_commands as preloaded

TASKS = pytest.mark.parametrize("spec", SPECS, ids=str)


@TASKS
def test_evaluating_the_saved_model_gives_the_training_metrics_and_files(spec, trained, task_cfg, tmp_path):
    run = trained(spec)
    trained_metrics = metrics_of(run)
    assert trained_metrics["val_examples_scored"] == trained_metrics["val_examples_total"] > 1
    written = prediction_files(run)
    assert written, f"{run} holds no prediction files"

    again = evaluate(RunSettings.from_config(task_cfg(spec, f"++model={run}")), tmp_path / "eval")
    assert metrics_of(tmp_path / "eval") == again
    assert_same_metrics(again, trained_metrics, tol=0)
    assert set(again) >= {k for k in trained_metrics if k.startswith("val_")}
    assert prediction_files(tmp_path / "eval") == written


#: Where the resumed run dies: after its second optimiser step (TINY_RUN: 3 steps an epoch, a periodic
#: checkpoint after each; Lightning runs checkpoint callbacks last, so the one of step 2 is never written).
KILL = "train:2:SIGKILL"


@TASKS
def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_runs_metrics_and_files(spec, trained, task_cfg, encoder,
                                                                                      tmp_path):
    straight = trained(spec)
    run = tmp_path / "killed"
    killed = preloaded.run([sys.executable, SCRIPTED_RUN, str(run), *MAKE_CFG_BASE, *spec.run_overrides(encoder)],
                            env={**os.environ, "KILL": KILL}, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (run / "metrics.json").exists()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 1  # mid-epoch

    resumed = train(RunSettings.from_config(task_cfg(spec, "resume=true")), run)
    assert resumed == metrics_of(straight)  # bit-identical
    assert metrics_of(run) == resumed
    assert prediction_files(run) == prediction_files(straight)


#: The DDP comparison's run: the full global batches of one epoch, at most MAX_DDP_STEPS (counted: a
#: task's examples may be several windows each), so the single process never trains the partial batch
#: the two ranks drop; every dev example evaluated; no dropout anywhere (the ranks' RNG streams differ).
#: An even number of dev examples: with an odd one the last rank's share is padded with a repeat, which
#: the scores count once but val_loss (Lightning's mean of the ranks' batch losses) twice, as
#: docs/scale.md says; the repeat is tests/tasks/core/test_distributed.py's (sesame-eval, 41 questions).
DDP = ("trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")
GLOBAL_BATCH = 8
MAX_DDP_STEPS = 4
DDP_EVAL_EXAMPLES = 16


@TASKS
def test_two_ddp_processes_train_on_the_single_process_batches_and_end_with_its_weights_and_metrics(
        spec, task_cfg, still_encoder, tmp_path, monkeypatch):
    overrides = ["trainer.limit_train_batches=null", "trainer.max_epochs=1", "checkpoint.every_n_train_steps=null",
                 "data.group_by_length=false", f"data.max_eval_examples={DDP_EVAL_EXAMPLES}"]
    cfg = task_cfg(spec, *overrides, encoder_dir=still_encoder)
    if "dropout" in cfg.head:
        overrides.append("head.dropout=0")
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("fit")
    steps = min(len(datamodule.dataset("train")) // GLOBAL_BATCH, MAX_DDP_STEPS)
    assert steps >= 2, f"{len(datamodule.dataset('train'))} training examples make fewer than 2 global batches"
    overrides.append(f"trainer.max_steps={steps}")

    recorder = RecordBatches(tmp_path / "one")
    build = runner.build_trainer
    monkeypatch.setattr(runner, "build_trainer", lambda cfg, run_dir, monitor, extra=None, **kw: build(
        cfg, run_dir, monitor, [*(extra or []), recorder], **kw))
    one = train(RunSettings.from_config(task_cfg(spec, *overrides, f"data.batch_size={GLOBAL_BATCH}", encoder_dir=still_encoder)), tmp_path / "one")
    done = preloaded.run(
        [sys.executable, SCRIPTED_RUN, str(tmp_path / "two"), *MAKE_CFG_BASE,
         *spec.run_overrides(still_encoder, *overrides, f"data.batch_size={GLOBAL_BATCH // 2}", *DDP)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "RECORD_BATCHES": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    two = metrics_of(tmp_path / "two")

    # rank 0's k-th batch then rank 1's is the single process's k-th batch, example for example
    batches = [json.loads((tmp_path / d / f"train_batches_rank{r}.json").read_text()) for d, r in (("one", 0), ("two", 0),
                                                                                                  ("two", 1))]
    single, rank0, rank1 = batches
    assert len(single) == steps and all(len(b) == GLOBAL_BATCH for b in single)
    assert [a + b for a, b in zip(rank0, rank1, strict=True)] == single

    weights = [torch.load(tmp_path / d / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for d in ("one", "two")]
    assert weights[0].keys() == weights[1].keys()
    assert set(spec.ddp_noise_parameters) <= weights[0].keys(), "a declared parameter the model does not have"
    for key, value in weights[0].items():
        if key not in spec.ddp_noise_parameters:
            torch.testing.assert_close(weights[1][key], value, rtol=0, atol=spec.ddp_weights_atol, msg=key)
    assert two["val_examples_scored"] == one["val_examples_scored"] == one["val_examples_total"] == DDP_EVAL_EXAMPLES
    compared = [k for k in one if k.startswith("val_") and k not in spec.ddp_unequal_metrics]
    assert_same_metrics(two, one, keys=compared)
    # every prediction file but RecordBatches' records and those the task declares apart, equal up to
    # float noise in its numbers (the ranks sum in another order)
    kept = lambda name: not name.startswith("train_batches_rank") and name not in spec.ddp_unequal_files  # noqa: E731
    single, ranks = ({k: v for k, v in prediction_files(tmp_path / d).items() if kept(k)} for d in ("one", "two"))
    assert single and ranks.keys() == single.keys()
    for name, text in single.items():
        assert_same_text(ranks[name], text, 1e-5, name)
    assert set(spec.ddp_unequal_files) <= set(prediction_files(tmp_path / "one")), "a declared file the run does not write"


@TASKS
def test_a_frozen_run_with_the_feature_cache_equals_one_without(spec, task_cfg, tmp_path, monkeypatch):
    frozen = ("finetune=frozen", "fusion=scalar_mix", f"cache.dir={tmp_path / 'cache'}")
    if "feature_cache" in spec.refuses:
        with pytest.raises(ConfigError, match=spec.refuses["feature_cache"]):
            train(RunSettings.from_config(task_cfg(spec, *frozen, "cache.enabled=true")), tmp_path / "cached")
        return
    plain = train(RunSettings.from_config(task_cfg(spec, *frozen)), tmp_path / "plain")
    cached = train(RunSettings.from_config(task_cfg(spec, *frozen, "cache.enabled=true")), tmp_path / "cached")
    assert cached == pytest.approx(plain, rel=1e-5)
    assert len(list_entries(tmp_path / "cache")) == 1
    # a second cached run reads the entry: the encoder never runs
    calls = []
    forward = Encoder.forward
    monkeypatch.setattr(Encoder, "forward", lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    again = train(RunSettings.from_config(task_cfg(spec, *frozen, "cache.enabled=true")), tmp_path / "again")
    assert again == cached and calls == []
    assert prediction_files(tmp_path / "again") == prediction_files(tmp_path / "cached")


def test_the_tiny_run_trains_more_than_an_epoch():
    """The resume check kills the run mid-epoch and resumes it across the epoch's end."""
    settings = dict(o.split("=", 1) for o in TINY_RUN)
    assert int(settings["trainer.max_steps"]) > int(settings["trainer.limit_train_batches"]) > int(KILL.split(":")[1])
