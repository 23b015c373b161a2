"""What benchmarks/train_speed.py times: its tasks, its arms (sesame's speed settings and the Trainer's), the
overrides every run composes with, and the settings both sides share, which the reference mirrors (the full-data
study's arms train with the same)."""

from __future__ import annotations

import argparse
from typing import Any


OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


TASKS: dict[str, dict[str, Any]] = {
    "sst2": {
        "overrides": ["task=glue", "data=sst2", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["sst2/train.tsv", "sst2/dev.tsv"], "hf": "sequence", "batch_size": 32,
        "label": "SST-2 (short sentences)",
    },
    "cola": {
        "overrides": ["task=glue", "data=cola", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["cola/in_domain_train.tsv", "cola/in_domain_dev.tsv"], "hf": "sequence", "batch_size": 32,
        "label": "CoLA (very short sentences)",
    },
    "mrpc": {
        "overrides": ["task=glue", "data=mrpc", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["mrpc/train.tsv", "mrpc/dev.tsv"], "hf": "sequence", "batch_size": 32,
        "label": "MRPC (sentence pairs)",
    },
    "squad256": {
        "overrides": ["task=squad_v1", "data=squad_v1", "data.max_seq_length=256", "data.doc_stride=128"],
        "quick": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=128"],
        "files": ["squad_v1.1/train-subset-44articles.json", "squad_v1.1/dev-v1.1.json"], "hf": "qa", "batch_size": 12,
        "label": "SQuAD v1.1, 256-token windows, stride 128", "squad": True,
    },
    "squad384": {
        "overrides": ["task=squad_v1", "data=squad_v1", "data.max_seq_length=384", "data.doc_stride=128"],
        "quick": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=384", "data.doc_stride=128"],
        "files": ["squad_v1.1/train-subset-44articles.json", "squad_v1.1/dev-v1.1.json"], "hf": "qa", "batch_size": 12,
        "label": "SQuAD v1.1, 384-token windows, stride 128", "squad": True,
    },
    "wnut17": {
        "overrides": ["task=ner", "data=wnut17", "data.test_file=null"],
        "quick": ["task=ner", "data=wnut17_slice"],
        "files": ["wnut17/wnut17train.conll", "wnut17/emerging.dev.conll"], "hf": "token", "batch_size": 32,
        "label": "WNUT-17 NER (tweets)",
    },
}
#: What sesame ships for speed, as the full-data study's sesame_fast arm trains with it: length-grouped
#: batches padded to a multiple of 32 tokens, bf16 autocast.
GROUPED = "data.group_by_length=true"
FAST_SETTINGS = [GROUPED, "data.pad_to_multiple_of=32", "trainer.precision=bf16-mixed"]
#: FAST_SETTINGS less the pad multiple: grouped batches padded to their longest, bf16 (the study's sesame_grouped)
GROUPED_BF16_SETTINGS = [s for s in FAST_SETTINGS if not s.startswith("data.pad_to_multiple_of=")]
#: arm -> how it trains. side: sesame | hf; padding: dynamic | max_length; order: sesame (the very
#: batches sesame trains on) | sesame_grouped (the very batches sesame's length grouping makes) |
#: group_by_length (the Trainer's LengthGroupedSampler); optim: the
#: TrainingArguments optimiser (None: --hf-optim).
ARMS: dict[str, dict[str, Any]] = {
    "sesame": {"side": "sesame", "overrides": []},
    # the layers run on the padding, as before encoder.padding_free (and as the Trainer's do)
    "sesame_padded": {"side": "sesame", "overrides": ["encoder.padding_free=false"]},
    "sesame_grouped": {"side": "sesame", "overrides": [GROUPED]},
    "sesame_grouped_padded": {"side": "sesame", "overrides": [GROUPED, "data.pad_to_multiple_of=32"]},
    "sesame_bf16": {"side": "sesame", "overrides": ["trainer.precision=bf16-mixed"], "precision_mirrored": False},
    "sesame_grouped_bf16": {"side": "sesame", "overrides": GROUPED_BF16_SETTINGS, "precision_mirrored": False},
    # as sesame_grouped_bf16, with attention dropout in torch SDPA's fp32 math path (as the Trainer's)
    "sesame_grouped_bf16_sdpa": {"side": "sesame", "overrides": [*GROUPED_BF16_SETTINGS,
                                                                 "encoder.low_precision_attention=false"],
                                 "precision_mirrored": False},
    # as sesame_grouped_bf16, with torch's own dropout on the hidden states (a float drawn per element)
    "sesame_grouped_bf16_exact_dropout": {"side": "sesame", "overrides": [*GROUPED_BF16_SETTINGS,
                                                                          "encoder.fast_dropout=false"],
                                          "precision_mirrored": False},
    # as sesame_grouped_bf16, with row-sparse word-embedding updates (finetune.sparse_embeddings)
    "sesame_grouped_bf16_sparse": {"side": "sesame", "overrides": [*GROUPED_BF16_SETTINGS,
                                                                   "finetune.sparse_embeddings=true"],
                                   "precision_mirrored": False},
    # the preset +experiment=cpu_speed: grouped, precision auto (bf16 here), sparse embeddings, fast dropout, oneDNN's
    # primitive cache bounded at 512
    "sesame_cpu_speed": {"side": "sesame", "overrides": ["+experiment=cpu_speed"], "precision_mirrored": False,
                         "grouped": True},
    # the preset with oneDNN's primitive cache at oneDNN's own 1,024 (trainer.onednn_primitive_cache), or at 256
    "sesame_cpu_speed_default_cache": {"side": "sesame", "overrides": ["+experiment=cpu_speed",
                                                                       "trainer.onednn_primitive_cache=null"],
                                       "precision_mirrored": False, "grouped": True},
    "sesame_cpu_speed_cache256": {"side": "sesame", "overrides": ["+experiment=cpu_speed",
                                                                  "trainer.onednn_primitive_cache=256"],
                                  "precision_mirrored": False, "grouped": True},
    # the full-data study's sesame_fast arm (benchmarks/full_data_study.py ARMS), less its validations
    "sesame_fast": {"side": "sesame", "overrides": FAST_SETTINGS, "precision_mirrored": False},
    "hf": {"side": "hf", "padding": "dynamic", "order": "sesame", "optim": None},
    "hf_max_length": {"side": "hf", "padding": "max_length", "order": "sesame", "optim": None},
    "hf_grouped": {"side": "hf", "padding": "dynamic", "order": "group_by_length", "optim": None},
    "hf_fused": {"side": "hf", "padding": "dynamic", "order": "sesame", "optim": "adamw_torch_fused"},
    # the Trainer with its own switches that match sesame_fast's (a fair speed baseline)
    "hf_fast": {"side": "hf", "padding": "dynamic", "order": "group_by_length", "optim": None, "bf16": True},
    # hf_fast's bf16 on sesame's own length-grouped batches: the very examples sesame_grouped_bf16 trains on
    "hf_fast_same_batches": {"side": "hf", "padding": "dynamic", "order": "sesame_grouped", "optim": None, "bf16": True},
}
REFERENCE = "hf"


def length_grouped(arm: str) -> bool:
    """Whether ``arm`` trains on length-grouped batches (sesame's ``data.group_by_length``, the Trainer's sampler)."""
    spec = ARMS[arm]
    return GROUPED in spec.get("overrides", []) or spec.get("grouped", False) or spec.get("order") in (
        "group_by_length", "sesame_grouped")


def data_overrides(args: argparse.Namespace, task: str, evaluate: bool) -> list[str]:
    """The overrides both sides compose with: task, data, encoder, batch size, evaluation size."""
    spec = TASKS[task]
    out = [*(spec["quick"] if args.quick else spec["overrides"]), f"encoder.name_or_path={args.encoder}",
           f"data.batch_size={args.batch_size or spec['batch_size']}"]
    if spec.get("squad"):
        if not args.quick:
            out.append(f"data.max_train_examples={args.squad_questions}")
        if getattr(args, "train_windows_available", True):
            out.append(f"data.train_windows={args.train_windows}")
    eval_examples = args.eval_examples or (100 if spec.get("squad") else 200)
    out.append(f"data.max_eval_examples={eval_examples if evaluate else 1}")
    return [*out, *args.override]


def trainer_overrides(base: Any, steps: int) -> list[str]:
    """Train ``steps`` optimiser steps, validate only after training (the runner does), quietly.
    ``+key=`` where conf/trainer/default.yaml has no such key (``max_steps`` is new there)."""
    def put(key: str, value: Any) -> str:
        return f"{'' if key in base.trainer else '+'}trainer.{key}={value}"

    return [put("max_steps", steps), "trainer.max_epochs=1000", put("check_val_every_n_epoch", 100000),
            "trainer.val_check_interval=1.0", "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false", "logger=csv"]


def check_mirrorable(cfg: Any, precision: bool = True) -> None:
    """The reference mirrors full fine-tuning in fp32 without gradient accumulation (``precision=False``:
    any precision, for an arm whose precision is the point and is reported as such)."""
    problems = []
    if cfg.finetune.mode != "full":
        problems.append(f"finetune.mode={cfg.finetune.mode}")
    if int(cfg.trainer.get("accumulate_grad_batches", 1)) != 1:
        problems.append(f"trainer.accumulate_grad_batches={cfg.trainer.accumulate_grad_batches}")
    if precision and str(cfg.trainer.precision) not in ("32-true", "32"):
        problems.append(f"trainer.precision={cfg.trainer.precision}")
    if cfg.get("fusion", {}).get("mode", "last") != "last":
        problems.append(f"fusion={cfg.fusion.mode}")
    if problems:
        raise SystemExit(f"the reference mirrors full fp32 fine-tuning of the last layer only, not {', '.join(problems)}")


def settings_of(cfg: Any) -> dict[str, Any]:
    """The settings both sides share, as the composed config has them."""
    f, t, d = cfg.finetune, cfg.trainer, cfg.data
    return {
        "encoder_lr": float(f.encoder_lr), "head_lr": float(f.head_lr), "weight_decay": float(f.weight_decay),
        "warmup_ratio": float(f.warmup_ratio), "adam_epsilon": float(f.adam_epsilon),
        "gradient_clip_val": None if t.gradient_clip_val is None else float(t.gradient_clip_val),
        "log_every_n_steps": int(t.log_every_n_steps), "seed": int(cfg.seed), "batch_size": int(d.batch_size),
        "max_seq_length": int(d.max_seq_length), "num_workers": int(d.num_workers),
        "train_windows": d.get("train_windows"), "group_by_length": d.get("group_by_length"),
        "max_train_examples": d.get("max_train_examples"), "max_eval_examples": d.get("max_eval_examples"),
        "pooling": cfg.get("pooling", {}).get("name"), "precision": str(t.precision),
    }
