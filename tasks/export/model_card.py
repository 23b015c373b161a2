"""The model card (``README.md``) every export writes: what the model does and how it was made.

It says the task and its labels, the encoder, the fusion / pooling / head settings, the temperature
where the exported weights apply one, the training data (file and number of examples), how far the run
trained (optimiser steps of how many an epoch, and the settings that limit it), which checkpoint was
exported, the run's metrics (its ``metrics.json``, flagged where they are of another checkpoint), what
the export checked (largest difference from sesame's outputs), the files, code that loads and runs
them (each snippet is run by the tests), and the command that wrote it. Everything comes from the checkpoint's config and the run folder; a value that
cannot be found (a bare .ckpt, a training file no longer there) is written as unknown, never guessed.
What is the task's (its kind and labels, its settings rows, the example input and the transformers
snippet, how its training file is counted) its ``TaskExport`` says (``tasks/base/export.py``).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from sesame.tasks.base.export import TaskExport
from sesame.tasks.saved.checkpoints import TrainedModel
from sesame.tasks.encoders.pruning import PLAIN_SHAPES, PruningPlan
from sesame.tasks.saved.int8 import is_quantized
from sesame.tasks.core.errors import UserError
from sesame.tasks.export import run_folder_of, task_export

log = logging.getLogger(__name__)


def run_metrics(trained: TrainedModel) -> dict[str, Any] | None:
    """The ``metrics.json`` of the run the checkpoint belongs to (None without one)."""
    folder = run_folder_of(trained.checkpoint)
    path = folder / "metrics.json" if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        log.warning("could not read %s for the model card: %s", path, err)
        return None


def count_training_examples(task: TaskExport) -> int | None:
    """Examples in the run's training file (before ``data.max_train_examples``), read by the task
    (``TaskExport.count_examples``); None where the file cannot be read here (it may have stayed on
    the training machine)."""
    path = task.settings.data.train_file
    if not path or not Path(str(path)).expanduser().is_file():
        return None
    try:
        return task.count_examples(path)
    except (UserError, OSError, KeyError, ValueError) as err:
        log.warning("could not count the training examples of %s: %s", path, err)
        return None


def _version() -> str:
    try:
        return metadata.version("sesame")
    except metadata.PackageNotFoundError:
        return "unknown"


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _table(rows: list[tuple[str, Any]]) -> str:
    lines = ["| | |", "|---|---|"]
    lines += [f"| {key} | {_value(value).replace('|', '/')} |" for key, value in rows]
    return "\n".join(lines)


#: ``metrics.json`` entries the card shows elsewhere (the training table), not as metrics.
NOT_METRICS = ("train_steps", "train_steps_per_epoch", "best_step", "val_calibration_warning")
#: ``metrics.json`` entries of ``calibrate=true``: shown only where the exported weights hold that temperature.
CALIBRATION_METRICS = ("val_temperature", "val_ece_calibrated", "val_ece_calibrated_crossfit")


def _trained(trained: TrainedModel, metrics: Mapping[str, Any] | None) -> str:
    """How long the run trained: optimiser steps of how many an epoch (from its metrics.json)."""
    steps, per_epoch = (metrics or {}).get("train_steps"), (metrics or {}).get("train_steps_per_epoch")
    if steps is None:
        return "unknown (no metrics.json with train_steps next to the checkpoint)"
    if not per_epoch:
        return f"{steps} optimiser steps"
    return f"{steps} optimiser steps, {per_epoch} per epoch: {steps / per_epoch:.3g} epochs"


def _exported(trained: TrainedModel, metrics: Mapping[str, Any] | None) -> str:
    """Which checkpoint this export is of, and what it is in its run."""
    step = "" if trained.global_step is None else f"step {trained.global_step}"
    name = trained.checkpoint.name
    if name == "best.ckpt":
        what = "the run's best validation by task.main_metric, which its metrics describe"
    elif name == "last.ckpt":
        what = "the run's latest training state, which its best.ckpt and metrics need not be"
    else:
        what = "a checkpoint file given directly"
    return f"{name} ({', '.join(x for x in (step, what) if x)})"


def _metrics_heading(trained: TrainedModel, metrics: Mapping[str, Any] | None) -> str:
    best = (metrics or {}).get("best_step")
    if best is not None and trained.global_step is not None and best != trained.global_step:
        return (f"The run's `metrics.json`, of its best.ckpt (step {best}) on its validation data: **not of the "
                f"exported checkpoint** (step {trained.global_step}):")
    return "The run's `metrics.json` (the exported checkpoint's weights, on the run's validation data):"


def _usage(fmt: str, task: TaskExport, folder_name: str, example: Mapping[str, str]) -> str:
    """How to load and run the export, on ``example``: transformers' code of the task
    (``TaskExport.hf_usage``), or ``sesame-predict`` / ``Predictor`` on an ONNX folder. Every snippet
    runs as printed from the export's parent folder (``tests/tasks/export/test_model_card.py``)."""
    if fmt == "hf":
        return task.hf_usage(folder_name, example)
    line = json.dumps(example)
    return ("```bash\n"
            f"echo '{line}' | sesame-predict {folder_name}   # onnxruntime; the outputs of the sesame run\n"
            "```\n\n"
            "```python\nfrom sesame.tasks.inference.predictor import Predictor\n\n"
            f"predict = Predictor.from_run(\"{folder_name}\")   # model.onnx, through onnxruntime\n"
            f"print(predict([{line}]))\n```")


def model_card(trained: TrainedModel, report: Mapping[str, Any], command: str | None = None,
               folder_name: str = "<this folder>") -> str:
    """The README.md text of an export of ``trained`` described by ``report`` (``export_hf`` / ``export_onnx``)."""
    cfg, settings = trained.cfg, trained.settings
    task = task_export(trained)
    fmt = report["format"]
    data, encoder, trainer = settings.data, trained.module.encoder, settings.trainer
    title = task.title()
    n_train = count_training_examples(task)
    cap = data.max_train_examples
    used = None if n_train is None else (min(n_train, int(cap)) if cap else n_train)
    train_size = "unknown (the training file is not readable here)" if n_train is None else (
        f"{used} examples" + (f" (the first {cap} of {n_train})" if cap and n_train > int(cap) else ""))
    fusion = settings.fusion
    params = sum(p.numel() for p in trained.module.parameters())

    front = ["---", f"library_name: {'transformers' if fmt == 'hf' else 'onnx'}", f"pipeline_tag: {task.pipeline_tag}",
             "tags:", "- sesame", f"- {settings.task.name}", *([f"- {fmt}"] if fmt == "onnx" else []), "---", ""]
    model_rows: list[tuple[str, Any]] = [
        ("task", f"{title}: {task.task_kind}"),
        task.label_row(),
        ("encoder", f"{settings.encoder.name_or_path} ({getattr(encoder.config, 'model_type', '?')}, "
                    f"{encoder.num_hidden_states - 1} layers, hidden size {encoder.hidden_size})"),
        ("parameters", f"{params:,}"),
        ("fusion", fusion.mode + (f" (layers {list(fusion.layers)}, {fusion.combine})" if fusion.layers else "")),
        *task.model_rows(),
        ("head", ", ".join(f"{k}={_value(v)}" for k, v in sorted(settings.head.as_dict().items())) or "-"),
        ("fine-tuning", settings.finetune.mode),
    ]
    metrics = run_metrics(trained)
    temperature = task.applied_temperature()
    applied = temperature is not None
    if applied:
        where = "folded into the classifier's weights and bias" if fmt == "hf" else "in model.onnx"
        model_rows.append(("calibration", f"temperature {temperature:.6g} applied: logits / T ({where})"))
    elif settings.calibrate:
        model_rows.append(("calibration", "none applied: the run fitted a temperature (calibrate=true), but this "
                                          "checkpoint does not hold it"))
    doubt = (metrics or {}).get("val_calibration_warning") if applied else None
    if doubt:
        model_rows.append(("calibration warning", doubt))
    plan = PruningPlan.of_config(encoder.config)
    if plan is not None:
        shapes = f"this folder holds {PLAIN_SHAPES}" if fmt == "hf" else "the compact pruned model"
        model_rows.append(("pruning", f"structured (sesame-compress prune): {plan.summary()}; {shapes}"))
    if is_quantized(cfg):
        model_rows.append(("compression", "dynamic int8 (sesame-compress quantize)"))
    data_rows: list[tuple[str, Any]] = [
        ("training file", data.train_file),
        ("training size", train_size),
        ("validation file", data.validation_file),
        ("max sequence length", data.max_seq_length),
        *task.data_rows(),
        ("trained", _trained(trained, metrics)),
        ("settings", ", ".join(f"{key}={_value(value)}" for key, value in (
            ("trainer.max_epochs", trainer.get("max_epochs")), ("trainer.max_steps", trainer.get("max_steps")),
            ("trainer.limit_train_batches", trainer.get("limit_train_batches")),
            ("data.max_train_examples", data.max_train_examples),
            ("data.max_eval_examples", data.max_eval_examples),
            ("calibrate", str(bool(settings.calibrate)).lower())))),
        ("seed", settings.seed),
        ("exported checkpoint", _exported(trained, metrics)),
    ]
    shown = {k: v for k, v in (metrics or {}).items() if k not in NOT_METRICS and (applied or k not in CALIBRATION_METRICS)}
    if metrics:
        metric_text = "\n".join(["| metric | value |", "|---|---|"] + [f"| {k} | {_value(v)} |" for k, v in sorted(shown.items())])
    else:
        metric_text = "No metrics.json found next to the checkpoint."
    export_rows: list[tuple[str, Any]] = [("format", fmt)]
    for key in ("architecture", "exporter", "opset", "inputs", "outputs", "max_abs_diff", "int8_weights", "int8_max_abs_diff",
                "int8_agreement", "decision_thresholds", "files"):
        if report.get(key) is not None:
            export_rows.append((key.replace("_", " "), report[key]))
    export_rows.append(("exported", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")))
    export_rows.append(("sesame", _version()))
    checked = ("largest difference from sesame's PyTorch outputs on probe inputs of other batch sizes and lengths "
               "than the export example" if fmt == "onnx" else
               "largest difference from sesame's outputs on probe inputs (QA: on the context positions)")
    body = [
        f"# {title} model ({fmt} export of a sesame run)", "",
        _table(model_rows), "",
        "## Training", "", _table(data_rows), "",
        "## Metrics", "", _metrics_heading(trained, metrics), "", metric_text, "",
        "## Export", "", f"max abs diff: {checked}.", "", _table(export_rows), "",
        "## Use", "", _usage(fmt, task, folder_name, task.example_input()), "",
        "## How it was made", "", *(["```bash", command, "```"] if command else ["Not recorded: exported from Python."]), "",
    ]
    return "\n".join(front + body)


def write_model_card(folder: str | Path, trained: TrainedModel, report: Mapping[str, Any],
                     command: str | None = None) -> Path:
    """Write ``README.md`` into the export folder ``folder`` (a staging folder, renamed into place whole)."""
    name = Path(report.get("output") or folder).name
    path = Path(folder) / "README.md"
    path.write_text(model_card(trained, report, command, folder_name=name), encoding="utf-8")
    return path
