"""``cfg.encoder``, typed: plain data (importing it loads no torch), so a config is checked before any model library loads."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings

ENCODER_INITS = ("pretrained", "random")
ACTIVATION_CHECKPOINTING = ("auto", True, False)


@dataclass(frozen=True)
class EncoderSettings(Settings):
    """``cfg.encoder`` (``conf/encoder/*.yaml``): which pretrained weights and tokenizer to load."""

    group = "encoder"
    name_or_path: str
    tokenizer: str | None  # null: the encoder's own
    dtype: str | None  # null: the checkpoint's dtype
    attn_implementation: str | None
    init: str  # pretrained | random (the same architecture and tokenizer, freshly initialised)
    #: Run only the layers up to the highest hidden state the fusion reads (``fusion=second_to_last``
    #: runs L - 1 of L layers); the outputs are the same (``Encoder.layers_to_run``).
    skip_unread_layers: bool = True
    #: With a head that reads only the [CLS] vector (``pooling=cls`` or ``pooler``), run the top layer the
    #: fusion reads at [CLS] alone: keys and values of every token, the rest at [CLS] (BERT-style families;
    #: ``tasks/encoders/summary_layer.py``). The same outputs.
    top_layer_at_summary: bool = True
    #: Training keeps only each layer's input and recomputes the layer's activations in the backward pass
    #: (``Encoder.checkpoint_activations``): the same gradients, bit for bit, at a fraction of the memory
    #: (attention probabilities are [B, heads, T, T] floats per layer) for about 1.5x the step's CPU time.
    #: ``auto``: where the family supports it; ``true``: an error where it does not.
    activation_checkpointing: bool | str = False
    #: Run the layers on the batch's real tokens alone: every token-wise part of a layer skips the padding,
    #: attention masks it as before (BERT-style families; ``tasks/encoders/padding_free.py``). The same outputs
    #: at every real token.
    padding_free: bool = True
    #: Under bf16/fp16 autocast on a CPU, training attention with dropout runs in that precision, where torch's
    #: SDPA would take its fp32 math path (``tasks/encoders/low_precision_attention.py``). Only where the model's
    #: attention is transformers' default, ``sdpa``, and ``attn_implementation`` is not set. Equal within bf16
    #: rounding; evaluation and fp32 unchanged.
    low_precision_attention: bool = True
    #: Dropout in the encoder draws its masks four elements per random draw, not one
    #: (``tasks/encoders/fast_dropout.py``): the rate rounded to a multiple of 2⁻¹⁶, other masks than torch's. Off:
    #: under 5% of a step (on in ``+experiment=cpu_speed``).
    fast_dropout: bool = False

    def __post_init__(self) -> None:
        if self.init not in ENCODER_INITS:
            raise ConfigError(f"encoder.init={self.init!r} is not one of {', '.join(ENCODER_INITS)}")
        if self.activation_checkpointing not in ACTIVATION_CHECKPOINTING:
            raise ConfigError(f"encoder.activation_checkpointing={self.activation_checkpointing!r} is not one of "
                              "auto, true, false")
