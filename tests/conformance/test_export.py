"""Every task exports (``sesame-export``): transformers' own task model and the ONNX graph give the
module's outputs on the run's dev batches (at the positions that carry a value) to 1e-5, and the ONNX
folder predicts what the run predicts; a task whose model does not map says why (a ConfigError)."""

from __future__ import annotations

import pytest
import transformers

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.export import task_export
from sesame.tasks.export.hf import hf_outputs, max_abs_diff
from sesame.tasks.inference.predictor import Predictor
from sesame.tasks.saved.checkpoints import load_trained
from tests.conformance.checks import dev_batches, meets, outputs, predictor_inputs, runner_inputs, same
from tests.conformance.specs import SPECS
from tests.conftest import require

TASKS = pytest.mark.parametrize("spec", SPECS, ids=str)
#: Largest |export - module| on the dev batches.
ATOL = 1e-5


def _refused(spec, check: str, export, output) -> bool:
    """Where the task declares ``check`` refused: the export raises its ConfigError, which points to what
    works instead, and writes nothing."""
    if check not in spec.refuses:
        return False
    with pytest.raises(ConfigError, match=spec.refuses[check]) as err:
        export()
    assert "run folder" in str(err.value) or "--format" in str(err.value), "a refusal says what to use instead"
    assert not output.exists()
    return True


@TASKS
def test_transformers_task_model_gives_the_modules_outputs(spec, trained, tmp_path):
    from sesame.tasks.export.hf import export_hf

    run, folder = trained(spec), tmp_path / "hf"
    if _refused(spec, "hf_export", lambda: export_hf(run, folder), folder):
        return
    report = export_hf(run, folder)
    assert report["max_abs_diff"] <= ATOL  # the export's own check, on the task's probe inputs
    model = load_trained(run)
    task = task_export(model)
    hf = getattr(transformers, task.auto_class).from_pretrained(folder).eval()
    assert report["architecture"] == type(hf).__name__
    worst, scale = 0.0, 0.0
    for batch in dev_batches(model):
        diff, size = max_abs_diff(task, batch, outputs(model.module, batch), hf_outputs(hf, task, batch))
        worst, scale = max(worst, diff), max(scale, size)
    assert scale > 100 * ATOL and worst <= ATOL, f"max |transformers - sesame| {worst:.3g} (outputs up to {scale:.3g})"
    assert task.auto_class in (folder / "README.md").read_text(encoding="utf-8")


@TASKS
def test_onnx_graph_gives_the_modules_outputs_and_predictions(spec, trained, tmp_path):
    require("onnxruntime")
    from sesame.tasks.export.onnx import compare, export_onnx
    from sesame.tasks.inference.onnx_runner import OnnxRunner

    run, folder = trained(spec), tmp_path / "onnx"
    # torchscript: the quicker exporter; torch's default (dynamo) is checked by tests/tasks/export and the tasks' own tests
    if _refused(spec, "onnx_export", lambda: export_onnx(run, folder, exporter="torchscript"), folder):
        return
    report = export_onnx(run, folder, exporter="torchscript")
    assert report["max_abs_diff"] <= ATOL
    model = load_trained(run)
    task = task_export(model)
    graph = OnnxRunner.from_folder(folder, threads=1)
    worst, scale = 0.0, 0.0
    for batch in dev_batches(model):
        got = graph(runner_inputs(model, batch))  # exactly as sesame-predict calls a runner
        diff, size = compare(task, outputs(model.module, batch), got if isinstance(got, tuple) else (got,), batch)
        worst, scale = max(worst, diff), max(scale, size)
    assert scale > 100 * ATOL and worst <= ATOL, f"max |onnxruntime - pytorch| {worst:.3g} (outputs up to {scale:.3g})"

    pairs = predictor_inputs(spec, run, model)
    from_graph = Predictor.from_run(folder)([i for i, _ in pairs])
    same(from_graph, Predictor.from_run(run)([i for i, _ in pairs]), tol=1e-4)
    if spec.expectations() is not None:
        meets(from_graph, pairs, tol=1e-4)
