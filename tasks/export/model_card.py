"""The model card (``README.md``) every export writes: what the model does and how it was made.

It says the task and its labels, the encoder, the fusion / pooling / head settings, the training data
(file and number of examples) and how the run trained, the run's metrics (its ``metrics.json``), what
the export checked (largest difference from sesame's outputs), the files, how to load them, and the
command that wrote it. Everything comes from the checkpoint's config and the run folder; a value that
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

from sesame.tasks.checkpoints import TrainedModel
from sesame.tasks.errors import UserError
from sesame.tasks.export import run_folder_of, task_family

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


def _labels(trained: TrainedModel) -> list[str] | None:
    module = trained.module
    names = getattr(module, "tag_names", None) or getattr(module, "label_names", None)
    return list(names) if names else None


def _usage(fmt: str, family: str, folder_name: str, kind: str = "") -> str:
    """How to load the export; ``kind``: ``regression`` or ``multi_label`` for such classifiers."""
    if fmt == "hf":
        auto = {"sequence_classification": "AutoModelForSequenceClassification",
                "question_answering": "AutoModelForQuestionAnswering",
                "token_classification": "AutoModelForTokenClassification"}[family]
        pipe = PIPELINE_TAGS[family]
        note = {
            "regression": "\nrun(text, function_to_apply=\"none\")   # the regression score (the pipeline's default squashes it)",
            "multi_label": "\nrun(text, top_k=None)   # every label's probability; sesame's decisions: >= its threshold (config.json)",
        }.get(kind, "")
        return (f"```python\nfrom transformers import {auto}, AutoTokenizer, pipeline\n\n"
                f"model = {auto}.from_pretrained(\"{folder_name}\")\n"
                f"tokenizer = AutoTokenizer.from_pretrained(\"{folder_name}\")\n"
                f"run = pipeline(\"{pipe}\", model=\"{folder_name}\"){note}\n```")
    return ("```bash\n"
            f"sesame-predict {folder_name} < inputs.jsonl       # onnxruntime; the outputs of the sesame run\n"
            "```\n\n"
            "```python\nfrom sesame.tasks.export.onnx_runner import OnnxRunner\n\n"
            f"runner = OnnxRunner.from_folder(\"{folder_name}\")   # int8=True: model.int8.onnx\n"
            "outputs = runner(batch)   # input_ids, attention_mask[, token_type_ids][, context_mask]\n```")


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
    if (cfg.get("compression") or {}).get("quantized"):
        model_rows.append(("compression", "dynamic int8 (sesame-compress quantize)"))
    data_rows: list[tuple[str, Any]] = [
        ("training file", data.get("train_file")),
        ("training size", train_size),
        ("validation file", data.get("validation_file")),
        ("max sequence length", data.get("max_seq_length")),
        *([("doc stride", data.get("doc_stride"))] if family == "question_answering" else []),
        ("epochs", trainer.get("max_epochs")),
        *([("training batches per epoch", trainer.get("limit_train_batches"))] if trainer.get("limit_train_batches") not in (None, 1.0) else []),
        ("seed", cfg.get("seed")),
        ("checkpoint", str(trained.checkpoint)),
    ]
    metrics = run_metrics(trained)
    if metrics:
        metric_text = "\n".join(["| metric | value |", "|---|---|"] + [f"| {k} | {_value(v)} |" for k, v in sorted(metrics.items())])
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
        "## Metrics", "", "The run's `metrics.json` (its best checkpoint, on its validation data):", "", metric_text, "",
        "## Export", "", f"max abs diff: {checked}.", "", _table(export_rows), "",
        "## Use", "", _usage(fmt, family, folder_name, kind), "",
        "## How it was made", "", "```bash", command or "(not recorded: exported from Python)", "```", "",
    ]
    return "\n".join(front + body)


def write_model_card(folder: str | Path, trained: TrainedModel, report: Mapping[str, Any],
                     command: str | None = None) -> Path:
    """Write ``README.md`` into the export folder ``folder`` (a staging folder, renamed into place whole)."""
    name = Path(report.get("output") or folder).name
    path = Path(folder) / "README.md"
    path.write_text(model_card(trained, report, command, folder_name=name), encoding="utf-8")
    return path
