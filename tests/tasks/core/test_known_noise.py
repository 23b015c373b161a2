"""Harmless library messages (``tasks/core/known_noise.py``) are silenced by their exact text during a run;
other warnings and log lines are not."""

from __future__ import annotations

import logging
import warnings

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.known_noise import known_noise_silenced
from sesame.tasks.base.task_module import EncoderTaskModule
from sesame.tasks.saved.checkpoints import build_module
from sesame.tasks.runs.runner import train

LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and treespec.is_leaf()`"


class Lines(logging.Handler):
    """The messages that reach a logger's handlers (its filters have let them through)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_frozen_run_shows_no_known_noise_and_keeps_lightning_s_other_lines(make_cfg, tmp_path):
    lines = Lines()
    lightning_log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    lightning_log.addHandler(lines)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(RunSettings.from_config(make_cfg("finetune=frozen", "data.max_train_examples=32", "data.max_eval_examples=16")), tmp_path)
    finally:
        lightning_log.removeHandler(lines)
    shown = [str(w.message) for w in caught]
    assert not [m for m in shown if "LeafSpec" in m or "in eval mode" in m], shown
    assert not [m for m in lines.messages if "litlogger" in m or "litmodels" in m], lines.messages
    # nor Lightning's note on where validation runs (also said before sesame-eval, which trains nothing)
    assert not [m for m in lines.messages if "val_check_interval" in m], lines.messages
    assert any(m.startswith("GPU available") for m in lines.messages), lines.messages  # Lightning's other lines stay


def test_only_the_known_messages_are_silenced():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with known_noise_silenced():
            warnings.warn_explicit(LEAFSPEC, FutureWarning, "_pytree.py", 21, module="lightning.pytorch.utilities._pytree")
            warnings.warn_explicit(LEAFSPEC, FutureWarning, "mine.py", 1, module="mine")  # not Lightning's: kept
            warnings.warn("a real warning", UserWarning)
    assert [str(w.message) for w in caught] == [LEAFSPEC, "a real warning"]


#: Messages seen in real runs (README "Loggers"): int8 checkpoint loading (torch), ONNX export (torch's exporter).
SEEN_WARNINGS = [
    ("TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only storage class.",
     UserWarning, "torch._utils"),
    ("torch.quantize_per_tensor, torch.quantize_per_channel and other quantized tensor creation functions that produce "
     "tensors with dtype torch.quint8, torch.qint8, and torch.qint32 are deprecated", UserWarning, "torch._utils"),
]
SEEN_LOG_LINES = [
    ("torch.onnx._internal.exporter._registration", "torchvision is not installed. Skipping %s", "torchvision::nms"),
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip: For seamless cloud logging and experiment tracking, try installing "
     "[litlogger](https://pypi.org/project/litlogger/)%s", ""),
]


def test_the_int8_and_onnx_messages_are_silenced_and_their_neighbours_kept():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with known_noise_silenced():
            for message, category, module in SEEN_WARNINGS:
                warnings.warn_explicit(message, category, "_utils.py", 1, module=module)
                warnings.warn_explicit("another " + message, category, "_utils.py", 1, module=module)
    assert [str(w.message) for w in caught] == ["another " + m for m, _, _ in SEEN_WARNINGS]
    for name, message, arg in SEEN_LOG_LINES:
        lines = Lines()
        logger = logging.getLogger(name)
        logger.addHandler(lines)
        try:
            with known_noise_silenced():
                logger.warning(message, arg)
                logger.warning("a real problem")
        finally:
            logger.removeHandler(lines)
        assert lines.messages == ["a real problem"]


def test_modules_left_in_eval_by_mistake_are_named(make_cfg):
    frozen: EncoderTaskModule = build_module(RunSettings.from_config(make_cfg("finetune=frozen")))
    assert frozen.unintended_eval_modules() == []  # the frozen encoder is in eval on purpose
    full = build_module(RunSettings.from_config(make_cfg("finetune=full")))
    full.head.eval()
    assert "head" in full.unintended_eval_modules()  # Lightning's warning about it is then shown
