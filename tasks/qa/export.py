"""What ``sesame-export``, the ONNX runner and the model card know of extractive question answering
(``task=squad_v1`` / ``squad_v2``): :class:`QuestionAnsweringExport` (``tasks/base/export.py``).

The module's ``forward`` gives start and end logits [B, T] with every position outside the context
masked (``heads/masking.py``; SQuAD 2.0 keeps [CLS], the "no answer" pointer): the ONNX graph takes
the context mask as an input and masks the same way; transformers' ``...ForQuestionAnswering`` has
the same ``qa_outputs`` layer but masks nothing, so it is compared on the positions sesame keeps.
Probe inputs are windows of ``tasks/qa/windows.py`` (question first, the context truncated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from sesame.heads.masking import is_masked
from sesame.tasks.base.export import OnnxGraph, TaskExport
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.qa.windows import check_question_lengths, encode_windows, window_collator

#: Probe inputs: (question, context).
PROBES = (
    ("who won the prize ?", "marie curie won the nobel prize in physics in 1903 and in chemistry in 1911 ."),
    ("where was the game played ?", "the game was played on february 7 , 2016 , at levi ' s stadium in santa clara , california ."),
    ("when ?", "in 1911 ."),
    ("which team won super bowl 50 and by how many points did it win over the panthers ?",
     "the denver broncos defeated the carolina panthers 24 - 10 to earn their third super bowl title ."),
)


class QuestionAnsweringGraph(OnnxGraph):
    """The QA module with named tensor inputs: the encoder's and ``context_mask`` [B, T] bool."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                context_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module(self.batch(input_ids, attention_mask, token_type_ids, context_mask=context_mask))


class QuestionAnsweringExport(TaskExport):
    """Span pointing: ``(start_logits, end_logits)`` [B, T] each, of the module ``SquadModule``."""

    auto_class = "AutoModelForQuestionAnswering"
    pipeline_tag = "question-answering"
    task_kind = "question answering"
    hf_output_layer = "qa_outputs"
    extra_inputs = ("context_mask",)
    output_names = ("start_logits", "end_logits")
    per_token_outputs = True
    example = {"question": "Where did Marie Curie live?",
               "context": "Marie Curie lived in Paris and worked on radioactivity."}

    def probe_batch(self, tokenizer: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """Each probe's first window (question + context, ``data.max_seq_length`` tokens, ``data.doc_stride``)
        with its ``context_mask``."""
        import datasets

        examples = datasets.Dataset.from_dict({
            "id": [f"probe {i}" for i in rows],
            "question": [PROBES[i][0] for i in rows], "context": [PROBES[i][1] for i in rows],
        })
        doc_stride = int(self.settings.data.doc_stride)
        too_long = check_question_lengths(examples, tokenizer, self.max_length, doc_stride)
        if too_long:
            raise ConfigError(too_long[0][1])
        windows = encode_windows(examples, tokenizer, max_seq_length=self.max_length, doc_stride=doc_stride, train=False)
        first: dict[int, dict[str, Any]] = {}
        for window in windows:
            first.setdefault(int(window["example_index"]), window)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return self.model_inputs(window_collator(pad_id)([first[i] for i in range(len(rows))]))

    def compared_positions(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The positions the module does not mask: the context (and [CLS] in SQuAD 2.0)."""
        return ~is_masked(output)

    def predictions(self, outputs: tuple[torch.Tensor, ...], batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The best start and end [B, 2]."""
        return torch.stack([outputs[0].argmax(-1), outputs[1].argmax(-1)], dim=-1)

    def fill_head(self, hf: Any) -> set[str]:
        hf.qa_outputs.load_state_dict(self.trained_module.head.qa_outputs.state_dict())
        return set()

    def report_labels(self, hf: Any) -> list[str] | None:
        return None

    def onnx_graph(self) -> QuestionAnsweringGraph:
        return QuestionAnsweringGraph(self.trained_module)

    # The model card ------------------------------------------------------------------------------
    def label_row(self) -> tuple[str, Any]:
        return ("tags", "answer spans in the context")

    def data_rows(self) -> list[tuple[str, Any]]:
        return [("doc stride", self.settings.data.doc_stride)]

    def hf_usage(self, folder: str, example: Mapping[str, str]) -> str:
        """transformers 5 has no question-answering pipeline: the snippet picks the best span from the
        start / end logits itself."""
        longest = int(self.settings.head.max_answer_length)
        return ("```python\nimport torch\nfrom transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n"
                + self.hf_load(folder) +
                f"question = {example['question']!r}\ncontext = {example['context']!r}\n"
                f"inputs = tokenizer(question, context, truncation=\"only_second\", max_length={self.max_length},\n"
                "                   return_offsets_mapping=True, return_tensors=\"pt\")\n"
                "offsets = inputs.pop(\"offset_mapping\")[0]\n"
                "in_context = torch.tensor([s == 1 for s in inputs.sequence_ids(0)])\n"
                "with torch.no_grad():\n    out = model(**inputs)\n"
                f"# the best span of the context: end >= start, at most {longest} tokens (head.max_answer_length);\n"
                "# sesame-predict also slides windows over long contexts (and, SQuAD 2.0, may answer nothing)\n"
                "start = out.start_logits[0].masked_fill(~in_context, float(\"-inf\"))\n"
                "end = out.end_logits[0].masked_fill(~in_context, float(\"-inf\"))\n"
                "scores = start[:, None] + end[None, :]\n"
                f"allowed = torch.ones_like(scores, dtype=torch.bool).triu().tril({longest - 1})\n"
                "first, last = divmod(int(scores.masked_fill(~allowed, float(\"-inf\")).argmax()), scores.shape[1])\n"
                "print(context[int(offsets[first][0]):int(offsets[last][1])])\n```")

    def count_examples(self, path: Path) -> int:
        from sesame.tasks.qa.readers import read_squad

        rows, _ = read_squad(path, allow_impossible=bool(self.settings.data.version_2_with_negative),
                             on_bad_example="skip", key="train_file")
        return len(rows)
