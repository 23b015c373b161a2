"""``TaskExport``: what a task tells ``sesame-export``, the ONNX runner and the model card about itself.

The generic code (``tasks/export/hf.py``, ``tasks/export/onnx.py``, ``tasks/export/model_card.py``,
``tasks/inference/onnx_runner.py``) never names a task: it gets the task's subclass with
``task_class(settings.task, "export")`` (``conf/task/<task>.yaml``'s ``task.export``) and asks it.
An instance is built from the trained model's typed settings and, for the export and the model card,
its module::

    export = task_class(trained.settings.task, "export")(trained.settings, trained.module)
    batch = export.probe_batch(tokenizer, (0, 1))     # probe inputs, the task's own tokenisation
    keep = export.compared_positions(output, batch)   # where an output carries a value

The ONNX runner builds it from the export folder's settings alone (no module): it then reads the
task's extra files back (:meth:`TaskExport.decoding_state`).

Shapes: B batch rows, T tokens (padded), C labels / tags. Outputs are the module's ``forward(batch)``
as a tuple (:attr:`TaskExport.output_names`, in that order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS


class OnnxGraph(nn.Module):
    """The task module with the graph's named tensor inputs instead of a batch dict: the encoder's
    inputs ``input_ids``, ``attention_mask`` [B, T] int64 and ``token_type_ids`` (where the encoder
    reads them). A task whose module reads more (QA's ``context_mask``) subclasses it with those as
    further keyword inputs (:meth:`TaskExport.onnx_graph`)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        return self.module(self.batch(input_ids, attention_mask, token_type_ids))

    @staticmethod
    def batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              **more: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The module's batch dict of the graph's inputs (those that are None left out)."""
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        for name, value in (("token_type_ids", token_type_ids), *more.items()):
            if value is not None:
                batch[name] = value
        return batch


class TaskExport:
    """A task's side of ``sesame-export``, the ONNX runner and the model card (see the module doc).

    Args:
        settings: the trained model's typed settings (``TrainedModel.settings``, ``OnnxRunner.settings``).
        module: the trained task module (eval mode); None where only the settings are known (the
            ONNX runner), for which the methods that need it raise.
    """

    # What the task is ----------------------------------------------------------------------------
    #: transformers' auto class of the task's model (``AutoModelForSequenceClassification``).
    auto_class: ClassVar[str] = ""
    #: Hugging Face ``pipeline_tag`` of the model card (``text-classification``).
    pipeline_tag: ClassVar[str] = ""
    #: The kind of task, in the card's task line (``sequence classification``).
    task_kind: ClassVar[str] = ""
    #: The layer of transformers' task model that the head fills besides the encoder (``qa_outputs``);
    #: any other layer of that model outside the encoder is one sesame never trained. None: the task
    #: checks its model's structure itself (:meth:`refusal_reasons`).
    hf_output_layer: ClassVar[str | None] = None

    # The ONNX graph ------------------------------------------------------------------------------
    #: Graph inputs beyond the encoder's (QA: ``("context_mask",)``, [B, T] bool).
    extra_inputs: ClassVar[tuple[str, ...]] = ()
    #: The graph's outputs, in the order of the module's forward (``("start_logits", "end_logits")``);
    #: also the attribute names of transformers' model output.
    output_names: ClassVar[tuple[str, ...]] = ("logits",)
    #: Whether the outputs have a length axis (per token: [B, T, ...]) or not ([B, C]).
    per_token_outputs: ClassVar[bool] = False
    #: The dynamic axes of every graph input, by name, in order: [B, T] by default; a task whose
    #: examples are groups of sequences (multiple choice) has ``("batch", "choices", "length")``.
    input_axes: ClassVar[tuple[str, ...]] = ("batch", "length")

    def output_axes(self) -> tuple[str, ...]:
        """The leading dynamic axes of every graph output: ``("batch", "length")`` for per-token
        outputs, else ``("batch",)``; a task with other axes (choices) overrides it."""
        return ("batch", "length") if self.per_token_outputs else ("batch",)

    # The model card ------------------------------------------------------------------------------
    #: The input every usage snippet runs on: ``sesame-predict``'s JSON fields.
    example: ClassVar[Mapping[str, str]] = {}

    def __init__(self, settings: RunSettings, module: nn.Module | None = None) -> None:
        self.settings = settings
        self.module = module

    @property
    def trained_module(self) -> Any:
        """The trained module (an error where the instance was built without one)."""
        if self.module is None:
            raise RuntimeError(f"{type(self).__name__} was built without the trained module, which this needs")
        return self.module

    @property
    def max_length(self) -> int:
        """``data.max_seq_length``: tokens per example or window."""
        return int(self.settings.data.max_seq_length)

    # Probe inputs and comparisons ----------------------------------------------------------------
    def probe_batch(self, tokenizer: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """A padded batch of the task's built-in probe inputs ``rows`` (indices 0-3; repeats allowed),
        tokenised by the task's own code as training and ``sesame-predict`` tokenise: the graph's
        inputs ``input_ids``, ``attention_mask`` [B, T] int64, ``token_type_ids`` where the tokenizer
        makes them, and :attr:`extra_inputs`; one row per probe (its first window)."""
        raise NotImplementedError

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The keys of ``batch`` the graph reads (the encoder's inputs and :attr:`extra_inputs`)."""
        return {k: batch[k] for k in (*ENCODER_INPUT_KEYS, *self.extra_inputs) if k in batch}

    def compared_positions(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Where ``output`` (one of the module's outputs, e.g. [B, C]) carries a value, as a bool
        tensor of its shape: where an export must give the module's numbers. Default: everywhere."""
        return torch.ones_like(output, dtype=torch.bool)

    def predictions(self, outputs: tuple[torch.Tensor, ...], batch: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """What a prediction is made of, one entry per row (int8 agreement: rows whose entries all
        match agree); None where the outputs are scores, not decisions (regression). Default: the
        argmax [B] of the first output."""
        return outputs[0].argmax(-1)

    # transformers' task model (--format hf) ------------------------------------------------------
    def refusal_reasons(self, hf: Any | None) -> list[str]:
        """Why the task's head does not map onto transformers' model ``hf`` (random weights; None
        where transformers has none for the encoder), one sentence each naming the setting; empty
        where it maps. The encoder-level reasons (fusion, quantised weights) are the generic code's."""
        return []

    def hf_config(self, config: Any) -> None:
        """Set the task's part of transformers' config (a copy of the encoder's), in place: labels
        (``id2label`` / ``label2id``), ``problem_type``. Default: nothing."""

    def fill_head(self, hf: Any) -> set[str]:
        """Copy the trained head (and any layer of it transformers puts in its base model) into
        ``hf``, whose encoder is already filled; fold in what the module applies after the head
        (a calibration temperature). Returns the base model's weight names it filled (e.g. the
        pooler's), which the encoder's weights did not."""
        raise NotImplementedError

    def hf_outputs(self, out: Any) -> tuple[torch.Tensor, ...]:
        """transformers' model output as the module's outputs: its :attr:`output_names` fields."""
        return tuple(getattr(out, name) for name in self.output_names)

    def report_labels(self, hf: Any) -> list[str] | None:
        """The label names the export report lists (``hf.config.id2label`` in order); None for a
        task without labels."""
        return [hf.config.id2label[i] for i in range(hf.config.num_labels)]

    def report_entries(self) -> dict[str, Any]:
        """Entries the task adds to the export report (and the card's export table), e.g. the
        multi-label decision thresholds. Default: none."""
        return {}

    # The ONNX graph and its runner ---------------------------------------------------------------
    def onnx_graph(self) -> nn.Module:
        """The trained module as a graph of named tensor inputs (:class:`OnnxGraph`)."""
        return OnnxGraph(self.trained_module)

    def forward_output(self, outputs: tuple[torch.Tensor, ...]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The graph's outputs (in :attr:`output_names` order) as the module's ``forward`` returns
        them: the one tensor, or the tuple."""
        return outputs[0] if len(self.output_names) == 1 else tuple(outputs)

    def write_files(self, folder: Path) -> list[str]:
        """Write the task's extra files into an ONNX export folder (what the graph does not hold:
        a CRF's transition scores, decision thresholds); their names, in order. Default: none."""
        return []

    def decoding_state(self, folder: Path) -> dict[str, torch.Tensor]:
        """What an export folder holds beside its graph that decoding reads (:meth:`write_files`' values:
        decision thresholds, a CRF's scores), as the trained network's ``decoding_state`` gives them.
        Default: nothing."""
        return {}

    # The model card ------------------------------------------------------------------------------
    def title(self) -> str:
        """The task as the card names it (``glue (sst2)``)."""
        return self.settings.task.name

    def label_row(self) -> tuple[str, Any]:
        """The card's row of what the model predicts: ``(name, labels or a sentence)``."""
        raise NotImplementedError

    def model_rows(self) -> list[tuple[str, Any]]:
        """The card's rows of the task's network settings after the fusion row (pooling). Default: none."""
        return []

    def data_rows(self) -> list[tuple[str, Any]]:
        """The card's rows of the task's data settings after the maximum sequence length (doc stride)."""
        return []

    def applied_temperature(self) -> float | None:
        """The calibration temperature the module divides its logits by, where it is not 1; else None."""
        return None

    def example_input(self) -> dict[str, str]:
        """The usage snippets' input: ``sesame-predict``'s JSON fields for this model."""
        return dict(self.example)

    def hf_load(self, folder: str) -> str:
        """Python lines that load the transformers export ``folder`` as ``model`` and ``tokenizer``."""
        return (f"model = {self.auto_class}.from_pretrained(\"{folder}\").eval()\n"
                f"tokenizer = AutoTokenizer.from_pretrained(\"{folder}\")\n")

    def pipeline_call(self, example: Mapping[str, str]) -> str:
        """The Python line that runs the pipeline ``run`` on ``example`` and prints its output."""
        return f"print(run({example['text']!r}))"

    def hf_usage(self, folder: str, example: Mapping[str, str]) -> str:
        """A Python snippet (markdown) that loads the transformers export ``folder`` and runs it on
        ``example`` and prints the result. Default: transformers' pipeline of :attr:`pipeline_tag`."""
        return (f"```python\nfrom transformers import {self.auto_class}, AutoTokenizer, pipeline\n\n" + self.hf_load(folder) +
                f"run = pipeline(\"{self.pipeline_tag}\", model=model, tokenizer=tokenizer)\n"
                f"{self.pipeline_call(example)}\n```")

    def count_examples(self, path: Path) -> int:
        """Examples in the training file ``path`` (which exists), read as training reads it; a
        :class:`~sesame.tasks.core.errors.UserError`, ``OSError``, ``KeyError`` or ``ValueError``
        where it cannot be read."""
        raise NotImplementedError
