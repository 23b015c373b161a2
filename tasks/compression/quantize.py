"""``sesame-compress quantize``: a trained checkpoint -> a run folder with its dynamic-int8 version.

Output folder (``sesame-eval model=<folder>`` evaluates it, on CPU):
``checkpoints/best.ckpt`` (int8 state dict + the config marked ``compression.quantized: true``),
``config.yaml`` and ``compression.json`` (source, layer counts, sizes).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from sesame.tasks.core.atomic_files import write_json_atomic
from sesame.tasks.saved.checkpoints import load_trained, save_model_folder, state_dict_bytes
from sesame.tasks.saved.int8 import count_quantized_linear, is_quantized, quantize_module
from sesame.tasks.core.errors import ConfigError

log = logging.getLogger(__name__)


def quantize_checkpoint(source: str | Path, output_dir: str | Path) -> dict[str, Any]:
    """Quantise the model of ``source`` (.ckpt or run folder) into ``output_dir``; returns the report."""
    trained = load_trained(source)
    ckpt_path, cfg, module = trained.checkpoint, copy.deepcopy(trained.cfg), trained.module
    if is_quantized(cfg):
        raise ConfigError(f"{ckpt_path} is already quantised")
    float_bytes = state_dict_bytes(module)
    quantize_module(module)
    quantized, left = count_quantized_linear(module)
    cfg["compression"] = {**(cfg.get("compression") or {}), "quantized": True, "method": "dynamic_int8",
                          "source": str(Path(ckpt_path).resolve())}
    output_dir = Path(output_dir)
    save_model_folder(module, cfg, output_dir, trained.tokenizer())
    report = {
        "source": str(ckpt_path),
        "method": "dynamic_int8",
        "quantized_linear_layers": quantized,
        "float_linear_layers": left,
        "float_state_dict_bytes": float_bytes,
        "quantized_state_dict_bytes": state_dict_bytes(module),
    }
    write_json_atomic(output_dir / "compression.json", report)
    log.info("quantised %d linear layers: %.1f MB -> %.1f MB", quantized, float_bytes / 1e6,
             report["quantized_state_dict_bytes"] / 1e6)
    return report
