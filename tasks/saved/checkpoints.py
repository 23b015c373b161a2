"""Trained models on disk: find a checkpoint, read it, rebuild its module, save a weights-only one.

A sesame checkpoint is ``{state_dict, hyper_parameters: {cfg}}`` (Lightning's format; ``cfg`` is the
resolved config the module was built from), found as a ``.ckpt`` file or inside a run folder's
``checkpoints/``. Training-time checkpoint writing is ``tasks/runs/checkpoint_callbacks.py``.
"""

from __future__ import annotations

import importlib.metadata
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class
from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from sesame.tasks.core.atomic_files import torch_save_atomic, write_text_atomic
from sesame.tasks.saved.checkpoint_files import load_checkpoint_file
from sesame.tasks.saved.int8 import is_quantized, quantize_module
from sesame.tasks.saved.config_upgrade import with_added_settings
from sesame.tasks.encoders.encoder import Encoder, load_tokenizer
from sesame.tasks.encoders.store import ENCODER_FOLDER, FROZEN_KEY, encoder_folder_of, has_weights, save_encoder_folder
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.task_network import EncoderTaskNetwork
from sesame.tasks.saved.trained_overrides import TrainedOverrides, apply_overrides

def is_hf_model_folder(path: str | Path) -> bool:
    """A Hugging Face model folder (``config.json``), as opposed to a sesame run folder or .ckpt."""
    return (Path(path) / "config.json").is_file()


def find_checkpoint(path: str | Path, names: Sequence[str] = ("best.ckpt", "last.ckpt"), key: str = "model") -> Path:
    """A .ckpt file as given; a run folder -> the first of ``names`` in its ``checkpoints/``.

    ``key`` is the setting the path came from, for the error message.
    """
    path = Path(path).expanduser()
    if path.is_file():
        return path
    for name in names:
        if (path / "checkpoints" / name).is_file():
            return path / "checkpoints" / name
    wanted = " or ".join(f"checkpoints/{n}" for n in names)
    raise MissingFileError(f"{key}={str(path)!r}: not a .ckpt file, nor a run folder holding {wanted}")


def read_checkpoint(path: str | Path, key: str = "model") -> tuple[Path, dict[str, Any]]:
    """``(checkpoint file, its contents)`` for a .ckpt file or a run folder (its best, else last)."""
    ckpt_path = find_checkpoint(path, key=key)
    checkpoint = load_checkpoint_file(ckpt_path)
    if "state_dict" not in checkpoint or "cfg" not in (checkpoint.get("hyper_parameters") or {}):
        raise DataError(f"{ckpt_path} is not a sesame checkpoint (no state_dict / hyper_parameters.cfg)")
    return ckpt_path, checkpoint


def checkpoint_config(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of the config a checkpoint's module was built from, with any setting added to
    sesame since it was written at its default (``tasks/saved/config_upgrade.py``)."""
    return with_added_settings(checkpoint["hyper_parameters"]["cfg"])


def build_module(settings: RunSettings, checkpoint: dict[str, Any] | None = None, encoder: Encoder | None = None,
                 encoder_source: str = "the pretrained encoder", network_only: bool = False) -> EncoderTaskNetwork:
    """The task module ``settings.task`` names (``network_only``: its network, plain torch, no Lightning;
    the same state dict), quantised first when its config says so, with ``checkpoint``'s weights loaded
    (its frozen encoder weights filled in from ``encoder``, digest-checked)."""
    task = settings.task
    module = get_class(task.network if network_only else task.module)(settings, encoder)
    if is_quantized(settings.config):  # packed int8 weights load only into the same quantised structure
        quantize_module(module)
    if checkpoint is not None:
        module.complete_checkpoint(checkpoint, source=encoder_source)
        module.load_state_dict(checkpoint["state_dict"])
    return module


@dataclass
class TrainedModel:
    """A trained model read back from disk: the module (CPU, eval mode), the settings it was built with
    (with any overrides applied; ``cfg`` is their record, for writing), its checkpoint file and the
    folder its encoder and tokenizer came from."""

    module: EncoderTaskNetwork  # the task's Lightning module; its network alone where loaded with network_only
    settings: RunSettings
    checkpoint: Path
    encoder_folder: str
    tokenizer_source: str  # the run's encoder/ folder, or encoder.tokenizer / name_or_path
    global_step: int | None = None  # the optimiser step its weights are from (None: not recorded)

    @property
    def cfg(self) -> dict[str, Any]:
        """The config the model was built from, as plain data: what a derived model folder records."""
        return self.settings.config

    def tokenizer(self) -> PreTrainedTokenizerFast:
        return load_tokenizer(self.tokenizer_source)


def load_trained(path: str | Path, key: str = "model",
                 overrides: Mapping[str, Any] | TrainedOverrides | None = None, network_only: bool = False) -> TrainedModel:
    """The trained model of a .ckpt file or run folder (``key`` names the setting it came from).

    The encoder is built from the run's ``encoder/`` folder (``tasks/encoders/store.py``), so the
    pretrained folder used in training may be gone; a bare .ckpt without its run folder, or an
    ``encoder.name_or_path`` override, loads the encoder from ``encoder.name_or_path``. Weights the
    checkpoint holds are not read twice: a fully fine-tuned checkpoint builds the encoder from its
    config alone. ``overrides`` (``{"head.max_answer_length": 50}``, or a command's
    ``TrainedOverrides``) go through ``tasks/saved/trained_overrides.py``. ``network_only``: build the
    task's network (``task.network``), which predicts and imports no Lightning, not its Lightning module.
    """
    ckpt_path, checkpoint = read_checkpoint(path, key=key)
    cfg = checkpoint_config(checkpoint)
    if overrides is not None and not isinstance(overrides, TrainedOverrides):
        overrides = TrainedOverrides.of_values(overrides, ckpt_path)
    overridden = set(overrides.values) if overrides is not None else set()
    if overridden:
        cfg = apply_overrides(cfg, overrides, ckpt_path)
    trained = RunSettings.of_trained(cfg)
    settings = trained.encoder
    folder = encoder_folder_of(ckpt_path)
    source = str(folder) if folder is not None and "encoder.name_or_path" not in overridden else settings.name_or_path
    # The run's encoder/ folder holds the tokenizer training used, whatever encoder.tokenizer named.
    tokenizer_source = str(folder) if folder is not None and not overridden & {"encoder.tokenizer", "encoder.name_or_path"} \
        else settings.tokenizer or settings.name_or_path
    needs_weights = bool(checkpoint.get(FROZEN_KEY))
    if needs_weights and Path(source).is_dir() and not has_weights(source):
        raise MissingFileError(
            f"{ckpt_path} leaves its frozen encoder weights to {source}, which holds none. Fix: set "
            f"encoder.name_or_path=<the pretrained encoder the run used: {settings.name_or_path}>"
        )
    encoder = Encoder.from_settings(settings, name_or_path=source, load_weights=needs_weights)
    module = build_module(trained, checkpoint, encoder=encoder, encoder_source=source, network_only=network_only)
    step = checkpoint.get("global_step")
    return TrainedModel(module.eval(), trained, ckpt_path, str(source), str(tokenizer_source),
                        int(step) if step is not None else None)


def load_initial_weights(module: EncoderTaskNetwork, path: str | Path) -> Path:
    """Give ``module`` every weight of the trained model at ``path`` (``init_from``): each of its weights
    must be there with the same shape, and nothing else (a different head, encoder or pruning plan is an
    error naming the keys). Returns the checkpoint read."""
    ckpt_path, checkpoint = read_checkpoint(path, key="init_from")
    module.complete_checkpoint(checkpoint, source=f"encoder.name_or_path ({module.encoder.name_or_path})")
    own, given = module.state_dict(), checkpoint["state_dict"]
    missing = sorted(own.keys() - given.keys())
    unexpected = sorted(given.keys() - own.keys())
    misfit = sorted(k for k in own.keys() & given.keys() if own[k].shape != given[k].shape)
    if missing or unexpected or misfit:
        parts = [f"{name} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                 for name, keys in (("missing", missing), ("not in this model", unexpected), ("other shapes", misfit)) if keys]
        raise ConfigError(f"init_from={path}: the weights of {ckpt_path} do not fit this model ({'; '.join(parts)}). "
                          "Fix: the same task, head settings and encoder (for a pruned run, "
                          "encoder.name_or_path=<that run>/encoder), or init_from=null")
    module.load_state_dict(given)
    return ckpt_path


def save_weights_checkpoint(module: EncoderTaskNetwork, cfg: dict[str, Any], path: str | Path) -> Path:
    """Write ``{state_dict, hyper_parameters: {cfg}}`` atomically: what ``sesame-eval`` and
    :func:`load_trained` read (no optimiser state, so its size is the model's size)."""
    path = Path(path)
    checkpoint = {
        "state_dict": module.state_dict(),
        "hyper_parameters": {"cfg": cfg},
        "pytorch-lightning_version": importlib.metadata.version("lightning"),  # as Lightning's own checkpoints
    }
    return torch_save_atomic(checkpoint, path)


def save_model_folder(module: EncoderTaskNetwork, cfg: dict[str, Any], output_dir: str | Path,
                      tokenizer: PreTrainedTokenizerBase) -> Path:
    """A self-contained run folder ``sesame-eval model=<folder>`` reads: ``checkpoints/best.ckpt``
    (every weight), ``encoder/`` (config and tokenizer) and ``config.yaml``. Returns the checkpoint's path."""
    output_dir = Path(output_dir)
    save_encoder_folder(module.encoder.model, tokenizer, output_dir / ENCODER_FOLDER, with_weights=False)
    ckpt = save_weights_checkpoint(module, cfg, output_dir / "checkpoints" / "best.ckpt")
    write_text_atomic(output_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(cfg)))
    return ckpt


def state_dict_bytes(module: torch.nn.Module) -> int:
    """Bytes of ``torch.save(module.state_dict())``: the model's size on disk, whatever else a checkpoint holds."""
    with tempfile.TemporaryFile() as handle:
        torch.save(module.state_dict(), handle)
        return handle.tell()
