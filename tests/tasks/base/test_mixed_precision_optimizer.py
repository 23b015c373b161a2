"""Under bf16 autocast sesame keeps torch's fused AdamW, and still clips the gradients. Lightning's mixed-precision
plugin refuses to clip a fused optimiser's gradients (under fp16's GradScaler they are scaled until its step); bf16
has no scaler, so sesame clips them itself. Before, bf16 runs fell back to the per-tensor AdamW."""

from __future__ import annotations

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base import task_module
from sesame.tasks.runs import runner


@pytest.mark.parametrize("precision, fused", [("bf16-mixed", True), ("32-true", True)])
def test_bf16_training_steps_with_the_fused_adamw_and_clipped_gradients(make_cfg, tmp_path, monkeypatch, precision, fused):
    clip = 0.05  # far below a fresh head's gradient norm: every step is clipped
    seen: list[dict[str, float | bool]] = []
    build = task_module.build_optimizer

    def recording_build(*args, **kwargs):
        optimizer, scheduler = build(*args, **kwargs)

        def after_step(opt, *_):  # the gradients the step used (Lightning computes them inside step)
            grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
            seen.append({"fused": bool(opt.defaults.get("fused")),
                         "norm": float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))})

        optimizer.register_step_post_hook(after_step)
        return optimizer, scheduler

    monkeypatch.setattr(task_module, "build_optimizer", recording_build)
    runner.train(RunSettings.from_config(make_cfg("data.max_train_examples=24", "data.batch_size=8", f"trainer.precision={precision}",
                          f"trainer.gradient_clip_val={clip}")), tmp_path)
    assert len(seen) == 3
    assert all(step["fused"] is fused for step in seen)
    assert all(step["norm"] <= clip * (1 + 1e-4) for step in seen), seen


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_clipping_reuses_the_logged_gradient_norm_and_clips_as_torch_does(make_cfg, tmp_path, monkeypatch, precision):
    from lightning.pytorch.plugins.precision import Precision

    clipped: list[bool] = []
    clip_as_sesame = task_module.clip_gradients

    def checked(params, max_norm, algorithm="norm", norm=None):
        params = [p for p in params if p.grad is not None]
        assert norm is not None  # measured once, by on_before_optimizer_step (the logged grad_norm)
        copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
        for copy, p in zip(copies, params):
            copy.grad = p.grad.clone()
        torch.nn.utils.clip_grad_norm_(copies, max_norm)
        clip_as_sesame(params, max_norm, algorithm, norm)
        clipped.append(all(torch.equal(p.grad, copy.grad) for p, copy in zip(params, copies)))

    def refuse(*_args, **_kwargs):
        raise AssertionError("Lightning's clipping measured the norm a second time")

    monkeypatch.setattr(task_module, "clip_gradients", checked)
    monkeypatch.setattr(Precision, "clip_gradients", refuse)
    runner.train(RunSettings.from_config(make_cfg("data.max_train_examples=24", "data.batch_size=8",
                                                  f"trainer.precision={precision}", "trainer.gradient_clip_val=0.05")),
                 tmp_path)
    assert clipped == [True, True, True]  # every step clipped, bit for bit as torch's clip_grad_norm_
