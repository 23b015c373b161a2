"""The reference side of benchmarks/train_speed.py (and of the full-data study's Trainer arms): transformers'
``Trainer`` on sesame's own training examples with sesame's optimiser groups, the switches it was given checked
inside the run, and its saved model scored by sesame's evaluation path."""

from __future__ import annotations

import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from compression import compose
from train_speed_arms import check_mirrorable, settings_of
from train_speed_recorder import StepRecorder
from sesame.tasks.base.run_settings import RunSettings


#: Inputs the Hugging Face models read, per kind of head.
HF_KEYS = {
    "sequence": ("input_ids", "attention_mask", "token_type_ids", "labels"),
    "qa": ("input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions"),
    "token": ("input_ids", "attention_mask", "token_type_ids", "labels"),
}


class HFExamples:
    """sesame's encoded training examples, as the dicts of lists an HF collator pads."""

    def __init__(self, source: Any, keys: tuple[str, ...]) -> None:
        self.source, self.keys = source, keys

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.source[i]
        return {k: (row[k].tolist() if hasattr(row[k], "tolist") else row[k]) for k in self.keys if k in row}


def hf_model(kind: str, path: str, cfg: Any, datamodule: Any) -> Any:
    """The transformers model of the task: ``sequence`` (GLUE; no label names: a 1-output regression, STS-B),
    ``token`` (NER) or ``qa``."""
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    if kind == "qa":
        return AutoModelForQuestionAnswering.from_pretrained(path)
    if kind != "token" and not cfg.data.get("label_names"):
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, problem_type="regression")
    names = list(datamodule.tag_names) if kind == "token" else list(cfg.data.label_names)
    cls = AutoModelForTokenClassification if kind == "token" else AutoModelForSequenceClassification
    return cls.from_pretrained(path, num_labels=len(names), id2label=dict(enumerate(names)),
                               label2id={n: i for i, n in enumerate(names)})


def head_parameter(model: Any, name: str) -> bool:
    """Whether sesame would train this parameter at ``finetune.head_lr``: everything outside the
    encoder, and BERT's pooler, which ``pooling=pooler`` copies into sesame's head."""
    prefix = getattr(model, "base_model_prefix", "")
    return not name.startswith(prefix + ".") or name.startswith(f"{prefix}.pooler.")


def sesame_optimizer(trainer: Any, head_lr: float) -> Any:
    """The optimiser sesame builds (``tasks/encoders/finetune.py`` ``build_optimizer``) for a transformers
    ``Trainer``'s model: the encoder at the Trainer's learning rate, the head (:func:`head_parameter`) at
    ``head_lr``, weight decay on the parameters the Trainer decays, its optimiser class and arguments."""
    decay = set(trainer.get_decay_parameter_names(trainer.model))
    named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
    groups = []
    for head, lr in ((False, trainer.args.learning_rate), (True, head_lr)):
        part = [(n, p) for n, p in named if head_parameter(trainer.model, n) == head]
        for decayed, wd in ((True, trainer.args.weight_decay), (False, 0.0)):
            params = [p for n, p in part if (n in decay) == decayed]
            if params:
                groups.append({"params": params, "lr": lr, "weight_decay": wd})
    optimizer_cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
    return optimizer_cls(groups, **kwargs)


def sesame_optim(cfg: Any) -> str:
    """The Trainer's name for the AdamW implementation sesame's ``build_optimizer`` builds (fused or not)."""
    from sesame.tasks.encoders.finetune import build_optimizer
    from sesame.tasks.encoders.finetune_settings import FinetuneSettings
    from torch import nn

    optimizer, _ = build_optimizer(nn.Linear(2, 2), [], FinetuneSettings.from_config(cfg.finetune), 10)
    return "adamw_torch_fused" if optimizer.defaults.get("fused") else "adamw_torch"


def reference_trainer_class(head_lr: float, train_sampler: Callable[[int, Callable[[], Any]], Any],
                            on_batch: Callable[[Any, Any], None]) -> type:
    """transformers' ``Trainer`` as both Trainer arms train (this benchmark's and the full-data study's):
    sesame's learning-rate groups (:func:`sesame_optimizer` at ``head_lr``), the training sampler that
    ``train_sampler(number of examples, the Trainer's own sampler)`` returns, and ``on_batch(trainer, inputs)``
    called before each training step (a per-step recorder, the study's clock)."""
    from transformers import Trainer

    class ReferenceTrainer(Trainer):
        def create_optimizer(self, model: Any = None) -> Any:
            if self.optimizer is None:
                self.optimizer = sesame_optimizer(self, head_lr)
            return self.optimizer

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            own = lambda: super(ReferenceTrainer, self)._get_train_sampler(train_dataset)  # noqa: E731
            return train_sampler(len(train_dataset or self.train_dataset), own)

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            on_batch(self, inputs)
            return super().training_step(model, inputs, num_items_in_batch)

    return ReferenceTrainer


def run_hf(overrides: list[str], steps: int, warmup: int, run_dir: Path, kind: str, padding: str, order: str,
           optim: str, save: bool = True, bf16: bool = False) -> dict[str, Any]:
    """Train the Hugging Face model on sesame's training examples with the ``Trainer`` (``bf16``: its own CPU bf16
    autocast); save it (``save``) into ``<run_dir>/hf_model``, a folder sesame-eval reads."""
    import torch
    from sesame.tasks.inputs.batching import LengthGroupedShuffleSampler, ResumableShuffleSampler
    from sesame.tasks.encoders.encoder import resolve_name_or_path
    from omegaconf import OmegaConf
    from sesame.tasks.runs.runner import build_datamodule
    from transformers import (
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    cfg = compose("config", overrides)
    check_mirrorable(cfg)
    settings = settings_of(cfg)
    optim = sesame_optim(cfg) if optim == "auto" else optim
    started = time.perf_counter()
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("fit")
    cfg = OmegaConf.merge(cfg, datamodule.config_updates())  # what the data decides (label sets)
    tokenizer = datamodule.tokenizer
    examples = HFExamples(datamodule.dataset("train"), HF_KEYS[kind])
    set_seed(settings["seed"])
    model = hf_model(kind, resolve_name_or_path(str(cfg.encoder.name_or_path)), cfg, datamodule)
    pad = {"padding": "max_length", "max_length": settings["max_seq_length"]} if padding == "max_length" else {}
    collator = (DataCollatorForTokenClassification(tokenizer, **pad) if kind == "token"
                else DataCollatorWithPadding(tokenizer, **pad))
    recorder = StepRecorder()
    switches = TrainerSwitches(model)

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kw):
            recorder.begin_training(optimizer, len(examples))

        def on_step_begin(self, args, state, control, optimizer=None, **kw):
            recorder.start(optimizer)

        def on_step_end(self, args, state, control, **kw):
            recorder.end()

        def on_train_end(self, args, state, control, **kw):
            recorder.finish_training()

    # order=sesame: the very shuffle sesame's train loader draws (tasks/inputs/batching.py); sesame_grouped: its
    # length-grouped one (data.group_by_length=true); else the Trainer's own.
    def sampler(size: int, own: Any) -> Any:
        if order == "sesame":
            return switches.sampler(ResumableShuffleSampler(size, datamodule.seed))
        if order == "sesame_grouped":
            return switches.sampler(LengthGroupedShuffleSampler(datamodule.example_lengths("train"),
                                                                settings["batch_size"], datamodule.seed))
        return switches.sampler(own())

    ReferenceTrainer = reference_trainer_class(settings["head_lr"], sampler, lambda trainer, inputs: recorder.batch(inputs))

    args = TrainingArguments(
        output_dir=str(run_dir / "hf_trainer"), max_steps=steps, per_device_train_batch_size=settings["batch_size"],
        learning_rate=settings["encoder_lr"], weight_decay=settings["weight_decay"],
        adam_epsilon=settings["adam_epsilon"], lr_scheduler_type="linear",
        warmup_steps=int(settings["warmup_ratio"] * steps),  # sesame: int(warmup_ratio * total steps)
        max_grad_norm=settings["gradient_clip_val"] or 0.0, optim=optim, seed=settings["seed"],
        **sampling_argument(TrainingArguments, order == "group_by_length"), **precision_arguments(bf16),
        logging_strategy="steps", logging_steps=settings["log_every_n_steps"], save_strategy="no",
        eval_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=settings["num_workers"], dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = ReferenceTrainer(model=model, args=args, train_dataset=examples, data_collator=collator,
                               processing_class=tokenizer, callbacks=[Timer()])
    trainer.train()
    total = time.perf_counter() - started
    folder = run_dir / "hf_model"
    if save:
        trainer.save_model(str(folder))  # model + tokenizer: what sesame-eval model=<folder> reads
    return {**recorder.summary(warmup), "run_seconds": total, "hf_model": str(folder),
            "attn_implementation": model.config._attn_implementation, "settings": settings, "hf_optim": optim,
            "switches": switches.check(order == "group_by_length", bf16,
                                       "LengthGroupedShuffleSampler" if order == "sesame_grouped" else None)}


def precision_arguments(bf16: bool) -> dict[str, Any]:
    """TrainingArguments for the Trainer's own bf16 autocast; on a machine without CUDA it needs ``use_cpu``."""
    import torch

    return {"bf16": True, "use_cpu": not torch.cuda.is_available()} if bf16 else {}


class TrainerSwitches:
    """What the Trainer's speed switches did, read from the run itself rather than from its arguments: the class of
    the sampler it trained with, and, inside the model's first training forward, the autocast state and dtype and
    the dtype a linear layer computed in. The hook sits on the first ``nn.Linear``, not on the model: accelerate puts
    autocast around the model's ``forward`` only, so a hook on the model itself would run outside it.
    ``check`` fails the run when a switch that was asked for did not take effect."""

    def __init__(self, model: Any) -> None:
        import torch

        self.seen: dict[str, Any] = {}
        linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        self.handle = linear.register_forward_hook(self.forward_hook)

    def sampler(self, sampler: Any) -> Any:
        self.seen["sampler"] = type(sampler).__name__
        return sampler

    def forward_hook(self, module: Any, inputs: Any, output: Any) -> None:
        import torch

        if not module.training or "autocast" in self.seen:
            return
        device = output.device.type
        self.seen["autocast"] = torch.is_autocast_enabled(device)
        self.seen["autocast_dtype"] = str(torch.get_autocast_dtype(device)).removeprefix("torch.")
        self.seen["linear_dtype"] = str(output.dtype).removeprefix("torch.")

    def check(self, grouped: bool, bf16: bool, sampler: str | None = None) -> dict[str, Any]:
        """The switches seen; raises when grouping, bf16 or (``sampler``) a sampler class was asked for and did not
        happen."""
        self.handle.remove()
        print(f"[hf] switches in effect: sampler {self.seen.get('sampler')}, autocast {self.seen.get('autocast')} "
              f"({self.seen.get('autocast_dtype')}), a linear layer computed in {self.seen.get('linear_dtype')}", flush=True)
        if grouped and self.seen.get("sampler") != "LengthGroupedSampler":
            raise RuntimeError(f"length grouping was asked for, the Trainer sampled with {self.seen.get('sampler')}")
        if sampler and self.seen.get("sampler") != sampler:
            raise RuntimeError(f"{sampler} was asked for, the Trainer sampled with {self.seen.get('sampler')}")
        if bf16 and not (self.seen.get("autocast") and self.seen.get("linear_dtype") == "bfloat16"):
            raise RuntimeError(f"bf16 was asked for, the forward ran with autocast {self.seen}")
        return dict(self.seen)


def sampling_argument(arguments: type, grouped: bool) -> dict[str, Any]:
    """Length-grouped sampling in this transformers' TrainingArguments (5.x: train_sampling_strategy)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(arguments)}
    if "train_sampling_strategy" in names:
        return {"train_sampling_strategy": "group_by_length" if grouped else "random"}
    return {"group_by_length": grouped}


def evaluate_hf(overrides: list[str], folder: Path, run_dir: Path) -> tuple[str, dict[str, Any]]:
    """Score a saved HF model with sesame's evaluation path (``sesame-eval model=<folder>``)."""
    from sesame.tasks.runs.evaluation import evaluate

    cfg = compose("eval", [*overrides, f"model={folder.resolve()}", "trainer.enable_progress_bar=false",
                           "trainer.enable_model_summary=false"])
    return str(cfg.task.main_metric), evaluate(RunSettings.from_config(cfg), run_dir)
