"""``sesame-compress drop-layers``: keep k of an encoder's transformer layers, as a student initialisation.

Output folder:
- ``encoder/``: a Hugging Face folder (``config.json`` with ``num_hidden_layers=k``, the kept layers'
  weights renumbered 0..k-1, embeddings and everything outside the layer stack unchanged, and the
  tokenizer), usable as ``encoder.name_or_path=<output>/encoder``;
- from a sesame checkpoint (unless ``--encoder-only``): ``checkpoints/best.ckpt`` and ``config.yaml``,
  the same task model on the smaller encoder with the teacher's fusion and head weights copied, which
  ``sesame-eval model=<output>`` evaluates as it is;
- ``compression.json``: source and kept layers.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, PreTrainedModel

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.atomic_files import write_json_atomic
from sesame.tasks.saved.checkpoints import build_module, is_hf_model_folder, load_trained, save_model_folder
from sesame.tasks.saved.int8 import is_quantized
from sesame.tasks.encoders.encoder import find_layer_stack, load_tokenizer, resolve_name_or_path
from sesame.tasks.encoders.families import PER_LAYER_CONFIG, family_of, load_encoder_model, prune_layout, shared_layers_error
from sesame.tasks.encoders.pruning import PruningPlan, apply_plan
from sesame.tasks.core.errors import ConfigError

log = logging.getLogger(__name__)

KEEP_CHOICES = ("every_other", "bottom", "top")


def select_layers(num_layers: int, keep: str, num_keep: int | None = None) -> list[int]:
    """The indices (0 = bottom) of the layers a student keeps, ascending.

    Args:
        num_layers: layers of the source encoder.
        keep: ``every_other`` (the top layer and every second one below it: 6 -> [1, 3, 5], 12 -> [1, 3,
            ..., 11]; keeping the top layer keeps the features the head was trained on), ``bottom`` /
            ``top`` (the lowest / highest ``num_keep``), or explicit indices ``"0,2,4"``.
        num_keep: how many layers, for ``bottom`` and ``top``; with ``every_other`` it must agree.
    """
    if keep == "every_other":
        layers = list(range(num_layers - 1, -1, -2))[::-1]
        if num_keep is not None and num_keep != len(layers):
            raise ConfigError(f"--keep every_other keeps {len(layers)} of {num_layers} layers, not {num_keep}; "
                             "use --keep bottom/top or explicit indices for another count")
    elif keep in ("bottom", "top"):
        if num_keep is None or not 1 <= num_keep <= num_layers:
            raise ConfigError(f"--keep {keep} needs --num-layers between 1 and {num_layers}")
        layers = list(range(num_keep)) if keep == "bottom" else list(range(num_layers - num_keep, num_layers))
    else:
        try:
            layers = sorted({int(part) for part in keep.split(",") if part.strip()})
        except ValueError:
            raise ConfigError(f"--keep {keep!r}: use one of {', '.join(KEEP_CHOICES)} or layer indices like 0,2,4") from None
        if not layers or layers[0] < 0 or layers[-1] >= num_layers:
            raise ConfigError(f"--keep {keep!r}: layer indices must lie in 0..{num_layers - 1}")
        if num_keep is not None and num_keep != len(layers):
            raise ConfigError(f"--keep {keep!r} names {len(layers)} layers, but --num-layers is {num_keep}")
    return layers


def renumber_layers(state_dict: dict[str, torch.Tensor], stack: str, layers: list[int]) -> dict[str, torch.Tensor]:
    """``state_dict`` with only the kept layers of ``stack``, renumbered 0..k-1 in their order."""
    new_index = {old: new for new, old in enumerate(layers)}
    prefix = f"{stack}."
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if not key.startswith(prefix):
            out[key] = value
            continue
        index, rest = key[len(prefix):].split(".", 1)
        if int(index) in new_index:
            out[f"{prefix}{new_index[int(index)]}.{rest}"] = value
    return out


def drop_model_layers(model: PreTrainedModel, layers: list[int], pooler: nn.Linear | None = None) -> PreTrainedModel:
    """A new model of the same class with ``num_hidden_layers=len(layers)`` and those layers' weights.

    ``pooler``: the pooler's dense layer to give the student where ``model``'s was dropped because a
    ``pooling=pooler`` head holds the trained copy (the student's head is built from its encoder's pooler)."""
    num_layers = int(model.config.num_hidden_layers)
    if family_of(model.config).shared_layers:
        raise shared_layers_error(model.config, "sesame-compress drop-layers",
                                  "a shallower model of this family is the same weights with a smaller "
                                  "num_hidden_layers: set it in a copy of the encoder's config.json")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = len(layers)
    # Configs that describe each layer (sliding / full attention per layer, Longformer's attention
    # windows) keep the kept layers' entries.
    for attr in PER_LAYER_CONFIG:
        value = getattr(config, attr, None)
        if isinstance(value, (list, tuple)) and len(value) == num_layers:
            setattr(config, attr, [value[i] for i in layers])
    # A pruned encoder (sesame-compress prune) keeps the kept layers' heads and neurons.
    plan = PruningPlan.of_config(model.config)
    if plan is not None:
        plan = plan.dropped(layers)
        plan.record(config)
    student = type(model)(config).to(model.dtype)
    if plan is not None:
        apply_plan(student, plan, prune_layout(config, "drop-layers"))
    if getattr(model, "pooler", "none") is None and pooler is None:  # a trained run's encoder, its unused pooler dropped
        student.pooler = None
    stack, _ = find_layer_stack(model, num_layers)
    source = model.state_dict()
    weights = renumber_layers(source, stack, layers)
    if pooler is not None:
        weights.update({k: pooler.weight if k.endswith("weight") else pooler.bias
                        for k in student.state_dict() if k.startswith("pooler.")})
    bottom = f"{stack}.0."
    if layers[0] != 0:
        # Weights only the bottom layer holds stay with the bottom layer: T5's relative position bias,
        # computed in layer 0 and used by every layer.
        own = {k for k in student.state_dict() if k.startswith(bottom)}
        weights.update({k: source[k] for k in own if k not in weights and k in source})
        extra = sorted(k.removeprefix(bottom) for k in weights if k.startswith(bottom) and k not in own)
        if extra:  # ModernBERT: its bottom layer has no attention norm (the embeddings' norm precedes it)
            raise ConfigError(
                f"--keep: in {type(model).__name__} the bottom layer lacks weights the layers above have "
                f"({', '.join(extra[:3])}), so layer {layers[0]} cannot become the bottom one without changing what "
                "it computes. Fix: keep layer 0 (--keep bottom --num-layers k, or indices starting with 0)")
    missing, unexpected = student.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ConfigError(f"the renumbered weights do not fit a {len(layers)}-layer {type(model).__name__}: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    return student.eval()


def drop_layers(
    source: str | Path, output_dir: str | Path, keep: str = "every_other", num_keep: int | None = None,
    encoder_only: bool = False,
) -> dict[str, Any]:
    """Write the student encoder (and, from a sesame checkpoint, the student task model) into ``output_dir``.

    ``source``: a Hugging Face encoder folder, an encoder alias (``minilm_l6``), a .ckpt file or a
    sesame run folder (then the fine-tuned encoder inside it is the one reduced). Returns the report.
    """
    output_dir = Path(output_dir)
    encoder_dir = output_dir / "encoder"
    teacher = cfg = None
    if is_hf_model_folder(source) or not Path(str(source)).exists():
        path = resolve_name_or_path(str(source))
        model, _ = load_encoder_model(path, AutoConfig.from_pretrained(path), load_weights=True)  # T5/BART: the encoder
        tokenizer = load_tokenizer(path)
    else:
        trained = load_trained(source)
        teacher, cfg = trained.module, trained.cfg
        if is_quantized(cfg):
            raise ConfigError(f"{source} is quantised; drop layers from the float checkpoint")
        model, tokenizer = teacher.encoder.model, trained.tokenizer()
    layers = select_layers(int(model.config.num_hidden_layers), keep, num_keep)
    head_pooler = teacher.pooling.dense if teacher is not None and teacher.reads_encoder_pooler() else None
    student = drop_model_layers(model, layers, pooler=head_pooler)
    student.save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    report: dict[str, Any] = {
        "source": str(source), "kept_layers": layers, "num_layers": len(layers),
        "source_num_layers": int(model.config.num_hidden_layers), "encoder": str(encoder_dir),
    }
    if teacher is not None and not encoder_only:
        report["checkpoint"] = str(_write_student_checkpoint(teacher, cfg, encoder_dir, output_dir, layers, source, tokenizer))
    write_json_atomic(output_dir / "compression.json", report)
    log.info("kept layers %s of %d -> %s", layers, report["source_num_layers"], encoder_dir)
    return report


def _write_student_checkpoint(
    teacher: nn.Module, cfg: dict[str, Any], encoder_dir: Path, output_dir: Path, layers: list[int], source: str | Path,
    tokenizer: Any,
) -> Path:
    """The teacher's task model on the student encoder, with the fusion and head weights copied."""
    cfg = copy.deepcopy(cfg)
    # The tokenizer was copied into the folder, so it comes from there too.
    cfg["encoder"] = {**cfg["encoder"], "name_or_path": str(encoder_dir.resolve()), "tokenizer": None}
    cfg["compression"] = {**(cfg.get("compression") or {}), "dropped_layers": {"source": str(source), "kept_layers": layers}}
    student = build_module(RunSettings.of_trained(cfg))
    own = student.state_dict()
    head = {k: v for k, v in teacher.state_dict().items() if not k.startswith("encoder.")}
    misfit = sorted(k for k, v in head.items() if k not in own or own[k].shape != v.shape)
    if misfit:
        raise ConfigError(f"the teacher's head does not fit the {len(layers)}-layer student ({', '.join(misfit[:5])}): "
                         "a fusion over the teacher's layers (e.g. fusion=scalar_mix) has no counterpart; "
                         "use --encoder-only and train the student's head")
    student.load_state_dict({**own, **head})
    return save_model_folder(student, cfg, output_dir, tokenizer)
