"""``sesame-export <run> <folder> --format hf``: a trained model as transformers' own task model.

The folder is a ``save_pretrained`` folder (``config.json`` with the label names in ``id2label``,
``model.safetensors``, the tokenizer, ``README.md``) that ``AutoModelForSequenceClassification`` /
``AutoModelForQuestionAnswering`` / ``AutoModelForTokenClassification`` and transformers' pipelines
load. It is written only where sesame's network *is* that model:

- the head reads the last layer's output (``fusion=last``, or ``fusion=layers`` of the last one):
  transformers' task models read nothing else;
- classification pools with ``pooling=pooler``: transformers' BERT-style classifier runs the
  encoder's pooler (dense + tanh on [CLS]) before its linear layer, and RoBERTa-style ones a dense +
  tanh layer on [CLS]; sesame's ``PoolerPooling`` is exactly that layer, trained, and goes there.
  ``pooling=cls`` has no such layer (its classifier reads [CLS] directly) and mean / max pooling read
  every token, so neither has a place in those models;
- tagging decodes by argmax (no CRF: transformers' token classifiers have no transition scores);
- the weights are float (a ``sesame-compress quantize`` run holds packed int8 weights).

Anything else is a :class:`ConfigError` naming each setting that does not map and why, and pointing
to ``--format onnx`` (the whole sesame network) or the sesame run folder. Where the structure maps,
the written model is also checked to give sesame's outputs on probe inputs (the same logits; QA on
the context positions, the only ones sesame does not mask).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from sesame.tasks.saved.checkpoints import TrainedModel, load_trained
from sesame.tasks.saved.int8 import is_quantized
from sesame.tasks.encoders.encoder import encoder_inputs
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.export import (as_tuple, check_output_folder, decision_thresholds, is_pair_task, probe_batch,
                                 staged_folder, task_family)
from sesame.tasks.export.model_card import write_model_card
from sesame.heads.masking import is_masked

log = logging.getLogger(__name__)

#: transformers' auto class of each task family.
AUTO_CLASSES = {
    "sequence_classification": "AutoModelForSequenceClassification",
    "question_answering": "AutoModelForQuestionAnswering",
    "token_classification": "AutoModelForTokenClassification",
}
#: Where the model does not map: what to use instead.
ALTERNATIVES = ("Use --format onnx (the whole sesame network, run with onnxruntime or sesame-predict), or the "
                "sesame run folder itself (sesame-eval / sesame-predict)")
#: Largest difference allowed between the exported model's outputs and sesame's, relative to their size.
TOLERANCE = 1e-5

_FUSIONS = {
    "second_to_last": "the second-to-last layer's output",
    "embeddings": "the embedding layer's output",
    "sum_last_4": "the sum of the last 4 layers' outputs",
    "concat_last_4": "the last 4 layers' outputs side by side",
}


def auto_class(family: str) -> Any:
    import transformers

    return getattr(transformers, AUTO_CLASSES[family])


def fusion_reason(module: Any) -> str | None:
    """Why the module's fused feature is not the last layer's output (None when it is)."""
    fusion = module.fusion
    if fusion.scalar_mix is None and tuple(fusion.indices) == (fusion.num_hidden_states - 1,):
        return None
    if fusion.scalar_mix is not None:
        read = f"a learned, softmax-weighted mix of all {fusion.num_hidden_states} hidden states (embeddings and every layer)"
    else:
        read = _FUSIONS.get(fusion.mode, f"hidden states {list(fusion.indices)} combined by {fusion.combine}")
    return (f"fusion.mode={fusion.mode}: the head reads {read}, but transformers' task models read only the last "
            "layer's output")


def _classifier_style(hf: PreTrainedModel) -> str | None:
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


def _between_cls_and_classifier(hf: PreTrainedModel) -> str:
    style = _classifier_style(hf)
    if style == "pooler":
        return "the encoder's pooler (dense + tanh)"
    if style == "dense_head":
        return "a dense + tanh layer (classifier.dense)"
    return "layers of its own"


#: The output layer sesame's head fills, per task family (classification's depends on the classifier style).
_OUTPUT_LAYERS = {"question_answering": "qa_outputs", "token_classification": "classifier"}


def structure_reasons(hf: PreTrainedModel, family: str) -> list[str]:
    """Where transformers' task model of the encoder's family is not an encoder plus one output layer:
    a decoder it runs too (T5, BART: encoder-decoder task models), or layers of its own between the
    encoder and the output layer (ModernBERT's ``head``), neither of which sesame's model has."""
    reasons = []
    prefix = hf.base_model_prefix + "."
    names = [name for name, _ in hf.named_parameters()]
    if any(n.startswith(("decoder.", prefix + "decoder.")) for n in names):
        return [f"{type(hf).__name__} is an encoder-decoder model that runs its decoder too, while this model is "
                "the encoder alone"]
    out = _OUTPUT_LAYERS.get(family)
    if out is not None:
        extra = sorted({n.split(".")[0] for n in names if not n.startswith(prefix) and not n.startswith(out + ".")})
        if extra:
            reasons.append(f"{type(hf).__name__} puts layers of its own ({', '.join(extra)}) between the encoder and its "
                           f"{out}, which this model never trained")
    return reasons


def refusal_reasons(trained: TrainedModel, hf: PreTrainedModel | None) -> list[str]:
    """Every reason the trained model cannot be written as ``hf`` (transformers' task model, None when
    transformers has none for the encoder); empty when it maps."""
    module, cfg = trained.module, trained.cfg
    family = task_family(cfg)
    reasons = []
    if is_quantized(cfg):
        reasons.append("compression.quantized=true: the weights are packed int8 for torch's dynamic-int8 kernels, "
                       "while transformers' models hold float weights (export the float run; --format onnx --int8 "
                       "makes an int8 ONNX graph)")
    if hf is None:
        model_type = getattr(module.encoder.config, "model_type", "?")
        reasons.append(f"transformers has no {AUTO_CLASSES[family].removeprefix('Auto')} for model_type={model_type}")
    if hf is not None:
        reasons += structure_reasons(hf, family)
    fusion = fusion_reason(module)
    if fusion:
        reasons.append(fusion)
    if family == "sequence_classification":
        name = cfg["pooling"]["name"]
        hf_name = type(hf).__name__ if hf is not None else AUTO_CLASSES[family].removeprefix("Auto")
        if name == "cls":
            between = _between_cls_and_classifier(hf) if hf is not None else "layers of its own"
            reasons.append(f"pooling=cls: sesame's classifier reads the [CLS] vector directly, but {hf_name} puts "
                           f"{between} between [CLS] and its classifier, which this model never trained (train with "
                           "pooling=pooler for a model that maps)")
        elif name == "pooler":
            if hf is not None and _classifier_style(hf) is None:
                reasons.append(f"pooling=pooler: {hf_name} has no dense + tanh layer on [CLS] for sesame's pooler to go into")
        else:
            what = {"mean": "the average of every token's features", "max": "the element-wise maximum over every token",
                    "cls_mean": "[CLS] and the token average side by side"}.get(name, f"made by pooling={name}")
            reasons.append(f"pooling={name}: the sentence vector is {what}, but {hf_name} reads the [CLS] token only")
    if family == "token_classification" and module.head.crf is not None:
        reasons.append(f"head.crf=true: the tags are decoded by a CRF (Viterbi over {module.head.num_tags}x"
                       f"{module.head.num_tags} learned transition scores), but transformers' token classifiers have "
                       "no transitions: they take each token's argmax")
    return reasons


def plain_encoder_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The encoder's weights as the plain Hugging Face model's: LoRA adapters (``finetune=lora``) merged
    into the weights they adapt, on a copy."""
    if not any("lora_" in name for name, _ in model.named_parameters()):
        return model.state_dict()
    from peft.tuners.tuners_utils import BaseTunerLayer

    from sesame.tasks.encoders.finetune import plain_state_dict

    merged = copy.deepcopy(model)
    for layer in merged.modules():
        if isinstance(layer, BaseTunerLayer):
            layer.merge()
    return plain_state_dict(merged)


def new_hf_model(trained: TrainedModel) -> PreTrainedModel | None:
    """transformers' task model for the trained model's encoder and labels (random weights), or None
    where transformers has none for the encoder's ``model_type``."""
    module, cfg = trained.module, trained.cfg
    family = task_family(cfg)
    config = copy.deepcopy(module.encoder.model.config)
    if family == "sequence_classification":
        names = module.label_names
        if names is None:
            config.num_labels, config.problem_type = 1, "regression"
        else:
            config.id2label = dict(enumerate(names))
            config.label2id = {n: i for i, n in enumerate(names)}
            multi = bool(getattr(module, "multi_label", False))
            config.problem_type = "multi_label_classification" if multi else "single_label_classification"
            thresholds = decision_thresholds(module)
            if thresholds is not None:  # sesame's tuned per-label decisions; transformers itself does not read them
                config.sesame_decision_thresholds = thresholds
    elif family == "token_classification":
        config.id2label = dict(enumerate(module.tag_names))
        config.label2id = {n: i for i, n in enumerate(module.tag_names)}
    try:
        return auto_class(family).from_config(config, dtype=next(module.encoder.model.parameters()).dtype)
    except ValueError:  # "Unrecognized configuration class ... for this kind of AutoModel"
        return None


def fill_weights(hf: PreTrainedModel, trained: TrainedModel) -> None:
    """Copy the sesame module's weights into ``hf``: the encoder under ``base_model_prefix``, the head
    (and for classification the trained pooler) into their places. Every weight of ``hf`` is set."""
    module = trained.module
    family = task_family(trained.cfg)
    base = getattr(hf, hf.base_model_prefix)
    missing, unexpected = base.load_state_dict(plain_encoder_state(module.encoder.model), strict=False)
    # A task model without a pooler (QA, tagging, RoBERTa-style classification) leaves the encoder's out.
    unexpected = [k for k in unexpected if not k.startswith("pooler.")]
    filled: set[str] = set()
    if family == "sequence_classification":
        if _classifier_style(hf) == "pooler":
            base.pooler.dense.load_state_dict(module.pooling.dense.state_dict())
            hf.classifier.load_state_dict(module.head.classifier.state_dict())
            filled |= {"pooler.dense.weight", "pooler.dense.bias"}
        else:
            hf.classifier.dense.load_state_dict(module.pooling.dense.state_dict())
            hf.classifier.out_proj.load_state_dict(module.head.classifier.state_dict())
    elif family == "question_answering":
        hf.qa_outputs.load_state_dict(module.head.qa_outputs.state_dict())
    else:
        hf.classifier.load_state_dict(module.head.classifier.state_dict())
    temperature = getattr(getattr(module, "calibration", None), "temperature", None)
    if family == "sequence_classification" and temperature is not None and float(temperature) != 1.0:
        # calibrate=true: logits / T is the same linear layer with weight / T and bias / T.
        out = hf.classifier if _classifier_style(hf) == "pooler" else hf.classifier.out_proj
        with torch.no_grad():
            out.weight.div_(float(temperature))
            out.bias.div_(float(temperature))
    missing = [k for k in missing if k not in filled]
    if missing or unexpected:  # the encoder is the same architecture: a bug, not a user error
        raise RuntimeError(f"{type(hf).__name__}: encoder weights missing {missing[:5]} / unexpected {unexpected[:5]}")


def hf_outputs(hf: PreTrainedModel, family: str, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    inputs = encoder_inputs(batch)
    if "token_type_ids" in inputs and "token_type_ids" not in _forward_parameters(hf):
        inputs.pop("token_type_ids")
    out = hf(**inputs)
    if family == "question_answering":
        return out.start_logits, out.end_logits
    return (out.logits,)


def _forward_parameters(model: nn.Module) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def compared_positions(family: str, sesame: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Where the exported model must equal sesame: everything for classification, real tokens for
    tagging, the positions sesame does not mask (the context, and [CLS] in v2) for QA."""
    if family == "question_answering":
        return ~is_masked(sesame)
    if family == "token_classification":
        return batch["attention_mask"].bool().unsqueeze(-1).expand_as(sesame)
    return torch.ones_like(sesame, dtype=torch.bool)


def max_abs_diff(family: str, batch: dict[str, torch.Tensor], sesame: tuple[torch.Tensor, ...],
                 other: tuple[torch.Tensor, ...]) -> tuple[float, float]:
    """``(max |sesame - other|, max |sesame|)`` over the compared positions of every output."""
    diff, scale = 0.0, 0.0
    for ref, got in zip(sesame, other, strict=True):
        keep = compared_positions(family, ref, batch)
        ref, got = ref.float()[keep], got.float()[keep]
        if ref.numel():
            diff = max(diff, float((ref - got).abs().max()))
            scale = max(scale, float(ref.abs().max()))
    return diff, scale


def check_same_outputs(hf: PreTrainedModel, trained: TrainedModel, tokenizer: Any) -> float:
    """The largest difference between ``hf``'s and sesame's outputs on two probe batches; a
    :class:`ConfigError` where it exceeds :data:`TOLERANCE` (relative to the outputs' size)."""
    module, family = trained.module, task_family(trained.cfg)
    max_length = int(trained.cfg["data"]["max_seq_length"])
    worst = 0.0
    for rows in ((0, 1), (2, 3, 0)):
        batch = probe_batch(family, tokenizer, rows, max_length, pairs=is_pair_task(module))
        with torch.inference_mode():
            sesame = as_tuple(module(batch))
            other = hf_outputs(hf, family, batch)
        diff, scale = max_abs_diff(family, batch, sesame, other)
        if diff > TOLERANCE * max(1.0, scale):
            raise ConfigError(f"{type(hf).__name__} built from this model does not give its outputs (max abs "
                              f"difference {diff:.3g}): its {AUTO_CLASSES[family]} head is not sesame's. {ALTERNATIVES}")
        worst = max(worst, diff)
    return worst


def build_hf_model(trained: TrainedModel) -> PreTrainedModel:
    """transformers' task model holding the trained model's weights (eval mode), or a
    :class:`ConfigError` listing what does not map."""
    hf = new_hf_model(trained)
    reasons = refusal_reasons(trained, hf)
    if reasons:
        family = task_family(trained.cfg)
        raise ConfigError(f"--format hf: this model does not map onto transformers' {AUTO_CLASSES[family]}: "
                          + "; ".join(reasons) + f". {ALTERNATIVES}")
    assert hf is not None
    fill_weights(hf, trained)
    return hf.eval()


def export_hf(run: str | Path, output: str | Path, command: str | None = None) -> dict[str, Any]:
    """Write the trained model of ``run`` (run folder or .ckpt) as a transformers folder ``output``.

    Returns the report (also in the model card): the architecture, the label names and the largest
    difference from sesame's outputs on the probe inputs.
    """
    check_output_folder(output)  # before any loading: a taken output fails at once
    trained = load_trained(run, key="run")
    tokenizer = trained.tokenizer()
    hf = build_hf_model(trained)
    diff = check_same_outputs(hf, trained, tokenizer)
    family = task_family(trained.cfg)
    report: dict[str, Any] = {
        "format": "hf", "output": str(Path(output).expanduser()), "checkpoint": str(trained.checkpoint),
        "architecture": type(hf).__name__, "auto_class": AUTO_CLASSES[family],
        "labels": [hf.config.id2label[i] for i in range(hf.config.num_labels)] if family != "question_answering" else None,
        "max_abs_diff": diff,
    }
    thresholds = decision_thresholds(trained.module)
    if thresholds is not None:
        report["decision_thresholds"] = thresholds
    with staged_folder(output) as folder:
        hf.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        write_model_card(folder, trained, report, command=command)
    log.info("wrote %s (%s; max abs difference from sesame %.3g)", output, type(hf).__name__, diff)
    return report
