"""The network of token tagging (NER): encoder -> layer fusion -> :class:`TokenTaggerHead` (softmax or
CRF) (plain torch; ``tasks/ner/module.py`` trains and evaluates it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from sesame.heads.tagger import TokenTaggerHead
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.task_network import EncoderTaskNetwork
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.hf_weights import load_prefixed_weights
from sesame.tasks.ner.settings import NerDataSettings


def training_tag_names(data: NerDataSettings) -> list[str]:
    """The training file's tag set (a trained model's config lists it in ``data.tag_names``, so only
    training reads it: the data readers are imported here)."""
    from sesame.tasks.ner.data import load_tag_names

    return load_tag_names(data)



#: The CRF's learned scores: what decoding reads besides the logits (``decoding_state``; an ONNX export's
#: ``crf.safetensors``).
CRF_PARAMETERS = ("start_transitions", "end_transitions", "transitions")


def tag_decoder(tag_names: Sequence[str], crf: bool, constrain_bio: bool, state: Mapping[str, torch.Tensor],
                source: str = "the model") -> TokenTaggerHead:
    """sesame's tagging head as a decoder of logits [B, T, C] (no classifier of its own: the network
    or graph has it): argmax, or the CRF's Viterbi with the trained scores of ``state``
    (``decoding_state``, from a run or from ``source``'s export folder), BIO-constrained as trained."""
    head = TokenTaggerHead(1, len(tag_names), dropout=0.0, crf=crf, tag_names=list(tag_names), constrain_bio=constrain_bio)
    if crf:
        absent = [name for name in CRF_PARAMETERS if name not in state]
        if absent:
            raise MissingFileError(f"{source}: head.crf=true but no CRF scores {', '.join(absent)}")
        with torch.no_grad():
            for name in CRF_PARAMETERS:
                getattr(head.crf, name).copy_(state[name])
    return head.eval()

class NerNetwork(EncoderTaskNetwork):
    """``forward(batch) -> logits [B, T, num_tags]``.

    Reads ``data.tag_names`` (filled in by the data module, and saved with the checkpoint) or else
    the training file's tag set.
    """

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        self.encoder.global_attention = None  # Longformer: local attention only, as its token classifier has
        data = settings.data
        names = data.tag_names or training_tag_names(data)
        #: Tag names read from the training file (no ``data.tag_names``): saved as ``data.tag_names`` in every
        #: checkpoint's config (:meth:`resolved_settings`), so loading it needs no training file. None otherwise.
        self.read_tag_names: list[str] | None = None if data.tag_names else list(names)
        self.tag_names = [str(n) for n in names]
        head = settings.head
        self.head = TokenTaggerHead(
            self.feature_size, len(self.tag_names), dropout=head.dropout, crf=head.crf,
            tag_names=self.tag_names, constrain_bio=head.constrain_bio,
        )

    def load_hf_head(self, folder: str | Path) -> None:
        """Load the ``classifier.*`` weights of a Hugging Face ``...ForTokenClassification`` folder; its
        rows follow the folder's ``id2label``, reordered to this module's tag names. Such a model reads
        the last layer, with no CRF, so sesame must be configured alike (clear error otherwise)."""
        from transformers import AutoConfig

        if not self.fusion.reads_last_only:
            raise ConfigError(f"{folder}: a Hugging Face token classifier reads the last layer, not "
                              f"fusion={self.fusion.mode}; evaluate it with fusion=last")
        if self.head.crf is not None:
            raise ConfigError(f"{folder}: a Hugging Face token classifier has no CRF transitions; evaluate it "
                              "with head.crf=false")
        id2label = AutoConfig.from_pretrained(str(folder)).id2label
        labels = [str(id2label[i]) for i in range(len(id2label))]
        if sorted(labels) != sorted(self.tag_names):
            raise ConfigError(f"{Path(folder) / 'config.json'}: id2label holds the tags {labels}, the data "
                              f"{self.tag_names}; evaluate it on data with its tag set (or set data.tag_names)")
        classifier = torch.nn.Linear(self.head.classifier.in_features, len(labels))
        load_prefixed_weights(classifier, folder, "classifier.")
        order = torch.tensor([labels.index(tag) for tag in self.tag_names])
        with torch.no_grad():
            self.head.classifier.weight.copy_(classifier.weight[order])
            self.head.classifier.bias.copy_(classifier.bias[order])

    def decoding_state(self) -> dict[str, torch.Tensor]:
        """With a CRF: its transition scores (:data:`CRF_PARAMETERS`), which Viterbi decoding reads."""
        crf = self.head.crf
        if crf is None:
            return {}
        return {name: getattr(crf, name).detach().float().cpu().clone() for name in CRF_PARAMETERS}

    def output_contract(self) -> dict[str, Any]:
        return {"tag_names": list(self.tag_names)}

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Tag logits [B, T, num_tags]."""
        return self.head(self.encode(batch))

