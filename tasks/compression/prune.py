"""``sesame-compress prune``: remove the attention heads and feed-forward neurons a trained model needs least.

    sesame-compress prune outputs/glue/<run> outputs/glue/<run>-pruned --heads 0.3 --ffn 0.4 [--batches 32]

The scores are Michel et al.'s (2019) ``|dL/dmask|`` on the run's own training batches, normalised per
layer and ranked across layers (``tasks/compression/prune_importance.py``); the lowest ``--heads`` of
all heads and ``--ffn`` of all neurons go, so layers keep different numbers of each. The weights are
cut, not masked (``tasks/encoders/pruning.py``): the model is smaller and faster.

Output folder (new; an existing path is refused):
- ``encoder/``: the pruned encoder as a Hugging Face folder, its compact weights and, in its
  ``config.json``, the record of what each layer keeps (``sesame_pruning``), which sesame's encoder
  loading applies before loading the weights; so ``sesame-train encoder.name_or_path=<output>/encoder
  distill.teacher=<run>`` trains it further (recovery training, with the unpruned run as teacher);
- ``checkpoints/best.ckpt`` and ``config.yaml``: the task model on the pruned encoder, every other
  weight the source's, which ``sesame-eval model=<output>`` and ``sesame-predict <output>`` run as it is;
- ``compression.json``: the fractions, the kept heads and neurons of each layer, parameter counts
  before and after, and the importance scores.

Pruning a little at a time, each step followed by recovery training distilled from the unpruned run
(``--rounds N --recover KEY=VALUE``), is ``tasks/runs/prune_schedule.py``: it trains, so it lives above
this layer and calls :func:`prune` once a round.

``sesame-export --format onnx`` exports the compact model; ``--format hf`` writes plain transformers
shapes (every head, the widest layer's neurons) with the removed parts' weights zero: the same outputs,
not a smaller folder (plain transformers cannot describe layers of different sizes).
"""

from __future__ import annotations

import copy
import itertools
import logging
from pathlib import Path
from typing import Any

import torch

from sesame.tasks.base.run_settings import task_class
from sesame.tasks.compression.prune_importance import importance, normalised, select
from sesame.tasks.core.atomic_files import staged_folder, write_json_atomic
from sesame.tasks.core.errors import ConfigError, UserError
from sesame.tasks.encoders.families import prune_layout
from sesame.tasks.encoders.pruning import PLAIN_SHAPES, parameter_count, present, prune_model
from sesame.tasks.saved.checkpoints import TrainedModel, load_trained, save_model_folder
from sesame.tasks.saved.int8 import is_quantized

log = logging.getLogger(__name__)

#: What the Hugging Face export of a pruned model is (compression.json, the export's model card).
#: What a refused write of the output leaves behind (``staged_folder`` removes its partial folder).
NOTHING_WRITTEN = "Nothing was written (the partial folder was removed). "
HF_EXPORT_NOTE = f"sesame-export --format hf writes {PLAIN_SHAPES}. --format onnx exports the compact pruned model"


def check_fraction(value: float, flag: str) -> float:
    """A share of heads or neurons to remove: in [0, 1)."""
    if not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"{flag} {value:g}: the share of them to remove lies in [0, 1) (0.3 removes 30%)")
    return float(value)


def check_arguments(heads: float, ffn: float, batches: int) -> tuple[float, float]:
    """The ``--heads`` and ``--ffn`` shares, each checked to lie in [0, 1), and ``--batches`` checked."""
    heads, ffn = check_fraction(heads, "--heads"), check_fraction(ffn, "--ffn")
    if batches < 1:
        raise ConfigError(f"--batches {batches}: score on at least 1 training batch")
    return heads, ffn


def refuse_existing(output: Path) -> None:
    """``sesame-compress prune`` writes only a new folder."""
    if output.exists():
        raise UserError(f"the output {str(output)!r} exists; sesame-compress prune writes only a new folder. "
                        "Fix: name a new folder, or remove that one")


def training_batches(trained: TrainedModel, count: int) -> list[dict[str, Any]]:
    """The first ``count`` training batches of the run's own data settings (its shuffle, its seed)."""
    settings = trained.settings
    datamodule = task_class(settings.task, "datamodule")(settings.data, trained.tokenizer(), seed=settings.seed)
    datamodule.setup("fit")
    if not datamodule.has_split("train"):
        raise ConfigError(f"{trained.checkpoint}: its config names no training data (data.train_file), which pruning "
                          "scores the heads and neurons on")
    return list(itertools.islice(datamodule.train_dataloader(), count))


def prune(source: str | Path, output_dir: str | Path, heads: float = 0.0, ffn: float = 0.0,
          batches: int = 32) -> dict[str, Any]:
    """Write the pruned model of ``source`` (a run folder or .ckpt) into the new folder ``output_dir``;
    returns the report (also ``<output_dir>/compression.json``)."""
    heads, ffn = check_arguments(heads, ffn, batches)
    output = Path(output_dir).expanduser()
    refuse_existing(output)
    trained = load_trained(source)
    module, cfg = trained.module, trained.cfg
    if is_quantized(cfg):
        raise ConfigError(f"{trained.checkpoint} is quantised (int8): prune before quantising. Fix: prune the float run, "
                          "then sesame-compress quantize the pruned one")
    model = module.encoder.model
    layout = prune_layout(model.config, "sesame-compress prune")
    if trained.settings.finetune.mode == "lora":
        raise ConfigError(f"{trained.checkpoint} trained LoRA adapters (finetune=lora) on the projections pruning cuts; "
                          "sesame-compress prune takes runs whose encoder weights are plain (finetune=full, frozen, top_k "
                          "or bitfit)")
    heads_before, neurons_before = present(model, layout)
    params_before, encoder_before = parameter_count(module), parameter_count(model)

    data = training_batches(trained, batches)
    if len(data) < batches:
        log.info("scoring on %d training batches: the run's training data has no more (--batches %d)", len(data), batches)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    module.to(device)
    scores = importance(module, data, layout)
    module.to("cpu")
    head_scores, neuron_scores = normalised(scores.heads), normalised(scores.neurons)
    keep_heads = select(head_scores, heads, "attention heads", "--heads",
                        "remove the layer with sesame-compress drop-layers")
    keep_neurons = select(neuron_scores, ffn, "feed-forward neurons", "--ffn",
                          "remove the layer with sesame-compress drop-layers")
    pooler = module.pooling.dense if module.reads_encoder_pooler() else None  # the trained copy pooling=pooler holds
    plan = prune_model(model, layout, keep_heads, keep_neurons)
    params_after, encoder_after = parameter_count(module), parameter_count(model)

    encoder_dir = output / "encoder"
    cfg = copy.deepcopy(cfg)
    # The tokenizer is copied into the folder, so it comes from there too.
    cfg["encoder"] = {**cfg["encoder"], "name_or_path": str(encoder_dir.resolve()), "tokenizer": None}
    cfg["compression"] = {**(cfg.get("compression") or {}),
                          "pruned": {"source": str(trained.checkpoint), "heads": heads, "ffn": ffn}}
    report: dict[str, Any] = {
        "source": str(trained.checkpoint), "method": "structured_pruning",
        "heads_fraction": heads, "ffn_fraction": ffn, "batches": scores.batches,
        "heads": {"before": sum(heads_before), "after": sum(len(h) for h in plan.heads),
                  "per_layer_before": heads_before, "per_layer": [len(h) for h in plan.heads],
                  "kept_per_layer": [list(h) for h in plan.heads]},
        "neurons": {"before": sum(neurons_before), "after": sum(plan.neurons),
                    "per_layer_before": neurons_before, "per_layer": list(plan.neurons),
                    "kept_per_layer": keep_neurons},
        "parameters": {"before": params_before, "after": params_after,
                       "encoder_before": encoder_before, "encoder_after": encoder_after},
        "encoder": str(encoder_dir), "checkpoint": str(output / "checkpoints" / "best.ckpt"),
        "plan": f"{encoder_dir / 'config.json'}: sesame_pruning, per layer the kept heads (indices of the unpruned "
                "layer's heads) and the number of kept neurons (here: neurons.kept_per_layer, their positions among "
                "the source's neurons)",
        "hf_export": HF_EXPORT_NOTE,
        "importance": {
            "method": ("Michel et al. 2019: |dL/dmask| of each head and neuron mask, the run's own training loss, summed "
                       f"over {scores.batches} training batches (abs per batch); ranked after dividing each layer's "
                       "scores by their L2 norm, across all layers"),
            "heads": _rounded(head_scores), "neurons": _rounded(neuron_scores),
            "heads_raw": _rounded(scores.heads), "neurons_raw": _rounded(scores.neurons),
        },
    }
    _write(output, module, cfg, trained, pooler, report)
    log.info("pruned %d of %d heads and %d of %d neurons: %d -> %d parameters -> %s",
             report["heads"]["before"] - report["heads"]["after"], report["heads"]["before"],
             report["neurons"]["before"] - report["neurons"]["after"], report["neurons"]["before"],
             params_before, params_after, output)
    return report


def _rounded(scores: list[torch.Tensor]) -> list[list[float]]:
    return [[float(f"{v:.6g}") for v in s.tolist()] for s in scores]


def _write(output: Path, module: Any, cfg: dict[str, Any], trained: TrainedModel, pooler: Any,
           report: dict[str, Any]) -> None:
    """The run folder, written into a hidden folder next to ``output`` and renamed into place when whole."""
    with staged_folder(output, refuse_existing, NOTHING_WRITTEN) as staging:
        model = module.encoder.model
        weights = dict(model.state_dict())
        if pooler is not None and getattr(model, "pooler", None) is None:
            # pooling=pooler: the head holds the trained pooler (the encoder's was dropped); the encoder
            # folder carries it, so a model trained from that folder starts from it (as drop-layers does).
            weights.update({"pooler.dense.weight": pooler.weight, "pooler.dense.bias": pooler.bias})
        model.save_pretrained(staging / "encoder", state_dict=weights)
        tokenizer = trained.tokenizer()
        save_model_folder(module, cfg, staging, tokenizer)
        write_json_atomic(staging / "compression.json", report)
