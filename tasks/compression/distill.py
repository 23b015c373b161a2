"""Knowledge distillation as a training option: ``sesame-train ... distill.teacher=<run folder or .ckpt>``.

The student (any module of the same task, e.g. on a ``drop-layers`` encoder) trains on
``alpha * gold_loss + (1 - alpha) * T**2 * KL(teacher || student)`` of temperature-``T`` softmaxes
(``heads/distillation.py`` ``DistillationLoss``): class logits for GLUE, tag logits per word
for NER, start and end logits for QA. The teacher is loaded before fitting starts (never when a
distilled student is evaluated), frozen and kept in eval mode, and is not a submodule of the
student: it is neither trained, nor saved in the student's checkpoints, nor in its optimiser.
The runner (``tasks/runs/runner.py``) builds the :class:`Distiller` and hands it to the student module
(``module.distiller``), as it does the feature cache.

With ``distill.cache=true`` the teacher's outputs are kept per example, keyed by the example's
tokens (as the frozen-feature cache is), and saved after every epoch in one file per teacher
checkpoint under ``distill.cache_dir``: later epochs and later runs with the same teacher (e.g. a
sweep over alpha and temperature) do not run the teacher again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import Tensor

from sesame.heads.distillation import DistillationLoss
from sesame.tasks.core.atomic_files import atomic_open
from sesame.heads.masking import masked_value
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.base.distill_settings import DistillSettings
from sesame.tasks.inputs.feature_cache import default_cache_dir as feature_cache_dir
from sesame.tasks.inputs.feature_cache import example_keys
from sesame.tasks.base.task_module import EncoderTaskModule

log = logging.getLogger(__name__)
CACHE_FORMAT = 2  # 2: logits from before the encoder passed token_type_ids to BERT (transformers 5) are stale


def default_cache_dir() -> Path:
    """``$SESAME_CACHE_DIR/teacher_logits`` (else ``~/.cache/sesame/teacher_logits``)."""
    return feature_cache_dir().parent / "teacher_logits"


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class TeacherLogitCache:
    """The teacher's outputs per example, keyed by the example's tokens, in one ``.npz`` file.

    Each example keeps its row of every output as the teacher gave it ([C] for class logits,
    [T', ...] for per-token ones, T' the padded length of the batch it came in). ``lookup`` fits
    per-token rows to the current batch's length: positions past an example's own tokens are padding
    either way, and are filled with the heads' masked-out value so no loss reads them.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.rows: dict[bytes, tuple[np.ndarray, ...]] = {}
        self.hits = self.misses = 0
        self._dirty = False
        if self.path.is_file():
            self.rows.update(self._read())

    def __len__(self) -> int:
        return len(self.rows)

    def lookup(self, batch: Mapping[str, Tensor], like: Sequence[Tensor]) -> tuple[Tensor, ...] | None:
        """Cached teacher outputs shaped like the student's ``like`` (each [B, ...]); None on any miss."""
        rows = [self.rows.get(k) for k in example_keys(batch)]
        if any(r is None or len(r) != len(like) for r in rows):
            self.misses += 1
            return None
        fill = masked_value(torch.float32)  # what heads put at masked-out positions
        outputs = []
        for i, ref in enumerate(like):
            target = tuple(ref.shape[1:])
            out = np.full((len(rows), *target), fill, dtype=np.float32)
            for b, row in enumerate(rows):
                value = row[i]
                if value.shape == target:
                    out[b] = value
                elif value.ndim == len(target) and value.ndim >= 1 and value.shape[1:] == target[1:]:
                    n = min(value.shape[0], target[0])  # a per-token row padded to another batch length
                    out[b, :n] = value[:n]
                else:
                    self.misses += 1
                    return None
            outputs.append(torch.from_numpy(out).to(ref.device))
        self.hits += 1
        return tuple(outputs)

    def add(self, batch: Mapping[str, Tensor], outputs: Sequence[Tensor]) -> None:
        """Remember each example's rows of ``outputs`` (each [B, ...])."""
        arrays = [o.detach().float().cpu().numpy() for o in outputs]
        for b, key in enumerate(example_keys(batch)):
            self.rows[key] = tuple(a[b].copy() for a in arrays)
        self._dirty = True

    def save(self) -> None:
        """Write the file (atomically) if anything was added; rows another run saved meanwhile are kept."""
        if not self._dirty or not self.rows:
            return
        if self.path.is_file():
            self.rows = {**self._read(), **self.rows}
        num_outputs = len(next(iter(self.rows.values())))
        keys = list(self.rows)
        arrays: dict[str, np.ndarray] = {"format": np.array(CACHE_FORMAT), "keys": _key_matrix(keys)}
        for i in range(num_outputs):
            values = [self.rows[k][i] for k in keys]
            arrays[f"values_{i}"] = np.concatenate([v.reshape(-1) for v in values]).astype(np.float32)
            arrays[f"offsets_{i}"] = np.concatenate([[0], np.cumsum([v.size for v in values])]).astype(np.int64)
            arrays[f"shapes_{i}"] = np.array([v.shape for v in values], dtype=np.int64).reshape(len(keys), -1)
        with atomic_open(self.path, "wb") as handle:  # a file object: numpy adds no ".npz" to the name
            np.savez(handle, **arrays)
        self._dirty = False
        log.info("teacher-logit cache: %d examples in %s", len(keys), self.path)

    def _read(self) -> dict[bytes, tuple[np.ndarray, ...]]:
        try:
            data = np.load(self.path)
            if int(data["format"]) != CACHE_FORMAT:
                return {}
            keys = [row.tobytes() for row in data["keys"]]
            columns = []
            i = 0
            while f"values_{i}" in data:
                values, offsets, shapes = data[f"values_{i}"], data[f"offsets_{i}"], data[f"shapes_{i}"]
                columns.append([values[offsets[j] : offsets[j + 1]].reshape(shapes[j]) for j in range(len(keys))])
                i += 1
        except (OSError, ValueError, KeyError) as err:  # a damaged file is only a cold cache
            log.warning("teacher-logit cache %s unreadable (%s); starting empty", self.path, err)
            return {}
        return {k: tuple(col[j] for col in columns) for j, k in enumerate(keys)}


def _key_matrix(keys: list[bytes]) -> np.ndarray:
    """Keys as a [N, 16] uint8 array: numpy's fixed-width bytes dtype ("S16") drops trailing zero bytes."""
    return np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), -1)


def check_compatible(teacher: EncoderTaskModule, student: EncoderTaskModule) -> None:
    """The teacher must read the student's batches and score the same classes in the same order."""
    if teacher.task.module != student.task.module:
        raise ConfigError(f"distill.teacher is a {teacher.task.module} model; the student is a {student.task.module}")
    t_vocab, s_vocab = teacher.encoder.config.vocab_size, student.encoder.config.vocab_size
    if t_vocab != s_vocab:
        raise ConfigError(f"teacher vocabulary {t_vocab} != student vocabulary {s_vocab}: the teacher reads the "
                         "student's token ids, so both need the same tokenizer")
    t_outputs, s_outputs = teacher.output_contract(), student.output_contract()
    for name in sorted(t_outputs.keys() & s_outputs.keys()):
        if t_outputs[name] != s_outputs[name]:
            raise ConfigError(f"teacher and student differ in {name}: {t_outputs[name]} vs {s_outputs[name]}")


class Distiller:
    """The frozen teacher, the loss and the optional logit cache of one distillation run.

    ``distiller(gold_loss, student_logits, batch, mask) -> (loss, kl)``, with ``student_logits`` the
    student's forward output (a tensor [..., C] or a tuple, as the teacher's forward returns) and
    ``mask`` [...] the rows that count (see :class:`DistillationLoss`).
    """

    def __init__(self, settings: DistillSettings, student: EncoderTaskModule) -> None:
        if not settings.teacher:
            raise ConfigError("distillation needs distill.teacher (a run folder or .ckpt)")
        self.settings = settings
        trained = load_trained(settings.teacher, key="distill.teacher")  # built without its own teacher
        ckpt_path, self.teacher = trained.checkpoint, trained.module
        self.teacher.requires_grad_(False)
        self.teacher.eval()
        check_compatible(self.teacher, student)
        self.loss = DistillationLoss(settings.alpha, settings.temperature)
        self.cache: TeacherLogitCache | None = None
        if settings.cache:
            folder = Path(settings.cache_dir).expanduser() if settings.cache_dir else default_cache_dir()
            self.cache = TeacherLogitCache(folder / f"{file_digest(ckpt_path)[:32]}.npz")
        log.info("distilling from %s (alpha=%s, temperature=%s%s)", ckpt_path, settings.alpha, settings.temperature,
                 f", logit cache {self.cache.path}" if self.cache else "")

    def teacher_logits(self, batch: Mapping[str, Tensor], like: Sequence[Tensor]) -> tuple[Tensor, ...]:
        """The teacher's outputs for ``batch`` (from the cache when it has every example)."""
        if self.cache is not None:
            cached = self.cache.lookup(batch, like)
            if cached is not None:
                return cached
        device = like[0].device
        if next(self.teacher.parameters(), torch.empty(0)).device != device:
            self.teacher.to(device)  # not a submodule, so Lightning does not move it
        with torch.no_grad():
            outputs = self.teacher(batch)
        outputs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
        if self.cache is not None:
            self.cache.add(batch, outputs)
        return outputs

    def __call__(
        self, gold_loss: Tensor, student_logits: Tensor | Sequence[Tensor], batch: Mapping[str, Tensor],
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        students = (student_logits,) if isinstance(student_logits, Tensor) else tuple(student_logits)
        return self.loss(gold_loss, students, self.teacher_logits(batch, students), mask)


class DistillationCallback(L.Callback):
    """Saves the teacher-logit cache after every training epoch."""

    def __init__(self, distiller: Distiller) -> None:
        self.distiller = distiller

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        distiller = self.distiller
        if distiller.cache is not None and trainer.is_global_zero:
            distiller.cache.save()
            log.info("teacher-logit cache: %d hits, %d misses this run", distiller.cache.hits, distiller.cache.misses)
