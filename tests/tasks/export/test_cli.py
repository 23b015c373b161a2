"""``sesame-export`` on the command line: the folder it writes, its model card, and user errors as
one ``error:`` line with exit code 2 (nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sesame.tasks.cli.export import main
from tests.conftest import require


def _fails(capsys, *argv) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_onnx_export_folder_and_model_card(trained_run, capsys, tmp_path: Path) -> None:
    require("onnxruntime")
    require("onnxscript")
    run = trained_run("glue")
    out = tmp_path / "exports" / "sst2-onnx"
    capsys.readouterr()
    main([str(run), str(out), "--format", "onnx", "--int8", "--exporter", "torchscript"])
    report = json.loads(capsys.readouterr().out)
    assert report["max_abs_diff"] < 1e-4 and report["int8_agreement"] >= 0.5
    assert {"model.onnx", "model.int8.onnx", "README.md", "sesame_config.yaml", "export.json"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind
    assert json.loads((out / "export.json").read_text()) == report

    card = (out / "README.md").read_text()
    metrics = json.loads((run / "metrics.json").read_text())
    assert f"| val_accuracy | {metrics['val_accuracy']:.6g} |" in card
    assert f"sesame-export {run} {out} --format onnx --int8 --exporter torchscript" in card
    for field in ("| task | glue (sst2): sequence classification |", "| labels | 0, 1 |", "| pooling | pooler |",
                  "| fusion | last |", "| training size | 64 examples (the first 64 of 2000) |", "pipeline_tag: text-classification"):
        assert field in card, field


def test_user_errors_are_one_line_and_write_nothing(trained_run, capsys, tmp_path: Path) -> None:
    run = trained_run("ner_crf")
    line = _fails(capsys, run, tmp_path / "x", "--format", "tflite")
    assert "--format" in line and "tflite" in line
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    line = _fails(capsys, run, taken, "--format", "onnx")
    assert "not empty" in line and str(taken) in line
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    line = _fails(capsys, run, tmp_path / "hf", "--format", "hf")
    assert "head.crf=true" in line and "--format onnx" in line
    line = _fails(capsys, tmp_path / "no-run", tmp_path / "y", "--format", "hf")
    assert "no-run" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing else written, no staging folders


def test_a_crash_mid_export_leaves_no_folder(trained_run, monkeypatch, tmp_path: Path) -> None:
    import sesame.tasks.export.hf as hf

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(hf, "write_model_card", crash)
    with pytest.raises(OSError, match="disk full"):
        hf.export_hf(trained_run("glue"), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_help_shows_examples(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "sesame-export outputs/glue/<run> exports/sst2-hf --format hf" in out and "--int8" in out
