"""What ``sesame-export``, the ONNX runner and the model card know of sentence(-pair) classification
(``task=glue`` / ``text_classification``): :class:`ClassificationExport` (``tasks/base/export.py``).

transformers' ``...ForSequenceClassification`` turns [CLS] into logits through a dense + tanh layer
(BERT: the base model's pooler; RoBERTa, XLM-R, MPNet: ``classifier.dense``) and a linear layer:
sesame's ``pooling=pooler`` (``heads/pooling.py``'s ``PoolerPooling``, trained) goes into the first,
its classifier into the second. ``pooling=cls`` has no such layer and mean / max pooling read every
token, so those models are refused with the reason. A calibration temperature (``calibrate=true``)
is folded into the linear layer (logits / T is the same layer with weight / T and bias / T).
Multi-label models export their tuned per-label decision thresholds (``thresholds.json`` of an ONNX
folder, ``sesame_decision_thresholds`` in transformers' config).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sesame.tasks.base.export import TaskExport
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS
from sesame.tasks.glue.settings import TableDataSettings
from sesame.tasks.inputs.batching import PaddingCollator

#: An ONNX folder's multi-label decision thresholds: ``{label: threshold}``.
THRESHOLDS_FILE = "thresholds.json"

#: Probe inputs: (text, pair); the pair is used by pair tasks only.
PROBES = (
    ("a gripping , beautifully shot film", "the film is gripping"),
    ("not good at all , sadly", "it was bad"),
    ("the cast is great but the plot is thin and the ending drags on for far too long", "the plot is thin"),
    ("fine", "ok"),
)
#: What each pooling reads, where transformers' classifier reads [CLS] only.
_POOLING_READS = {"mean": "the average of every token's features", "max": "the element-wise maximum over every token",
                  "cls_mean": "[CLS] and the token average side by side"}


def classifier_style(hf: nn.Module) -> str | None:
    """How a ``...ForSequenceClassification`` turns [CLS] into logits, where sesame's pooler maps onto it:
    ``pooler`` (the base model's pooler, dense + tanh, then ``classifier``: BERT), ``dense_head``
    (``classifier.dense`` + tanh + ``classifier.out_proj``: RoBERTa, XLM-R, MPNet), else None."""
    base = getattr(hf, hf.base_model_prefix, None)
    classifier = getattr(hf, "classifier", None)
    pooler = getattr(base, "pooler", None)
    if isinstance(classifier, nn.Linear) and isinstance(getattr(pooler, "dense", None), nn.Linear) \
            and isinstance(getattr(pooler, "activation", None), nn.Tanh):
        return "pooler"
    if isinstance(getattr(classifier, "dense", None), nn.Linear) and isinstance(getattr(classifier, "out_proj", None), nn.Linear):
        return "dense_head"
    return None


def _between_cls_and_classifier(hf: nn.Module) -> str:
    style = classifier_style(hf)
    if style == "pooler":
        return "the encoder's pooler (dense + tanh)"
    if style == "dense_head":
        return "a dense + tanh layer (classifier.dense)"
    return "layers of its own"


class ClassificationExport(TaskExport):
    """Sentence(-pair) classification, multi-label classification and regression: logits [B, C]
    ([B, 1] for regression) of the module ``SentenceClassificationModule``."""

    auto_class = "AutoModelForSequenceClassification"
    pipeline_tag = "text-classification"
    task_kind = "sequence classification"
    example = {"text": "a charming and often affecting journey"}
    #: The second text of a pair task's example.
    example_pair = "an often charming journey"

    # What the trained model is ---------------------------------------------------------------------
    @property
    def pairs(self) -> bool:
        """A sentence-pair task (its spec has a second text column)."""
        return getattr(getattr(self.trained_module, "spec", None), "text_b", None) is not None

    @property
    def label_names(self) -> list[str] | None:
        """The label names in logit order; None for regression."""
        return self.trained_module.label_names

    @property
    def multi_label(self) -> bool:
        return bool(getattr(self.trained_module, "multi_label", False))

    @property
    def pooling(self) -> str:
        """``pooling.name`` the model was trained with."""
        return self.trained_module.pooling_settings().name

    def decision_thresholds(self) -> dict[str, float] | None:
        """Multi-label: ``{label: threshold}`` on each label's sigmoid probability, as tuned on the dev
        set in training (a label applies where ``probability >= threshold``); else None."""
        module = self.trained_module
        thresholds = getattr(module, "thresholds", None) if self.multi_label else None
        if thresholds is None:
            return None
        return {str(n): float(t) for n, t in zip(module.label_names, thresholds.detach().cpu().tolist())}

    # Probes and comparisons ----------------------------------------------------------------------
    def probe_batch(self, tokenizer: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        from sesame.tasks.glue.predict import encode_texts

        texts = [PROBES[i][0] for i in rows]
        pairs = [PROBES[i][1] for i in rows] if self.pairs else None
        enc = encode_texts(tokenizer, texts, pairs, self.max_length)
        keys = [k for k in ENCODER_INPUT_KEYS if k in enc]
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return PaddingCollator({"input_ids": pad_id})([{k: enc[k][i] for k in keys} for i in range(len(texts))])

    def predictions(self, outputs: tuple[torch.Tensor, ...], batch: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """The class [B] (multi-label: the labels whose probability reaches their threshold, [B, C]);
        None for regression."""
        if self.label_names is None:
            return None
        thresholds = self.decision_thresholds()
        if thresholds is not None:
            return torch.sigmoid(outputs[0]) >= torch.tensor(list(thresholds.values()))
        return outputs[0].argmax(-1)

    # transformers --------------------------------------------------------------------------------
    def refusal_reasons(self, hf: Any | None) -> list[str]:
        name = self.pooling
        hf_name = type(hf).__name__ if hf is not None else self.auto_class.removeprefix("Auto")
        if name == "cls":
            between = _between_cls_and_classifier(hf) if hf is not None else "layers of its own"
            return [f"pooling=cls: sesame's classifier reads the [CLS] vector directly, but {hf_name} puts "
                    f"{between} between [CLS] and its classifier, which this model never trained (train with "
                    "pooling=pooler for a model that maps)"]
        if name == "pooler":
            if hf is not None and classifier_style(hf) is None:
                return [f"pooling=pooler: {hf_name} has no dense + tanh layer on [CLS] for sesame's pooler to go into"]
            return []
        what = _POOLING_READS.get(name, f"made by pooling={name}")
        return [f"pooling={name}: the sentence vector is {what}, but {hf_name} reads the [CLS] token only"]

    def hf_config(self, config: Any) -> None:
        names = self.label_names
        if names is None:
            config.num_labels, config.problem_type = 1, "regression"
            return
        config.id2label = dict(enumerate(names))
        config.label2id = {n: i for i, n in enumerate(names)}
        config.problem_type = "multi_label_classification" if self.multi_label else "single_label_classification"
        thresholds = self.decision_thresholds()
        if thresholds is not None:  # sesame's tuned per-label decisions; transformers itself does not read them
            config.sesame_decision_thresholds = thresholds

    def fill_head(self, hf: Any) -> set[str]:
        module = self.trained_module
        filled: set[str] = set()
        if classifier_style(hf) == "pooler":
            getattr(hf, hf.base_model_prefix).pooler.dense.load_state_dict(module.pooling.dense.state_dict())
            hf.classifier.load_state_dict(module.head.classifier.state_dict())
            filled |= {"pooler.dense.weight", "pooler.dense.bias"}
            out = hf.classifier
        else:
            hf.classifier.dense.load_state_dict(module.pooling.dense.state_dict())
            hf.classifier.out_proj.load_state_dict(module.head.classifier.state_dict())
            out = hf.classifier.out_proj
        temperature = self.applied_temperature()
        if temperature is not None:  # calibrate=true: logits / T is the same linear layer with weight / T and bias / T
            with torch.no_grad():
                out.weight.div_(temperature)
                out.bias.div_(temperature)
        return filled

    def report_entries(self) -> dict[str, Any]:
        thresholds = self.decision_thresholds()
        return {"decision_thresholds": thresholds} if thresholds is not None else {}

    # ONNX ----------------------------------------------------------------------------------------
    def write_files(self, folder: Path) -> list[str]:
        """Multi-label: ``thresholds.json``, the decisions tuned in training (:meth:`decoding_state`)."""
        thresholds = self.decision_thresholds()
        if thresholds is None:
            return []
        (Path(folder) / THRESHOLDS_FILE).write_text(json.dumps(thresholds, indent=2) + "\n", encoding="utf-8")
        return [THRESHOLDS_FILE]

    def decoding_state(self, folder: Path) -> dict[str, torch.Tensor]:
        """Multi-label: ``{"thresholds": [C]}`` from ``thresholds.json``, in the order of ``data.label_names``."""
        path = Path(folder) / THRESHOLDS_FILE
        if not path.is_file():
            return {}
        by_label = json.loads(path.read_text(encoding="utf-8"))
        return {"thresholds": torch.tensor([float(by_label[str(n)]) for n in self.settings.data.label_names],
                                           dtype=torch.float32)}

    # The model card ------------------------------------------------------------------------------
    def title(self) -> str:
        task_name = getattr(self.settings.data, "task_name", None)
        return self.settings.task.name + (f" ({task_name})" if task_name else "")

    def label_row(self) -> tuple[str, Any]:
        names = self.label_names
        return ("labels" + (" (multi-label)" if self.multi_label else ""),
                list(names) if names else "none (regression: one score)")

    def model_rows(self) -> list[tuple[str, Any]]:
        return [("pooling", self.pooling)]

    def applied_temperature(self) -> float | None:
        temperature = getattr(getattr(self.trained_module, "calibration", None), "temperature", None)
        return float(temperature) if temperature is not None and float(temperature) != 1.0 else None

    def example_input(self) -> dict[str, str]:
        return {**self.example, **({"text_pair": self.example_pair} if self.pairs else {})}

    def pipeline_call(self, example: Mapping[str, str]) -> str:
        text = repr(example if "text_pair" in example else example["text"])
        if self.label_names is None:
            return (f"print(run({text}, function_to_apply=\"none\"))   # the regression score "
                    "(the pipeline's default squashes it)")
        if self.multi_label:
            return (f"print(run({text}, top_k=None))   # every label's probability; sesame's decisions: "
                    ">= its threshold (config.json)")
        return f"print(run({text}))"

    def count_examples(self, path: Path) -> int:
        from sesame.tasks.glue.readers import read_glue_tsv, read_table

        data = self.settings.data
        if isinstance(data, TableDataSettings):
            table, _ = read_table(path, data.text_column, data.text_pair_column, data.label_column)
            return len(table)
        spec = data.task_spec()
        return len(read_glue_tsv(path, spec))
