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
