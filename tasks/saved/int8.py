"""Dynamic int8 quantisation (``torch.ao.quantization.quantize_dynamic``) of a sesame module.

Every ``nn.Linear`` (the encoder's attention and feed-forward projections, the pooler, the task head)
gets int8 weights; activations are quantised on the fly per batch, so no calibration data is needed.
Embeddings and layer norms stay float. The result runs on CPU only (fbgemm / qnnpack kernels).

A quantised checkpoint's config carries ``compression.quantized: true``: its state dict holds packed
int8 weights that load only into a module that was quantised the same way, so loaders build the float
module from the config, call :func:`quantize_module`, then ``load_state_dict``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

#: Trainer settings a quantised model is evaluated with: int8 kernels exist on CPU only, in float32.
QUANTIZED_TRAINER = {"accelerator": "cpu", "precision": "32-true", "devices": 1, "strategy": "auto"}


def is_quantized(cfg: Mapping[str, Any] | Any) -> bool:
    """Whether a checkpoint's config marks its weights as dynamically quantised."""
    compression = cfg.get("compression") if hasattr(cfg, "get") else None
    return bool(compression and compression.get("quantized"))


def quantize_module(module: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` of ``module`` in place by a dynamic int8 one; returns ``module``.

    The module is put in eval mode first (quantised layers are for inference).
    """
    module.eval()
    with warnings.catch_warnings():
        # torch announces that eager-mode quantisation will move to torchao; it is still torch's own API.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        from torch.ao.quantization import quantize_dynamic

        quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return module


def count_quantized_linear(module: nn.Module) -> tuple[int, int]:
    """``(dynamic int8 linear layers, float nn.Linear layers)`` inside ``module``."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    quantized = sum(isinstance(m, DynamicLinear) for m in module.modules())
    plain = sum(type(m) is nn.Linear for m in module.modules())
    return quantized, plain
