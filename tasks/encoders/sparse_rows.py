"""Row-sparse training of the word embeddings (``finetune.sparse_embeddings``).

The word-embedding matrix is about half of a small encoder's parameters (MiniLM-L6: 11.7 M of 22.7 M),
yet a batch reads a few hundred of its rows. With ``nn.Embedding(sparse=True)`` its gradient is a
sparse tensor holding only those rows, and :class:`AdamWWithSparseRows` updates only them: no dense
[V, H] gradient is built in the backward pass, and neither the optimiser nor gradient clipping walks
the whole matrix.

The update of a row a batch touches is AdamW's, exactly as torch's ``AdamW`` computes it for that row
(the parameter's step count gives the bias correction). Rows a batch does not touch are left alone
("lazy" Adam, as torch's ``SparseAdam`` and TensorFlow's ``LazyAdam``): their moments are not decayed
and they take no step, where dense AdamW would still move them by their remaining momentum, and their
weight decay is applied only at the steps that touch them (``lr * weight_decay`` each time, as AdamW
decays). Every other parameter is updated by ``AdamW`` itself (the fused kernel where sesame fuses).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

#: The key of a parameter group whose parameters have sparse (row) gradients.
SPARSE_ROWS = "sparse_rows"


class AdamWWithSparseRows(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose groups flagged ``sparse_rows: True`` hold parameters with sparse
    gradients [V, H] (``nn.Embedding(sparse=True)``); those get AdamW's update on their touched rows
    only. The state of such a parameter has AdamW's keys (``step``, ``exp_avg``, ``exp_avg_sq``)."""

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self.param_groups
        # AdamW refuses sparse gradients: it steps the dense groups alone.
        self.param_groups = [g for g in groups if not g.get(SPARSE_ROWS)]
        try:
            if self.param_groups:
                super().step()
        finally:
            self.param_groups = groups
        for group in groups:
            if group.get(SPARSE_ROWS):
                for param in group["params"]:
                    if param.grad is not None:
                        self._row_step(param, group)
        return loss

    @torch.no_grad()
    def _row_step(self, param: nn.Parameter, group: dict) -> None:
        """AdamW on the rows of ``param`` that its sparse gradient holds."""
        if group["amsgrad"] or group["maximize"]:
            raise ValueError("AdamWWithSparseRows supports neither amsgrad nor maximize")
        grad = param.grad.coalesce()
        rows, values = grad.indices()[0], grad.values()
        state = self.state[param]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32, device=param.device)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["step"] += 1
        step = float(state["step"])
        lr, weight_decay, eps = float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
        beta1, beta2 = (float(b) for b in group["betas"])
        exp_avg = state["exp_avg"][rows].lerp_(values, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"][rows].mul_(beta2).addcmul_(values, values, value=1 - beta2)
        state["exp_avg"].index_copy_(0, rows, exp_avg)
        state["exp_avg_sq"].index_copy_(0, rows, exp_avg_sq)
        weights = param[rows].mul_(1 - lr * weight_decay)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
        weights.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))
        param.index_copy_(0, rows, weights)


def coalesced_gradients(params: Iterable[nn.Parameter]) -> list[torch.Tensor]:
    """The gradients of ``params`` (those that have one), each sparse one summed per row once and kept
    so (a batch's sparse gradient lists a row once per token that reads it)."""
    grads = []
    for param in params:
        if param.grad is None:
            continue
        if param.grad.is_sparse and not param.grad.is_coalesced():
            param.grad = param.grad.coalesce()
        grads.append(param.grad)
    return grads


def total_gradient_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all ``grads`` together (sparse ones coalesced), as ``torch.nn.utils.get_total_norm``."""
    dense = [g for g in grads if not g.is_sparse]
    parts = [torch.nn.utils.get_total_norm(dense)] if dense else []
    parts += [torch.linalg.vector_norm(g._values()) for g in grads if g.is_sparse]
    if not parts:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack([p.float() for p in parts]))


def clip_gradients(params: Iterable[nn.Parameter], max_norm: float, algorithm: str = "norm",
                   norm: torch.Tensor | None = None) -> None:
    """``torch.nn.utils.clip_grad_norm_`` (``algorithm="norm"``) or ``clip_grad_value_`` (``"value"``)
    over gradients some of which may be sparse: the same scale factor, ``max_norm / (norm + 1e-6)`` capped
    at 1, on every gradient. ``norm``: their total norm, when already measured (:func:`total_gradient_norm`)."""
    grads = coalesced_gradients(params)
    if not grads:
        return
    if algorithm == "value":
        for g in grads:
            (g._values() if g.is_sparse else g).clamp_(-max_norm, max_norm)
        return
    scale = torch.clamp(max_norm / ((total_gradient_norm(grads) if norm is None else norm) + 1e-6), max=1.0)
    dense = [g for g in grads if not g.is_sparse]
    for dtype in {g.dtype for g in dense}:  # as torch's clipping: one foreach multiply per dtype
        torch._foreach_mul_([g for g in dense if g.dtype == dtype], scale.to(dtype))
    for g in grads:
        if g.is_sparse:
            g._values().mul_(scale.to(g.dtype))


def has_sparse_gradients(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` has a group of parameters with sparse gradients."""
    return any(group.get(SPARSE_ROWS) for group in optimizer.param_groups)
