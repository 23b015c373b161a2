"""Evaluate a trained model: a sesame run folder or checkpoint, or a Hugging Face ``...For<Task>`` folder.

``cfg.model`` names what to evaluate (``conf/eval.yaml``). The evaluation itself is the same
validate / test path a training run ends with (``tasks/module.py``).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sesame.tasks.checkpoints import build_module, checkpoint_config, is_hf_model_folder, read_checkpoint
from sesame.tasks.compression.int8 import QUANTIZED_TRAINER, is_quantized
from sesame.tasks.encoder import check_tokenizer_fits
from sesame.tasks.errors import ConfigError
from sesame.tasks.module import EncoderTaskModule
from sesame.tasks.run_lock import holds_run_folder
from sesame.tasks.runner import build_datamodule, build_trainer, config_with_data, finish_run, flat_metrics


def load_for_evaluation(cfg: DictConfig) -> tuple[EncoderTaskModule | None, DictConfig]:
    """The module to evaluate (None for a Hugging Face folder: built once its data is read), and the
    config its data must be read with."""
    if OmegaConf.is_missing(cfg, "model") or cfg.get("model") is None:
        raise ConfigError("sesame-eval needs model=<run folder | .ckpt | Hugging Face model folder> "
                          "(the key was called checkpoint= before)")
    source = Path(str(cfg.model)).expanduser()
    if is_hf_model_folder(source):
        return None, OmegaConf.merge(cfg, {"encoder": {"name_or_path": str(source)}})
    ckpt_path, checkpoint = read_checkpoint(source)
    trained = OmegaConf.create(checkpoint_config(checkpoint))
    if trained.task.name != cfg.task.name:
        raise ConfigError(f"{ckpt_path} was trained for task={trained.task.name}, not task={cfg.task.name}. "
                          f"Fix: pass task={trained.task.name}")
    # The trained model's settings; this command's data files and trainer; never the training file.
    # Its label / tag set too (GLUE label_names, NER tag_names; QA data has neither key).
    labels = {k: trained.data[k] for k in ("label_names", "tag_names") if k in trained.data}
    data = OmegaConf.merge(cfg.data, {"train_file": None, **labels})
    datamodule_cfg = OmegaConf.merge(trained, {"data": data, "trainer": cfg.trainer})
    module = build_module(trained, checkpoint["state_dict"])
    if is_quantized(trained):  # int8 kernels run on CPU
        datamodule_cfg = OmegaConf.merge(datamodule_cfg, {"trainer": QUANTIZED_TRAINER})
    return module, datamodule_cfg


@holds_run_folder
def evaluate(cfg: DictConfig, run_dir: Path) -> dict[str, float]:
    """Validate / test the model ``cfg.model`` names; write metrics and predictions into ``run_dir``."""
    module, cfg = load_for_evaluation(cfg)
    datamodule = build_datamodule(cfg)
    datamodule.setup("validate")
    if module is None:  # a Hugging Face folder: the encoder loads from it, the head from its task weights
        cfg = config_with_data(cfg, datamodule)
        module = build_module(cfg)
        module.load_hf_head(cfg.encoder.name_or_path)
    check_tokenizer_fits(datamodule.tokenizer, module.encoder.config, module.encoder.name_or_path)
    module.output_dir = run_dir
    trainer = build_trainer(cfg, run_dir, monitor=None)
    metrics: dict[str, float] = {}
    if datamodule.has_split("validation"):
        metrics.update(flat_metrics(trainer.validate(module, datamodule=datamodule, verbose=False)))
    if datamodule.has_split("test"):
        metrics.update(flat_metrics(trainer.test(module, datamodule=datamodule, verbose=False)))
    finish_run(module, metrics, run_dir)
    return metrics
