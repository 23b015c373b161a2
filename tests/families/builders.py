"""Tiny random encoders of every family the compatibility matrix covers, each with a tokenizer of
its real kind, trained here, offline, with the ``tokenizers`` library.

One :class:`FamilySpec` per family says everything the fixture needs: the config class and its tiny
sizes, the model class saved (encoder-decoder families are saved whole, as their checkpoints come),
how the tokenizer's vocabulary is trained (WordPiece, byte-level BPE, SentencePiece-style Unigram)
and which transformers tokenizer class wraps it: transformers 5 builds each family's own
normaliser, pre-tokenizer, offset trimming and special-token template around a given vocabulary
(``BertTokenizer(vocab=...)``, ``RobertaTokenizer(vocab=..., merges=...)``,
``AlbertTokenizer(vocab=[(piece, score), ...])``), so the tokenizers behave as the real ones do.
ModernBERT's tokenizer is a plain ``tokenizer.json`` (OLMo-style byte-level BPE with a
``[CLS] A [SEP] B [SEP]`` template), built here the same way.

:func:`build_family` saves the model and tokenizer into a folder that ``encoder.name_or_path`` reads.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sesame.tasks.core.paths import shipped_path

#: Longest input any matrix test uses (SQuAD windows); every model gets more positions than this.
MAX_LENGTH = 128
#: Vocabulary size of every trained tokenizer (special tokens included).
VOCAB_SIZE = 700


@dataclass(frozen=True)
class FamilySpec:
    """One encoder family of the matrix.

    ``config`` are the tiny config's keyword arguments (``vocab_size`` is filled in from the
    tokenizer); ``model_class`` is what is saved (the encoder-decoder families save their whole
    model, as a user's checkpoint is); ``tokenizer`` is ``wordpiece``, ``bytelevel_bpe``, ``unigram``
    or ``olmo_bpe``; ``specials`` the special tokens that open the vocabulary, in id order (the
    family's own layout); ``tokenizer_kwargs`` go to the tokenizer class.
    """

    name: str
    config_class: str
    config: dict[str, Any]
    tokenizer: str
    tokenizer_class: str
    specials: tuple[str, ...]
    model_class: str = "AutoModel"
    tokenizer_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Unigram families whose vocabulary ends with special tokens (XLM-R's <mask>, T5's sentinels).
    trailing_specials: tuple[str, ...] = ()

    @property
    def model_type(self) -> str:
        import transformers

        return getattr(transformers, self.config_class).model_type


_BERT_LIKE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=MAX_LENGTH + 2)
_WORDPIECE_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# RoBERTa-style position ids start after the padding index (1): 2 + the longest input.
_ROBERTA_LIKE = dict(_BERT_LIKE, type_vocab_size=1, max_position_embeddings=MAX_LENGTH + 4, pad_token_id=1,
                     bos_token_id=0, eos_token_id=2)

#: Every family of the matrix, by ``config.model_type``.
FAMILY_SPECS: dict[str, FamilySpec] = {spec.model_type: spec for spec in (
    FamilySpec("BERT", "BertConfig", _BERT_LIKE, "wordpiece", "BertTokenizer", _WORDPIECE_SPECIALS),
    FamilySpec("RoBERTa", "RobertaConfig", _ROBERTA_LIKE, "bytelevel_bpe", "RobertaTokenizer", _ROBERTA_SPECIALS),
    FamilySpec("DistilBERT", "DistilBertConfig",
               dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=MAX_LENGTH + 2),
               "wordpiece", "BertTokenizer", _WORDPIECE_SPECIALS),
    FamilySpec("ALBERT", "AlbertConfig", dict(_BERT_LIKE, embedding_size=16), "unigram", "AlbertTokenizer",
               ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")),
    FamilySpec("ELECTRA", "ElectraConfig", dict(_BERT_LIKE, embedding_size=16), "wordpiece", "BertTokenizer",
               _WORDPIECE_SPECIALS),
    FamilySpec("MobileBERT", "MobileBertConfig",
               dict(_BERT_LIKE, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                    num_feedforward_networks=1, intermediate_size=32),
               "wordpiece", "MobileBertTokenizer", _WORDPIECE_SPECIALS),
    FamilySpec("XLNet", "XLNetConfig", dict(d_model=32, n_layer=2, n_head=2, d_inner=64), "unigram", "XLNetTokenizer",
               ("<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>")),
    FamilySpec("Longformer", "LongformerConfig", dict(_ROBERTA_LIKE, attention_window=[8, 8], sep_token_id=2),
               "bytelevel_bpe", "RobertaTokenizer", _ROBERTA_SPECIALS),
    FamilySpec("DeBERTa-v2/v3", "DebertaV2Config",
               dict(_BERT_LIKE, relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                    position_buckets=32, norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
                    type_vocab_size=0),
               "unigram", "DebertaV2Tokenizer", ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"),
               tokenizer_kwargs={"unk_id": 3}),
    FamilySpec("ModernBERT", "ModernBertConfig",
               dict(_BERT_LIKE, max_position_embeddings=MAX_LENGTH * 2, global_attn_every_n_layers=2,
                    local_attention=16, pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2,
                    eos_token_id=3),
               "olmo_bpe", "PreTrainedTokenizerFast", ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    FamilySpec("XLM-RoBERTa", "XLMRobertaConfig", _ROBERTA_LIKE, "unigram", "XLMRobertaTokenizer",
               ("<s>", "<pad>", "</s>", "<unk>"), trailing_specials=("<mask>",)),
    FamilySpec("BART (encoder)", "BartConfig",
               dict(d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                    decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                    max_position_embeddings=MAX_LENGTH + 2),
               "bytelevel_bpe", "RobertaTokenizer", _ROBERTA_SPECIALS, model_class="BartModel"),
    FamilySpec("T5 (encoder)", "T5Config",
               dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=1, num_heads=2,
                    relative_attention_num_buckets=8, decoder_start_token_id=0),
               "unigram", "T5Tokenizer", ("<pad>", "</s>", "<unk>"), model_class="T5Model",
               tokenizer_kwargs={"extra_ids": 0}),
)}


# Training text ------------------------------------------------------------------------------------
def training_sentences(n_sst2: int = 300, n_paragraphs: int = 60, n_wnut: int = 200) -> list[str]:
    """A few hundred real sentences from the shipped data: SST-2 reviews, SQuAD train paragraphs
    (the round-trip check reads their questions) and WNUT-17 tweets."""
    rows = Path(shipped_path("glue/sst2/train.2k.tsv")).read_text(encoding="utf-8").splitlines()[1 : n_sst2 + 1]
    lines = [row.split("\t")[0] for row in rows]
    squad = json.loads(Path(shipped_path("squad_v1/train.slice.json")).read_text(encoding="utf-8"))
    paragraphs = [p for article in squad["data"] for p in article["paragraphs"]][:n_paragraphs]
    for p in paragraphs:
        lines.append(p["context"])
        lines += [qa["question"] for qa in p["qas"]]
    words: list[str] = []
    for line in Path(shipped_path("wnut17/train.1k.conll")).read_text(encoding="utf-8").splitlines():
        if line.strip():
            words.append(line.split("\t")[0])
        elif words:
            lines.append(" ".join(words))
            words = []
            if len(lines) >= n_sst2 + 2 * n_paragraphs + n_wnut:
                break
    return lines


def _alphabet(lines: list[str]) -> list[str]:
    return sorted({ch for line in lines for ch in line if not ch.isspace()})


# Vocabularies -------------------------------------------------------------------------------------
def wordpiece_vocab(lines: list[str], specials: tuple[str, ...]) -> dict[str, int]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(specials)))
    return tok.get_vocab()


def bytelevel_bpe(lines: list[str], specials: tuple[str, ...], prefix_space: bool = False,
                  ) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE vocabulary and merges (GPT-2 / RoBERTa style)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def unigram_pieces(lines: list[str], specials: tuple[str, ...], trailing: tuple[str, ...] = (),
                   lowercase: bool = False) -> list[tuple[str, float]]:
    """A SentencePiece-style Unigram vocabulary (``▁`` marks a word start): ``[(piece, log prob)]``,
    the family's special tokens first (score 0) in their id order and ``trailing`` ones last."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    norms = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tok.normalizer = normalizers.Sequence(norms)
    # Punctuation apart while training, as SentencePiece's split by Unicode script keeps it: no piece
    # joins a word and the punctuation after it ("s."), which no real SentencePiece vocabulary has.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
                                                 pre_tokenizers.Punctuation()])
    unk = next(s for s in specials if "unk" in s.lower())
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB_SIZE - len(trailing), special_tokens=list(specials),
                                      unk_token=unk, initial_alphabet=_alphabet(lines), shrinking_factor=0.75,
                                      show_progress=False)
    tok.train_from_iterator([line.lower() if lowercase else line for line in lines], trainer)
    pieces = [(p, float(s)) for p, s in json.loads(tok.to_str())["model"]["vocab"]]
    head = [(s, 0.0) for s in specials]
    rest = [(p, s) for p, s in pieces if p not in specials and p not in trailing]
    return head + rest + [(s, 0.0) for s in trailing]


# Tokenizers ---------------------------------------------------------------------------------------
def build_tokenizer(spec: FamilySpec, lines: list[str]) -> Any:
    """The family's fast tokenizer, around a vocabulary trained on ``lines``."""
    import transformers

    cls = getattr(transformers, spec.tokenizer_class)
    kwargs = dict(spec.tokenizer_kwargs)
    if spec.tokenizer == "wordpiece":
        tokenizer = cls(vocab=wordpiece_vocab(lines, spec.specials), **kwargs)
    elif spec.tokenizer == "bytelevel_bpe":
        vocab, merges = bytelevel_bpe(lines, spec.specials)
        tokenizer = cls(vocab=vocab, merges=merges, **kwargs)
    elif spec.tokenizer == "unigram":
        lowercase = spec.tokenizer_class == "AlbertTokenizer"  # ALBERT's SentencePiece model lower-cases
        tokenizer = cls(vocab=unigram_pieces(lines, spec.specials, spec.trailing_specials, lowercase), **kwargs)
    elif spec.tokenizer == "olmo_bpe":
        tokenizer = olmo_style_tokenizer(lines, spec.specials)
    else:  # pragma: no cover - a typo in FAMILY_SPECS
        raise ValueError(spec.tokenizer)
    tokenizer.model_max_length = MAX_LENGTH
    return tokenizer


def olmo_style_tokenizer(lines: list[str], specials: tuple[str, ...]) -> Any:
    """ModernBERT's kind of tokenizer: OLMo's byte-level BPE (no prefix space) with BERT's special
    tokens in a ``[CLS] A [SEP] B [SEP]`` template, and no segment ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab, merges = bytelevel_bpe(lines, specials)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(specials))
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    # A template alone, as ModernBERT's tokenizer.json has: no byte-level post-processor trims the
    # offsets, so a word's span takes in the space before it.
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, model_input_names=["input_ids", "attention_mask"], unk_token="[UNK]",
        pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
    )


# Models -------------------------------------------------------------------------------------------
def build_family(name: str, folder: Path, lines: list[str] | None = None, seed: int = 0) -> Path:
    """Save the tiny random model of family ``name`` (a ``model_type``) and its tokenizer into ``folder``."""
    import transformers

    spec = FAMILY_SPECS[name]
    tokenizer = build_tokenizer(spec, lines if lines is not None else training_sentences())
    config = getattr(transformers, spec.config_class)(vocab_size=len(tokenizer), **spec.config)
    model_class = getattr(transformers, spec.model_class) if spec.model_class != "AutoModel" else transformers.AutoModel
    torch.manual_seed(seed)
    random.seed(seed)
    model = model_class.from_config(config) if model_class is transformers.AutoModel else model_class(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

