"""``encoder.activation_checkpointing``: training recomputes each layer's activations in the backward pass.
The same losses, gradients, metrics and predictions bit for bit (dropout draws the same masks in the
recompute), less memory kept for the backward pass, evaluation untouched; off by default, on in the low-memory preset (+experiment=low_memory)."""

from __future__ import annotations

import json

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.qa.module import SquadModule
from sesame.tasks.runs.runner import train

QA = ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=96", "data.doc_stride=32", "data.batch_size=8",
      "data.eval_batch_size=16", "data.max_train_examples=24", "data.max_eval_examples=12",
      "trainer.limit_val_batches=null", "trainer.max_steps=3", "trainer.limit_train_batches=null"]


def _batch(vocab_size: int, batch: int = 4, length: int = 40) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    context = torch.ones(batch, length, dtype=torch.bool)
    context[:, :5] = False
    return {"input_ids": torch.randint(5, vocab_size, (batch, length), generator=g),
            "attention_mask": torch.ones(batch, length, dtype=torch.long),
            "token_type_ids": torch.zeros(batch, length, dtype=torch.long), "context_mask": context}


def _step(make_cfg, setting: str) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Loss, gradients and the bytes autograd saved for the backward pass of one training step (dropout on)."""
    torch.manual_seed(0)
    module = SquadModule(RunSettings.from_config(make_cfg(*QA, f"encoder.activation_checkpointing={setting}"))).train()
    batch = _batch(module.encoder.config.vocab_size)
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel() * t.element_size())
        return t

    torch.manual_seed(5)  # the dropout masks
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        start, end = module(batch)
        loss = module.head.loss(start, end, torch.tensor([6, 7, 8, 9]), torch.tensor([8, 9, 10, 11]))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in module.named_parameters() if p.grad is not None}, sum(saved)


def test_the_same_gradients_with_less_kept_for_the_backward_pass(make_cfg):
    loss_off, grads_off, saved_off = _step(make_cfg, "false")
    loss_on, grads_on, saved_on = _step(make_cfg, "true")
    assert torch.equal(loss_on, loss_off)
    assert grads_on.keys() == grads_off.keys() and any(n.startswith("encoder.") for n in grads_on)
    for name, grad in grads_off.items():
        assert torch.equal(grads_on[name], grad), name
    # Only each layer's inputs are kept; the attention probabilities and the rest are recomputed.
    assert saved_on < saved_off / 2


def test_evaluation_is_untouched(make_cfg):
    outputs = []
    for setting in ("false", "true"):
        torch.manual_seed(0)
        module = SquadModule(RunSettings.from_config(make_cfg(*QA, f"encoder.activation_checkpointing={setting}"))).eval()
        with torch.no_grad():
            outputs.append(module(_batch(module.encoder.config.vocab_size)))
    assert all(torch.equal(a, b) for a, b in zip(*outputs))


def test_a_qa_run_writes_the_same_metrics_and_predictions(make_cfg, tmp_path):
    written = []
    for setting in ("false", "true"):
        run = tmp_path / setting
        metrics = train(RunSettings.from_config(make_cfg(*QA, f"encoder.activation_checkpointing={setting}")), run)
        files = {name: (run / name).read_text() for name in ("predictions.json", "nbest_predictions.json")}
        written.append(({k: v for k, v in metrics.items() if k.startswith("val_") and not k.endswith("_loss")}, files))
    (metrics_off, files_off), (metrics_on, files_on) = written
    assert metrics_on == metrics_off and "val_f1" in metrics_on
    assert files_on == files_off and json.loads(files_on["predictions.json"])


def test_off_by_default_and_auto_in_the_low_memory_preset(make_cfg):
    for task in ("squad_v1", "squad_v2", "glue"):
        assert RunSettings.from_config(make_cfg(f"task={task}")).encoder.activation_checkpointing is False
    assert RunSettings.from_config(make_cfg("task=squad_v1", "+experiment=low_memory")).encoder.activation_checkpointing == "auto"
    module = SquadModule(RunSettings.from_config(make_cfg(*QA, "+experiment=low_memory")))
    assert module.activation_checkpointing  # BERT supports it: auto turns it on
    assert not SquadModule(RunSettings.from_config(make_cfg(*QA))).activation_checkpointing


def test_auto_leaves_it_off_and_true_refuses_where_the_family_cannot(make_cfg):
    module = SquadModule(RunSettings.from_config(make_cfg(*QA, "encoder.activation_checkpointing=false")))
    assert not module.activation_checkpointing
    module.encoder.model.supports_gradient_checkpointing = False  # stands in for a family without it
    assert module.encoder.checkpoint_activations("auto") is False
    with pytest.raises(ConfigError, match=r"activation_checkpointing=true: BertModel \(bert\).*Fix"):
        module.encoder.checkpoint_activations(True)


def test_a_bad_value_is_one_clear_error(make_cfg):
    with pytest.raises(ConfigError, match="activation_checkpointing='sometimes' is not one of auto, true, false"):
        RunSettings.from_config(make_cfg("task=squad_v1", "encoder.activation_checkpointing=sometimes"))


# trainer.malloc_mmap_threshold_mb (tasks/runs/heap.py), the low-memory preset's other setting ----------------
def test_the_low_memory_preset_fixes_the_mmap_threshold_and_a_bad_one_is_one_clear_error(make_cfg):
    assert RunSettings.from_config(make_cfg("task=squad_v1", "+experiment=low_memory")).trainer.malloc_mmap_threshold_mb == 8
    assert RunSettings.from_config(make_cfg("task=squad_v1")).trainer.malloc_mmap_threshold_mb is None
    for bad in ("64", "0", "true", "'8'"):
        with pytest.raises(ConfigError, match="malloc_mmap_threshold_mb=.*from 1 to 32"):
            RunSettings.from_config(make_cfg("task=squad_v1", f"trainer.malloc_mmap_threshold_mb={bad}"))


def test_a_fixed_threshold_returns_a_large_block_to_the_system_when_freed(tmp_path):
    """In a fresh process: after a 16 MiB block is freed glibc's dynamic threshold rises, so the next 12 MiB
    block comes from the heap and its pages stay resident once freed; with the threshold fixed at 8 MiB
    they go back to the system."""
    import subprocess
    import sys

    script = (
        "import ctypes, sys\n"
        "from sesame.tasks.runs.heap import fix_mmap_threshold\n"
        "def rss():\n"
        "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')) / 1024\n"
        "print(fix_mmap_threshold(8 if sys.argv[1] == 'fixed' else None))\n"
        "libc = ctypes.CDLL('libc.so.6'); libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]\n"
        "libc.free(libc.malloc(16 << 20))\n"  # raises the dynamic threshold
        "p = libc.malloc(12 << 20); ctypes.memset(p, 1, 12 << 20); libc.free(libc.malloc(64))\n"
        "before = rss(); libc.free(p); print(before - rss())\n"
    )
    freed = {}
    for mode in ("dynamic", "fixed"):
        out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, check=True).stdout.split()
        assert out[0] == str(mode == "fixed")
        freed[mode] = float(out[1])
    assert freed["fixed"] > 10 and freed["dynamic"] < 2, freed
