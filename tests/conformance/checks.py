"""What the conformance checks compare: a run's prediction files and metrics, a module's outputs on the
run's own dev batches, and predictor outputs against what the evaluation wrote. Nothing here names a task."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from sesame.tasks.export import as_tuple, task_export
from sesame.tasks.saved.checkpoints import TrainedModel
from tests.conformance.specs import TaskSpec
from tests.tasks.export.conftest import dev_data

#: Files of a run (or evaluation) folder that are not the module's prediction files.
RUN_FILES = {"config.yaml", "metrics.json", "train_throughput.json", "compression.json"}


def prediction_files(folder: Path) -> dict[str, str]:
    """``{name: text}`` of the prediction files the module wrote into ``folder`` (every top-level file
    but the run's own records and logs)."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir())
            if p.is_file() and p.name not in RUN_FILES and not p.name.startswith(".") and p.suffix != ".log"}


#: A decimal number in a prediction file (JSON, TSV, CoNLL): what float noise may change.
NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")


def assert_same_text(got: str, want: str, tol: float, where: str = "") -> None:
    """``got`` is ``want`` but for its decimal numbers, each within ``tol`` (absolute or relative)."""
    assert NUMBER.split(got) == NUMBER.split(want), f"{where}: the text differs beyond its numbers"
    for a, b in zip(NUMBER.findall(got), NUMBER.findall(want), strict=True):
        assert math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol), f"{where}: {a} != {b}"


def metrics_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "metrics.json").read_text(encoding="utf-8"))


def run_config(folder: Path) -> dict[str, Any]:
    """The trained config a run folder saved (plain data, resolved)."""
    return OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"), resolve=True)


def assert_same_metrics(got: Mapping[str, Any], want: Mapping[str, Any], tol: float = 1e-6,
                        keys: Iterable[str] | None = None) -> None:
    """Every metric of ``keys`` (default: each ``val_*`` of ``want``) in ``got``, equal within ``tol``
    (absolute); None only where None."""
    keys = [k for k in want if k.startswith("val_")] if keys is None else list(keys)
    assert keys, f"no metrics to compare in {sorted(want)}"
    for key in keys:
        assert key in got, f"{key} missing: {sorted(got)}"
        a, b = got[key], want[key]
        if a is None or b is None:
            assert a is b, f"{key}: {a} != {b}"
        else:
            assert abs(a - b) <= tol, f"{key}: {a!r} != {b!r}"


def dev_batches(trained: TrainedModel, batch_size: int = 7) -> list[dict]:
    """The run's dev examples (all that it evaluated) in batches of another size than evaluation's,
    padded per batch: shapes the export never traced."""
    limit = trained.cfg["data"]["max_eval_examples"]
    batches, _ = dev_data(trained, batch_size=batch_size, limit=limit)
    assert batches
    return batches


def outputs(module: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The module's ``forward(batch)`` as a tuple of float tensors (eval mode, no gradients)."""
    module.eval()
    with torch.inference_mode():
        return tuple(o.float() for o in as_tuple(module(batch)))


def runner_inputs(trained: TrainedModel, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a predictor gives a ``ModelRunner`` of ``batch``: the encoder's inputs and the task's graph inputs."""
    return task_export(trained).model_inputs(batch)


def same(got: Any, want: Any, tol: float = 0.0, where: str = "") -> None:
    """``got`` equals ``want`` (nested dicts and lists); floats within ``tol`` (exactly where 0)."""
    if isinstance(want, Mapping):
        assert isinstance(got, Mapping) and list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            same(got[key], want[key], tol, f"{where}.{key}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, tol, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool) and isinstance(got, (int, float)):
        assert math.isclose(got, want, rel_tol=tol, abs_tol=tol), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def meets(outputs: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
          tol: float = 1e-5, varied: bool = True) -> None:
    """Each output has the fields its expectation gives (floats within ``tol``); ``varied``: and the
    outputs are not all the same."""
    assert len(outputs) == len(pairs) > 1
    for i, (out, (_, expected)) in enumerate(zip(outputs, pairs)):
        assert expected, "an expectation without fields checks nothing"
        for key, value in expected.items():
            assert key in out, f"input {i}: no {key!r} in {sorted(out)}"
            same(out[key], value, tol, f"input {i}: {key}")
    # a predictor that ignored its input would fail (the tiny encoder may give every example one label,
    # but never the same probabilities or scores)
    assert not varied or len({json.dumps(o, sort_keys=True) for o in outputs}) > 1, "every dev example gets the same output"


def predictor_inputs(spec: TaskSpec, folder: Path, trained: TrainedModel) -> list[tuple[dict, dict]]:
    """The task's dev examples as predictor inputs with what ``folder``'s prediction files say of each
    (its ``predict`` function); without one, the model card's example input and no expectation."""
    hook = spec.expectations()
    if hook is None:
        return [(task_export(trained).example_input(), {})]
    return hook(folder, trained.cfg)
