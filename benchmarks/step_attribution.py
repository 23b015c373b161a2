"""Where one profiled training step's time goes: every profiler event's self CPU time into exactly one part.

Used by ``benchmarks/step_profile.py``. The step runs inside ``record_function`` annotations
(:data:`ROOT` around it; :data:`PHASES` for its forward, backward, gradient clipping, optimiser step and
``zero_grad``), so an event's phase is its nearest annotation above it. Its part is then decided by:

1. clipping / optimiser / ``zero_grad`` phase: everything in it is that part (:data:`PHASE_PARTS`);
2. an annotation's own self time (Python running between ops: module code, hooks) is ``python``;
3. forward: the outermost op above it (or itself) named in :data:`CAPTURING` (attention, loss: every op
   inside them counts there, their matmuls and dropout included); else the nearest cast
   (:data:`CASTS`: autocast's casts inside ``aten::linear`` are casts, not GEMM); else the outermost op
   named in :data:`NAMED`; else ``other`` (low-level ops such as ``aten::copy_`` or ``aten::empty``
   take the part of the named op they run in);
4. backward: a ``autograd::engine::evaluate_function: X`` wrapper's own time and gradient
   accumulation into ``.grad`` (``AccumulateGrad``) are ``autograd``; everything else the wrapper runs (the
   backward node ``X`` and the engine's work on X's outputs) takes the part of the forward op that created X
   (matched by autograd sequence number: the last forward event, in start order, holding the node's
   number is its creator), so ``BmmBackward0`` of an attention
   matmul is attention and ``EmbeddingBackward0`` (``aten::embedding_dense_backward``) is embedding;
   ops outside any node (the loss gradient's seed) go by rule 3's tables.

Every event gets exactly one part, so the parts add up to the sum of all self times, which is the
root annotation's total time (:func:`attribute` reports both).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sesame.tasks.encoders.low_precision_attention import UNFUSED_ATTENTION_RANGE

ROOT = "step_profile.step"
FORWARD, BACKWARD, CLIP, OPTIMIZER, ZERO_GRAD = "forward", "backward", "clip", "optimizer", "zero_grad"
PHASES = (FORWARD, BACKWARD, CLIP, OPTIMIZER, ZERO_GRAD)

#: part key -> label, in the order the tables list them
PARTS: dict[str, str] = {
    "gemm": "GEMM (linear / matmul: mm, addmm, bmm; fwd + bwd)",
    "attention": "attention (SDPA and the ops inside it; fwd + bwd)",
    "softmax": "softmax outside attention (fwd + bwd)",
    "gelu": "GELU (fwd + bwd)",
    "layernorm": "LayerNorm (fwd + bwd)",
    "dropout": "dropout outside attention (fwd + bwd)",
    "embedding": "embedding (lookup + dense backward)",
    "loss": "loss (cross-entropy; fwd + bwd)",
    "casts": "dtype casts (aten::to; fwd + bwd)",
    "layout": "views, reshapes, copies (fwd + bwd)",
    "elementwise": "elementwise: residual adds, masks, tanh (fwd + bwd)",
    "autograd": "autograd engine (node dispatch, grad accumulation)",
    "python": "Python between ops (module code, hooks)",
    "clip": "gradient clipping",
    "optimizer": "optimizer step (AdamW + scheduler + zero_grad)",
    "other": "other ops",
}
PHASE_PARTS = {CLIP: "clip", OPTIMIZER: "optimizer", ZERO_GRAD: "optimizer"}

#: forward ops whose every inner op counts as theirs
CAPTURING: dict[str, str] = {
    "aten::scaled_dot_product_attention": "attention",
    "aten::_scaled_dot_product_attention_math": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    UNFUSED_ATTENTION_RANGE: "attention",  # sesame's bf16 attention with dropout (encoder.low_precision_attention)
    "aten::cross_entropy_loss": "loss",
    "aten::nll_loss": "loss",
    "aten::nll_loss_nd": "loss",
    "aten::log_softmax": "loss",
    "aten::_log_softmax": "loss",
    "aten::binary_cross_entropy_with_logits": "loss",
    "aten::mse_loss": "loss",
}
CASTS = frozenset({"aten::to", "aten::_to_copy", "aten::type_as"})
_LAYOUT_OPS = ("view", "reshape", "_reshape_alias", "_unsafe_view", "transpose", "t", "permute", "contiguous",
               "clone", "expand", "unsqueeze", "squeeze", "select", "slice", "narrow", "split", "chunk", "cat", "stack",
               "flatten", "unflatten", "unbind", "split_with_sizes", "as_strided", "detach", "detach_", "gather", "index",
               "index_select")
_ELEMENTWISE_OPS = ("add", "add_", "sub", "rsub", "mul", "mul_", "div", "div_", "where", "ge", "gt", "le", "lt", "eq",
                    "ne", "__and__", "__or__", "bitwise_and", "bitwise_or", "bitwise_not", "all", "any", "isneginf",
                    "masked_fill", "masked_fill_", "tanh", "sum", "mean", "new_ones", "ones", "ones_like", "zeros",
                    "zeros_like", "full", "arange", "fill_", "zero_", "scalar_tensor", "is_nonzero", "item", "clamp",
                    "clamp_")
#: forward (and seed-gradient) ops -> part; the outermost one named here decides
NAMED: dict[str, str] = {
    **{f"aten::{op}": "gemm" for op in ("linear", "matmul", "mm", "addmm", "bmm", "baddbmm", "addbmm")},
    **{f"aten::{op}": "softmax" for op in ("softmax", "_softmax", "_safe_softmax")},
    "aten::gelu": "gelu",
    "aten::layer_norm": "layernorm", "aten::native_layer_norm": "layernorm",
    "aten::dropout": "dropout", "aten::native_dropout": "dropout", "aten::feature_dropout": "dropout",
    "aten::embedding": "embedding",
    **{f"aten::{op}": "layout" for op in _LAYOUT_OPS},
    **{f"aten::{op}": "elementwise" for op in _ELEMENTWISE_OPS},
}
ENGINE_PREFIX = "autograd::engine::evaluate_function: "
ENGINE_NODES = frozenset({"torch::autograd::AccumulateGrad"})
#: GEMM kernels whose recorded input shapes give (batch, m, k, n): position of the two operands
GEMM_OPERANDS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}


@dataclass
class StepParts:
    """One profiled step: microseconds of self CPU time per part (keys of :data:`PARTS`), the sum of every
    event's self time, the root annotation's total time, how many events were attributed, the GEMM shapes
    ``(batch, m, k, n) -> [calls, FLOPs]``, and the op names that fell into ``other``."""

    parts_us: dict[str, float]
    events_self_us: float
    root_total_us: float
    events: int
    gemm_shapes: dict[tuple[int, int, int, int], list[int]] = field(default_factory=dict)
    other_ops_us: dict[str, float] = field(default_factory=dict)

    @property
    def total_us(self) -> float:
        return sum(self.parts_us.values())


def _chain(event: Any) -> list[Any]:
    """``event`` and its ancestors, innermost first."""
    out = []
    while event is not None:
        out.append(event)
        event = event.cpu_parent
    return out


def phase_of(chain: Sequence[Any]) -> str | None:
    """The nearest phase annotation in an event's chain (None: only the root, or outside it)."""
    return next((e.name for e in chain if e.name in PHASES), None)


def forward_part(chain: Sequence[Any]) -> str:
    """Rule 3 of the module doc for an event's chain (innermost first)."""
    ops = [e.name for e in chain if e.name not in PHASES and e.name != ROOT]
    capturing = [CAPTURING[n] for n in ops if n in CAPTURING]
    if capturing:
        return capturing[-1]  # outermost
    if any(n in CASTS for n in ops):
        return "casts"
    named = [NAMED[n] for n in ops if n in NAMED]
    return named[-1] if named else "other"


def _creators(events: Sequence[Any]) -> dict[int, Any]:
    """Autograd sequence number -> the forward event that created that node (the last one holding it)."""
    creators: dict[int, Any] = {}
    # A child can start in the same microsecond as its parent: depth breaks the tie, inner ops last.
    for event in sorted(events, key=lambda e: (e.time_range.start, len(_chain(e)))):
        if event.sequence_nr >= 0 and phase_of(_chain(event)) == FORWARD:
            creators[event.sequence_nr] = event
    return creators


def backward_part(chain: Sequence[Any], creators: dict[int, Any]) -> str:
    """Rule 4 of the module doc for an event's chain (innermost first). The engine's wrapper of node X carries X's
    sequence number; what it runs besides X (summing a broadcast gradient down to its input's shape, adding
    X's output into the next node's input buffer) counts as X's too."""
    if chain[0].name.startswith(ENGINE_PREFIX):
        return "autograd"
    wrapper = next((e for e in chain[1:] if e.name.startswith(ENGINE_PREFIX)), None)
    if wrapper is None:
        return forward_part(chain)
    if wrapper.name.removeprefix(ENGINE_PREFIX) in ENGINE_NODES:
        return "autograd"
    creator = creators.get(wrapper.sequence_nr)
    return forward_part(_chain(creator)) if creator is not None else "other"


def part_of(event: Any, creators: dict[int, Any]) -> str:
    """The one part (a key of :data:`PARTS`) an event's self time goes to."""
    chain = _chain(event)
    phase = phase_of(chain)
    if phase in PHASE_PARTS:
        return PHASE_PARTS[phase]
    if event.name in PHASES or event.name == ROOT:
        return "python"
    if phase == BACKWARD:
        return backward_part(chain, creators)
    return forward_part(chain)


def gemm_shape(event: Any) -> tuple[int, int, int, int] | None:
    """``(batch, m, k, n)`` of a GEMM kernel event from its recorded input shapes (None: not a GEMM, or
    shapes not recorded)."""
    operands = GEMM_OPERANDS.get(event.name)
    shapes = getattr(event, "input_shapes", None)
    if operands is None or not shapes or len(shapes) <= max(operands):
        return None
    a, b = shapes[operands[0]], shapes[operands[1]]
    if len(a) == 2 and len(b) == 2:
        return (1, a[0], a[1], b[1])
    if len(a) == 3 and len(b) == 3:
        return (a[0], a[1], a[2], b[2])
    return None


def attribute(events: Iterable[Any]) -> StepParts:
    """Every event of one profiled step (``prof.events()``, the step run inside a :data:`ROOT` annotation)
    into its part; the GEMM shapes and the ops that fell into ``other`` on the side."""
    events = list(events)
    creators = _creators(events)
    parts = dict.fromkeys(PARTS, 0.0)
    shapes: dict[tuple[int, int, int, int], list[int]] = {}
    other: dict[str, float] = defaultdict(float)
    for event in events:
        part = part_of(event, creators)
        parts[part] += event.self_cpu_time_total
        if part == "other":
            other[event.name] += event.self_cpu_time_total
        shape = gemm_shape(event)
        if shape is not None:
            entry = shapes.setdefault(shape, [0, 0])
            entry[0] += 1
            entry[1] += 2 * shape[0] * shape[1] * shape[2] * shape[3]
    roots = [e for e in events if e.name == ROOT]
    if len(roots) != 1:
        raise RuntimeError(f"expected one {ROOT!r} annotation in the profile, found {len(roots)}")
    return StepParts(parts, sum(e.self_cpu_time_total for e in events), roots[0].cpu_time_total, len(events), shapes,
                     dict(sorted(other.items(), key=lambda kv: -kv[1])))
