"""The model card (``README.md``) every export writes: what the model does and how it was made.

It says the task and its labels, the encoder, the fusion / pooling / head settings, the temperature
where the exported weights apply one, the training data (file and number of examples), how far the run
trained (optimiser steps of how many an epoch, and the settings that limit it), which checkpoint was
exported, the run's metrics (its ``metrics.json``, flagged where they are of another checkpoint), what
the export checked (largest difference from sesame's outputs), the files, code that loads and runs
them (each snippet is run by the tests), and the command that wrote it. Everything comes from the checkpoint's config and the run folder; a value that
cannot be found (a bare .ckpt, a training file no longer there) is written as unknown, never guessed.
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

from sesame.tasks.saved.checkpoints import TrainedModel
from sesame.tasks.core.errors import UserError
from sesame.tasks.export import is_pair_task, run_folder_of, task_family

log = logging.getLogger(__name__)

#: Hugging Face ``pipeline_tag`` of each task family.
PIPELINE_TAGS = {
    "sequence_classification": "text-classification",
    "question_answering": "question-answering",
    "token_classification": "token-classification",
}


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


def count_training_examples(cfg: Mapping[str, Any]) -> int | None:
    """Examples in the run's training file (before ``data.max_train_examples``); None where the file
    cannot be read here (it may have stayed on the training machine)."""
    data = cfg.get("data") or {}
    path = data.get("train_file")
    if not path or not Path(str(path)).expanduser().is_file():
        return None
    try:
        family = task_family(cfg)
        if family == "question_answering":
            from sesame.tasks.qa.readers import read_squad

            rows, _ = read_squad(path, allow_impossible=bool(data.get("version_2_with_negative")),
                                 on_bad_example="skip", key="train_file")
            return len(rows)
        if family == "token_classification":
            from sesame.tasks.ner.readers import read_examples

            return len(read_examples(path, data.get("format", "auto"), int(data.get("tag_column", -1)), "train_file"))
        if cfg["task"]["name"] == "text_classification":
            from sesame.tasks.glue.readers import read_table

            table, _ = read_table(path, data["text_column"], data.get("text_pair_column"), data["label_column"])
            return len(table)
        from sesame.tasks.glue.data import GlueDataModule, GlueDataSettings
        from sesame.tasks.glue.readers import read_glue_tsv

        spec = GlueDataModule.task_spec(GlueDataSettings.from_config(data))
        return len(read_glue_tsv(path, spec))
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


def _labels(trained: TrainedModel) -> list[str] | None:
    module = trained.module
    names = getattr(module, "tag_names", None) or getattr(module, "label_names", None)
    return list(names) if names else None


#: The example input every usage snippet runs on, per task family (sesame-predict's JSON fields).
EXAMPLE_INPUTS = {
    "sequence_classification": {"text": "a charming and often affecting journey"},
    "question_answering": {"question": "Where did Marie Curie live?",
                           "context": "Marie Curie lived in Paris and worked on radioactivity."},
    "token_classification": {"text": "Marie Curie lived in Paris ."},
}


def example_input(family: str, pairs: bool = False) -> dict[str, str]:
    """The snippets' input: sesame-predict's JSON fields (``text_pair`` too for a sentence-pair task)."""
    return {**EXAMPLE_INPUTS[family], **({"text_pair": "an often charming journey"} if pairs else {})}


def _hf_usage(family: str, folder: str, kind: str, example: dict[str, str], trained_cfg: Mapping[str, Any]) -> str:
    """Python that loads the transformers export and runs it on ``example`` (transformers 5: no
    question-answering pipeline, so QA picks the best span from the start / end logits itself)."""
    auto = {"sequence_classification": "AutoModelForSequenceClassification",
            "question_answering": "AutoModelForQuestionAnswering",
            "token_classification": "AutoModelForTokenClassification"}[family]
    load = (f"model = {auto}.from_pretrained(\"{folder}\").eval()\n"
            f"tokenizer = AutoTokenizer.from_pretrained(\"{folder}\")\n")
    if family == "question_answering":
        max_length = int((trained_cfg.get("data") or {}).get("max_seq_length") or 384)
        longest = int((trained_cfg.get("head") or {}).get("max_answer_length") or 30)
        return ("```python\nimport torch\nfrom transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n" + load +
                f"question = {example['question']!r}\ncontext = {example['context']!r}\n"
                f"inputs = tokenizer(question, context, truncation=\"only_second\", max_length={max_length},\n"
                "                   return_offsets_mapping=True, return_tensors=\"pt\")\n"
                "offsets = inputs.pop(\"offset_mapping\")[0]\n"
                "in_context = torch.tensor([s == 1 for s in inputs.sequence_ids(0)])\n"
                "with torch.no_grad():\n    out = model(**inputs)\n"
                f"# the best span of the context: end >= start, at most {longest} tokens (head.max_answer_length);\n"
                "# sesame-predict also slides windows over long contexts (and, SQuAD 2.0, may answer nothing)\n"
                "start = out.start_logits[0].masked_fill(~in_context, float(\"-inf\"))\n"
                "end = out.end_logits[0].masked_fill(~in_context, float(\"-inf\"))\n"
                "scores = start[:, None] + end[None, :]\n"
                f"allowed = torch.ones_like(scores, dtype=torch.bool).triu().tril({longest - 1})\n"
                "first, last = divmod(int(scores.masked_fill(~allowed, float(\"-inf\")).argmax()), scores.shape[1])\n"
                "print(context[int(offsets[first][0]):int(offsets[last][1])])\n```")
    text = repr(example if "text_pair" in example else example["text"])
    call = {"regression": f"print(run({text}, function_to_apply=\"none\"))   # the regression score "
                          "(the pipeline's default squashes it)",
            "multi_label": f"print(run({text}, top_k=None))   # every label's probability; sesame's decisions: "
                           ">= its threshold (config.json)"}.get(kind, f"print(run({text}))")
    return (f"```python\nfrom transformers import {auto}, AutoTokenizer, pipeline\n\n" + load +
            f"run = pipeline(\"{PIPELINE_TAGS[family]}\", model=model, tokenizer=tokenizer)\n{call}\n```")


def _usage(fmt: str, family: str, folder_name: str, kind: str = "", example: dict[str, str] | None = None,
           trained_cfg: Mapping[str, Any] | None = None) -> str:
    """How to load and run the export, on ``example``; ``kind``: ``regression`` or ``multi_label`` for such classifiers.
    Every snippet runs as printed from the export's parent folder (``tests/tasks/export/test_model_card.py``)."""
    example = example or example_input(family)
    if fmt == "hf":
        return _hf_usage(family, folder_name, kind, example, trained_cfg or {})
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
    cfg = trained.cfg
    family = task_family(cfg)
    fmt = report["format"]
    data, encoder, trainer = cfg.get("data") or {}, trained.module.encoder, cfg.get("trainer") or {}
    labels = _labels(trained)
    task = cfg["task"]["name"] + (f" ({data['task_name']})" if data.get("task_name") else "")
    n_train = count_training_examples(cfg)
    cap = data.get("max_train_examples")
    used = None if n_train is None else (min(n_train, int(cap)) if cap else n_train)
    train_size = "unknown (the training file is not readable here)" if n_train is None else (
        f"{used} examples" + (f" (the first {cap} of {n_train})" if cap and n_train > int(cap) else ""))
    fusion = cfg.get("fusion") or {}
    head = cfg.get("head") or {}
    params = sum(p.numel() for p in trained.module.parameters())
    kind = ""
    if family == "sequence_classification":
        kind = "multi_label" if getattr(trained.module, "multi_label", False) else "regression" if labels is None else ""

    front = ["---", f"library_name: {'transformers' if fmt == 'hf' else 'onnx'}", f"pipeline_tag: {PIPELINE_TAGS[family]}",
             "tags:", "- sesame", f"- {cfg['task']['name']}", *([f"- {fmt}"] if fmt == "onnx" else []), "---", ""]
    model_rows: list[tuple[str, Any]] = [
        ("task", f"{task}: {family.replace('_', ' ')}"),
        ("labels" + (" (multi-label)" if getattr(trained.module, "multi_label", False) else "")
         if family == "sequence_classification" else "tags", labels if labels else
         ("none (regression: one score)" if family == "sequence_classification" else "answer spans in the context")),
        ("encoder", f"{cfg['encoder']['name_or_path']} ({getattr(encoder.config, 'model_type', '?')}, "
                    f"{encoder.num_hidden_states - 1} layers, hidden size {encoder.hidden_size})"),
        ("parameters", f"{params:,}"),
        ("fusion", fusion.get("mode", "?") + (f" (layers {fusion['layers']}, {fusion.get('combine')})" if fusion.get("layers") else "")),
    ]
    if family == "sequence_classification":
        model_rows.append(("pooling", (cfg.get("pooling") or {}).get("name")))
    model_rows.append(("head", ", ".join(f"{k}={_value(v)}" for k, v in sorted(head.items())) or "-"))
    model_rows.append(("fine-tuning", (cfg.get("finetune") or {}).get("mode")))
    metrics = run_metrics(trained)
    temperature = getattr(getattr(trained.module, "calibration", None), "temperature", None)
    applied = temperature is not None and float(temperature) != 1.0
    if applied:
        where = "folded into the classifier's weights and bias" if fmt == "hf" else "in model.onnx"
        model_rows.append(("calibration", f"temperature {float(temperature):.6g} applied: logits / T ({where})"))
    elif cfg.get("calibrate"):
        model_rows.append(("calibration", "none applied: the run fitted a temperature (calibrate=true), but this "
                                          "checkpoint does not hold it"))
    doubt = (metrics or {}).get("val_calibration_warning") if applied else None
    if doubt:
        model_rows.append(("calibration warning", doubt))
    if (cfg.get("compression") or {}).get("quantized"):
        model_rows.append(("compression", "dynamic int8 (sesame-compress quantize)"))
    data_rows: list[tuple[str, Any]] = [
        ("training file", data.get("train_file")),
        ("training size", train_size),
        ("validation file", data.get("validation_file")),
        ("max sequence length", data.get("max_seq_length")),
        *([("doc stride", data.get("doc_stride"))] if family == "question_answering" else []),
        ("trained", _trained(trained, metrics)),
        ("settings", ", ".join(f"{key}={_value(value)}" for key, value in (
            ("trainer.max_epochs", trainer.get("max_epochs")), ("trainer.max_steps", trainer.get("max_steps")),
            ("trainer.limit_train_batches", trainer.get("limit_train_batches")),
            ("data.max_train_examples", data.get("max_train_examples")),
            ("data.max_eval_examples", data.get("max_eval_examples")),
            ("calibrate", str(bool(cfg.get("calibrate"))).lower())))),
        ("seed", cfg.get("seed")),
        ("exported checkpoint", _exported(trained, metrics)),
    ]
    shown = {k: v for k, v in (metrics or {}).items() if k not in NOT_METRICS and (applied or k not in CALIBRATION_METRICS)}
    if metrics:
        metric_text = "\n".join(["| metric | value |", "|---|---|"] + [f"| {k} | {_value(v)} |" for k, v in sorted(shown.items())])
    else:
        metric_text = "No metrics.json found next to the checkpoint."
    export_rows: list[tuple[str, Any]] = [("format", fmt)]
    for key in ("architecture", "exporter", "opset", "inputs", "outputs", "max_abs_diff", "int8_max_abs_diff",
                "int8_agreement", "decision_thresholds", "files"):
        if report.get(key) is not None:
            export_rows.append((key.replace("_", " "), report[key]))
    export_rows.append(("exported", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")))
    export_rows.append(("sesame", _version()))
    checked = ("largest difference from sesame's PyTorch outputs on probe inputs of other batch sizes and lengths "
               "than the export example" if fmt == "onnx" else
               "largest difference from sesame's outputs on probe inputs (QA: on the context positions)")
    body = [
        f"# {task} model ({fmt} export of a sesame run)", "",
        _table(model_rows), "",
        "## Training", "", _table(data_rows), "",
        "## Metrics", "", _metrics_heading(trained, metrics), "", metric_text, "",
        "## Export", "", f"max abs diff: {checked}.", "", _table(export_rows), "",
        "## Use", "", _usage(fmt, family, folder_name, kind, example_input(family, is_pair_task(trained.module)), cfg), "",
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
