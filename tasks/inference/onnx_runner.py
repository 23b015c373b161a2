"""Run a ``sesame-export --format onnx`` folder with onnxruntime, as ``sesame-predict`` runs a trained model.

:class:`OnnxRunner` is ``tasks/inference/predictor.py``'s ``ModelRunner`` on onnxruntime::

    runner = OnnxRunner.from_folder("exports/sst2-onnx", {"head.n_best_size": 5}, int8=False, threads=4)
    runner.cfg                          # the trained config (sesame_config.yaml), overrides applied
    runner.settings.data.max_seq_length # its typed view (RunSettings): read settings there
    tokenizer = runner.tokenizer()      # the tokenizer saved in the folder
    logits = runner(batch)              # what the sesame module's forward(batch) returns, float32 CPU
    state = runner.head_state()   # what decoding reads beside the logits: NER's CRF scores, multi-label thresholds

Overrides apply as on a trained run (``tasks/saved/trained_overrides.py``): ``head.*`` (decoding) and
``data.*`` (how inputs are windowed) settings; of ``encoder.*`` only ``encoder.tokenizer``, since the
graph holds the encoder's weights. What is the task's (how the graph's outputs make the module's,
the files the export wrote next to the graph: a CRF's scores, decision thresholds) the task's
``TaskExport`` does (``tasks/base/export.py``; ``task.export`` of the config), built from the settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerFast

from sesame.tasks.base.export import TaskExport
from sesame.tasks.base.run_settings import RunSettings, task_class
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.inference.onnx_session import (CONFIG_FILE, INT8_FILE, MODEL_FILE, new_session, run_session,
                                                 run_session_by_row)
from sesame.tasks.saved.config_upgrade import with_added_settings
from sesame.tasks.saved.trained_overrides import apply_overrides


class OnnxRunner:
    """A sesame ONNX export run by onnxruntime, with the sesame module's interface (see the module doc).

    Args:
        folder: the export folder.
        cfg: the trained config with overrides applied (``settings`` is its typed view).
        session: the onnxruntime session of ``model.onnx`` or ``model.int8.onnx``.
        tokenizer_source: where :meth:`tokenizer` loads from (the folder, or ``encoder.tokenizer``).
        by_row: run each example alone at its own length (``run_session_by_row``): the int8 graph's
            activation scales are per call, so only then is an example's output independent of its batch.
    """

    def __init__(self, folder: Path, cfg: dict[str, Any], session: Any, tokenizer_source: str | None = None,
                 by_row: bool = False) -> None:
        self.folder = Path(folder)
        self.cfg = cfg
        self.settings = RunSettings.of_trained(cfg)
        #: The task's side of the export (``tasks/base/export.py``), from the settings alone.
        self.task_export: TaskExport = task_class(self.settings.task, "export")(self.settings)
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        self.tokenizer_source = tokenizer_source or str(self.folder)
        self._tokenizer: PreTrainedTokenizerFast | None = None
        self.by_row = by_row

    @classmethod
    def from_folder(cls, folder: str | Path, overrides: Mapping[str, Any] | None = None, *, int8: bool = False,
                    threads: int | None = None, providers: Sequence[str] | None = None) -> OnnxRunner:
        """The runner of an export folder.

        Args:
            folder: a ``sesame-export --format onnx`` folder.
            overrides: dotted settings over the trained config (``{"head.max_answer_length": 50}``).
            int8: run ``model.int8.onnx`` (exported with ``--int8``) instead of ``model.onnx``, one example at
                a time (its predictions then do not depend on the batch).
            threads: onnxruntime's intra-op threads (None: its default, one per core).
            providers: onnxruntime execution providers (default CPU).
        """
        folder = Path(folder).expanduser()
        model = folder / (INT8_FILE if int8 else MODEL_FILE)
        if not model.is_file():
            hint = " (export with --int8 to have one)" if int8 else ""
            raise MissingFileError(f"{folder}: no {model.name}{hint}; is it a sesame-export --format onnx folder?")
        if not (folder / CONFIG_FILE).is_file():
            raise MissingFileError(f"{folder}: no {CONFIG_FILE} (the trained config every sesame ONNX export holds)")
        # An export written before a setting existed gets it as a run folder's checkpoint does (config_upgrade).
        cfg = with_added_settings(OmegaConf.to_container(OmegaConf.load(folder / CONFIG_FILE), resolve=True))
        overrides = dict(overrides or {})
        fixed = [k for k in overrides if k.startswith("encoder.") and k != "encoder.tokenizer"]
        if fixed:
            raise ConfigError(f"{', '.join(fixed)}: an ONNX export holds its encoder's weights, so only encoder.tokenizer "
                              f"can change ({folder})")
        if overrides:
            cfg = apply_overrides(cfg, overrides, folder)
        tokenizer_source = overrides.get("encoder.tokenizer") or None
        try:
            import onnxruntime  # noqa: F401
        except ImportError as err:
            raise ConfigError("running an ONNX export needs onnxruntime: pip install 'sesame[export]'") from err
        return cls(folder, cfg, new_session(model, threads=threads, providers=providers), tokenizer_source, by_row=int8)

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The tokenizer saved with the export (or ``encoder.tokenizer`` when overridden)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_source)
        return self._tokenizer

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The module's ``forward(batch)``: logits [B, C] / [B, T, C], or QA ``(start, end)`` [B, T] each,
        masked outside the context as ``SpanPointerHead`` masks them. Other batch keys are ignored. The int8
        graph runs example by example (``by_row``): an example's outputs do not depend on its batch."""
        if self.by_row:
            return self.task_export.forward_output(run_session_by_row(self.session, batch, self.task_export.output_axes()))
        return self.task_export.forward_output(run_session(self.session, batch))

    def head_state(self) -> dict[str, torch.Tensor]:
        """The trained head's decoding values the export wrote beside its graph (``thresholds.json``,
        ``crf.safetensors``: ``TaskExport.decoding_state``), as the run's ``decoding_state`` gives them."""
        return self.task_export.decoding_state(self.folder)
