"""Named entities (any BIO tagging) of raw text or pre-split words (``task=ner``).

Input, one per line: ``{"text": "Marie Curie lived in Paris."}`` or ``{"tokens": ["Marie", "Curie", ...]}``
(optional ``"id"``). Raw text is split into words in two steps (:func:`split_words`):

1. :data:`WORD_PATTERN`: a word is a run of letters, digits and underscores, which may continue over a
   hyphen or apostrophe followed by more of them (``state-of-the-art``, ``O'Neil``, ``don't``); every
   other visible non-space character (punctuation, symbols, emoji) is a word of its own; white space
   separates words and is never part of one. Words are made of whole grapheme clusters
   (``tasks/core/graphemes.py``): a letter keeps its combining accents (``cafe\u0301``), an emoji its
   variation selector, skin tone or zero-width-joined partners (``👨\u200d👩\u200d👧``), a flag both its
   regional indicators. Invisible characters (zero-width joiner and space, direction marks, other
   format and control characters) and combining marks with no letter before them are never words.
   Japanese writes no spaces, and no tokenizer of the BERT family cuts kana: a word also ends where the
   script changes between katakana, hiragana and anything else, as Unicode's word boundaries (UAX #29) put
   them (``タワーは1958`` -> ``タワー``, ``は``, ``1958``).
2. The model's tokenizer (:func:`~sesame.tasks.encoders.families.pre_token_spans`: its normaliser and
   pre-tokeniser) splits those words further where it cuts between two letters or digits, not both
   ASCII: BERT-family tokenizers put each CJK character apart (``北京`` -> ``北``, ``京``), as their
   pre-training did; plain ASCII words (``COVID19``, ``foo_bar``) and the hyphen/apostrophe joins of
   step 1 stay whole whatever the tokenizer. A tokenizer that does not cut inside such words
   (SentencePiece's, which splits at white space only) leaves a Chinese or Japanese clause one word:
   give ``"tokens"`` split as the training data was.

Models trained on differently split text (e.g. ``n't`` as its own token, ``@user`` as one) do best
with ``"tokens"`` split the way their training data was. The words are then tokenised exactly as in
training (``tasks/ner/windows.py``: sub-words, windows of whole words for long inputs). A ``"text"``
that is empty or only white space, an empty ``"tokens"`` list and a word of ``"tokens"`` that is
empty or only white space are errors naming the input line and the field; a text whose characters
are all invisible (step 1) has no words and gets empty ``tokens``, ``tags`` and ``entities``.

Output::

    {"entities": [{"type": "person", "text": "Marie Curie", "char_start": 0, "char_end": 11, "score": 0.93}],
     "tokens": ["Marie", "Curie", "lived", "in", "Paris", "."], "tags": ["B-person", "I-person", "O", "O", "B-location", "O"]}

One tag per word (read at its first sub-token, decoded by the head: argmax, or CRF Viterbi).
Entities are read from the tags as the model's ``task.entity_metric`` reads them
(``tasks/ner/metrics.py``: with ``conlleval`` an ``I-X`` after ``O`` starts an entity). Char offsets
are into ``text``; for ``"tokens"`` input into the words joined by single spaces, which is then
the entity's ``text``. ``score`` is the mean, over the entity's words, of the softmax probability of
the word's predicted tag at its first sub-token, also for a CRF model (whose tags come from
Viterbi; the CRF's own marginals are not computed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import regex
import torch
from transformers import PreTrainedTokenizerBase

from sesame.heads.masking import IGNORE_INDEX
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS
from sesame.tasks.encoders.families import pre_token_spans
from sesame.tasks.core.errors import DataError
from sesame.tasks.core.graphemes import cluster_bounds
from sesame.tasks.ner.metrics import get_entities
from sesame.tasks.ner.network import tag_decoder
from sesame.tasks.ner.windows import WindowTokenizer, stitch_words, tagging_collator
from sesame.tasks.base.predictor import ModelRunner, TaskPredictor, finite, string_field

#: One grapheme cluster (``\X``) that begins with a letter, digit or underscore (not with a lone mark or
#: an invisible joiner, which ``\w`` also matches).
_WORD_CLUSTER = r"(?=\w)(?![\p{M}\p{Cf}])\X"

#: What ``sesame-predict --help`` says of this task (read from this file, not imported).
PREDICT_HELP = """\
named entities (task=ner): {"text"} raw text, or {"tokens": [...]} words split beforehand
  echo '{"text": "Marie Curie lived in Paris."}' | sesame-predict outputs/ner/<run>
  -> {"entities": [{"type": "person", "text": "Marie Curie", "char_start": 0, "char_end": 11, "score": 0.9}],
      "tokens": ["Marie", "Curie", "lived", "in", "Paris", "."], "tags": ["B-person", "I-person", "O", ...]}
  Raw text is split into words and punctuation (a word: letters/digits/_, also across an inner - or '),
  then where the model's tokenizer splits (BERT's: each CJK character); give "tokens" to split it as
  the training data was.
"""

#: How raw text is split into words (step 1 of the module docstring); each match is one word: word
#: clusters joined over a hyphen or apostrophe, or one visible cluster of anything else.
WORD_PATTERN = regex.compile(
    rf"(?:{_WORD_CLUSTER})+(?:['\u2019-](?:{_WORD_CLUSTER})+)*" + r"|(?=[^\w\s\p{Cc}\p{Cf}])\X"
)


def split_words(text: str, tokenizer: PreTrainedTokenizerBase | None = None) -> tuple[list[str], np.ndarray]:
    """The words of ``text`` and their char offsets [W, 2] (start, end): :data:`WORD_PATTERN`'s words,
    split further where ``tokenizer`` (when given) cuts between two letters or digits, not both ASCII
    (the module docstring). Offsets are on grapheme cluster boundaries."""
    spans = np.asarray([m.span() for m in WORD_PATTERN.finditer(text)], dtype=np.int64).reshape(-1, 2)
    if len(spans):
        cuts = _kana_cuts(text, spans)
        if tokenizer is not None:
            cuts = np.union1d(cuts, _tokenizer_cuts(text, spans, tokenizer))
        # Cuts fall strictly inside words: the sorted starts and ends pair up into the pieces.
        spans = np.stack([np.sort(np.concatenate([spans[:, 0], cuts])), np.sort(np.concatenate([spans[:, 1], cuts]))], 1)
    return [text[s:e] for s, e in spans.tolist()], spans


#: The Japanese syllabaries, each a class of its own for word boundaries; the prolonged sound mark (``ー``, script
#: Common) and the iteration marks belong to the katakana or hiragana run they extend.
_KANA = {"katakana": regex.compile(r"[\p{Katakana}\u30fc\uff70\u30fd\u30fe]"),
         "hiragana": regex.compile(r"[\p{Hiragana}\u309d\u309e]")}
_KANA_ANY = regex.compile("|".join(p.pattern for p in _KANA.values()))


def _kana_class(char: str) -> str | None:
    return next((name for name, pattern in _KANA.items() if pattern.match(char)), None)


def _kana_cuts(text: str, spans: np.ndarray) -> np.ndarray:
    """Cluster boundaries inside a word of ``spans`` where katakana, hiragana and other characters meet."""
    if not _KANA_ANY.search(text):
        return np.zeros(0, dtype=np.int64)
    bounds = cluster_bounds(text)
    word = np.searchsorted(spans[:, 0], bounds, side="left") - 1  # the word starting before each boundary
    inner = bounds[(word >= 0) & (bounds < spans[word.clip(0), 1])]
    starts = bounds[np.searchsorted(bounds, inner) - 1]  # where the cluster before each boundary begins
    keep = [(a := _kana_class(text[b])) != (c := _kana_class(text[e])) and (a or c)
            for b, e in zip(starts.tolist(), inner.tolist())]
    return inner[np.asarray(keep, dtype=bool)]



def _tokenizer_cuts(text: str, spans: np.ndarray, tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """The ends of ``tokenizer``'s pre-tokens that fall inside a word of ``spans``, on a cluster boundary,
    between two letters or digits (of the clusters either side) not both ASCII."""
    bounds = cluster_bounds(text)
    cuts = np.unique(pre_token_spans(tokenizer, text))
    word = (np.searchsorted(spans[:, 0], cuts, side="right") - 1).clip(0)
    cuts = cuts[(cuts > spans[word, 0]) & (cuts < spans[word, 1]) & np.isin(cuts, bounds)]
    before = bounds[np.searchsorted(bounds, cuts) - 1]  # where the cluster before each cut begins
    keep = [_cuttable(text[b], text[c]) for b, c in zip(before.tolist(), cuts.tolist())]
    return cuts[np.asarray(keep, dtype=bool)]


def _cuttable(left: str, right: str) -> bool:
    # Not between two ASCII characters: plain English words stay as step 1 made them (byte-level BPE
    # pre-tokenisers split ``COVID19``, BERT's ``foo_bar``; NER training data has them whole).
    return left.isalnum() and right.isalnum() and not (left.isascii() and right.isascii())


def joined_offsets(words: Sequence[str]) -> tuple[str, np.ndarray]:
    """``" ".join(words)`` and each word's char offsets [W, 2] in it."""
    lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
    return " ".join(words), np.stack([starts, starts + lengths], axis=1)


@dataclass
class Sentence:
    text: str
    words: list[str]
    offsets: np.ndarray  # [W, 2]


class TaggingPredictor(TaskPredictor):
    """Tags and entities of raw text or of pre-split words (``task=ner``)."""

    input_example = '{"text": "Marie Curie lived in Paris."}'

    def __init__(self, runner: ModelRunner, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        data = self.settings.data  # NerDataSettings: the trained model's tag set is in it
        self.tag_names = np.asarray([str(n) for n in data.tag_names], dtype=object)
        self.entity_mode = self.settings.task.entity_metric
        self.windows = WindowTokenizer(self.tokenizer, self.max_seq_length, data.label_all_subwords)
        self.collator = tagging_collator(self.tokenizer)
        head = self.settings.head
        # The same decoder for a run and an ONNX export: the trained CRF scores come from either.
        self.decoder = tag_decoder(list(self.tag_names), bool(head.crf), bool(head.constrain_bio), runner.head_state(),
                                   source=str(getattr(runner, "folder", "the model")))

    def prepare(self, record: Mapping[str, Any], where: str) -> Sentence:
        fix = 'give each input as {"text": "raw text"} or {"tokens": ["pre", "split", "words"]}'
        if "tokens" in record and "text" in record:
            raise DataError(f"{where}: both 'text' and 'tokens'. Fix: {fix}, not both")
        if "tokens" not in record:
            text = string_field(record, "text", where, fix)
            words, offsets = split_words(text, self.tokenizer)
            return Sentence(text, words, offsets)
        words = record["tokens"]
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise DataError(f"{where}: 'tokens' must be a list of strings, got {str(words)[:60]}. Fix: {fix}")
        if not words:
            raise DataError(f"{where}: 'tokens' is empty. Fix: {fix}")
        blank = next((i for i, w in enumerate(words) if not w.strip()), None)
        if blank is not None:
            raise DataError(f"{where}: 'tokens' word {blank + 1} ({words[blank]!r}) is empty or only white space. "
                            "Fix: leave it out (white space is no word)")
        text, offsets = joined_offsets(words)
        return Sentence(text, list(words), offsets)

    def predict_prepared(self, items: Sequence[Sentence]) -> list[dict[str, Any]]:
        outputs = [{"entities": [], "tokens": [], "tags": []} for _ in items]
        todo = [i for i, item in enumerate(items) if item.words]  # a text of invisible characters has no words
        if not todo:
            return outputs
        enc = self.windows({"tokens": [items[i].words for i in todo], "example_index": list(range(len(todo)))})
        keys = [k for k in (*ENCODER_INPUT_KEYS, "word_index", "example_index") if k in enc]
        features = [{k: enc[k][j] for k in keys} for j in range(len(enc["input_ids"]))]
        parts = []
        for _, batch, logits in self.run_sorted(features, self.collator, ENCODER_INPUT_KEYS):
            words = batch["word_index"] >= 0  # [B, T] the first sub-token of each word
            with torch.inference_mode():
                tags = self.decoder.decode(logits.float(), words)
            probs = torch.softmax(logits.float(), dim=-1).gather(-1, tags.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            example = batch["example_index"].unsqueeze(1).expand_as(words)
            parts.append((example[words], batch["word_index"][words], tags[words], probs[words]))
        example, word, tag_ids, probs = (torch.cat(column).numpy() for column in zip(*parts))
        if (tag_ids == IGNORE_INDEX).any():
            raise RuntimeError("the tag decoder left a word without a tag")  # a bug, not bad input
        lengths = [len(items[i].words) for i in todo]
        tag_ids = stitch_words(example, word, tag_ids, lengths)
        probs = stitch_words(example, word, probs, lengths)
        for k, i in enumerate(todo):
            outputs[i] = self._output(items[i], self.tag_names[tag_ids[k]].tolist(), probs[k])
        return outputs

    def _output(self, sentence: Sentence, tags: list[str], probs: np.ndarray) -> dict[str, Any]:
        entities = []
        for kind, first, last in get_entities(tags, mode=self.entity_mode):
            start, end = int(sentence.offsets[first, 0]), int(sentence.offsets[last, 1])
            entities.append({"type": kind, "text": sentence.text[start:end], "char_start": start, "char_end": end,
                             "score": finite(probs[first: last + 1].astype(np.float64).mean())})
        return {"entities": entities, "tokens": list(sentence.words), "tags": tags}
