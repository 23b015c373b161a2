"""Evaluate a trained model: a sesame checkpoint, a run folder, or a Hugging Face ``...For<Task>`` folder."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from sesame.tasks.compression.int8 import QUANTIZED_TRAINER, is_quantized, quantize_module
from sesame.tasks.module import EncoderTaskModule
from sesame.tasks.runner import build_datamodule, build_trainer, config_with_data, finish_run, flat_metrics


def find_checkpoint(path: str | Path) -> Path:
    """A .ckpt file as given; a run folder -> its ``checkpoints/best.ckpt`` (else ``last.ckpt``)."""
    path = Path(path)
    if path.is_file():
        return path
    for name in ("best.ckpt", "last.ckpt"):
        if (path / "checkpoints" / name).is_file():
            return path / "checkpoints" / name
    raise FileNotFoundError(f"checkpoint={str(path)!r}: not a .ckpt file, a run folder, or a Hugging Face model folder")


def is_hf_model_folder(path: str | Path) -> bool:
    return (Path(path) / "config.json").is_file()


def load_for_evaluation(cfg: DictConfig) -> tuple[EncoderTaskModule, DictConfig]:
    """The module to evaluate, and the config its data must be read with."""
    source = Path(str(cfg.checkpoint))
    if is_hf_model_folder(source):
        cfg = OmegaConf.merge(cfg, {"encoder": {"name_or_path": str(source)}})
        datamodule_cfg = cfg
        module = None
    else:
        ckpt_path = find_checkpoint(source)
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        trained = OmegaConf.create(checkpoint["hyper_parameters"]["cfg"])
        if trained.task.name != cfg.task.name:
            raise ValueError(f"{ckpt_path} was trained for task={trained.task.name}, not task={cfg.task.name}")
        # The trained model's settings; this command's data files and trainer; never the training file.
        # Its label / tag set too (GLUE label_names, NER tag_names; QA data has neither key).
        labels = {k: trained.data[k] for k in ("label_names", "tag_names") if k in trained.data}
        data = OmegaConf.merge(cfg.data, {"train_file": None, **labels})
        datamodule_cfg = OmegaConf.merge(trained, {"data": data, "trainer": cfg.trainer})
        module = get_class(trained.task.module)(trained)
        if is_quantized(trained):  # int8 weights load only into the same quantised structure, run on CPU
            quantize_module(module)
            datamodule_cfg = OmegaConf.merge(datamodule_cfg, {"trainer": QUANTIZED_TRAINER})
        module.load_state_dict(checkpoint["state_dict"])
    return module, datamodule_cfg


def evaluate(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    module, cfg = load_for_evaluation(cfg)
    datamodule = build_datamodule(cfg)
    datamodule.setup("validate")
    if module is None:  # a Hugging Face folder: the encoder loads from it, the head from its task weights
        cfg = config_with_data(cfg, datamodule)
        module = get_class(cfg.task.module)(cfg)
        module.load_hf_head(cfg.encoder.name_or_path)
    module.output_dir = run_dir
    trainer = build_trainer(cfg, run_dir, monitor=None)
    metrics: dict[str, float] = {}
    if datamodule.has_split("validation"):
        metrics.update(flat_metrics(trainer.validate(module, datamodule=datamodule, verbose=False)))
    if datamodule.has_split("test"):
        metrics.update(flat_metrics(trainer.test(module, datamodule=datamodule, verbose=False)))
    finish_run(module, metrics, run_dir)
    return metrics
