"""What every task's predictor builds on (``tasks/<task>/predict.py``): :class:`TaskPredictor`, the
:class:`ModelRunner` it predicts with, and the rules every task's input follows (:func:`string_field`,
:func:`finite`).

A predictor turns raw inputs (mappings: one JSON object per line on the command line) into plain
dicts that ``json.dumps`` writes; an input's optional ``"id"`` comes back first in its output. The
task-independent entry points (``Predictor.from_run``, ``runner_for``, the torch and ONNX runners) are
``tasks/inference/``; which predictor a model gets is its config's ``task.predictor``
(``conf/task/*.yaml``).

How inputs are run: they are read in chunks (``chunk_size`` inputs), every input of a chunk is
checked and tokenised (into several windows where it is longer than ``data.max_seq_length``), the
windows are sorted by length (longest first, ``tasks/inputs/batching.py``'s order, as evaluation sorts
them) and run ``batch_size`` at a time with per-batch padding, and the outputs come back in input
order. With the trained ``data.eval_batch_size`` and a chunk holding a whole dev set, the batches
are exactly those of ``sesame-eval``, so the predictions are too.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from sesame.tasks.inputs.data_files import reject_json_constant
from sesame.tasks.base.run_settings import RunSettings, task_class
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.inputs.batching import LengthSortedSampler, example_size

#: Inputs read, checked and tokenised together, per batch of the model (at least 256).
CHUNK_BATCHES = 16


@runtime_checkable
class ModelRunner(Protocol):
    """A trained model as the predictors use it, whatever runs it (PyTorch, ONNX Runtime).

    ``settings``: the trained config's typed view (``tasks/base/run_settings.py``, with any overrides
    applied): what predictors read (``settings.data.max_seq_length``, ``settings.head.n_best_size``, ...).
    ``cfg``: the same config as plain data.
    """

    cfg: dict[str, Any]
    settings: RunSettings

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The tokenizer the model was trained with."""
        ...

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The task module's ``forward(batch)`` output, float32 on the CPU.

        ``batch`` holds ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the tokenizer
        makes them) [B, T] int64 ([B, G, T] for a task whose examples are groups of sequences), and
        the task's own inputs (QA: ``context_mask`` [B, T] bool). The task's outputs: GLUE logits [B, C]
        ([B, 1] for regression); QA ``(start, end)`` logits, each [B, T]; NER logits [B, T, C].
        """
        ...

    def head_state(self) -> dict[str, torch.Tensor]:
        """What the trained head holds beyond the outputs that the task's decoding reads (a multi-label
        model's decision thresholds, a CRF's transition scores: the network's ``decoding_state``); empty
        where there is none."""
        ...


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


def predictor_class(settings: RunSettings) -> type[TaskPredictor]:
    """The predictor class the trained model's ``task.predictor`` names (a :class:`TaskPredictor` subclass)."""
    chosen = task_class(settings.task, "predictor")
    if not (isinstance(chosen, type) and issubclass(chosen, TaskPredictor)):
        raise ConfigError(f"task.predictor={settings.task.predictor!r} (task={settings.task.name}) is not a "
                          "TaskPredictor subclass (tasks/base/predictor.py). Fix: name the task's predictor, "
                          f"see conf/task/{settings.task.name}.yaml")
    return chosen


class TaskPredictor:
    """Predictions of one trained model on raw inputs: the base of each task's predictor.

    Call it on an iterable of mappings to get a list of output dicts, or use :meth:`predict_iter` to
    stream them. A task implements :meth:`prepare` and :meth:`predict_prepared`.

    Args:
        runner: the model (``tasks/inference/predictor.py``'s ``runner_for``); its ``task.predictor``
            must be this class (or a base of it): another task's model is refused.
        batch_size: windows run at once (default: the trained ``data.eval_batch_size``).
        chunk_size: inputs read and tokenised together, sorted by length within the chunk
            (default: ``max(256, 16 * batch_size)``). Only speed and memory depend on it.
    """

    #: What one input line looks like, for error messages.
    input_example: ClassVar[str] = ""

    def __init__(self, runner: ModelRunner, *, batch_size: int | None = None, chunk_size: int | None = None) -> None:
        settings = runner.settings
        chosen = predictor_class(settings)
        if not isinstance(self, chosen):
            raise ConfigError(f"{type(self).__name__} cannot predict for a {settings.task.name} model: its predictor "
                              f"is {chosen.__name__} (task.predictor). Fix: use Predictor.from_run, which picks the "
                              "task's predictor")
        self.runner = runner
        self.settings = settings
        self.task = settings.task.name
        self.batch_size = int(batch_size or settings.data.eval_batch_size)
        if self.batch_size < 1:
            raise ConfigError(f"batch size {self.batch_size}: must be at least 1")
        self.chunk_size = int(chunk_size or max(256, CHUNK_BATCHES * self.batch_size))
        if self.chunk_size < 1:
            raise ConfigError(f"chunk size {self.chunk_size}: must be at least 1")
        self.tokenizer = runner.tokenizer()
        self.max_seq_length = settings.data.max_seq_length

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
                record = json.loads(line, parse_constant=reject_json_constant)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not JSON ({err.msg} at column {err.colno}). Fix: give one JSON object "
                                f"per line, e.g. {self.input_example}") from None
            except ValueError as err:  # NaN / Infinity: Python reads them, JSON has none (and the output could not hold them)
                raise DataError(f"{where}: not JSON ({err}). Fix: give one JSON object per line, e.g. "
                                f"{self.input_example}") from None
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
        """Run ``features`` (windows: dicts of arrays with ``input_ids``, a sequence or a group of them)
        longest first (:func:`example_size`), ``batch_size`` at a time.

        Yields ``(indices into features, the collated batch, the runner's output)`` per batch; the
        runner sees the batch keys in ``inputs`` that the batch has.
        """
        order = LengthSortedSampler([example_size(f["input_ids"]) for f in features]).order
        for lo in range(0, len(order), self.batch_size):
            index = np.asarray(order[lo: lo + self.batch_size], dtype=np.int64)
            batch = collate([features[i] for i in index])
            yield index, batch, self.runner({k: batch[k] for k in inputs if k in batch})
