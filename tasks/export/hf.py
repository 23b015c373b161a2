"""``sesame-export <run> <folder> --format hf``: a trained model as transformers' own task model.

The folder is a ``save_pretrained`` folder (``config.json`` with the label names in ``id2label``,
``model.safetensors``, the tokenizer, ``README.md``) that ``AutoModelForSequenceClassification`` /
``AutoModelForQuestionAnswering`` / ``AutoModelForTokenClassification`` and transformers' pipelines
load. It is written only where sesame's network *is* that model:

- the head reads the last layer's output (``fusion=last``, or ``fusion=layers`` of the last one):
  transformers' task models read nothing else;
- transformers' task model is the encoder plus the layer(s) the task's head fills (no decoder, no
  layers of its own sesame never trained);
- the task's head maps (``TaskExport.refusal_reasons``: e.g. classification pools with
  ``pooling=pooler``, the layer transformers' classifiers put on [CLS]; tagging decodes by argmax,
  not a CRF);
- the weights are float (a ``sesame-compress quantize`` run holds packed int8 weights).

A pruned encoder (``sesame-compress prune``: layers with different numbers of heads and neurons,
which a transformers config cannot say) is written in the unpruned shapes with the removed heads'
and neurons' weights zero (``tasks/encoders/pruning.py`` ``full_shape_state``): the same outputs.

Anything else is a :class:`ConfigError` naming each setting that does not map and why, and pointing
to ``--format onnx`` (the whole sesame network) or the sesame run folder. The task says which model
class and labels (``TaskExport.auto_class``, ``hf_config``) and fills its head's weights
(``fill_head``); the encoder's are copied here. Where the structure maps, the written model is also
checked to give sesame's outputs on the task's probe inputs (the same logits, at the positions that
carry a value: ``TaskExport.compared_positions``; QA's context positions, the only ones sesame does
not mask).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from sesame.tasks.base.export import TaskExport
from sesame.tasks.saved.checkpoints import TrainedModel, load_trained
from sesame.tasks.saved.int8 import is_quantized
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS
from sesame.tasks.encoders.families import prune_layout
from sesame.tasks.encoders.low_precision_attention import ATTENTION_NAME, TRANSFORMERS_ATTENTION
from sesame.tasks.encoders.pruning import PLAIN_SHAPES, PruningPlan, full_shape_state, head_size, plain_config
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.export import as_tuple, check_output_folder, staged_folder, task_export
from sesame.tasks.export.model_card import write_model_card

log = logging.getLogger(__name__)

#: Where the model does not map: what to use instead.
ALTERNATIVES = ("Use --format onnx (the whole sesame network, run with onnxruntime or sesame-predict), or the "
                "sesame run folder itself (sesame-eval / sesame-predict)")
#: What the folder of a pruned model (``sesame-compress prune``) is.
PRUNED_NOTE = f"a pruned model in {PLAIN_SHAPES}; --format onnx exports the compact model"
#: Largest difference allowed between the exported model's outputs and sesame's, relative to their size.
TOLERANCE = 1e-5

_FUSIONS = {
    "second_to_last": "the second-to-last layer's output",
    "embeddings": "the embedding layer's output",
    "sum_last_4": "the sum of the last 4 layers' outputs",
    "concat_last_4": "the last 4 layers' outputs side by side",
}


def auto_class(name: str) -> Any:
    """transformers' auto class ``name`` (``TaskExport.auto_class``)."""
    import transformers

    return getattr(transformers, name)


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


def structure_reasons(hf: PreTrainedModel, output_layer: str | None) -> list[str]:
    """Where transformers' task model of the encoder's family is not an encoder plus one output layer
    (``output_layer``, the task's ``TaskExport.hf_output_layer``; None: the task checks the layers
    outside the encoder itself): a decoder it runs too (T5, BART: encoder-decoder task models), or
    layers of its own between the encoder and the output layer (ModernBERT's ``head``), neither of
    which sesame's model has."""
    reasons = []
    prefix = hf.base_model_prefix + "."
    names = [name for name, _ in hf.named_parameters()]
    if any(n.startswith(("decoder.", prefix + "decoder.")) for n in names):
        return [f"{type(hf).__name__} is an encoder-decoder model that runs its decoder too, while this model is "
                "the encoder alone"]
    if output_layer is not None:
        extra = sorted({n.split(".")[0] for n in names if not n.startswith(prefix) and not n.startswith(output_layer + ".")})
        if extra:
            reasons.append(f"{type(hf).__name__} puts layers of its own ({', '.join(extra)}) between the encoder and its "
                           f"{output_layer}, which this model never trained")
    return reasons


def refusal_reasons(trained: TrainedModel, hf: PreTrainedModel | None, task: TaskExport | None = None) -> list[str]:
    """Every reason the trained model cannot be written as ``hf`` (transformers' task model, None when
    transformers has none for the encoder); empty when it maps. The encoder's reasons are found here,
    the head's by the task (``TaskExport.refusal_reasons``)."""
    task = task or task_export(trained)
    module = trained.module
    reasons = []
    if is_quantized(trained.cfg):
        reasons.append("compression.quantized=true: the weights are packed int8 for torch's dynamic-int8 kernels, "
                       "while transformers' models hold float weights (export the float run; --format onnx --int8 "
                       "makes an int8 ONNX graph)")
    if hf is None:
        model_type = getattr(module.encoder.config, "model_type", "?")
        reasons.append(f"transformers has no {task.auto_class.removeprefix('Auto')} for model_type={model_type}")
    if hf is not None:
        reasons += structure_reasons(hf, task.hf_output_layer)
    fusion = fusion_reason(module)
    if fusion:
        reasons.append(fusion)
    return reasons + task.refusal_reasons(hf)


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


def new_hf_model(trained: TrainedModel, task: TaskExport | None = None) -> PreTrainedModel | None:
    """transformers' task model for the trained model's encoder and labels (random weights), or None
    where transformers has none for the encoder's ``model_type``."""
    task = task or task_export(trained)
    module = trained.module
    config = copy.deepcopy(module.encoder.model.config)
    plan = PruningPlan.of_config(config)
    if plan is not None:  # every head, the widest layer's neurons: the pruned model's weights fit, zero-padded
        config = plain_config(config, plan)
    task.hf_config(config)
    # transformers' own attention, not sesame's training-time one (encoder.low_precision_attention): the model
    # transformers loads from the exported folder, whose config.json records no attention implementation
    own = {"attn_implementation": TRANSFORMERS_ATTENTION} if getattr(config, "_attn_implementation", None) == ATTENTION_NAME else {}
    try:
        return auto_class(task.auto_class).from_config(config, dtype=next(module.encoder.model.parameters()).dtype,
                                                       **own)
    except ValueError:  # "Unrecognized configuration class ... for this kind of AutoModel"
        return None


def fill_weights(hf: PreTrainedModel, trained: TrainedModel, task: TaskExport | None = None) -> None:
    """Copy the sesame module's weights into ``hf``: the encoder under ``base_model_prefix``, the head
    (and for classification the trained pooler) into their places (``TaskExport.fill_head``). Every
    weight of ``hf`` is set."""
    task = task or task_export(trained)
    base = getattr(hf, hf.base_model_prefix)
    model = trained.module.encoder.model
    state = plain_encoder_state(model)
    plan = PruningPlan.of_config(model.config)
    if plan is not None:
        layout = prune_layout(model.config, "--format hf")
        state = full_shape_state(state, plan, layout, head_size(model, layout))
    missing, unexpected = base.load_state_dict(state, strict=False)
    # A task model without a pooler (QA, tagging, RoBERTa-style classification) leaves the encoder's out.
    unexpected = [k for k in unexpected if not k.startswith("pooler.")]
    filled = task.fill_head(hf)
    missing = [k for k in missing if k not in filled]
    if missing or unexpected:  # the encoder is the same architecture: a bug, not a user error
        raise RuntimeError(f"{type(hf).__name__}: encoder weights missing {missing[:5]} / unexpected {unexpected[:5]}")


def hf_outputs(hf: PreTrainedModel, task: TaskExport, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """``hf``'s outputs on ``batch`` as the module's (``TaskExport.hf_outputs``). transformers' task
    model reads the batch as the task shapes it ([B, T], or [B, G, T] for multiple choice)."""
    inputs = {k: batch[k] for k in ENCODER_INPUT_KEYS if k in batch}
    if "token_type_ids" in inputs and "token_type_ids" not in _forward_parameters(hf):
        inputs.pop("token_type_ids")
    return task.hf_outputs(hf(**inputs))


def _forward_parameters(model: nn.Module) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def max_abs_diff(task: TaskExport, batch: dict[str, torch.Tensor], sesame: tuple[torch.Tensor, ...],
                 other: tuple[torch.Tensor, ...]) -> tuple[float, float]:
    """``(max |sesame - other|, max |sesame|)`` over the compared positions of every output
    (``TaskExport.compared_positions``: everything for classification, real tokens for tagging, the
    positions sesame does not mask for QA)."""
    diff, scale = 0.0, 0.0
    for ref, got in zip(sesame, other, strict=True):
        keep = task.compared_positions(ref, batch)
        ref, got = ref.float()[keep], got.float()[keep]
        if ref.numel():
            diff = max(diff, float((ref - got).abs().max()))
            scale = max(scale, float(ref.abs().max()))
    return diff, scale


def check_same_outputs(hf: PreTrainedModel, trained: TrainedModel, tokenizer: Any) -> float:
    """The largest difference between ``hf``'s and sesame's outputs on two probe batches; a
    :class:`ConfigError` where it exceeds :data:`TOLERANCE` (relative to the outputs' size)."""
    module, task = trained.module, task_export(trained)
    worst = 0.0
    for rows in ((0, 1), (2, 3, 0)):
        batch = task.probe_batch(tokenizer, rows)
        with torch.inference_mode():
            sesame = as_tuple(module(batch))
            other = hf_outputs(hf, task, batch)
        diff, scale = max_abs_diff(task, batch, sesame, other)
        if diff > TOLERANCE * max(1.0, scale):
            raise ConfigError(f"{type(hf).__name__} built from this model does not give its outputs (max abs "
                              f"difference {diff:.3g}): its {task.auto_class} head is not sesame's. {ALTERNATIVES}")
        worst = max(worst, diff)
    return worst


def build_hf_model(trained: TrainedModel) -> PreTrainedModel:
    """transformers' task model holding the trained model's weights (eval mode), or a
    :class:`ConfigError` listing what does not map."""
    task = task_export(trained)
    hf = new_hf_model(trained, task)
    reasons = refusal_reasons(trained, hf, task)
    if reasons:
        raise ConfigError(f"--format hf: this model does not map onto transformers' {task.auto_class}: "
                          + "; ".join(reasons) + f". {ALTERNATIVES}")
    assert hf is not None
    fill_weights(hf, trained, task)
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
    task = task_export(trained)
    report: dict[str, Any] = {
        "format": "hf", "output": str(Path(output).expanduser()), "checkpoint": str(trained.checkpoint),
        "architecture": type(hf).__name__, "auto_class": task.auto_class, "labels": task.report_labels(hf),
        "max_abs_diff": diff,
    }
    if PruningPlan.of_config(trained.module.encoder.model.config) is not None:
        report["pruned"] = PRUNED_NOTE
    report.update(task.report_entries())  # multi-label: the decision thresholds
    with staged_folder(output) as folder:
        hf.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        write_model_card(folder, trained, report, command=command)
    log.info("wrote %s (%s; max abs difference from sesame %.3g)", output, type(hf).__name__, diff)
    return report
