"""``sesame-export``: a trained sesame model as a folder other tools run without sesame's training code.

- ``hf`` (``tasks/export/hf.py``): a ``save_pretrained`` folder of transformers' own
  ``AutoModelForSequenceClassification`` / ``...ForQuestionAnswering`` / ``...ForTokenClassification``,
  written only where sesame's network is exactly that model (the last layer's features, a head
  transformers has); otherwise a :class:`~sesame.tasks.core.errors.ConfigError` says which setting does not
  map and why.
- ``onnx`` (``tasks/export/onnx.py``): the whole module (encoder, fusion, pooling, head, QA masking)
  as ``model.onnx`` with dynamic batch and length axes, checked with onnxruntime against PyTorch,
  optionally with a dynamically quantised ``model.int8.onnx``; ``tasks/inference/onnx_runner.py`` runs
  it for ``sesame-predict``.

Both write a model card (``README.md``, ``tasks/export/model_card.py``) and the tokenizer, into a
hidden temporary folder next to the output that is renamed into place only when everything is
written and checked: a crash never leaves a complete-looking half export.

What the task adds (transformers' model class, the head's weights, probe inputs in the task's own
tokenisation, which positions of an output carry a value, extra files, the model card's facts) the
task's ``TaskExport`` says (``tasks/base/export.py``; ``task.export`` of ``conf/task/<task>.yaml``):
nothing here names a task. This file holds what both formats share: the task export of a trained
model, the run folder of a checkpoint and the staging folder.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sesame.tasks.base.run_settings import task_class
from sesame.tasks.core.atomic_files import file_in_the_way
from sesame.tasks.core.atomic_files import staged_folder as core_staged_folder
from sesame.tasks.core.errors import UserError, WriteError

if TYPE_CHECKING:
    from sesame.tasks.base.export import TaskExport
    from sesame.tasks.saved.checkpoints import TrainedModel

#: What a refused export write leaves behind (``staged_folder`` removes its partial folder).
NOTHING_WRITTEN = "Nothing was written (the partial export was removed). "
#: ``--format`` values.
FORMATS = ("hf", "onnx")


def run_folder_of(checkpoint: str | Path) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/x.ckpt``), if it looks like one."""
    folder = Path(checkpoint).resolve().parent.parent
    return folder if (folder / "config.yaml").is_file() or (folder / "metrics.json").is_file() else None


def check_output_folder(output: str | Path) -> Path:
    """``output`` must not exist, or be an empty folder (nothing is ever overwritten), and its parents
    must be folders."""
    output = Path(output).expanduser()
    blocker = file_in_the_way(output)
    if blocker is not None:
        raise WriteError(f"cannot write {output}: {blocker} is a file, not a folder. {NOTHING_WRITTEN}"
                         "Fix: name an output folder whose parents are folders")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        what = "a file" if not output.is_dir() else "a folder that is not empty"
        raise UserError(f"the output {str(output)!r} is {what}; sesame-export writes only a new or empty folder. "
                        "Fix: name a new folder, or remove that one")
    return output


def staged_folder(output: str | Path) -> contextlib.AbstractContextManager[Path]:
    """``with staged_folder(out) as tmp: <write into tmp>``: the export folder ``out`` appears, whole,
    only when the block succeeds (``tasks/core/atomic_files.py``'s ``staged_folder``)."""
    return core_staged_folder(Path(output).expanduser(), check_output_folder, NOTHING_WRITTEN)


def task_export(trained: TrainedModel) -> TaskExport:
    """The trained model's task export (``task.export`` of its config: ``tasks/base/export.py``), with its module."""
    return task_class(trained.settings.task, "export")(trained.settings, trained.module)


def as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)
