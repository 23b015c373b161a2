"""trainer.precision=bf16-mixed and trainer.compile=true train and evaluate every task's path; a compiled
run saves the eager model's parameter names and gives the eager run's predictions."""

from __future__ import annotations

import json

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.runner import train


def test_a_compiled_encoder_evaluates_to_the_eager_metrics_under_the_eager_names(make_cfg, tmp_path):
    """Compiled in place: the module's parameter names stay the eager ones (checkpoints load both ways),
    and sesame-eval with trainer.compile=true scores a trained run as the eager run did."""
    from sesame.tasks.saved.checkpoints import build_module
    from sesame.tasks.runs.compilation import CompileEncoder
    from sesame.tasks.runs.evaluation import evaluate

    module = build_module(RunSettings.from_config(make_cfg()))
    names = list(module.state_dict())
    CompileEncoder().setup(None, module, "validate")
    assert list(module.state_dict()) == names
    eager = train(RunSettings.from_config(make_cfg("trainer.limit_train_batches=2", "trainer.limit_val_batches=null")), tmp_path / "run")
    compiled = evaluate(RunSettings.from_config(make_cfg(f"++model={tmp_path / 'run'}", "trainer.compile=true", "trainer.limit_val_batches=null")),
                        tmp_path / "eval", overrides=[])
    assert compiled["val_accuracy"] == pytest.approx(eager["val_accuracy"], abs=1e-9)
    assert compiled["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-4)


@pytest.mark.parametrize("task", ["glue", "squad_v1", "ner"])
def test_bf16_mixed_precision_trains_and_evaluates(make_cfg, tmp_path, task):
    metrics = train(RunSettings.from_config(make_cfg(f"task={task}", "trainer.precision=bf16-mixed", "trainer.limit_train_batches=2")), tmp_path)
    main = {"glue": "val_accuracy", "squad_v1": "val_f1", "ner": "val_f1"}[task]
    assert metrics[main] is not None
    assert json.loads((tmp_path / "metrics.json").read_text())[main] == metrics[main]
