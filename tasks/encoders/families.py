"""What sesame must know about an encoder family beyond ``AutoModel``, in one place.

Most of what differs between families is found from the model and tokenizer themselves (the
forward's arguments, the layer stack by shape, the tokenizer's template and offsets). What cannot
be found that way is a record here, keyed by ``config.model_type``: where the sequence-summary
token sits, whether the layers share their weights, whether the family takes global attention.
Families the table does not name behave like BERT. The "Encoder families" table of docs/encoders.md lists
what each tested family supports (rendered from the tests' results by ``tests/families/table.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.pruning import (
    BERT_LAYOUT,
    PLAN_KEY,
    PruneLayout,
    PruningPlan,
    load_pruned,
    unsupported_message,
)

#: Where a family's sequence-summary token is: ``first`` ([CLS], <s>), ``last`` (XLNet's <cls>,
#: after the last segment) or None (T5 has none: its first token is the first word).
SUMMARY_TOKENS = ("first", "last", None)
#: Poolings that read the summary token (``heads/pooling.py``).
SUMMARY_POOLINGS = ("cls", "cls_mean", "pooler")
#: Config entries holding one value per layer; dropping layers keeps the kept layers' entries.
PER_LAYER_CONFIG = ("layer_types", "attention_window")


@dataclass(frozen=True)
class EncoderFamily:
    """The facts about one family (``config.model_type``) that its model and tokenizer do not tell."""

    model_type: str
    summary_token: str | None = "first"
    #: Why the family has no stack of one module per layer (ALBERT shares one layer's weights across
    #: the depth), or None when it has one: top_k and drop-layers need that stack.
    shared_layers: str | None = None
    #: Longformer: local windowed attention plus global attention on chosen tokens
    #: (``global_attention_mask``; see :func:`global_attention_mask`).
    global_attention: bool = False
    #: Why transformers' implementation of the family cannot become an ONNX graph with dynamic
    #: lengths (sesame-export --format onnx), or None where it can.
    onnx_unsupported: str | None = None
    #: Why ``--exporter dynamo`` (torch.export) fails on the family where ``torchscript`` works.
    dynamo_unsupported: str | None = None
    #: Where its layers keep the attention heads and feed-forward neurons structured pruning removes
    #: (``tasks/encoders/pruning.py``); None: the family cannot be pruned.
    pruning: PruneLayout | None = None
    #: Why the family's layers above the highest hidden state a fusion reads cannot simply be left out
    #: of the forward pass (``encoder.skip_unread_layers``), or None where they can: a stack that ends
    #: in a norm of its own would apply it to a lower layer's output, and shared layers have no stack.
    cannot_stop_early: str | None = None
    #: Whether its forward pass works with no layer at all (``fusion=embeddings``); DeBERTa's encoder
    #: reads the output of its last layer run, so it runs its first layer.
    runs_without_layers: bool = True
    #: Whether its layers are transformers' ``BertLayer`` (or a copy of it), which the top layer of a head
    #: reading [CLS] alone can run at that token only (``encoder.top_layer_at_summary``).
    summary_layer: bool = False

    def __post_init__(self) -> None:
        if self.summary_token not in SUMMARY_TOKENS:  # pragma: no cover - a typo in FAMILIES
            raise ValueError(f"summary_token={self.summary_token!r}")


_FINAL_NORM = "its stack ends in a norm applied after the last layer, which a shorter stack would apply to a lower layer"
_NO_SUMMARY = "T5's encoder has no [CLS]-style summary token (its first token is the input's first word)"

#: Every family that is not BERT-like in one of :class:`EncoderFamily`'s respects.
FAMILIES: dict[str, EncoderFamily] = {f.model_type: f for f in (
    EncoderFamily("xlnet", summary_token="last",
                  dynamo_unsupported="torch's dynamo exporter cannot convert transformers' XLNet (its attention mask "
                                     "subtracts a tensor from a Python float, for which it finds no aten.sub overload)"),
    EncoderFamily("bert", pruning=BERT_LAYOUT, summary_layer=True),
    EncoderFamily("roberta", pruning=BERT_LAYOUT, summary_layer=True),
    EncoderFamily("xlm-roberta", pruning=BERT_LAYOUT, summary_layer=True),
    EncoderFamily("electra", pruning=BERT_LAYOUT, summary_layer=True),
    EncoderFamily("t5", summary_token=None, cannot_stop_early=_FINAL_NORM),
    EncoderFamily("mt5", summary_token=None, cannot_stop_early=_FINAL_NORM),
    EncoderFamily("umt5", summary_token=None, cannot_stop_early=_FINAL_NORM),
    EncoderFamily("modernbert", cannot_stop_early=_FINAL_NORM),
    EncoderFamily("deberta", runs_without_layers=False),
    EncoderFamily("deberta-v2", runs_without_layers=False),
    EncoderFamily("albert", shared_layers="ALBERT applies one shared set of layer weights at every depth, so it has "
                                          "no separate module per layer",
                  cannot_stop_early="its layers share one set of weights, applied by depth count"),
    EncoderFamily("longformer", global_attention=True,
                  onnx_unsupported="Longformer's sliding-window attention reshapes its input into chunks whose number "
                                   "depends on the input's length, which neither ONNX exporter can trace with a dynamic "
                                   "length (torch.export stops on the data-dependent shape; a torchscript trace is "
                                   "wrong at other lengths)"),
)}


def family_of(config: Any) -> EncoderFamily:
    """The family record of a transformers config (a BERT-like default for families not listed)."""
    model_type = str(getattr(config, "model_type", "") or "")
    return FAMILIES.get(model_type, EncoderFamily(model_type))


def prune_layout(config: Any, setting: str) -> PruneLayout:
    """Where the family of ``config`` keeps what structured pruning removes; a :class:`ConfigError`
    naming ``setting``, the family and the families that can be pruned where it is not known."""
    layout = family_of(config).pruning
    if layout is None:
        raise ConfigError(unsupported_message(family_of(config).model_type,
                                              [f.model_type for f in FAMILIES.values() if f.pruning], setting))
    return layout


# Loading: the encoder half of encoder-decoder models -------------------------------------------------
def encoder_class(config: Any) -> type | None:
    """The transformers class of the encoder alone for an encoder-decoder config (``T5EncoderModel``,
    ``BartEncoder``); None for an encoder-only config, which ``AutoModel`` loads as it is."""
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES,
        MODEL_MAPPING,
        MODEL_MAPPING_NAMES,
    )

    model_type = getattr(config, "model_type", None)
    name = MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES.get(model_type)
    if name and name != MODEL_MAPPING_NAMES.get(model_type):
        # t5, mt5, umt5: an encoder-only class of its own (whose saved config says is_encoder_decoder=false)
        return getattr(transformers, name)
    if not getattr(config, "is_encoder_decoder", False):
        return None
    try:
        full = MODEL_MAPPING[type(config)]
    except KeyError:
        full = None
    # BART-style families: <Name>Model holds <Name>Encoder, a PreTrainedModel of its own.
    candidate = getattr(importlib.import_module(full.__module__), full.__name__.removesuffix("Model") + "Encoder", None) \
        if full is not None else None
    if isinstance(candidate, type) and issubclass(candidate, transformers.PreTrainedModel):
        return candidate
    raise ConfigError(
        f"{type(config).__name__} (model_type={config.model_type!r}) is an encoder-decoder model, and sesame found no "
        "class for its encoder alone. Fix: save the encoder half as a model of its own (model.get_encoder()"
        ".save_pretrained(folder)) and point encoder.name_or_path at that folder"
    )


def load_encoder_model(path: str, config: Any, load_weights: bool, **kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """``(model, loading info)``: ``AutoModel`` for an encoder, the encoder half of an encoder-decoder.

    An encoder-decoder checkpoint (``BartModel``, ``T5Model``, ``...ForConditionalGeneration``) gives
    its encoder; a folder sesame saved from such an encoder (``architectures`` names the encoder class)
    loads as it is; a pruned encoder (its config records the plan: ``tasks/encoders/pruning.py``) gets
    the recorded shapes before its weights. ``load_weights=False`` builds the architecture from ``config`` alone.
    """
    from transformers import AutoModel

    if getattr(config, PLAN_KEY, None) is not None:  # sesame-compress prune wrote it: the shapes are in the record
        layout = prune_layout(config, f"{path}: its config.json records a pruned model ({PLAN_KEY})")
        return load_pruned(path, config, PruningPlan.of_config(config), layout, load_weights, **kwargs)
    cls = encoder_class(config)
    if cls is None:
        if not load_weights:
            return AutoModel.from_config(config, **kwargs), {}
        return AutoModel.from_pretrained(path, output_loading_info=True, **kwargs)
    if not load_weights:
        return cls._from_config(config, **kwargs), {}
    if cls.__name__.endswith("EncoderModel") or cls.__name__ in (getattr(config, "architectures", None) or ()):
        return cls.from_pretrained(path, output_loading_info=True, **kwargs)  # reads a whole model's encoder too
    full, info = AutoModel.from_pretrained(path, output_loading_info=True, **kwargs)
    encoder = full.get_encoder()
    prefix = next((name + "." for name, module in full.named_children() if module is encoder), "")
    info = {k: {key.removeprefix(prefix) for key in v if key.startswith(prefix)} if isinstance(v, (set, list)) else v
            for k, v in info.items()}
    return encoder, info


def takes_token_types(config: Any, forward_parameters: Mapping[str, Any]) -> bool:
    """Whether to pass segment ids: the forward takes them and the model embeds more than one segment
    (RoBERTa, XLM-R and Longformer have ``type_vocab_size=1``: segment B's ids 1 would index past the
    table; DeBERTa-v3's 0 means no segment embedding at all)."""
    if "token_type_ids" not in forward_parameters:
        return False
    types = getattr(config, "type_vocab_size", None)
    return types is None or int(types) > 1


# Forward: Longformer's global attention -----------------------------------------------------------
#: ``Encoder.global_attention`` values: the first token (what transformers' Longformer classifiers
#: use), the question (every token before the first separator: its QA model's rule), or none (its
#: token classifier).
GLOBAL_ATTENTION = ("first", "question", None)


def global_attention_mask(input_ids: torch.Tensor, mode: str | None, sep_token_id: int | None) -> torch.Tensor | None:
    """[B, T] long: 1 where a token attends to (and is attended by) every token; None for ``mode=None``."""
    if mode is None:
        return None
    if mode == "first":
        mask = torch.zeros_like(input_ids)
        mask[:, 0] = 1
        return mask
    if mode != "question" or sep_token_id is None:
        raise ValueError(f"global attention {mode!r} (sep token {sep_token_id})")
    is_sep = input_ids == sep_token_id
    first_sep = torch.where(is_sep.any(dim=1), is_sep.long().argmax(dim=1), torch.zeros_like(input_ids[:, 0]))
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    return (positions < first_sep.unsqueeze(1)).long()


# Heads ---------------------------------------------------------------------------------------------
def summary_token(config: Any, pooling: str | None = None) -> str | None:
    """Where the summary token sits (``first`` / ``last``); a :class:`ConfigError` when ``pooling``
    reads it and the family has none."""
    family = family_of(config)
    if family.summary_token is None and pooling in SUMMARY_POOLINGS:
        raise ConfigError(f"pooling={pooling}: {_NO_SUMMARY} (the {family.model_type} family). "
                          "Fix: pooling=mean or pooling=max")
    return family.summary_token


def pooler_linear(model: nn.Module) -> nn.Linear | None:
    """The dense layer of a model's pooler: ``pooler.dense`` (BERT, RoBERTa, MobileBERT) or the
    pooler itself where it is a bare ``Linear`` (ALBERT's, with ``pooler_activation`` tanh)."""
    pooler = getattr(model, "pooler", None)
    if isinstance(pooler, nn.Linear):
        return pooler
    dense = getattr(pooler, "dense", None)
    return dense if isinstance(dense, nn.Linear) else None


def no_pooler_message(config: Any, name: str) -> str:
    """Why ``pooling=pooler`` cannot be used with an encoder that has no pooler, and the fix."""
    family = family_of(config)
    alternative = "pooling=mean" if family.summary_token is None else "pooling=cls or pooling=mean"
    return (f"pooling=pooler: the encoder has no pooler, no pretrained dense + tanh layer on the summary token to "
            f"start from (the {family.model_type or 'unknown'} family: {name}). Fix: {alternative}")


def shared_layers_error(config: Any, setting: str, fix: str) -> ConfigError:
    """The error of a setting that needs one module per layer, on a family whose layers share weights."""
    family = family_of(config)
    return ConfigError(f"{setting}: {family.shared_layers} (the {family.model_type} family). Fix: {fix}")


# Tokenizers ---------------------------------------------------------------------------------------
def _byte_level_without_prefix_space(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("type") == "ByteLevel" and node.get("add_prefix_space") is False:
            return True
        return any(_byte_level_without_prefix_space(v) for v in node.values())
    if isinstance(node, list):
        return any(_byte_level_without_prefix_space(v) for v in node)
    return False


def _with_prefix_space(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _with_prefix_space(v) for k, v in node.items()}
        if out.get("type") == "ByteLevel" and "add_prefix_space" in out:
            out["add_prefix_space"] = True
        return out
    if isinstance(node, list):
        return [_with_prefix_space(v) for v in node]
    return node


def words_tokenizer(tokenizer: Any) -> Any:
    """The tokenizer to use on pre-split words (NER): ``tokenizer`` itself, except for byte-level BPE
    without a prefix space (RoBERTa, Longformer, BART, ModernBERT), which would encode every word as
    if it began the text (``Paris`` instead of ``ĠParis``, the form it has after a space in the
    running text the model was trained on): a copy whose pre-tokenizer adds the space, as
    transformers' NER examples do with ``add_prefix_space=True``."""
    import json

    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return tokenizer
    state = json.loads(backend.to_str())
    if not _byte_level_without_prefix_space(state.get("pre_tokenizer")):
        return tokenizer
    import copy

    state["pre_tokenizer"] = _with_prefix_space(state["pre_tokenizer"])
    words = copy.deepcopy(tokenizer)
    words._tokenizer = Tokenizer.from_str(json.dumps(state))
    if hasattr(words, "add_prefix_space"):
        words.add_prefix_space = True
    return words


def pre_token_spans(tokenizer: Any, text: str) -> np.ndarray:
    """The char spans [P, 2] in ``text`` of the tokenizer's pre-tokens (the words it cuts text into before
    sub-words): its normaliser, then its pre-tokeniser, as in encoding. BERT's normaliser puts each CJK
    character apart, its pre-tokeniser splits at white space and punctuation; SentencePiece's at white
    space only. Spans are in ``text``'s own coordinates, even where the normaliser changes lengths
    (accents stripped, ligatures expanded); characters it drops (controls, lone accents) are in none.
    A tokenizer without a Rust backend gives no spans."""
    from tokenizers import PreTokenizedString

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return np.zeros((0, 2), dtype=np.int64)
    pieces = PreTokenizedString(text)
    if backend.normalizer is not None:
        pieces.normalize(backend.normalizer.normalize)
    if backend.pre_tokenizer is not None:
        backend.pre_tokenizer.pre_tokenize(pieces)
    spans = [span for _, span, _ in pieces.get_splits(offset_referential="original", offset_type="char")]
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def show_segment_ids(tokenizer: Any) -> None:
    """Make ``tokenizer`` return the segment ids its pair template assigns (ALBERT's, XLNet's:
    transformers 5 leaves ``token_type_ids`` out of their ``model_input_names``, so pairs would reach
    the model as one segment). The encoder passes them on only where its model embeds segments."""
    names = list(getattr(tokenizer, "model_input_names", None) or ())
    if "token_type_ids" in names or "input_ids" not in names:
        return
    try:
        types = tokenizer("a", "b", return_token_type_ids=True).get("token_type_ids") or []
    except Exception:  # noqa: BLE001 - a tokenizer that cannot say keeps its own inputs
        return
    if any(t != 0 for t in types):
        tokenizer.model_input_names = [*names, "token_type_ids"]


@lru_cache(maxsize=64)
def _offsets_include_spaces(backend_json: str) -> bool:
    from tokenizers import Tokenizer

    encoding = Tokenizer.from_str(backend_json).encode("ab cd ef", add_special_tokens=False)
    text = "ab cd ef"
    return any(end > start and text[start].isspace() for start, end in encoding.offsets)


def offsets_include_spaces(tokenizer: Any) -> bool:
    """Whether the tokenizer's char offsets take in the space before a word (DeBERTa-v2/v3's fast
    tokenizer: ``▁word`` spans " word"), which answer spans must not include."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and _offsets_include_spaces(backend.to_str())


#: Unicode code points ``str.isspace`` is true for.
_SPACES = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


def trim_space_offsets(offsets: np.ndarray, keep: np.ndarray, text: str) -> np.ndarray:
    """``offsets`` [T, 2] with the rows ``keep`` narrowed to leave out white space at either end."""
    out = offsets.copy()
    space = np.isin(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), _SPACES)
    space = np.append(space, False)  # index len(text) (an empty span's start) is no space
    rows = np.flatnonzero(keep)
    starts, ends = out[rows, 0], out[rows, 1]
    while True:
        move = (starts < ends) & space[starts]
        if not move.any():
            break
        starts[move] += 1
    while True:
        move = (ends > starts) & space[np.maximum(ends - 1, 0)]
        if not move.any():
            break
        ends[move] -= 1
    out[rows, 0], out[rows, 1] = starts, ends
    return out
