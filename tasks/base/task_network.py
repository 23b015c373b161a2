"""The network of every task model, in plain torch: encoder -> LayerFusion -> (the task's head).

A task's network (``tasks/<task>/network.py``, named by ``task.network`` in ``conf/task/<task>.yaml``)
subclasses :class:`EncoderTaskNetwork`, builds its head from ``self.feature_size`` and implements
``forward``. It is everything a trained model needs to predict, and imports no Lightning: predictions
from a run folder build only the network (``tasks/inference/predictor.py``). The task's Lightning module
(``tasks/<task>/module.py``) is the same network plus training and evaluation, so both read the same
checkpoint state dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from sesame.heads.fusion import LayerFusion
from sesame.heads.pooling import SUMMARY_ONLY_POOLINGS, PoolerPooling, build_pooling
from sesame.tasks.base.run_settings import PoolingSettings, RunSettings
from sesame.tasks.core.errors import ConfigError, DataError, settings_check
from sesame.tasks.encoders.encoder import Encoder, encoder_inputs
from sesame.tasks.encoders.fast_dropout import use_fast_dropout
from sesame.tasks.encoders.families import no_pooler_message, pooler_linear
from sesame.tasks.encoders.finetune import apply_finetune_mode
from sesame.tasks.encoders.store import FROZEN_KEY, weights_digest

if TYPE_CHECKING:
    from sesame.tasks.inputs.feature_cache import FeatureCache


class EncoderTaskNetwork(nn.Module):
    """Encoder + layer fusion + finetune policy. Subclasses add a head and ``forward(batch)``.

    ``encode(batch)`` -> fused features [B, T, feature_size].
    """

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        """``settings``: the run's, read once where the command started (a trained model's:
        ``RunSettings.of_trained``). ``encoder``: an encoder already built for ``settings.encoder`` (loading
        a trained model builds it from the run's ``encoder/`` folder); None loads its ``name_or_path``."""
        super().__init__()
        self.settings = settings
        self.task = settings.task
        self.encoder = encoder or Encoder.from_settings(settings.encoder)
        fusion = settings.fusion
        with settings_check():
            self.fusion = LayerFusion(
                self.encoder.num_hidden_states, self.encoder.hidden_size, mode=fusion.mode,
                layers=fusion.layers, **({"combine": fusion.combine} if fusion.combine else {}),
            )
        self.feature_size = self.fusion.output_size
        #: How many encoder layers a forward pass runs (None: all): those above the fusion's highest
        #: read one are skipped under ``encoder.skip_unread_layers`` (the outputs are the same).
        self.encoder_layers_run: int | None = (
            self.encoder.layers_to_run(self.fusion.highest) if settings.encoder.skip_unread_layers else None)
        #: Whether training recomputes each encoder layer's activations in the backward pass
        #: (``encoder.activation_checkpointing``; the same gradients, far less memory at long inputs).
        self.activation_checkpointing = self.encoder.checkpoint_activations(settings.encoder.activation_checkpointing)
        #: Whether the head reads the [CLS] vector alone, so the encoder returns [B, 1, H] hidden states and
        #: runs its top layer read at [CLS] only (``encoder.top_layer_at_summary``).
        self.reads_summary_only = settings.encoder.top_layer_at_summary and self._pools_first_token()
        self.encoder.padding_free = settings.encoder.padding_free
        #: Whether training attention with dropout runs in the autocast precision (``encoder.low_precision_attention``).
        self.low_precision_attention = self.encoder.use_low_precision_attention(
            settings.encoder.low_precision_attention and not settings.encoder.attn_implementation)
        #: How many of the encoder's dropout modules draw masks four elements per draw (``encoder.fast_dropout``).
        self.fast_dropout_modules = use_fast_dropout(self.encoder.model) if settings.encoder.fast_dropout else 0
        self.finetune = settings.finetune
        self._eval_only_parts = apply_finetune_mode(self.encoder, self.finetune)
        for param in self.encoder.unread_parameters(max(self.fusion.indices)):
            param.requires_grad_(False)  # no gradient reaches them: not trained (DDP needs every trained one used)
        if not self.reads_encoder_pooler():
            self.encoder.drop_pooler()
        self.feature_cache: FeatureCache | None = None  # set by the runner when the cache applies
        #: Keep the encoder's graph even when it is frozen: gradients must reach something inside it
        #: (pruning's head and neuron masks, ``tasks/compression/prune_importance.py``).
        self.encoder_graph_always = False
        # from_pretrained leaves the encoder in eval mode and Lightning keeps modes as it finds them:
        # without this, full fine-tuning would silently train with dropout off.
        self.train()

    #: Whether the head reads one vector per sequence made by ``cfg.pooling`` (:meth:`build_pooling`):
    #: sentence classification, multiple choice. Per-token heads (QA, tagging) leave it False.
    pools_sequences: ClassVar[bool] = False

    def decoding_state(self) -> dict[str, torch.Tensor]:
        """What the trained head holds beyond the network's outputs that decoding them reads (a multi-label
        model's decision thresholds, a CRF's transition scores), float32 on the CPU; what an ONNX export
        writes beside its graph. Default: nothing."""
        return {}

    def output_contract(self) -> dict[str, Any]:
        """What the network's outputs mean, as plain data: two networks whose contracts differ score
        different things (a distillation teacher and its student must agree). Default: nothing beyond
        the task; a task adds its label or tag set, its kind of answers."""
        return {}

    def reads_encoder_pooler(self) -> bool:
        """Whether the task head copies the encoder's pooler when it is built (``pooling=pooler``); it
        then drops the encoder's pooler itself (:meth:`build_pooling`). Every other network drops it at once."""
        return self.pools_sequences and self.pooling_settings().name == "pooler"

    def _pools_first_token(self) -> bool:
        """Whether the head reads nothing but the first token's fused feature: a pooling of the summary
        token alone (``cls``, ``pooler``) where it comes first; the fusion is position by position."""
        pooling = self.settings.pooling
        if not self.pools_sequences or pooling is None or pooling.name not in SUMMARY_ONLY_POOLINGS:
            return False
        return self.encoder.family.summary_token == "first"

    def pooling_settings(self) -> PoolingSettings:
        """``settings.pooling``; a config without the group is an error for a network that pools."""
        if self.settings.pooling is None:
            raise ConfigError(f"task={self.task.name} pools each sequence into one vector: the config needs the "
                              "pooling group (pooling=cls|mean|max|cls_mean|pooler; conf/pooling/)")
        return self.settings.pooling

    def build_pooling(self, built_from_trained: bool) -> nn.Module:
        """``cfg.pooling``'s pooling of this network's features (``heads/pooling.py``): [N, T, D] -> [N, D'].

        ``pooling=pooler`` copies the encoder's pretrained pooler into the head, where it trains, and
        drops the encoder's; an encoder without one is a :class:`ConfigError`, unless the network is a
        trained model read back (``built_from_trained``), whose checkpoint holds the head's pooler.
        """
        name = self.pooling_settings().name
        with settings_check():  # the summary token: [CLS] first, XLNet's <cls> last, none in T5 (an error)
            pooling = build_pooling(name, self.feature_size, self.encoder.summary_token(name))
        if isinstance(pooling, PoolerPooling):
            if self.encoder.has_pretrained("pooler") and pooler_linear(self.encoder.model) is not None:
                pooling.load_from(self.encoder.model.pooler)
            elif not built_from_trained:
                raise ConfigError(no_pooler_message(self.encoder.config, str(self.encoder.name_or_path)))
            self.encoder.drop_pooler()  # its copy in the head is what trains
        return pooling

    @property
    def encoder_frozen(self) -> bool:
        return self.finetune.mode == "frozen"

    def train(self, mode: bool = True) -> EncoderTaskNetwork:
        super().train(mode)
        for part in self._eval_only_parts:  # frozen parts keep dropout off while the head trains
            part.eval()
        return self

    # Reading a checkpoint's state dict ----------------------------------------------------------------
    def complete_checkpoint(self, checkpoint: dict[str, Any], source: str) -> None:
        """Make ``checkpoint``'s state dict this network's: without the encoder pooler it dropped
        (:meth:`drop_unused_pooler`), with the frozen encoder weights it left out (:meth:`fill_stored_once`,
        from ``source``)."""
        self.drop_unused_pooler(checkpoint)
        self.fill_stored_once(checkpoint, source)

    def drop_unused_pooler(self, checkpoint: dict[str, Any]) -> None:
        """Leave out the encoder pooler's weights of a checkpoint written before sesame dropped the unused
        pooler (``Encoder.drop_pooler``): this network has no place for them."""
        if getattr(self.encoder.model, "pooler", "none to drop") is None:
            state = checkpoint["state_dict"]
            for key in [k for k in state if k.startswith("encoder.model.pooler.")]:
                del state[key]

    def fill_stored_once(self, checkpoint: dict[str, Any], source: str) -> None:
        """Put the frozen encoder weights a checkpoint left out (``tasks/encoders/store.py``) back into
        its state dict, from this network's encoder (loaded from ``source``), once their digest matches
        the recorded one."""
        record = checkpoint.get(FROZEN_KEY)
        if not record:
            return
        params = dict(self.named_parameters())
        missing = [k for k in record["keys"] if k not in params]
        if missing:
            raise DataError(f"the checkpoint's frozen encoder weights ({', '.join(missing[:3])}, ...) do not exist in "
                            f"{source}: it is not the encoder the model was trained on ({record['encoder']})")
        digest = weights_digest((k, params[k]) for k in record["keys"])
        if digest != record["digest"]:
            raise DataError(
                f"the frozen encoder weights in {source} differ from those the checkpoint was trained on "
                f"({record['encoder']}; sha256 {record['digest'][:12]}..., found {digest[:12]}...). "
                "Fix: point encoder.name_or_path at the pretrained weights the run used"
            )
        checkpoint["state_dict"].update({k: params[k].detach().clone() for k in record["keys"]})

    # Features ---------------------------------------------------------------------------------------
    @property
    def layers_run(self) -> int:
        """How many encoder layers a forward pass runs: the index of the top hidden state it gives."""
        return self.encoder.num_hidden_states - 1 if self.encoder_layers_run is None else self.encoder_layers_run

    def hidden_states(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        """The hidden states the fusion reads, each [B, T, H] ([B, 1, H] where :attr:`reads_summary_only`):
        all of them (up to the highest the fusion reads, when the layers above are skipped), or only the one
        read (a 1-tuple) for a fusion that reads nothing else; from the feature cache, None stands for each
        one the fusion does not read (the entry may not hold it). No graph is kept for a frozen encoder."""
        if self.feature_cache is not None:
            cached = self.feature_cache.lookup(batch)
            if cached is not None:
                return cached
        with torch.set_grad_enabled(torch.is_grad_enabled() and (self.encoder_graph_always or not self.encoder_frozen)):
            return self.encoder(**encoder_inputs(batch), all_layers=self.fusion.indices != (self.layers_run,),
                                num_layers=self.encoder_layers_run, summary_only=self.reads_summary_only)

    def encode(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Fused per-token features [B, T, feature_size]; [B, 1, feature_size], the summary token's alone,
        where :attr:`reads_summary_only` (unless the feature cache gave every token's)."""
        return self.fusion(self.hidden_states(batch))
