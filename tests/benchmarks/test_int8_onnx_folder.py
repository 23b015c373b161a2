"""benchmarks/int8_onnx_folder.py: an int8 export is reused only while its weight scheme and traced attention
are the ones asked for (an export from before either was recorded counts as per tensor, the model's attention)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks import load_benchmark


def test_an_export_is_redone_when_its_int8_weight_scheme_differs(tmp_path: Path, monkeypatch) -> None:
    import sesame.tasks.export.onnx as onnx_export

    folder_module = load_benchmark("int8_onnx_folder")
    calls = []

    def fake_export(run, folder, *, int8, int8_weights, attention):
        calls.append((int8_weights, attention))
        folder.mkdir()
        (folder / "model.int8.onnx").write_bytes(b"graph")
        (folder / "export.json").write_text(json.dumps({"int8_weights": int8_weights, "attention_option": attention}))

    monkeypatch.setattr(onnx_export, "export_onnx", fake_export)
    folder = tmp_path / "onnx"
    folder.mkdir()
    (folder / "model.int8.onnx").write_bytes(b"old")
    (folder / "export.json").write_text("{}")  # written before int8_weights was recorded
    assert folder_module.export_weights(folder) == "per_tensor" and folder_module.export_attention(folder) == "model"
    folder_module.export_int8_onnx(Path("run"), folder, weights="per_tensor", attention="model")
    assert calls == [] and (folder / "model.int8.onnx").read_bytes() == b"old"  # kept: same settings
    folder_module.export_int8_onnx(Path("run"), folder, weights="per_tensor")  # the default attention, eager: again
    folder_module.export_int8_onnx(Path("run"), folder)  # the default, per channel: exported again
    assert calls == [("per_tensor", "eager"), ("per_channel", "eager")] and folder_module.export_weights(folder) == "per_channel"
    folder_module.export_int8_onnx(Path("run"), folder)
    folder_module.export_int8_onnx(Path("run"), folder, fresh=True)
    assert calls == [("per_tensor", "eager"), ("per_channel", "eager"), ("per_channel", "eager")]
    assert folder_module.export_weights(tmp_path / "missing") is None
