"""A checkpoint is data, never code: a .ckpt whose pickle would run a payload is refused by every command
that reads one, and the payload never runs; a damaged one is a clear error naming the file."""

from __future__ import annotations

import os
import pickle
import pickletools
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoint_files import DamagedCheckpointError, UnsafeCheckpointError, load_checkpoint_file
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.core.errors import UserError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train

TINY = ["data.max_train_examples=8", "data.max_eval_examples=8"]


class Payload:
    """Unpickling this runs ``touch <marker>``, as a hostile checkpoint would run anything."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def clean_run(make_cfg, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("clean") / "run"
    train(RunSettings.from_config(make_cfg(*TINY)), run)
    return run


@pytest.fixture
def poisoned(clean_run, tmp_path) -> tuple[Path, Path]:
    """A copy of a real run whose best.ckpt and last.ckpt also carry a payload; and the payload's marker file."""
    run, marker = tmp_path / "shared_run", tmp_path / "payload_ran"
    shutil.copytree(clean_run, run)
    for name in ("best.ckpt", "last.ckpt"):
        path = run / "checkpoints" / name
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["hyper_parameters"]["note"] = Payload(marker)
        torch.save(checkpoint, path)
    # the payload is real: the pickle calls os.system (read as data, never run) and a data-only load refuses it
    assert ("posix", "system") in pickled_globals(run / "checkpoints" / "best.ckpt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert not marker.exists()
    return run, marker


def pickled_globals(path: Path) -> set[tuple[str, str]]:
    """The ``(module, name)`` globals a torch checkpoint's pickle would import, read without unpickling."""
    with zipfile.ZipFile(path) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.add(tuple(arg.split(" ", 1)))
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.add((strings[-2], strings[-1]))
        if isinstance(arg, str):
            strings.append(arg)
    return found


def _eval_cfg(*overrides: str):
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        return compose(config_name="eval", overrides=["trainer=debug", "trainer.enable_progress_bar=false", *overrides])


def _entry_points(run: Path, tmp: Path, make_cfg) -> dict:
    """Every way sesame reads a trained model's checkpoint, as the commands call it."""
    from sesame.tasks.cli.export import main as export_main
    from sesame.tasks.cli.predict import main as predict_main
    from sesame.tasks.cli.compress import main as compress_main

    return {
        "load_trained": lambda: load_trained(run),
        "sesame-predict": lambda: predict_main([str(run), str(_write(tmp / "in.jsonl", '{"text": "a fine film"}\n'))]),
        "sesame-eval": lambda: evaluate(RunSettings.from_config(_eval_cfg(f"model={run}", "data.max_eval_examples=8")), tmp / "eval"),
        "sesame-export hf": lambda: export_main([str(run), str(tmp / "hf"), "--format", "hf"]),
        "sesame-export onnx": lambda: export_main([str(run), str(tmp / "onnx"), "--format", "onnx"]),
        "sesame-compress quantize": lambda: compress_main(["quantize", str(run), str(tmp / "int8")]),
        "sesame-compress drop-layers": lambda: compress_main(["drop-layers", str(run), str(tmp / "student")]),
        "distill.teacher": lambda: train(RunSettings.from_config(make_cfg(*TINY, f"distill.teacher={run}")), tmp / "student_run"),
        "resume": lambda: train(RunSettings.from_config(make_cfg(*TINY, f"resume={run / 'checkpoints' / 'last.ckpt'}")), tmp / "resumed"),
    }


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


ENTRY_POINTS = ["load_trained", "sesame-predict", "sesame-eval", "sesame-export hf", "sesame-export onnx",
                "sesame-compress quantize", "sesame-compress drop-layers", "distill.teacher", "resume"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_checkpoint_carrying_code_is_refused_and_its_code_never_runs(poisoned, tmp_path, make_cfg, capsys, entry):
    run, marker = poisoned
    with pytest.raises(SystemExit) as stop, user_errors_are_messages():
        _entry_points(run, tmp_path, make_cfg)[entry]()
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert "was refused: loading it would run code (posix.system)" in err and "checkpoints" in err, err
    assert not marker.exists()


def test_every_clean_checkpoint_sesame_writes_loads_as_data(clean_run):
    for name in ("best.ckpt", "last.ckpt"):
        checkpoint = load_checkpoint_file(clean_run / "checkpoints" / name)
        assert "state_dict" in checkpoint and "cfg" in checkpoint["hyper_parameters"]
    assert load_trained(clean_run).module is not None


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
@pytest.mark.parametrize("entry", ["load_trained", "resume"])
def test_a_damaged_checkpoint_is_named_as_damaged(clean_run, tmp_path, make_cfg, damage, entry):
    run = tmp_path / "run"
    shutil.copytree(clean_run, run)
    for name in ("best.ckpt", "last.ckpt"):
        path = run / "checkpoints" / name
        data = path.read_bytes()
        path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"not a checkpoint\n" * 50}[damage])
    with pytest.raises(DamagedCheckpointError) as info:
        _entry_points(run, tmp_path, make_cfg)[entry]()
    message = str(info.value)
    assert str(run / "checkpoints") in message and "is damaged" in message and "best.ckpt" in message
    assert isinstance(info.value, UserError)


def test_a_legacy_pickle_with_a_payload_is_refused_too(tmp_path):
    path, marker = tmp_path / "old.ckpt", tmp_path / "payload_ran"
    torch.save({"state_dict": {}, "x": Payload(marker)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(UnsafeCheckpointError, match="old.ckpt was refused"):
        load_checkpoint_file(path)
    assert not marker.exists()
