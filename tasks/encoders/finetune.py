"""Which encoder parameters train (config group ``finetune``), and the optimiser that trains them.

- ``frozen``: feature extraction. Encoder weights get no gradients and stay bit-identical; the encoder
  runs in eval mode (dropout off) even while the head trains, and under ``no_grad`` so no activations
  are kept for it.
- ``full``: every parameter trains.
- ``top_k``: only the top ``k`` transformer layers train (embeddings and lower layers frozen).
- ``bitfit``: only the encoder's bias terms train (Ben Zaken et al., 2022), at ``encoder_lr``.
- ``lora``: low-rank adapters (Hu et al., 2021; the ``peft`` library) on the attention projections
  train at ``encoder_lr``, the pretrained weights stay frozen.

In every mode the fusion and the task head train, at ``head_lr``. Encoder weights a mode does not
train are stored once per run, not in each checkpoint (``tasks/encoders/store.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.finetune_settings import FinetuneSettings
from sesame.tasks.encoders.sparse_rows import SPARSE_ROWS, AdamWWithSparseRows


#: LoRA target modules per ``config.model_type`` where peft's own table has none.
LORA_TARGETS = {"distilbert": ("q_lin", "v_lin"), "albert": ("query", "value"), "mobilebert": ("query", "value"),
                "longformer": ("query", "value"), "mpnet": ("q", "v"), "modernbert": ("Wqkv",)}


def apply_finetune_mode(encoder: Encoder, settings: FinetuneSettings) -> list[nn.Module]:
    """Set ``requires_grad`` on the encoder; return the encoder parts that must stay in eval mode."""
    if settings.mode == "full":
        encoder.requires_grad_(True)
        if settings.freeze_embeddings:
            encoder.model.get_input_embeddings().weight.requires_grad_(False)
        return []
    encoder.requires_grad_(False)
    if settings.mode == "frozen":
        return [encoder]
    if settings.mode == "bitfit":
        for name, param in encoder.named_parameters():
            if name.endswith(".bias"):
                param.requires_grad_(True)
        return []
    if settings.mode == "lora":
        add_lora(encoder, settings)
        return []
    layers = encoder.layers(f"finetune.mode=top_k (top_k={settings.top_k})",
                            "finetune=full, frozen, bitfit or lora train or freeze the shared layers as a whole")
    if settings.top_k > len(layers):
        raise ConfigError(f"finetune.top_k={settings.top_k} but {encoder.name_or_path} has only {len(layers)} layers")
    embeddings = _embedding_modules(encoder)
    lower = layers[: len(layers) - settings.top_k]
    frozen = {id(p) for part in (*lower, *embeddings) for p in part.parameters()}
    # The top layers and whatever lies outside the embeddings and the stack train: a final norm
    # (ModernBERT's final_norm, T5's final_layer_norm inside its stack module), the pooler.
    for param in encoder.parameters():
        if id(param) not in frozen:
            param.requires_grad_(True)
    # The frozen embeddings and lower layers keep dropout off.
    return [*lower, *embeddings]


def lora_targets(encoder: Encoder, settings: FinetuneSettings) -> list[str]:
    """``finetune.lora_target_modules``, else the attention projections of the encoder's family."""
    if settings.lora_target_modules:
        return list(settings.lora_target_modules)
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    family = str(getattr(encoder.config, "model_type", ""))
    targets = PEFT_TARGETS.get(family) or LORA_TARGETS.get(family)
    if not targets:
        raise ConfigError(f"finetune.mode=lora: no default LoRA target modules for the {family!r} family. Fix: set "
                          "finetune.lora_target_modules=[<names of its attention Linear layers>]")
    return list(targets)


def add_lora(encoder: Encoder, settings: FinetuneSettings) -> None:
    """Inject LoRA adapters into ``encoder.model`` in place; only they train (the model stays a plain
    Hugging Face model, so fusion, top-k logic and checkpoints see the same module tree)."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as err:
        raise ConfigError("finetune.mode=lora needs the peft package: pip install 'sesame[lora]'") from err
    targets = lora_targets(encoder, settings)
    names = {name.rsplit(".", 1)[-1] for name, _ in encoder.model.named_modules()}
    absent = [t for t in targets if t not in names]
    if absent:
        raise ConfigError(f"finetune.lora_target_modules: {', '.join(absent)} not found in {encoder.name_or_path} "
                          f"({type(encoder.model).__name__}). Fix: name its attention Linear layers")
    config = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                        target_modules=targets, bias="none")
    inject_adapter_in_model(config, encoder.model)
    for name, param in encoder.model.named_parameters():
        param.requires_grad_("lora_" in name)


def plain_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of a model with LoRA adapters injected, as the plain model's (adapters left out,
    base weights under their own names): what ``from_pretrained`` of the pretrained model reads."""
    return {k.replace(".base_layer.", "."): v for k, v in model.state_dict().items() if "lora_" not in k}


def _contains(parent: nn.Module, child: nn.Module) -> bool:
    return any(m is child for m in parent.modules())


def _embedding_modules(encoder: Encoder) -> list[nn.Module]:
    """The model's embedding block: the child holding the input embeddings (BERT's ``embeddings``),
    with the other children named for embeddings where a family keeps them apart (BART's
    ``embed_positions`` and ``layernorm_embedding`` next to ``embed_tokens``)."""
    embeddings = encoder.model.get_input_embeddings()
    holder = next((m for m in encoder.model.children() if _contains(m, embeddings)), embeddings)
    others = [m for name, m in encoder.model.named_children() if "embed" in name and m is not holder]
    return [holder, *others]


def _no_decay(name: str, param: nn.Parameter) -> bool:
    # Biases and normalisation weights (1-d) are not decayed, as in BERT's optimiser.
    return param.ndim <= 1 or name.endswith(".bias")


def parameter_groups(
    named_parameters: Iterable[tuple[str, nn.Parameter]], lr: float, weight_decay: float
) -> list[dict]:
    """Split trainable parameters into a decayed and a non-decayed group at one learning rate."""
    decay, no_decay = [], []
    for name, param in named_parameters:
        if param.requires_grad:
            (no_decay if _no_decay(name, param) else decay).append(param)
    groups = [{"params": decay, "lr": lr, "weight_decay": weight_decay}, {"params": no_decay, "lr": lr, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def sparse_word_embeddings(encoder: nn.Module) -> nn.Parameter | None:
    """Make the encoder's word embedding give sparse (row) gradients and return its weight [V, H]; None
    where it does not train (finetune=frozen, top_k, bitfit, lora), which leaves nothing to make sparse."""
    model = getattr(encoder, "model", encoder)
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not isinstance(embedding, nn.Embedding):
        raise ConfigError(f"finetune.sparse_embeddings=true: the encoder's input embedding is a "
                          f"{type(embedding).__name__}, not an nn.Embedding. Fix: finetune.sparse_embeddings=false")
    if not embedding.weight.requires_grad:
        return None
    embedding.sparse = True
    return embedding.weight


#: Devices whose parameters torch's fused AdamW kernel updates.
FUSED_ADAMW_DEVICES = ("cpu", "cuda", "xpu", "mps")


def build_optimizer(
    encoder: nn.Module, head_named_parameters: Iterable[tuple[str, nn.Parameter]], settings: FinetuneSettings,
    total_steps: int, allow_fused: bool = True,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with separate encoder / head learning rates and a linear warm-up then decay schedule.
    ``allow_fused=False`` keeps the per-tensor kernel: under fp16's GradScaler Lightning refuses to clip the gradients
    of a fused optimiser, which unscales them itself (bf16 has no scaler: ``TaskModule.configure_gradient_clipping``)."""
    # Each group is named ("encoder" / "head"): the logs' learning rates are lr_encoder and lr_head.
    sparse = sparse_word_embeddings(encoder) if settings.sparse_embeddings else None
    named = [(n, p) for n, p in encoder.named_parameters() if p is not sparse]
    groups = [{**g, "name": "encoder"} for g in parameter_groups(named, settings.encoder_lr, settings.weight_decay)]
    if sparse is not None:  # decayed, as in the dense decay group
        groups.append({"params": [sparse], "lr": settings.encoder_lr, "weight_decay": settings.weight_decay,
                       "name": "encoder", SPARSE_ROWS: True})
    groups += [{**g, "name": "head"} for g in parameter_groups(head_named_parameters, settings.head_lr,
                                                               settings.weight_decay)]
    if not groups:
        raise ConfigError("nothing to train: the encoder is frozen and the head has no parameters")
    # The fused kernel updates every tensor in one pass: on CPU it took the optimiser step of MiniLM-L6
    # from 0.44 s to 0.10 s (for-each), same arithmetic; it needs float tensors on a device that has it.
    params = [p for group in groups for p in group["params"]]
    fused = allow_fused and all(p.is_floating_point() and p.device.type in FUSED_ADAMW_DEVICES for p in params)
    adamw = AdamWWithSparseRows if sparse is not None else torch.optim.AdamW
    optimizer = adamw(groups, eps=settings.adam_epsilon, fused=fused or None)
    # Imported here: transformers.optimization imports peft and the Trainer's utilities (0.4 s), which
    # loading a trained model (sesame-predict) never needs.
    from transformers import get_linear_schedule_with_warmup

    warmup = int(settings.warmup_ratio * total_steps)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, max(total_steps, 1))
    return optimizer, scheduler
