"""Distillation training: the loss the student trains on, a frozen teacher outside the student, the
teacher-logit cache, and a tiny end-to-end run (drop-layers student -> distilled -> sesame-eval)."""

import csv
import shutil

import numpy as np
import pytest
import torch
from hydra.utils import get_class

from omegaconf import OmegaConf
from sesame.tasks.base.run_settings import RunSettings
from sesame.heads.distillation import distillation_kl
from sesame.tasks.compression.distill import TeacherLogitCache
from sesame.tasks.base.distill_settings import DistillSettings
from sesame.tasks.compression.drop_layers import drop_layers
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.base.task_module import EncoderTaskModule
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.runner import attach_distiller, build_datamodule, settings_with_data, train


@pytest.fixture(scope="module")
def teachers(make_cfg, tmp_path_factory):
    """A tiny trained GLUE, NER and QA run (the teachers) and a 2-layer student encoder for each."""
    root = tmp_path_factory.mktemp("teachers")
    out = {}
    for task in ("glue", "ner", "squad_v1"):
        train(RunSettings.from_config(make_cfg(f"task={task}", f"data.max_eval_examples={EVAL[task]}")), root / task)
        drop_layers(root / task, root / f"{task}_student", keep="every_other", encoder_only=True)
        out[task] = (root / task, root / f"{task}_student" / "encoder")
    return out


EVAL = {"glue": 32, "ner": 32, "squad_v1": 8}


def _student(make_cfg, task, teacher, encoder, *extra):
    cfg = make_cfg(f"task={task}", f"encoder.name_or_path={encoder}", f"distill.teacher={teacher}",
                   f"data.max_eval_examples={EVAL[task]}", *extra)
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    cfg = OmegaConf.merge(cfg, dm.config_updates())  # what the data decides (label sets)
    torch.manual_seed(0)
    student = get_class(cfg.task.module)(RunSettings.from_config(cfg))
    attach_distiller(DistillSettings.from_config(cfg.distill), student)
    return student, next(iter(dm.train_dataloader()))


def _gold(student, task, logits, batch):
    if task == "glue":
        return student.head.loss(logits, batch["labels"])
    if task == "ner":
        return student._loss(logits, batch)
    return student.head.loss(*logits, batch["start_positions"], batch["end_positions"])


def _qa_reference(student, teacher, kept, T):
    """Per window: T^2 * KL over the positions the head scores (``kept``) only; mean over windows."""
    kls = []
    for s, t, keep in zip(student, teacher, kept):
        log_s, log_t = torch.log_softmax(s[keep] / T, -1), torch.log_softmax(t[keep] / T, -1)
        kls.append((log_t.exp() * (log_t - log_s)).sum() * T * T)
    return torch.stack(kls).mean()


@pytest.mark.parametrize("task", ["glue", "ner", "squad_v1"])
def test_the_training_loss_mixes_gold_and_kl_to_the_frozen_teacher(make_cfg, teachers, task):
    student, batch = _student(make_cfg, task, *teachers[task], "distill.alpha=0.3", "distill.temperature=3.0")
    teacher = student.distiller.teacher
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student.train()
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())

    torch.manual_seed(1)
    loss = student.training_step(batch, 0)
    torch.manual_seed(1)  # the same dropout masks: the same student logits
    logits = student(batch)
    gold = _gold(student, task, logits, batch)
    with torch.no_grad():
        t_logits = teacher(batch)
    if task == "squad_v1":  # start and end separately, each over the positions the head scores
        keep = batch["context_mask"].bool().clone()
        keep[:, 0] |= student.head.allow_null  # [CLS] is a target where training windows point at it
        kl = sum(_qa_reference(s, t, keep, 3.0) for s, t in zip(logits, t_logits)) / 2
    else:
        kl = distillation_kl(logits, t_logits, 3.0, None if task == "glue" else batch["word_index"] >= 0)
    want = 0.3 * gold + 0.7 * kl
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    assert abs(loss.item() - gold.item()) > 1e-4

    loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    head = student.head.qa_outputs if task == "squad_v1" else student.head.classifier
    assert head.weight.grad.abs().sum() > 0
    # The teacher is no part of the student: not in its weights, nor among its optimised parameters.
    assert not any(k.startswith(("distiller", "_distiller", "teacher")) for k in student.state_dict())
    teacher_ids = {id(p) for p in teacher.parameters()}
    assert not teacher_ids & {id(p) for p in student.parameters()}
    for k, v in teacher.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_alpha_one_trains_on_the_gold_loss_alone(make_cfg, teachers):
    student, batch = _student(make_cfg, "glue", *teachers["glue"], "distill.alpha=1.0")
    student.eval()  # no dropout: two forward passes agree
    assert student.training_step(batch, 0).item() == pytest.approx(student.head.loss(student(batch), batch["labels"]).item(), rel=1e-6)


def test_without_a_teacher_the_loss_is_the_gold_loss(make_cfg):
    cfg = make_cfg()
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    module = get_class(cfg.task.module)(settings_with_data(RunSettings.from_config(cfg), dm)).eval()
    batch = next(iter(dm.train_dataloader()))
    assert module.distiller is None and module.configure_callbacks() == []
    assert module.training_step(batch, 0).item() == pytest.approx(module.head.loss(module(batch), batch["labels"]).item(), rel=1e-6)


def test_a_teacher_of_another_task_or_label_set_is_refused(make_cfg, teachers):
    with pytest.raises(ConfigError, match="teacher"):
        _student(make_cfg, "glue", teachers["ner"][0], teachers["glue"][1])


def _rows(*lengths, width, seed=0):
    """A fake batch of token ids with the given real lengths, padded to ``width``."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(5, 300, (n,), generator=gen)
        mask[b, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def test_the_logit_cache_refits_per_token_rows_to_another_padding(tmp_path):
    batch = _rows(3, 6, width=6)
    tokens = torch.randn(2, 6, 5)   # NER-like [B, T, C]
    classes = torch.randn(2, 4)     # GLUE-like [B, C]
    cache = TeacherLogitCache(tmp_path / "t.npz")
    cache.add(batch, (tokens, classes))
    cache.save()
    reread = TeacherLogitCache(tmp_path / "t.npz")
    assert len(reread) == 2
    # The same two examples, now padded to 8 and in the other order.
    again = {k: torch.cat([v[1:], v[:1]]) for k, v in batch.items()}
    again = {k: torch.nn.functional.pad(v, (0, 2)) for k, v in again.items()}
    got_tokens, got_classes = reread.lookup(again, (torch.zeros(2, 8, 5), torch.zeros(2, 4)))
    torch.testing.assert_close(got_tokens[0, :6], tokens[1])
    torch.testing.assert_close(got_tokens[1, :3], tokens[0, :3])
    assert (got_tokens[0, 6:] < -1e30).all()  # beyond the cached row: the heads' masked-out value
    torch.testing.assert_close(got_classes, torch.stack([classes[1], classes[0]]))
    assert reread.lookup(_rows(3, 6, width=6, seed=1), (torch.zeros(2, 6, 5), torch.zeros(2, 4))) is None
    # A key ending in zero bytes survives the file (numpy's "S16" would strip them).
    key = bytes(range(1, 15)) + b"\x00\x00"
    reread.rows[key] = (np.ones((2, 5), np.float32), np.zeros(4, np.float32))
    reread._dirty = True
    reread.save()
    assert key in TeacherLogitCache(tmp_path / "t.npz").rows


def test_a_logit_cache_of_another_format_is_read_as_cold(tmp_path, monkeypatch):
    from sesame.tasks.compression import distill

    cache = TeacherLogitCache(tmp_path / "t.npz")
    cache.add(_rows(3, 6, width=6), (torch.randn(2, 4),))
    cache.save()
    assert len(TeacherLogitCache(tmp_path / "t.npz")) == 2
    monkeypatch.setattr(distill, "CACHE_FORMAT", distill.CACHE_FORMAT + 1)  # logits from older code are stale
    assert len(TeacherLogitCache(tmp_path / "t.npz")) == 0


def _teacher_calls(monkeypatch):
    """Count encoder passes of the teacher (the one module whose config has no distill.teacher)."""
    calls = []
    original = EncoderTaskModule.encode

    def encode(self, batch):
        if not self.settings.distill.teacher:
            calls.append(batch["input_ids"].shape[0])
        return original(self, batch)

    monkeypatch.setattr(EncoderTaskModule, "encode", encode)
    return calls


def test_a_distillation_run_end_to_end_with_the_logit_cache(make_cfg, teachers, tmp_path, monkeypatch):
    teacher_run, encoder = teachers["glue"]
    common = ("task=glue", f"encoder.name_or_path={encoder}", f"distill.teacher={teacher_run}", "data.max_eval_examples=32",
              "trainer.max_epochs=2", "seed=5")
    calls = _teacher_calls(monkeypatch)
    plain = train(RunSettings.from_config(make_cfg(*common)), tmp_path / "plain")
    assert sum(calls) > 0
    cache = ("distill.cache=true", f"distill.cache_dir={tmp_path / 'cache'}")
    calls.clear()
    first = train(RunSettings.from_config(make_cfg(*common, *cache)), tmp_path / "cached")
    per_epoch = sum(calls)
    assert per_epoch > 0 and len(list((tmp_path / "cache").glob("*.npz"))) == 1
    assert first == pytest.approx(plain, rel=1e-5)
    calls.clear()
    second = train(RunSettings.from_config(make_cfg(*common, *cache)), tmp_path / "again")
    assert calls == [] and second == first  # the teacher never ran

    # The distillation term was logged, and the student's checkpoint holds the student only.
    rows = list(csv.DictReader(open(tmp_path / "plain" / "logs" / "metrics.csv")))
    kl = [float(r["train_distill_kl"]) for r in rows if r.get("train_distill_kl")]
    assert kl and all(np.isfinite(kl)) and max(kl) > 0
    state = torch.load(tmp_path / "plain" / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
    assert state["encoder.model.encoder.layer.1.output.dense.weight"] is not None
    assert "encoder.model.encoder.layer.2.output.dense.weight" not in state
    # Evaluating the student needs no teacher.
    shutil.move(teacher_run, tmp_path / "teacher_moved")
    try:
        got = evaluate(RunSettings.from_config(make_cfg("data.max_eval_examples=32", f"++model={tmp_path / 'plain'}")), tmp_path / "eval")
    finally:
        shutil.move(tmp_path / "teacher_moved", teacher_run)
    assert got["val_accuracy"] == plain["val_accuracy"]


@pytest.mark.parametrize("teacher, student, differ", [
    (["task=ner", "data.tag_names=[O,B-X,I-X]"], ["task=ner", "data.tag_names=[O,B-Y,I-Y]"], "tag_names"),
    (["task=squad_v1"], ["task=squad_v2"], "version_2_with_negative"),
    (["data.label_names=[a,b]"], ["data.label_names=[b,a]"], "label_names"),
])
def test_a_teacher_whose_outputs_mean_something_else_is_refused(make_cfg, teacher, student, differ):
    """What must agree is each task's output contract (tasks/<task>/network.py), not a list in distill.py."""
    from sesame.tasks.compression.distill import check_compatible
    from sesame.tasks.saved.checkpoints import build_module

    built_teacher, built_student = build_module(RunSettings.from_config(make_cfg(*teacher))), build_module(RunSettings.from_config(make_cfg(*student)))
    with pytest.raises(ConfigError, match=f"teacher and student differ in {differ}"):
        check_compatible(built_teacher, built_student)
    check_compatible(built_teacher, build_module(RunSettings.from_config(make_cfg(*teacher))))  # the same contract: accepted
