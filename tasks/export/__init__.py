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

This file holds what both formats share: which task family a module is, the run folder of a
checkpoint, the staging folder, and the small probe batches the exports are checked on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from sesame.tasks.core.atomic_files import current_umask, file_in_the_way, write_errors_explained
from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.core.errors import ConfigError, UserError, WriteError

#: What a refused export write leaves behind (``staged_folder`` removes its partial folder).
NOTHING_WRITTEN = "Nothing was written (the partial export was removed). "
#: ``--format`` values.
FORMATS = ("hf", "onnx")

#: Task family of each ``task.name``.
FAMILIES = {
    "glue": "sequence_classification",
    "text_classification": "sequence_classification",
    "squad_v1": "question_answering",
    "squad_v2": "question_answering",
    "ner": "token_classification",
}


def task_family(cfg: Mapping[str, Any]) -> str:
    """``sequence_classification``, ``question_answering`` or ``token_classification`` for a trained config."""
    name = cfg["task"]["name"]
    if name not in FAMILIES:
        raise ConfigError(f"task.name={name!r}: sesame-export knows the tasks {', '.join(FAMILIES)}")
    return FAMILIES[name]


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


@contextlib.contextmanager
def staged_folder(output: str | Path) -> Iterator[Path]:
    """``with staged_folder(out) as tmp: <write into tmp>``: ``out`` appears, whole, only when the block
    succeeds (``tmp`` is a hidden folder next to it, renamed into place; removed on any error)."""
    output = check_output_folder(output)
    with write_errors_explained(output, NOTHING_WRITTEN):  # a full disk, a read-only folder: one clear line
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.", suffix=".partial"))
        try:
            tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes it private; the export is an ordinary folder
            yield tmp
            check_output_folder(output)  # someone may have written it meanwhile
            if output.is_dir():
                output.rmdir()  # empty: rename cannot replace it on every platform
            os.replace(tmp, output)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def decision_thresholds(module: Any) -> dict[str, float] | None:
    """Multi-label classification: ``{label: threshold}`` on each label's sigmoid probability, as tuned
    on the dev set in training (a label applies where ``probability >= threshold``); else None."""
    thresholds = getattr(module, "thresholds", None) if getattr(module, "multi_label", False) else None
    if thresholds is None:
        return None
    return {str(n): float(t) for n, t in zip(module.label_names, thresholds.detach().cpu().tolist())}


# Probe batches: small inputs the exports are checked on ---------------------------------------------
_SENTENCES = [
    ("a gripping , beautifully shot film", "the film is gripping"),
    ("not good at all , sadly", "it was bad"),
    ("the cast is great but the plot is thin and the ending drags on for far too long", "the plot is thin"),
    ("fine", "ok"),
]
_QA = [
    ("who won the prize ?", "marie curie won the nobel prize in physics in 1903 and in chemistry in 1911 ."),
    ("where was the game played ?", "the game was played on february 7 , 2016 , at levi ' s stadium in santa clara , california ."),
    ("when ?", "in 1911 ."),
    ("which team won super bowl 50 and by how many points did it win over the panthers ?",
     "the denver broncos defeated the carolina panthers 24 - 10 to earn their third super bowl title ."),
]
_WORDS = [
    ["marie", "curie", "lived", "in", "paris", "."],
    ["@user", "going", "to", "new", "york", "city", "tomorrow", "with", "john", "smith", "!"],
    ["hi"],
    ["the", "denver", "broncos", "won", "super", "bowl", "50", "in", "santa", "clara"],
]


def probe_batch(family: str, tokenizer: PreTrainedTokenizerBase, rows: Sequence[int], max_length: int,
                pairs: bool = False) -> dict[str, torch.Tensor]:
    """A padded batch of the built-in probe inputs ``rows`` (indices 0-3) for a task family.

    ``pairs``: sentence-pair classification (segment B present). QA batches carry ``context_mask``
    (the context's tokens), NER batches are word lists tokenised as sesame's windows are.
    """
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    encoded: list[dict[str, Any]] = []
    for i in rows:
        if family == "question_answering":
            question, context = _QA[i]
            enc = tokenizer(question, context, truncation="only_second", max_length=max_length)
            row = dict(enc)
            row["context_mask"] = [s == 1 for s in enc.sequence_ids()]
        elif family == "token_classification":
            row = dict(tokenizer(_WORDS[i], is_split_into_words=True, truncation=True, max_length=max_length))
        else:
            a, b = _SENTENCES[i]
            row = dict(tokenizer(a, b if pairs else None, truncation=True, max_length=max_length))
        encoded.append(row)
    return PaddingCollator({"input_ids": pad_id, "context_mask": False})(encoded)


def is_pair_task(module: Any) -> bool:
    """A sentence-pair classification task (its spec has a second text column)."""
    spec = getattr(module, "spec", None)
    return getattr(spec, "text_b", None) is not None


def as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)
