"""``sesame-export`` on the command line: the folder it writes, its model card, and user errors as
one ``error:`` line with exit code 2 (nothing written)."""

from __future__ import annotations

import errno
import json
import tempfile
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
    assert report["max_abs_diff"] < 1e-4 and report["int8_agreement"] >= 0.5 and report["int8_weights"] == "per_channel"
    assert {"model.onnx", "model.int8.onnx", "README.md", "sesame_config.yaml", "export.json"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind
    assert json.loads((out / "export.json").read_text()) == report

    card = (out / "README.md").read_text()
    metrics = json.loads((run / "metrics.json").read_text())
    assert f"| val_accuracy | {metrics['val_accuracy']:.6g} |" in card
    assert f"sesame-export {run} {out} --format onnx --int8 --exporter torchscript" in card
    assert "| int8 weights | per_channel |" in card
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
    line = _fails(capsys, run, tmp_path / "z", "--format", "onnx", "--int8-weights", "per_tensor")
    assert "--int8-weights is for --int8" in line
    line = _fails(capsys, run, tmp_path / "w", "--format", "hf", "--attention", "model")
    assert "--attention are for --format onnx" in line
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


def test_an_output_under_a_regular_file_is_named_before_any_work(trained_run, capsys, tmp_path: Path) -> None:
    (tmp_path / "some_file").write_text("mine")
    line = _fails(capsys, trained_run("glue"), tmp_path / "some_file" / "out", "--format", "hf")
    assert f"cannot write {tmp_path / 'some_file' / 'out'}: {tmp_path / 'some_file'} is a file, not a folder" in line
    assert [p.name for p in tmp_path.iterdir()] == ["some_file"] and (tmp_path / "some_file").read_text() == "mine"


@pytest.mark.parametrize("code, words", [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only")])
def test_a_read_only_parent_is_one_line_and_writes_nothing(trained_run, capsys, monkeypatch, tmp_path: Path,
                                                           code, words) -> None:
    mkdtemp = tempfile.mkdtemp

    def refused(*args, dir=None, **kwargs):  # root writes anywhere: refuse as a read-only folder would
        if Path(dir) == tmp_path:
            raise OSError(code, "refused", str(dir))
        return mkdtemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    line = _fails(capsys, trained_run("glue"), tmp_path / "out", "--format", "hf")
    assert f"cannot write {tmp_path / 'out'}: " in line and words in line and "Nothing was written" in line
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_mid_export_is_one_line_and_leaves_no_folder(trained_run, capsys, monkeypatch, tmp_path: Path) -> None:
    import sesame.tasks.export.hf as hf

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hf, "write_model_card", full)
    line = _fails(capsys, trained_run("glue"), tmp_path / "out", "--format", "hf")
    assert f"cannot write {tmp_path / 'out'}: no space left on the device" in line and "Nothing was written" in line
    assert list(tmp_path.iterdir()) == []
