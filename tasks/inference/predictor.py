"""Predictions on raw input with a trained model: the task-independent entry of ``sesame-predict``.

``Predictor.from_run(path)`` reads a run folder, a ``.ckpt`` file or an ONNX export folder (one that
holds ``model.onnx``) and returns the predictor of the model's task::

    from sesame.tasks.inference.predictor import Predictor

    predict = Predictor.from_run("outputs/squad_v1/2024-05-01_12-00-00")
    predict([{"question": "Who won?", "context": "Marie Curie won the prize."}])
    # [{"answer": "Marie Curie", "char_start": 0, "char_end": 11, "score": ..., "probability": ...}]

Inputs are mappings (one JSON object per line on the command line), outputs are plain dicts that
``json.dumps`` writes. An input's optional ``"id"`` comes back first in its output. The predictor is
the class the model's ``task.predictor`` names (``conf/task/*.yaml``), a subclass of
``tasks/base/predictor.py``'s ``TaskPredictor`` (how inputs are chunked, sorted and batched is
described there); the tasks' inputs and outputs are described in ``tasks/glue/predict.py``
(``ClassificationPredictor``), ``tasks/qa/predict.py`` (``QuestionAnsweringPredictor``) and
``tasks/ner/predict.py`` (``TaggingPredictor``).

The model itself is a ``ModelRunner`` (``tasks/base/predictor.py``): :class:`TorchRunner` runs the
trained task network (``tasks/<task>/network.py``: no Lightning is imported);
``tasks/inference/onnx_runner.py``'s ``OnnxRunner`` runs an ONNX export with the same interface.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedTokenizerFast

from sesame.tasks.base.predictor import ModelRunner, TaskPredictor, predictor_class
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.saved.int8 import is_quantized, quantize_module

if TYPE_CHECKING:
    from sesame.tasks.saved.checkpoints import TrainedModel

#: The file that marks an ONNX export folder (``sesame-export``).
ONNX_FILE = "model.onnx"
#: The module holding ``OnnxRunner`` (imported only for an ONNX folder: it needs onnxruntime).
ONNX_RUNNER = "sesame.tasks.inference.onnx_runner"


class TorchRunner:
    """``ModelRunner`` of a trained model read back with ``load_trained`` (CPU, eval mode)."""

    def __init__(self, trained: TrainedModel) -> None:
        self.trained = trained
        self.module = trained.module.eval()
        self.cfg: dict[str, Any] = trained.cfg
        self.settings: RunSettings = trained.settings
        self._tokenizer: PreTrainedTokenizerFast | None = None

    def tokenizer(self) -> PreTrainedTokenizerFast:
        if self._tokenizer is None:
            self._tokenizer = self.trained.tokenizer()
        return self._tokenizer

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        with torch.inference_mode():
            out = self.module(batch)
        if isinstance(out, tuple):
            return tuple(o.float() for o in out)
        return out.float()

    def head_state(self) -> dict[str, torch.Tensor]:
        """The trained head's decoding values (``decoding_state``: thresholds, CRF scores)."""
        return self.module.decoding_state()


def is_onnx_folder(path: str | Path) -> bool:
    """A ``sesame-export`` ONNX folder (it holds ``model.onnx``)."""
    return (Path(path).expanduser() / ONNX_FILE).is_file()


def runner_for(path: str | Path, overrides: Mapping[str, Any] | None = None, *, int8: bool = False) -> ModelRunner:
    """The ``ModelRunner`` of a run folder, ``.ckpt`` file or ONNX export folder.

    ``overrides``: dotted settings applied over the trained config (``{"head.n_best_size": 5}``;
    ``tasks/saved/trained_overrides.py`` says which may change). ``int8``: an ONNX folder's int8 graph
    (``model.int8.onnx``, from ``sesame-export --int8``); a trained run's linear layers made dynamic int8
    on load (as ``sesame-compress quantize`` makes them; a model quantised already stays as it is).
    """
    if is_onnx_folder(path):
        onnx_runner = importlib.import_module(ONNX_RUNNER)  # needs the [export] extra
        return onnx_runner.OnnxRunner.from_folder(Path(path).expanduser(), overrides, int8=int8)
    # Imported here: an ONNX folder needs none of the torch model's code.
    from sesame.tasks.saved.checkpoints import load_trained

    # The task's network alone (tasks/<task>/network.py): the Lightning module's state dict, no Lightning import.
    trained = load_trained(path, overrides=dict(overrides or {}), network_only=True)
    if int8 and not is_quantized(trained.cfg):
        quantize_module(trained.module)
    return TorchRunner(trained)


class Predictor:
    """The predictor of a trained model, whatever its task: the class its ``task.predictor`` names
    (a ``TaskPredictor`` subclass, ``tasks/base/predictor.py``). Not instantiated itself: use
    :meth:`from_run` or :meth:`from_runner`, and call what they return on an iterable of mappings.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> TaskPredictor:
        raise TypeError("Predictor picks a task's predictor: use Predictor.from_run(path) or Predictor.from_runner(runner)")

    @staticmethod
    def class_of(runner: ModelRunner) -> type[TaskPredictor]:
        """The predictor class of ``runner``'s model (its ``task.predictor``)."""
        return predictor_class(runner.settings)

    @classmethod
    def from_runner(cls, runner: ModelRunner, **kwargs: Any) -> TaskPredictor:
        """The predictor of ``runner``'s task (``kwargs`` go to its constructor: ``batch_size``,
        ``chunk_size``; QA: ``n_best``)."""
        return cls.class_of(runner)(runner, **kwargs)

    @classmethod
    def from_run(cls, path: str | Path, *, overrides: Mapping[str, Any] | None = None, int8: bool = False,
                 **kwargs: Any) -> TaskPredictor:
        """The predictor of the trained model at ``path`` (run folder, .ckpt or ONNX folder).

        ``overrides``: dotted settings over the trained config (``{"head.null_score_diff_threshold": 1.0}``);
        ``int8``: run it in int8 (:func:`runner_for`); ``kwargs`` go to the task's predictor
        (``batch_size``, ``chunk_size``; QA: ``n_best``).
        """
        return cls.from_runner(runner_for(path, overrides, int8=int8), **kwargs)
