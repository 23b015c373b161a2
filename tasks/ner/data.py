"""The NER data module (``task=ner``): typed ``cfg.data`` settings, and files -> BIO2 tag ids -> batches of windows.

Reading is in ``tasks/ner/readers.py``, tag schemes and the tag set in ``tasks/ner/tags.py``,
sub-word windows and stitching in ``tasks/ner/windows.py``; the loader recipe is
``tasks/inputs/datamodule.py``'s. The presets are ``conf/data/wnut17_slice.yaml`` and the files that
extend it.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from sesame.tasks.inputs.datamodule import SplitDataModule
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.ner.readers import NerExamples, check_tag, read_examples
from sesame.tasks.ner.tags import apply_tag_scheme, build_tag_set, encode_tags
from sesame.tasks.ner.windows import tagging_collator, tokenize_examples
from sesame.tasks.ner.settings import NerDataSettings

log = logging.getLogger(__name__)



def load_tag_names(settings: NerDataSettings) -> list[str]:
    """The tag set: ``data.tag_names`` when given, else from the (BIO2-converted) training file."""
    if settings.tag_names:
        names = [str(n) for n in settings.tag_names]
        for n in names:
            check_tag(n, "data.tag_names", "list tags as 'O', 'B-TYPE', 'I-TYPE'", error=ConfigError)
        return names
    if not settings.train_file:
        raise ConfigError("set data.train_file (the tag set comes from it) or data.tag_names")
    train = read_examples(settings.train_file, settings.format, settings.tag_column, "train_file")
    return build_tag_set(apply_tag_scheme(train, settings.tag_scheme).tags)


class NerDataModule(SplitDataModule):
    """Token tagging data. Built as ``NerDataModule.from_config(cfg, tokenizer)`` (reads ``cfg.data``, ``cfg.seed``).

    After ``setup``: ``tag_names``, ``examples[split]`` (the sentences, for metrics and prediction
    files) and ``splits[split]`` (tokenised windows) for ``train`` / ``validation`` / ``test``.
    """

    settings: NerDataSettings

    def __init__(self, settings: NerDataSettings, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
        super().__init__(settings, tokenizer, seed)
        self.tag_names: list[str] = []
        self.examples: dict[str, NerExamples] = {}
        self.collator = tagging_collator(tokenizer)

    def _read(self, key: str) -> NerExamples:
        s = self.settings
        return apply_tag_scheme(read_examples(getattr(s, key), s.format, s.tag_column, key), s.tag_scheme)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        s = self.settings
        train = self._read("train_file") if s.train_file else None
        self.tag_names = build_tag_set(train.tags) if train is not None and not s.tag_names else load_tag_names(s)
        if train is not None:
            self.examples["train"] = train.head(s.max_train_examples)
        for split, key in (("validation", "validation_file"), ("test", "test_file")):
            if getattr(s, key):
                self.examples[split] = self._read(key).head(s.max_eval_examples)
        for split, examples in self.examples.items():
            tag_ids = encode_tags(examples, self.tag_names, role="the training" if split == "train" else f"the {split}")
            self.splits[split] = tokenize_examples(examples, tag_ids, self.tokenizer, s.max_seq_length, s.label_all_subwords)
            windows = len(self.splits[split])
            if windows > len(examples):
                log.info("%s: %d sentences -> %d windows of <= %d tokens", split, len(examples), windows, s.max_seq_length)

    def config_updates(self) -> dict[str, Any]:
        """What the module must know from the data: the tag set (saved with the checkpoint)."""
        return {"data": {"tag_names": list(self.tag_names)}}

    def eval_units(self, split: str) -> np.ndarray:
        """One row per word: the sentence of each word."""
        lengths = [len(t) for t in self.examples[split].tokens]
        return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
