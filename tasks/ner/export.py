"""What ``sesame-export``, the ONNX runner and the model card know of token tagging (``task=ner``):
:class:`TaggingExport` (``tasks/base/export.py``).

The module's ``forward`` gives each token's tag logits [B, T, C]; a word's tag is read at its first
sub-token. transformers' ``...ForTokenClassification`` has the same ``classifier`` layer and takes
each token's argmax, so a CRF model (``head.crf=true``) does not map onto it. The ONNX graph holds
the logits only: the CRF's Viterbi decoding is not in it, so the export writes the CRF's learned
scores to ``crf.safetensors`` and the runner decodes with sesame's own head (``heads/tagger.py``),
its BIO constraints rebuilt from the tag names and ``head.constrain_bio``. Probe inputs are word
lists tokenised as ``tasks/ner/windows.py`` tokenises sentences (sub-words of whole words).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from sesame.tasks.base.export import TaskExport
from sesame.tasks.core.errors import MissingFileError
from sesame.tasks.ner.network import CRF_PARAMETERS
from sesame.tasks.ner.windows import WindowTokenizer, tagging_collator

#: An ONNX folder's CRF transition scores (safetensors).
CRF_FILE = "crf.safetensors"
#: Probe inputs: sentences as word lists.
PROBES = (
    ["marie", "curie", "lived", "in", "paris", "."],
    ["@user", "going", "to", "new", "york", "city", "tomorrow", "with", "john", "smith", "!"],
    ["hi"],
    ["the", "denver", "broncos", "won", "super", "bowl", "50", "in", "santa", "clara"],
)


class TaggingExport(TaskExport):
    """Token tagging: logits [B, T, C] of the module ``NerModule``; tags decoded by argmax or a CRF."""

    auto_class = "AutoModelForTokenClassification"
    pipeline_tag = "token-classification"
    task_kind = "token classification"
    hf_output_layer = "classifier"
    per_token_outputs = True
    example = {"text": "Marie Curie lived in Paris ."}

    def probe_batch(self, tokenizer: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """Each probe sentence's first window of whole words (a window is the whole of these short ones)."""
        windows = WindowTokenizer(tokenizer, self.max_length, bool(self.settings.data.label_all_subwords))
        enc = windows({"tokens": [PROBES[i] for i in rows], "example_index": list(range(len(rows)))})
        first: dict[int, int] = {}
        for k, example in enumerate(enc["example_index"]):
            first.setdefault(int(example), k)
        keys = list(enc)
        batch = tagging_collator(tokenizer)([{key: enc[key][first[i]] for key in keys} for i in range(len(rows))])
        return self.model_inputs(batch)

    def compared_positions(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The real tokens (``attention_mask``), every tag's logit."""
        return batch["attention_mask"].bool().unsqueeze(-1).expand_as(output)

    def predictions(self, outputs: tuple[torch.Tensor, ...], batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Each real token's argmax tag [N] (N real tokens in the batch)."""
        return outputs[0].argmax(-1)[batch["attention_mask"].bool()]

    # transformers --------------------------------------------------------------------------------
    def refusal_reasons(self, hf: Any | None) -> list[str]:
        if not self.settings.head.crf:
            return []
        tags = self.trained_module.head.num_tags
        return [f"head.crf=true: the tags are decoded by a CRF (Viterbi over {tags}x{tags} learned transition "
                "scores), but transformers' token classifiers have no transitions: they take each token's argmax"]

    def hf_config(self, config: Any) -> None:
        names = self.trained_module.tag_names
        config.id2label = dict(enumerate(names))
        config.label2id = {n: i for i, n in enumerate(names)}

    def fill_head(self, hf: Any) -> set[str]:
        hf.classifier.load_state_dict(self.trained_module.head.classifier.state_dict())
        return set()

    # ONNX ----------------------------------------------------------------------------------------
    def write_files(self, folder: Path) -> list[str]:
        """With a CRF: ``crf.safetensors``, its learned transition scores (:data:`CRF_PARAMETERS`)."""
        state = self.trained_module.decoding_state()
        if not state:
            return []
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(Path(folder) / CRF_FILE))
        return [CRF_FILE]

    def decoding_state(self, folder: Path) -> dict[str, torch.Tensor]:
        """With a CRF: its scores from ``crf.safetensors`` (a :class:`MissingFileError` where they are not there)."""
        if not bool(self.settings.head.crf):
            return {}
        path = Path(folder) / CRF_FILE
        if not path.is_file():
            raise MissingFileError(f"{folder}: head.crf=true but no {CRF_FILE} (the CRF's transition scores)")
        from safetensors.torch import load_file

        scores = load_file(str(path))
        absent = [n for n in CRF_PARAMETERS if n not in scores]
        if absent:
            raise MissingFileError(f"{path}: no {', '.join(absent)}")
        return scores

    # The model card ------------------------------------------------------------------------------
    def label_row(self) -> tuple[str, Any]:
        return ("tags", list(self.trained_module.tag_names))

    def count_examples(self, path: Path) -> int:
        from sesame.tasks.ner.readers import read_examples

        data = self.settings.data
        return len(read_examples(path, data.format, int(data.tag_column), "train_file"))
