"""benchmarks/int8_onnx_folder.py: an int8 export is reused only while its weight scheme is the one asked
for (an export from before the scheme was recorded counts as per tensor)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks import load_benchmark


def test_an_export_is_redone_when_its_int8_weight_scheme_differs(tmp_path: Path, monkeypatch) -> None:
    import sesame.tasks.export.onnx as onnx_export

    folder_module = load_benchmark("int8_onnx_folder")
    calls = []

    def fake_export(run, folder, *, int8, int8_weights):
        calls.append(int8_weights)
        folder.mkdir()
        (folder / "model.int8.onnx").write_bytes(b"graph")
        (folder / "export.json").write_text(json.dumps({"int8_weights": int8_weights}))

    monkeypatch.setattr(onnx_export, "export_onnx", fake_export)
    folder = tmp_path / "onnx"
    folder.mkdir()
    (folder / "model.int8.onnx").write_bytes(b"old")
    (folder / "export.json").write_text("{}")  # written before int8_weights was recorded
    assert folder_module.export_weights(folder) == "per_tensor"
    folder_module.export_int8_onnx(Path("run"), folder, weights="per_tensor")
    assert calls == [] and (folder / "model.int8.onnx").read_bytes() == b"old"  # kept: same scheme
    folder_module.export_int8_onnx(Path("run"), folder)  # the default, per channel: exported again
    assert calls == ["per_channel"] and folder_module.export_weights(folder) == "per_channel"
    folder_module.export_int8_onnx(Path("run"), folder)
    folder_module.export_int8_onnx(Path("run"), folder, fresh=True)
    assert calls == ["per_channel", "per_channel"]
    assert folder_module.export_weights(tmp_path / "missing") is None
