"""The limit of one training step on this CPU: its FLOPs, and the machine's GEMM peak.

Used by ``benchmarks/step_profile.py``:

- :func:`count_flops`: the FLOPs of a forward + backward, counted by ``torch.utils.flop_counter.FlopCounterMode``
  (matrix products and attention only; torch's CPU flash-attention kernels are added, which its table lacks);
- :func:`bert_step_flops`: the same count by formula for a BERT encoder and head, to check the counter;
- :func:`gemm_rate`: FLOP/s of one matmul shape ``(batch, m, k, n)`` in one dtype, timed in a loop;
- :func:`own_shape_peak`: the rate at which a step's own GEMMs would run if each ran at its measured rate
  (FLOP-weighted harmonic mean over its shapes), and :func:`square_peaks` at large square shapes.

Operands are contiguous row-major ``[batch, m, k] @ [batch, k, n]`` (2-d when ``batch`` is 1); the step's own
GEMMs read some operands transposed (views), which BLAS takes without a copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

#: dtype names of the two precisions
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
Shape = tuple[int, int, int, int]  # a matmul's (batch, m, k, n)


# FLOPs ---------------------------------------------------------------------------------------------
def _cpu_flash_mapping() -> dict[Any, Callable[..., int]]:
    """FLOP formulas for torch's CPU flash-attention ops (the counter's table has the CUDA ones only)."""
    from torch.utils import flop_counter

    aten = torch.ops.aten
    out: dict[Any, Callable[..., int]] = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return flop_counter.sdpa_flop_count(query, key, value)

        def backward(grad: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return flop_counter.sdpa_backward_flop_count(grad, query, key, value)

        out[aten._scaled_dot_product_flash_attention_for_cpu] = forward
        out[aten._scaled_dot_product_flash_attention_for_cpu_backward] = backward
    return out


def count_flops(run: Callable[[], Any]) -> dict[str, Any]:
    """``{"total": FLOPs, "by_op": {op: FLOPs}}`` of everything ``run()`` does (a forward and its backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=_cpu_flash_mapping()) as counter:
        run()
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return {"total": int(counter.get_total_flops()), "by_op": by_op}


def bert_step_flops(config: Any, batch: int, length: int, head: str, num_labels: int = 2,
                    summary_top_layer: bool = False) -> int:
    """Forward + backward FLOPs of a BERT encoder (``config``: hidden_size, intermediate_size,
    num_hidden_layers) on ``batch`` x ``length`` tokens, and its ``head``: ``sequence`` (pooler dense on
    [CLS], then a linear to ``num_labels``) or ``qa`` (a linear to 2 on every token). Matrix products only,
    as the counter counts: per layer Q, K, V and output projections (4 x 2NH^2), the feed-forward
    (2 x 2NHI), and attention's QK^T and PV (2 x 2BT^2H); a backward computes both the input's and the
    weight's gradient of every product: twice the forward. ``summary_top_layer``: the top layer runs at
    [CLS] alone (``encoder.top_layer_at_summary``): K and V for every token, the rest for one per sequence."""
    h, inner, tokens = config.hidden_size, config.intermediate_size, batch * length
    layer = 2 * tokens * (4 * h * h + 2 * h * inner) + 2 * 2 * batch * length * length * h
    top = layer
    if summary_top_layer:
        top = 2 * tokens * 2 * h * h + 2 * batch * (2 * h * h + 2 * h * inner) + 2 * 2 * batch * length * h
    if head == "sequence":
        head_flops = 2 * batch * h * h + 2 * batch * h * num_labels
    elif head == "qa":
        head_flops = 2 * tokens * h * 2
    else:
        raise ValueError(f"head {head!r}: sequence or qa")
    return 3 * ((config.num_hidden_layers - 1) * layer + top + head_flops)


# GEMM rates ----------------------------------------------------------------------------------------
def gemm_flops(shape: Shape) -> int:
    """FLOPs of one ``(batch, m, k, n)`` matmul: 2 * batch * m * k * n."""
    b, m, k, n = shape
    return 2 * b * m * k * n


def gemm_rate(shape: Shape, dtype: torch.dtype, min_seconds: float = 0.3,
              min_calls: int = 3) -> dict[str, Any]:
    """Time ``a @ b`` of ``shape`` = (batch, m, k, n) in ``dtype`` after one warm-up call, for at least
    ``min_seconds`` and ``min_calls`` calls; ``{"shape", "dtype", "calls", "seconds", "flops_per_call",
    "flops_per_s"}`` with flops_per_s = calls * flops_per_call / seconds."""
    b, m, k, n = shape
    lead = () if b == 1 else (b,)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(*lead, m, k, generator=generator).to(dtype)
    w = torch.randn(*lead, k, n, generator=generator).to(dtype)
    out = torch.matmul(a, w)  # warm-up: the kernel's first call picks and prepares its path
    calls, started = 0, time.perf_counter()
    while True:
        torch.matmul(a, w, out=out)
        calls += 1
        seconds = time.perf_counter() - started
        if calls >= min_calls and seconds >= min_seconds:
            break
    flops = gemm_flops(shape)
    return {"shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "calls": calls, "seconds": seconds,
            "flops_per_call": flops, "flops_per_s": calls * flops / seconds}


def square_peaks(sizes: Iterable[int], dtype: torch.dtype, min_seconds: float = 0.3) -> dict[str, Any]:
    """Rates at square ``size`` x ``size`` x ``size`` matmuls; ``peak`` = the best of them."""
    rates = [gemm_rate((1, s, s, s), dtype, min_seconds) for s in sizes]
    return {"rates": rates, "peak_flops_per_s": max(r["flops_per_s"] for r in rates)}


def own_shape_peak(shapes: dict[Shape, int], rates: dict[Shape, float]) -> dict[str, float]:
    """A step's GEMM peak from its own shapes: ``shapes`` = (batch, m, k, n) -> the step's FLOPs in that shape,
    ``rates`` = shape -> measured FLOP/s. ``floor_s`` = sum of FLOPs / rate (the step's GEMMs alone, each at
    its measured rate); ``peak_flops_per_s`` = their FLOPs / floor_s (the FLOP-weighted harmonic mean)."""
    flops = sum(shapes.values())
    floor = sum(f / rates[s] for s, f in shapes.items())
    return {"gemm_flops": flops, "floor_s": floor, "peak_flops_per_s": flops / floor if floor else 0.0}


class RateCache:
    """Measured rates per (shape, dtype), so shapes shared by both sides or by steps are timed once."""

    def __init__(self, min_seconds: float) -> None:
        self.min_seconds = min_seconds
        self.measured: dict[tuple[Shape, str], dict[str, Any]] = {}

    def rate(self, shape: Shape, precision: str) -> float:
        key = (tuple(shape), precision)
        if key not in self.measured:
            self.measured[key] = gemm_rate(key[0], DTYPES[precision], self.min_seconds)
        return self.measured[key]["flops_per_s"]

    def peak_for(self, shapes: dict[Shape, int], precision: str) -> dict[str, float]:
        return own_shape_peak(shapes, {s: self.rate(s, precision) for s in shapes})
