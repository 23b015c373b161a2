"""Every task compresses (``sesame-compress``, ``distill.teacher=``): dynamic int8 quantisation, structured
pruning and distillation into a smaller student work on its trained run, or the task refuses with a
ConfigError saying why."""

from __future__ import annotations

import copy
import csv
import math

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.compression.drop_layers import drop_layers
from sesame.tasks.compression.prune import prune
from sesame.tasks.compression.prune_importance import PruningMasks
from sesame.tasks.compression.quantize import quantize_checkpoint
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.families import prune_layout
from sesame.tasks.export import task_export
from sesame.tasks.export.onnx import compare
from sesame.tasks.inference.predictor import Predictor
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.saved.int8 import count_quantized_linear, is_quantized, quantize_module
from tests.conformance.checks import dev_batches, meets, metrics_of, outputs, predictor_inputs, prediction_files, same
from tests.conformance.specs import SPECS
from tests.conftest import at_real_tokens

TASKS = pytest.mark.parametrize("spec", SPECS, ids=str)


def _refused(spec, check: str, action) -> bool:
    """Where the task declares ``check`` refused: ``action`` raises its ConfigError."""
    if check not in spec.refuses:
        return False
    with pytest.raises(ConfigError, match=spec.refuses[check]):
        action()
    return True


@TASKS
def test_int8_quantisation_saves_the_quantised_module_and_predicts_what_its_evaluation_writes(
        spec, trained, task_cfg, tmp_path):
    run, folder = trained(spec), tmp_path / "int8"
    if _refused(spec, "int8", lambda: quantize_checkpoint(run, folder)):
        return
    report = quantize_checkpoint(run, folder)
    float_model, int8 = load_trained(run), load_trained(folder)
    assert is_quantized(int8.cfg) and report["float_linear_layers"] == 0
    linear = sum(type(m) is torch.nn.Linear for m in float_model.module.modules())
    assert count_quantized_linear(int8.module) == (report["quantized_linear_layers"], 0) == (linear, 0)
    expected = quantize_module(copy.deepcopy(float_model.module))  # what quantising the module in memory gives
    task = task_export(float_model)
    for batch in dev_batches(float_model):
        got, reference = outputs(int8.module, batch), outputs(float_model.module, batch)
        assert all(torch.equal(g, e) for g, e in zip(got, outputs(expected, batch), strict=True))  # saved = quantised
        assert not any(torch.equal(g, r) for g, r in zip(got, reference))  # int8 kernels really ran, every output
        diff, scale = compare(task, reference, got, batch)
        assert diff <= 0.05 * scale + 1e-3, f"int8 moved the outputs by {diff:.3g} (they reach {scale:.3g})"

    metrics = evaluate(RunSettings.from_config(task_cfg(spec, f"++model={folder}")), tmp_path / "eval")
    assert metrics["val_examples_scored"] == metrics_of(run)["val_examples_scored"]
    assert prediction_files(tmp_path / "eval").keys() == prediction_files(run).keys()
    pairs = predictor_inputs(spec, tmp_path / "eval", int8)
    inputs = [i for i, _ in pairs]
    from_folder = Predictor.from_run(folder)(inputs)
    same(from_folder, Predictor.from_run(run, int8=True)(inputs))  # sesame-predict --int8 quantises the same way
    if spec.expectations() is not None:
        # int8 may round a tiny model's small differences between examples away: all outputs alike is no failure
        meets(from_folder, pairs, varied=False)


def _mask(masks: PruningMasks, keep_heads: list[list[int]], keep_neurons: list[list[int]]) -> None:
    """Zero the masks of every head and neuron not kept."""
    with torch.no_grad():
        for mask, kept in (*zip(masks.heads, keep_heads), *zip(masks.neurons, keep_neurons)):
            mask[[i for i in range(mask.numel()) if i not in kept]] = 0


#: |pruned - masked| allowed: the same sums without the zero terms, in float32 (tests/tasks/compression/test_prune.py).
PRUNE_ATOL = 2e-6


@TASKS
def test_the_pruned_model_computes_what_the_masked_model_computes_and_evaluates(spec, trained, task_cfg, tmp_path):
    run, folder = trained(spec), tmp_path / "pruned"
    if _refused(spec, "prune", lambda: prune(run, folder, heads=0.25, ffn=0.25, batches=2)):
        return
    report = prune(run, folder, heads=0.25, ffn=0.25, batches=2)
    assert report["heads"]["after"] < report["heads"]["before"] and report["neurons"]["after"] < report["neurons"]["before"]
    original, pruned = load_trained(run), load_trained(folder)
    model = original.module.encoder.model
    moved = 0.0
    for batch in dev_batches(original):
        plain = at_real_tokens(outputs(original.module, batch), batch["attention_mask"])
        with PruningMasks(model, prune_layout(model.config, "test")) as masks:
            _mask(masks, report["heads"]["kept_per_layer"], report["neurons"]["kept_per_layer"])
            masked = outputs(original.module, batch)
        # the pruned model's layers run padding-free, the masked ones on the padding: equal at the real tokens
        ours, masked = (at_real_tokens(o, batch["attention_mask"]) for o in (outputs(pruned.module, batch), masked))
        for got, want in zip(ours, masked, strict=True):
            torch.testing.assert_close(got, want, atol=PRUNE_ATOL, rtol=0)
        moved = max(moved, *(float((m - p).abs().max()) for m, p in zip(masked, plain)))
    assert moved > 30 * PRUNE_ATOL, f"the cut barely changes the outputs ({moved:.3g}): the comparison could not fail"

    metrics = evaluate(RunSettings.from_config(task_cfg(spec, f"++model={folder}")), tmp_path / "eval")
    assert metrics["val_examples_scored"] == metrics_of(run)["val_examples_scored"]
    assert prediction_files(tmp_path / "eval").keys() == prediction_files(run).keys()


@TASKS
def test_a_drop_layers_student_distils_from_the_trained_run(spec, trained, task_cfg, tmp_path):
    teacher = trained(spec)
    drop_layers(teacher, tmp_path / "student", keep="every_other", encoder_only=True)
    student = tmp_path / "student" / "encoder"
    distill = (f"distill.teacher={teacher}", "distill.alpha=0.5")
    cache = ("distill.cache=true", f"distill.cache_dir={tmp_path / 'logits'}")
    if _refused(spec, "distill", lambda: train(RunSettings.from_config(task_cfg(spec, *distill, encoder_dir=student)), tmp_path / "refused")):
        return
    plain = train(RunSettings.from_config(task_cfg(spec, *distill, encoder_dir=student)), tmp_path / "plain")
    cached = train(RunSettings.from_config(task_cfg(spec, *distill, *cache, encoder_dir=student)), tmp_path / "cached")
    alone = train(RunSettings.from_config(task_cfg(spec, encoder_dir=student)), tmp_path / "alone")
    assert cached == pytest.approx(plain, rel=1e-5)  # the teacher's logits kept per example are its logits
    assert plain != pytest.approx(alone, rel=1e-5)  # the teacher's term changed the training
    assert list((tmp_path / "logits").glob("*.npz"))

    rows = list(csv.DictReader(open(tmp_path / "plain" / "logs" / "metrics.csv", encoding="utf-8")))
    kl = [float(r["train_distill_kl"]) for r in rows if r.get("train_distill_kl")]
    assert kl and all(math.isfinite(v) for v in kl) and max(kl) > 0
    states = {name: torch.load(tmp_path / name / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
              for name in ("plain", "alone")}
    assert states["plain"].keys() == states["alone"].keys()  # the student only: no teacher weights
    assert any(not torch.equal(states["plain"][k], states["alone"][k]) for k in states["plain"])  # the teacher taught
    layers = [load_trained(path).module.encoder.model.config.num_hidden_layers for path in (teacher, tmp_path / "plain")]
    assert layers[1] < layers[0]
