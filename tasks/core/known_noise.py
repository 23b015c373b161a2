"""Warnings and log lines of the libraries under sesame that tell a sesame user nothing, silenced by their
exact text while sesame calls into those libraries (training, evaluation, checkpoint loading, ONNX
export). Every other warning and log line is kept.

Each entry says why it is harmless; one that stops being so is removed here, in one place.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

#: ``(message regex, category, module regex)`` of warnings known to be harmless (``warnings.filterwarnings``
#: matches the message from its start and the module against the warning's module).
HARMLESS_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # torch deprecated LeafSpec; Lightning's own _pytree still builds one on every batch. Nothing a user can change.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, r"lightning\."),
    # torch's weights-only unpickler rebuilding the quantised tensors of a dynamic-int8 checkpoint
    # (sesame-compress quantize): torch's own storage and tensor constructors, deprecated inside torch.
    (r"TypedStorage is deprecated", UserWarning, r"torch\._utils"),
    (r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor creation functions",
     UserWarning, r"torch\._utils"),
)

#: Logger name -> the starts of its messages known to be harmless.
HARMLESS_LOG_LINES: dict[str, tuple[str, ...]] = {
    # Lightning's advertisements for its cloud services (litlogger, litmodels), on every Trainer.
    # ... and its note that validation runs at the end of each epoch: said before every fit, and before sesame-eval,
    # which trains nothing; sesame's validation cadence is trainer.val_check_interval in the run's config.
    "lightning.pytorch.utilities.rank_zero": ("💡 Tip: For seamless cloud", "`Trainer(val_check_interval="),
    # torch's ONNX exporter registering torchvision's detection ops, which no sesame graph holds.
    "torch.onnx._internal.exporter._registration": ("torchvision is not installed. Skipping torchvision::",),
}


class DropMessages(logging.Filter):
    """Drops the records whose message starts with one of ``starts``."""

    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


@contextlib.contextmanager
def known_noise_silenced() -> Iterator[None]:
    """Within it (also as a decorator), the warnings of :data:`HARMLESS_WARNINGS` and the log lines of
    :data:`HARMLESS_LOG_LINES` are dropped; everything else shows as before."""
    filters = [(logging.getLogger(name), DropMessages(starts)) for name, starts in HARMLESS_LOG_LINES.items()]
    with warnings.catch_warnings():
        for message, category, module in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
        for logger, drop in filters:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger, drop in filters:
                logger.removeFilter(drop)


def lightning_lines_once() -> None:
    """Print each of Lightning's log lines once. Imported after Hydra has set up logging (the console
    scripts import it only once a command runs), Lightning sends its lines up to Hydra's handlers (the
    console and the job's ``.log`` file), and also to a console handler of its own on the ``lightning``
    logger, which would print each a second time: that handler is removed. Without handlers on the root
    logger (Lightning imported first) nothing changes."""
    if not logging.getLogger().handlers:
        return
    lightning_log = logging.getLogger("lightning")
    for handler in list(lightning_log.handlers):
        if type(handler) is logging.StreamHandler:
            lightning_log.removeHandler(handler)


def library_progress_bars_off() -> None:
    """Turn off transformers' own progress bars ("Loading weights", "Writing model shards"): they time sub-second
    steps of loading or saving one model and read like trouble beside sesame's own progress bar, which shows the
    long work (training, evaluation, prediction). Called by the console scripts once a command runs (importing
    transformers at --help would slow it)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
