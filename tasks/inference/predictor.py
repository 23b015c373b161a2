"""Predictions on raw input with a trained model: the task-independent part of ``sesame-predict``.

``Predictor.from_run(path)`` reads a run folder, a ``.ckpt`` file or an ONNX export folder (one that
holds ``model.onnx``) and returns the predictor of the model's task::

    from sesame.tasks.inference.predictor import Predictor

    predict = Predictor.from_run("outputs/squad_v1/2024-05-01_12-00-00")
    predict([{"question": "Who won?", "context": "Marie Curie won the prize."}])
    # [{"answer": "Marie Curie", "char_start": 0, "char_end": 11, "score": ..., "probability": ...}]

Inputs are mappings (one JSON object per line on the command line), outputs are plain dicts that
``json.dumps`` writes. An input's optional ``"id"`` comes back first in its output. The tasks'
inputs and outputs are described in ``tasks/glue/predict.py`` (``ClassificationPredictor``),
``tasks/qa/predict.py`` (``QuestionAnsweringPredictor``) and ``tasks/ner/predict.py``
(``TaggingPredictor``).

How inputs are run: they are read in chunks (``chunk_size`` inputs), every input of a chunk is
checked and tokenised (into several windows where it is longer than ``data.max_seq_length``), the
windows are sorted by length (longest first, ``tasks/inputs/batching.py``'s order, as evaluation sorts
them) and run ``batch_size`` at a time with per-batch padding, and the outputs come back in input
order. With the trained ``data.eval_batch_size`` and a chunk holding a whole dev set, the batches
are exactly those of ``sesame-eval``, so the predictions are too.

The model itself is a :class:`ModelRunner`: :class:`TorchRunner` runs the trained Lightning module;
``tasks/inference/onnx_runner.py``'s ``OnnxRunner`` runs an ONNX export with the same interface.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from sesame.tasks.inputs.batching import LengthSortedSampler
from sesame.tasks.saved.checkpoints import TrainedModel, load_trained
from sesame.tasks.saved.int8 import is_quantized, quantize_module
from sesame.tasks.core.errors import ConfigError, DataError

#: The predictor class of each ``task.name`` (imported on use: the task modules import this one).
PREDICTORS = {
    "glue": "sesame.tasks.glue.predict.ClassificationPredictor",
    "text_classification": "sesame.tasks.glue.predict.ClassificationPredictor",
    "squad_v1": "sesame.tasks.qa.predict.QuestionAnsweringPredictor",
    "squad_v2": "sesame.tasks.qa.predict.QuestionAnsweringPredictor",
    "ner": "sesame.tasks.ner.predict.TaggingPredictor",
}
#: The file that marks an ONNX export folder (``sesame-export``).
ONNX_FILE = "model.onnx"
#: The module holding ``OnnxRunner`` (imported only for an ONNX folder: it needs onnxruntime).
ONNX_RUNNER = "sesame.tasks.inference.onnx_runner"
#: Inputs read, checked and tokenised together, per batch of the model (at least 256).
CHUNK_BATCHES = 16


@runtime_checkable
class ModelRunner(Protocol):
    """A trained model as the predictors use it, whatever runs it (PyTorch, ONNX Runtime).

    ``cfg``: the trained config as plain data (``cfg["task"]["name"]``, ``cfg["data"]``,
    ``cfg["head"]``, with any overrides applied).
    """

    cfg: dict[str, Any]

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The tokenizer the model was trained with."""
        ...

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The task module's ``forward(batch)`` output, float32 on the CPU.

        ``batch`` holds ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the tokenizer
        makes them) [B, T] int64, and for QA ``context_mask`` [B, T] bool. GLUE: logits [B, C]
        ([B, 1] for regression); QA: ``(start, end)`` logits, each [B, T]; NER: logits [B, T, C].
        """
        ...

    def decode_tags(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """NER only: the head's decoding of ``logits`` [B, T, C] at the positions of ``mask`` [B, T]
        (argmax, or CRF Viterbi over them): tag ids [B, T], -100 outside ``mask``."""
        ...

    # A runner of a multi-label classifier (``data.multi_label=true``) also has ``label_thresholds() ->
    # Tensor [C]`` (see TorchRunner); it is not part of the protocol, which every runner must meet.


class TorchRunner:
    """:class:`ModelRunner` of a trained model read back with ``load_trained`` (CPU, eval mode)."""

    def __init__(self, trained: TrainedModel) -> None:
        self.trained = trained
        self.module = trained.module.eval()
        self.cfg: dict[str, Any] = trained.cfg
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

    def label_thresholds(self) -> torch.Tensor | None:
        """Multi-label classification: the per-label decision thresholds [C] saved with the model
        (a label applies where its sigmoid probability reaches its threshold); None for other models."""
        thresholds = getattr(self.module, "thresholds", None)
        return None if thresholds is None else thresholds.detach().float().cpu()

    def decode_tags(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        head = getattr(self.module, "head", None)
        if head is None or not hasattr(head, "decode"):
            raise ConfigError(f"{self.trained.checkpoint} is a {self.cfg['task']['name']} model: it has no tag decoding")
        with torch.inference_mode():
            return head.decode(logits, mask)


def is_onnx_folder(path: str | Path) -> bool:
    """A ``sesame-export`` ONNX folder (it holds ``model.onnx``)."""
    return (Path(path).expanduser() / ONNX_FILE).is_file()


def runner_for(path: str | Path, overrides: Mapping[str, Any] | None = None, *, int8: bool = False) -> ModelRunner:
    """The :class:`ModelRunner` of a run folder, ``.ckpt`` file or ONNX export folder.

    ``overrides``: dotted settings applied over the trained config (``{"head.n_best_size": 5}``;
    ``tasks/saved/trained_overrides.py`` says which may change). ``int8``: an ONNX folder's int8 graph
    (``model.int8.onnx``, from ``sesame-export --int8``); a trained run's linear layers made dynamic int8
    on load (as ``sesame-compress quantize`` makes them; a model quantised already stays as it is).
    """
    if is_onnx_folder(path):
        onnx_runner = importlib.import_module(ONNX_RUNNER)  # needs the [export] extra
        return onnx_runner.OnnxRunner.from_folder(Path(path).expanduser(), overrides, int8=int8)
    trained = load_trained(path, overrides=dict(overrides or {}))
    if int8 and not is_quantized(trained.cfg):
        quantize_module(trained.module)
    return TorchRunner(trained)


def finite(value: float | None) -> float | None:
    """``value`` as a float, or None for None / NaN / infinity (JSON has neither)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def string_field(record: Mapping[str, Any], key: str, where: str, fix: str, required: bool = True) -> str | None:
    """``record[key]`` checked to be a string; a :class:`DataError` naming ``where`` and ``fix`` otherwise.

    The rule of every task's input: a required field that is missing, not a string, empty or only
    white space is refused (an empty text has nothing to predict on; a model would still answer).
    """
    if key not in record or record[key] is None:
        if not required:
            return None
        raise DataError(f"{where}: no {key!r} field. Fix: {fix}")
    value = record[key]
    if not isinstance(value, str):
        raise DataError(f"{where}: {key!r} must be a string, got {type(value).__name__} {value!r:.60}. Fix: {fix}")
    if required and not value.strip():
        raise DataError(f"{where}: {key!r} is empty or only white space. Fix: {fix}")
    return value


class Predictor:
    """Predictions of one trained model on raw inputs; a subclass per task family.

    ``Predictor.from_run(path)`` picks the subclass for the model's task. Call it on an iterable of
    mappings to get a list of output dicts, or use :meth:`predict_iter` to stream them.

    Args:
        runner: the model (:func:`runner_for`).
        batch_size: windows run at once (default: the trained ``data.eval_batch_size``).
        chunk_size: inputs read and tokenised together, sorted by length within the chunk
            (default: ``max(256, 16 * batch_size)``). Only speed and memory depend on it.
    """

    #: Task names (``cfg.task.name``) this predictor handles.
    task_names: ClassVar[tuple[str, ...]] = ()
    #: What one input line looks like, for error messages.
    input_example: ClassVar[str] = ""

    def __init__(self, runner: ModelRunner, *, batch_size: int | None = None, chunk_size: int | None = None) -> None:
        task = runner.cfg["task"]["name"]
        if self.task_names and task not in self.task_names:
            raise ConfigError(f"{type(self).__name__} predicts for task={'/'.join(self.task_names)}, not a {task} model. "
                              "Fix: use Predictor.from_run, which picks the task's predictor")
        self.runner = runner
        self.cfg = runner.cfg
        self.task = task
        self.batch_size = int(batch_size or self.cfg["data"]["eval_batch_size"])
        if self.batch_size < 1:
            raise ConfigError(f"batch size {self.batch_size}: must be at least 1")
        self.chunk_size = int(chunk_size or max(256, CHUNK_BATCHES * self.batch_size))
        if self.chunk_size < 1:
            raise ConfigError(f"chunk size {self.chunk_size}: must be at least 1")
        self.tokenizer = runner.tokenizer()
        self.max_seq_length = int(self.cfg["data"]["max_seq_length"])

    # Building ------------------------------------------------------------------------------------
    @staticmethod
    def class_for(task: str) -> type[Predictor]:
        """The predictor class of ``task`` (``cfg.task.name``)."""
        if task not in PREDICTORS:
            raise ConfigError(f"no predictor for task={task!r} (there are: {', '.join(sorted(PREDICTORS))})")
        module, _, name = PREDICTORS[task].rpartition(".")
        return getattr(importlib.import_module(module), name)

    @classmethod
    def from_runner(cls, runner: ModelRunner, **kwargs: Any) -> Predictor:
        """The predictor of ``runner``'s task (``kwargs`` go to its constructor)."""
        task = runner.cfg["task"]["name"]
        chosen = cls.class_for(task)
        if not issubclass(chosen, cls):
            raise ConfigError(f"the model is a {task} model: {cls.__name__} cannot predict for it. "
                              f"Fix: use Predictor.from_run (it picks {chosen.__name__})")
        return chosen(runner, **kwargs)

    @classmethod
    def from_run(cls, path: str | Path, *, overrides: Mapping[str, Any] | None = None, int8: bool = False,
                 **kwargs: Any) -> Predictor:
        """The predictor of the trained model at ``path`` (run folder, .ckpt or ONNX folder).

        ``overrides``: dotted settings over the trained config (``{"head.null_score_diff_threshold": 1.0}``);
        ``int8``: run it in int8 (:func:`runner_for`); ``kwargs`` go to the task's predictor
        (``batch_size``, ``chunk_size``; QA: ``n_best``).
        """
        return cls.from_runner(runner_for(path, overrides, int8=int8), **kwargs)

    # Predicting ----------------------------------------------------------------------------------
    def __call__(self, inputs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The outputs of ``inputs``, in order (errors name the input by its position, from 1)."""
        return list(self.predict_iter(inputs))

    def predict_iter(self, inputs: Iterable[Mapping[str, Any]], *, source: str = "input", progress: bool = False,
                     total: int | None = None) -> Iterator[dict[str, Any]]:
        """Stream the outputs of ``inputs`` in order, a chunk at a time.

        ``source`` names the inputs in errors (``"input record 3"``); ``progress`` shows a progress
        bar on stderr (``total`` inputs, when known).
        """
        numbered = ((f"{source} record {i}", record) for i, record in enumerate(inputs, start=1))
        return self.predict_numbered(numbered, progress=progress, total=total)

    def predict_json_lines(self, lines: Iterable[str], *, source: str = "<stdin>", progress: bool = False,
                           total: int | None = None) -> Iterator[dict[str, Any]]:
        """Stream the outputs of JSON lines (one object per line; blank lines are skipped).

        A line that is not a JSON object is a :class:`DataError` naming ``source`` and the line.
        """
        return self.predict_numbered(self._parse_lines(lines, source), progress=progress, total=total)

    def _parse_lines(self, lines: Iterable[str], source: str) -> Iterator[tuple[str, Any]]:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{source}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not JSON ({err.msg} at column {err.colno}). Fix: give one JSON object "
                                f"per line, e.g. {self.input_example}") from None
            yield where, record

    def predict_numbered(self, numbered: Iterable[tuple[str, Any]], *, progress: bool = False,
                         total: int | None = None) -> Iterator[dict[str, Any]]:
        """Stream the outputs of ``(where, record)`` pairs; ``where`` names the record in errors."""
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, unit=" inputs", desc="predicting", dynamic_ncols=True)
        try:
            iterator = iter(numbered)
            while chunk := list(itertools.islice(iterator, self.chunk_size)):
                items = [self.prepare(self._checked_object(record, where), where) for where, record in chunk]
                outputs = self.predict_prepared(items)
                for (_, record), output in zip(chunk, outputs, strict=True):
                    yield {"id": record["id"], **output} if "id" in record else output
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()

    def _checked_object(self, record: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(record, Mapping):
            raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}. "
                            f"Fix: give one object per input, e.g. {self.input_example}")
        return record

    # What a task implements ----------------------------------------------------------------------
    def prepare(self, record: Mapping[str, Any], where: str) -> Any:
        """The checked input of one record (a :class:`DataError` naming ``where``, the field and the fix)."""
        raise NotImplementedError

    def predict_prepared(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        """One output dict per prepared input, in order (without the ``id``)."""
        raise NotImplementedError

    # Shared by the tasks -------------------------------------------------------------------------
    def run_sorted(self, features: Sequence[Mapping[str, Any]], collate: Callable[[list], dict[str, torch.Tensor]],
                   inputs: Sequence[str]) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor], Any]]:
        """Run ``features`` (windows: dicts of arrays with ``input_ids``) longest first, ``batch_size`` at a time.

        Yields ``(indices into features, the collated batch, the runner's output)`` per batch; the
        runner sees the batch keys in ``inputs`` that the batch has.
        """
        order = LengthSortedSampler([len(f["input_ids"]) for f in features]).order
        for lo in range(0, len(order), self.batch_size):
            index = np.asarray(order[lo: lo + self.batch_size], dtype=np.int64)
            batch = collate([features[i] for i in index])
            yield index, batch, self.runner({k: batch[k] for k in inputs if k in batch})
