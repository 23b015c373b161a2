"""The two sides of ``benchmarks/step_profile.py`` on one batch: sesame's task module and the transformers
Trainer's model, each with its data path, its bare training step and its framework's training loop.

- The batch: sesame's data module (``tasks/runs/runner.py`` ``build_datamodule``) with
  ``data.group_by_length=true`` draws the epoch's length-grouped training batches (``tasks/inputs/batching.py``
  ``LengthGroupedShuffleSampler``, indices only); :func:`pick_batch` takes one of them (``median``: the first
  full batch whose padded length is the median over the epoch's full batches; ``full``: the first padded to
  ``data.max_seq_length``).
- sesame: ``build_module(RunSettings.from_config(cfg))`` (``tasks/saved/checkpoints.py``); its collator is the train loader's
  (``PaddingCollator``), its dataset the data module's train split; optimiser and schedule from
  ``tasks/encoders/finetune.py`` ``build_optimizer`` as ``configure_optimizers`` builds them (fused AdamW
  where sesame fuses); the loss is the module's own ``training_step``.
- Trainer: transformers' task model holding the very same weights (``tasks/export/hf.py`` ``build_hf_model``,
  what ``sesame-export --format hf`` writes: ``AutoModelForSequenceClassification`` with BERT's pooler for
  ``pooling=pooler``, ``AutoModelForQuestionAnswering``); its dataset is sesame's encoded train split with
  only the model's columns (what the Trainer's ``remove_unused_columns`` leaves), in Arrow as a Hugging
  Face pipeline holds it, padded by ``DataCollatorWithPadding``; optimiser and schedule made by the
  ``Trainer`` itself (``create_optimizer_and_scheduler``, ``optim`` = the torch AdamW kernel sesame uses).
- Both fetch examples as torch's ``DataLoader`` does (``__getitems__`` where the dataset has it).
"""

from __future__ import annotations

import copy
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import record_function

from step_attribution import BACKWARD, CLIP, FORWARD, OPTIMIZER, ZERO_GRAD
from sesame.tasks.base.run_settings import RunSettings

#: Model inputs per kind of head (what the Trainer's model reads).
HF_KEYS = {
    "sequence": ("input_ids", "attention_mask", "token_type_ids", "labels"),
    "qa": ("input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions"),
}
WORKLOADS: dict[str, dict[str, Any]] = {
    "sst2": {
        "overrides": ["task=glue", "data=sst2", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["sst2/train.tsv"], "kind": "sequence", "batch_size": 32, "pick": "median",
        "label": "SST-2, 32 length-grouped sentences",
    },
    "squad256": {
        "overrides": ["task=squad_v1", "data=squad_v1", "data.max_seq_length=256", "data.doc_stride=128"],
        "quick": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=128"],
        "files": ["squad_v1.1/train-subset-44articles.json"], "kind": "qa", "batch_size": 12, "pick": "full",
        "label": "SQuAD v1.1, 12 windows of 256 tokens (stride 128)",
    },
}
SELF_LOG_WARNING = r".*`self.trainer` reference is not registered.*"  # training_step's self.log outside a Trainer


def compose(overrides: Sequence[str]) -> Any:
    """sesame's config (``conf/config.yaml``) with Hydra ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def fetch(dataset: Any, indices: Sequence[int]) -> list[Any]:
    """The examples at ``indices``, fetched as torch's ``DataLoader`` fetches a batch of a map-style dataset."""
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(list(indices)) if getitems else [dataset[i] for i in indices]


def pick_batch(batches: Sequence[Sequence[int]], lengths: Sequence[int], batch_size: int, rule: str,
               max_length: int) -> tuple[list[int], dict[str, Any]]:
    """One full batch of ``batches`` (index lists in training order): the first whose padded length (its longest
    example's ``lengths``) is closest to the target: the median over the full batches (``rule="median"``) or
    ``max_length`` (``"full"``). Returns its indices and how it was chosen."""
    full = [list(b) for b in batches if len(b) == batch_size]
    if not full:
        raise ValueError(f"no full batch of {batch_size} examples")
    padded = [max(lengths[i] for i in b) for b in full]
    target = sorted(padded)[len(padded) // 2] if rule == "median" else max_length
    position = min(range(len(full)), key=lambda j: (abs(padded[j] - target), j))
    return full[position], {"rule": rule, "target_padded_length": target, "position": position,
                            "full_batches": len(full), "median_padded_length": sorted(padded)[len(padded) // 2]}


@dataclass
class Side:
    """One side's batch, data path and bare training step (forward + loss, backward, clipping, optimiser and
    scheduler step, zero_grad), each phase in its ``record_function`` annotation."""

    name: str
    model: torch.nn.Module
    batch: dict[str, torch.Tensor]
    loss: Callable[[], torch.Tensor]
    optimizer: Any
    scheduler: Any
    zero_grad: Callable[[], None]
    max_norm: float
    dataset: Any
    indices: list[int]
    collate: Callable[[list[Any]], dict[str, torch.Tensor]]
    info: dict[str, Any] = field(default_factory=dict)

    def step(self, bf16: bool) -> None:
        with record_function(FORWARD), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = self.loss()
        with record_function(BACKWARD):
            loss.backward()
        with record_function(CLIP):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        with record_function(OPTIMIZER):
            self.optimizer.step()
            self.scheduler.step()
        with record_function(ZERO_GRAD):
            self.zero_grad()

    def timed_step(self, bf16: bool) -> float:
        started = time.perf_counter()
        self.step(bf16)
        return time.perf_counter() - started

    def timed_data(self) -> float:
        """Seconds to fetch the batch's examples and collate them."""
        started = time.perf_counter()
        self.collate(fetch(self.dataset, self.indices))
        return time.perf_counter() - started

    def forward_backward(self, bf16: bool) -> None:
        """Forward (autocast in bf16) and backward, gradients freed after: what the FLOPs are counted on."""
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = self.loss()
        loss.backward()
        self.zero_grad()


@dataclass
class Workload:
    """One workload's config, data module, chosen batch and both sides."""

    name: str
    cfg: Any
    overrides: list[str]
    datamodule: Any
    trained: Any  # tasks/saved/checkpoints.py TrainedModel around the sesame module, for the export helpers
    sesame: Side
    trainer: Side
    batch_info: dict[str, Any]

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.sesame, self.trainer


def workload_overrides(name: str, encoder: str, quick: bool, squad_questions: int) -> list[str]:
    """The overrides of a workload: its task and data (shipped slices when ``quick``), the encoder, its batch
    size, length-grouped batches, no dev set (nothing is evaluated). Layers run on the padded batch, as the
    Trainer's do: both sides compute the same FLOPs, which the BERT formula counts (``encoder.padding_free``
    leaves out the padding, little of a length-grouped batch; its own measurements: docs/speed.md)."""
    spec = WORKLOADS[name]
    out = [*(spec["quick"] if quick else spec["overrides"]), f"encoder.name_or_path={encoder}",
           f"data.batch_size={spec['batch_size']}", "data.group_by_length=true", "data.validation_file=null",
           "encoder.padding_free=false"]
    if spec["kind"] == "qa" and not quick:
        out.append(f"data.max_train_examples={squad_questions}")
    return out


def build_workload(name: str, encoder: str, quick: bool, squad_questions: int, total_steps: int,
                   work_dir: Path, pick: str | None = None) -> Workload:
    """Data, the batch, sesame's module and the Trainer's model with the same weights, both sides' optimisers
    (schedules over ``total_steps``); ``work_dir``: the Trainer's output folder (nothing is saved); ``pick``: which
    batch (:func:`pick_batch`'s rule; None: the workload's own)."""
    from omegaconf import OmegaConf

    from sesame.tasks.runs.runner import build_datamodule
    from sesame.tasks.saved.checkpoints import build_module

    spec = WORKLOADS[name]
    overrides = workload_overrides(name, encoder, quick, squad_questions)
    cfg = compose(overrides)
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("fit")
    cfg = OmegaConf.merge(cfg, datamodule.config_updates())  # what the data decides (label sets)
    loader = datamodule.train_dataloader()
    indices, choice = pick_batch(list(loader.batch_sampler), datamodule.example_lengths("train"), spec["batch_size"],
                                 pick or spec["pick"], int(cfg.data.max_seq_length))
    module = build_module(RunSettings.from_config(cfg))
    trained = trained_model(module)
    sesame = sesame_side(module, datamodule.dataset("train"), indices, loader.collate_fn, cfg, total_steps)
    trainer = trainer_side(trained, datamodule, indices, spec["kind"], cfg, total_steps,
                           sesame.info["optimizer_fused"], work_dir)
    same = torch.equal(sesame.batch["input_ids"], trainer.batch["input_ids"])
    mask = sesame.batch["attention_mask"]
    info = {**choice, "examples": int(mask.shape[0]), "padded_length": int(mask.shape[1]), "tokens": int(mask.sum()),
            "padded_tokens": int(mask.numel()), "padding_share": 1 - float(mask.sum()) / mask.numel(),
            "same_input_ids": same, "train_examples": len(datamodule.dataset("train"))}
    return Workload(name, cfg, overrides, datamodule, trained, sesame, trainer, info)


def trained_model(module: Any) -> Any:
    """The in-memory module as a ``TrainedModel`` (what the export helpers read)."""
    from sesame.tasks.encoders.encoder import resolve_name_or_path
    from sesame.tasks.saved.checkpoints import TrainedModel

    folder = resolve_name_or_path(str(module.settings.encoder.name_or_path))
    return TrainedModel(module=module, settings=module.settings, checkpoint=Path("in-memory"), encoder_folder=folder,
                        tokenizer_source=folder)


def sesame_side(module: Any, dataset: Any, indices: list[int], collate: Callable, cfg: Any, total_steps: int) -> Side:
    """sesame's module on its collated batch, with the optimiser ``configure_optimizers`` builds."""
    from sesame.tasks.encoders.finetune import build_optimizer

    batch = collate(fetch(dataset, indices))
    optimizer, scheduler = build_optimizer(module.encoder, module.head_named_parameters(), module.finetune, total_steps)
    # Once for the process, not per step: a catch_warnings() around every forward would be timed as sesame's
    warnings.filterwarnings("ignore", message=SELF_LOG_WARNING)

    def loss() -> torch.Tensor:
        return module.training_step(batch, 0)

    # sesame frees the gradients right after the optimiser step (task_module.py optimizer_step)
    return Side("sesame", module, batch, loss, optimizer, scheduler, lambda: optimizer.zero_grad(set_to_none=True),
                float(cfg.trainer.gradient_clip_val or 0.0) or float("inf"), dataset, indices, collate,
                {"optimizer_fused": bool(optimizer.defaults.get("fused")), "param_groups": len(optimizer.param_groups),
                 "attn_implementation": module.encoder.model.config._attn_implementation})


def hf_dataset(dataset: Any, kind: str) -> Any:
    """sesame's encoded train split as the Trainer reads it: a ``datasets.Dataset`` of the model's columns."""
    import datasets

    keys = HF_KEYS[kind]
    if isinstance(dataset, datasets.Dataset):
        return dataset.select_columns([k for k in keys if k in dataset.column_names])
    rows = [dataset[i] for i in range(len(dataset))]
    return datasets.Dataset.from_dict({k: [r[k].tolist() if hasattr(r[k], "tolist") else r[k] for r in rows]
                                       for k in keys if k in rows[0]})


def sesame_optim(fused: bool) -> str:
    """The Trainer's ``optim`` for the torch AdamW kernel sesame uses."""
    return "adamw_torch_fused" if fused else "adamw_torch"


def training_arguments(cfg: Any, output_dir: Path, steps: int, bf16: bool, fused: bool) -> Any:
    """The Trainer's arguments mirroring sesame's optimiser settings (one example = one prepared batch)."""
    from transformers import TrainingArguments

    f, t = cfg.finetune, cfg.trainer
    return TrainingArguments(
        output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=1, learning_rate=float(f.encoder_lr),
        weight_decay=float(f.weight_decay), adam_epsilon=float(f.adam_epsilon), lr_scheduler_type="linear",
        warmup_steps=int(float(f.warmup_ratio) * steps), max_grad_norm=float(t.gradient_clip_val or 0.0),
        optim=sesame_optim(fused), seed=int(cfg.seed), logging_strategy="steps", logging_steps=int(t.log_every_n_steps),
        save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=0, dataloader_pin_memory=False, use_cpu=True, bf16=bf16,
    )


def trainer_side(trained: Any, datamodule: Any, indices: list[int], kind: str, cfg: Any, total_steps: int,
                 fused: bool, work_dir: Path) -> Side:
    """The Trainer's model (sesame's weights, ``build_hf_model``) on its own collated batch, with the optimiser
    and schedule the Trainer makes."""
    from transformers import DataCollatorWithPadding, Trainer

    from sesame.tasks.export.hf import build_hf_model

    model = build_hf_model(trained).train()
    dataset = hf_dataset(datamodule.dataset("train"), kind)
    collate = DataCollatorWithPadding(datamodule.tokenizer)
    batch = dict(collate(fetch(dataset, indices)))
    args = training_arguments(cfg, work_dir, total_steps, False, fused)
    hf_trainer = Trainer(model=model, args=args)
    hf_trainer.create_optimizer_and_scheduler(num_training_steps=total_steps)
    optimizer, scheduler = hf_trainer.optimizer, hf_trainer.lr_scheduler
    return Side("trainer", model, batch, lambda: model(**batch).loss, optimizer, scheduler, model.zero_grad,
                float(args.max_grad_norm) or float("inf"), dataset, indices, collate,
                {"optimizer": type(optimizer).__name__, "optim": str(getattr(args.optim, "value", args.optim)),
                 "optimizer_fused": bool(getattr(optimizer, "defaults", {}).get("fused")),
                 "param_groups": len(optimizer.param_groups), "attn_implementation": model.config._attn_implementation})


def compare_outputs(workload: Workload) -> dict[str, Any]:
    """Both sides in eval mode (dropout off) on their batches, from the weights they hold now: their losses and
    the largest output difference where sesame computes a value (``tasks/export/hf.py`` ``max_abs_diff``; for QA
    the context positions: sesame masks the rest before its loss, the Trainer's model does not)."""
    from sesame.tasks.export import as_tuple, task_export
    from sesame.tasks.export.hf import hf_outputs, max_abs_diff

    task = task_export(workload.trained)
    module, hf = workload.sesame.model, workload.trainer.model
    module.eval(), hf.eval()
    try:
        with torch.no_grad():
            sesame_loss, trainer_loss = float(workload.sesame.loss()), float(workload.trainer.loss())
            diff, scale = max_abs_diff(task, workload.sesame.batch, as_tuple(module(workload.sesame.batch)),
                                       hf_outputs(hf, task, workload.sesame.batch))
    finally:
        module.train(), hf.train()
    return {"sesame_loss": sesame_loss, "trainer_loss": trainer_loss, "loss_abs_diff": abs(sesame_loss - trainer_loss),
            "outputs_max_abs_diff": diff, "outputs_max_abs": scale,
            "same_loss_definition": WORKLOADS[workload.name]["kind"] != "qa"}


# The frameworks' loops --------------------------------------------------------------------------------
class _Repeat(torch.utils.data.Dataset):
    """The same prepared batch ``n`` times (a loader with ``batch_size=None`` hands it over as it is)."""

    def __init__(self, batch: dict[str, torch.Tensor], n: int) -> None:
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.batch


def periods(starts: Sequence[float], warmup: int) -> list[float]:
    """Seconds from each measured step's start to the next step's start (steps ``warmup`` .. len - 2)."""
    return [b - a for a, b in zip(starts[warmup:-1], starts[warmup + 1:])]


def lightning_periods(workload: Workload, bf16: bool, steps: int, run_dir: Path) -> list[float]:
    """``steps`` Lightning steps of a copy of sesame's module on its batch, in a ``lightning.Trainer`` built by
    sesame's ``build_trainer`` (its callbacks, CSV logger, clipping, precision); the start time of each step
    (``on_train_batch_start``)."""
    import lightning as L

    from sesame.tasks.core.known_noise import known_noise_silenced
    from sesame.tasks.runs.runner import build_trainer

    starts: list[float] = []

    class Starts(L.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            starts.append(time.perf_counter())

    cfg = compose([*workload.overrides, f"trainer.max_steps={steps}", "trainer.max_epochs=1",
                   f"trainer.precision={'bf16-mixed' if bf16 else '32-true'}", "trainer.enable_progress_bar=false",
                   "trainer.enable_model_summary=false", "logger=csv"])
    loader = torch.utils.data.DataLoader(_Repeat(workload.sesame.batch, steps), batch_size=None)
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)  # its lines of each fit; restored after (the caller may be a test process)
    try:
        with known_noise_silenced(), warnings.catch_warnings():
            # a loader of one prepared batch, no dev set, fewer steps than the logging interval: all on purpose
            warnings.filterwarnings("ignore", message=".*(does not have many workers|dataloader is not resumable|"
                                    "but have no `val_dataloader`|smaller than the logging interval).*")
            trainer = build_trainer(RunSettings.from_config(cfg), run_dir, None, [Starts()])
            trainer.fit(copy.deepcopy(workload.sesame.model), train_dataloaders=loader)
    finally:
        lightning_log.setLevel(level)
    return starts


def trainer_periods(workload: Workload, bf16: bool, steps: int, run_dir: Path) -> list[float]:
    """``steps`` steps of transformers' ``Trainer`` (its own bf16 autocast when ``bf16``) on a copy of its model,
    fed the prepared batch; the start time of each step (``on_step_begin``)."""
    from transformers import PrinterCallback, Trainer, TrainerCallback

    starts: list[float] = []

    class Starts(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            starts.append(time.perf_counter())

    side = workload.trainer
    args = training_arguments(workload.cfg, run_dir, steps, bf16, side.info["optimizer_fused"])
    trainer = Trainer(model=copy.deepcopy(side.model), args=args, train_dataset=_Repeat(side.batch, steps),
                      data_collator=_first, callbacks=[Starts()])
    trainer.remove_callback(PrinterCallback)  # it prints the run's summary line
    trainer.train()
    return starts


def _first(rows: list[Any]) -> Any:
    return rows[0]


# Quick mode's encoder --------------------------------------------------------------------------------
def tiny_encoder(folder: Path, texts: Sequence[str], hidden: int = 16, layers: int = 2) -> Path:
    """A random BERT (``layers`` x ``hidden``, 2 heads: a few thousand parameters) with a fast WordPiece
    tokenizer of 400 entries trained on ``texts``, saved into ``folder`` (as tests/conftest.py builds its own)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=["input_ids", "token_type_ids", "attention_mask"],
                                   unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                   mask_token="[MASK]")
    fast.model_max_length = 512
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=512)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def shipped_texts() -> list[str]:
    """The text of the shipped SST-2 training slice and SQuAD v1.1 training slice (the quick encoder's vocabulary)."""
    import json

    from sesame.tasks.core.paths import shipped_path

    lines = Path(shipped_path("glue/sst2/train.2k.tsv")).read_text(encoding="utf-8").splitlines()[1:]
    texts = [line.split("\t")[0] for line in lines]
    for article in json.loads(Path(shipped_path("squad_v1/train.slice.json")).read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"])
            texts += [qa["question"] for qa in paragraph["qas"]]
    return texts
