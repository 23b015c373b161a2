"""The int8 ONNX export a benchmark measures, made once and reused while it matches what was asked.

Used by ``benchmarks/inference.py``, ``benchmarks/compression.py`` and ``benchmarks/export_attention.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def export_weights(folder: Path) -> str | None:
    """The int8 weight scheme of an export folder (``export.json``; one from before the scheme was recorded
    is per tensor, the only scheme then), or None without an int8 graph."""
    from sesame.tasks.inference.onnx_session import INT8_FILE

    if not (folder / INT8_FILE).is_file() or not (folder / "export.json").is_file():
        return None
    return json.loads((folder / "export.json").read_text()).get("int8_weights", "per_tensor")


def export_attention(folder: Path) -> str:
    """The ``--attention`` an export folder was traced with (one from before the option traced the model's own)."""
    return json.loads((folder / "export.json").read_text()).get("attention_option", "model")


def export_int8_onnx(run: Path, folder: Path, fresh: bool = False, weights: str = "per_channel",
                     attention: str = "eager") -> Path:
    """``sesame-export --format onnx --int8 --int8-weights <weights> --attention <attention>`` of ``run`` into
    ``folder``; a whole earlier export with the same settings is kept unless ``fresh``."""
    from sesame.tasks.export.onnx import export_onnx

    if fresh or export_weights(folder) != weights or export_attention(folder) != attention:
        if folder.exists():
            shutil.rmtree(folder)
        print(f"[export] {run} -> {folder} (onnx, --int8 --int8-weights {weights} --attention {attention})", flush=True)
        export_onnx(run, folder, int8=True, int8_weights=weights, attention=attention)
    return folder
