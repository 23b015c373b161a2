"""``trainer.precision: auto``: bf16 autocast where the hardware computes in bf16, fp32 elsewhere.

On a CPU, bf16 matrix products are fast only with bf16 instructions (``avx512_bf16``, or AMX's
``amx_bf16``, in ``/proc/cpuinfo``'s flags): there bf16-mixed trained in 0.70-0.76x fp32's time with the
same dev metrics (docs/speed.md); without them torch emulates bf16 and is slower than fp32. On a GPU,
``auto`` picks bf16-mixed where CUDA says the device supports bf16. Any other value of
``trainer.precision`` is passed to Lightning as it is.

What ``auto`` picks depends on the machine, so the same config gives bit-for-bit the same numbers only
on machines that pick the same precision (and bf16 results differ from fp32's in their last digits).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

#: CPU flags (``/proc/cpuinfo``) of instructions that compute bf16 products natively.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
AUTO = "auto"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (the first ``flags`` line of ``cpuinfo``); none where it cannot be read
    (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def auto_precision(on_gpu: bool, gpu_bf16: bool, flags: Iterable[str]) -> str:
    """What ``trainer.precision=auto`` picks: ``bf16-mixed`` on a GPU that supports bf16 or a CPU with
    one of :data:`CPU_BF16_FLAGS`, else ``32-true``."""
    if on_gpu:
        return "bf16-mixed" if gpu_bf16 else "32-true"
    return "bf16-mixed" if set(CPU_BF16_FLAGS) & set(flags) else "32-true"


def resolve_precision(precision: object, accelerator: object = "auto") -> object:
    """``precision`` as Lightning takes it: ``auto`` resolved for this machine (logged), any other value
    as it is. ``accelerator`` is ``trainer.accelerator`` (``auto`` uses a GPU where there is one)."""
    if precision != AUTO:
        return precision
    import torch

    on_gpu = str(accelerator) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    chosen = auto_precision(on_gpu, on_gpu and torch.cuda.is_bf16_supported(), () if on_gpu else cpu_flags())
    why = ("the GPU supports bf16" if chosen != "32-true" else "the GPU lacks bf16") if on_gpu else (
        f"the CPU has {', '.join(sorted(set(CPU_BF16_FLAGS) & cpu_flags()))}" if chosen != "32-true"
        else f"the CPU has none of {', '.join(CPU_BF16_FLAGS)}")
    log.info("trainer.precision=auto: %s (%s)", chosen, why)
    return chosen
