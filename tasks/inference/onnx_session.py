"""onnxruntime sessions of a ``sesame-export --format onnx`` folder, and the folder's file names.

Shared by the export (``tasks/export/onnx.py``, which writes and checks the graph) and the runner
(``tasks/inference/onnx_runner.py``, which runs it for ``sesame-predict``). The int8 graph runs one
example at a time (:func:`run_session_by_row`), so its predictions do not depend on the batch. onnxruntime is imported
only when a session is made (it is the ``[export]`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sesame.heads.masking import masked_value
from sesame.tasks.core.errors import ConfigError

#: The float graph.
MODEL_FILE = "model.onnx"
#: onnxruntime's dynamic int8 quantisation of the graph (``--int8``).
INT8_FILE = "model.int8.onnx"
#: The trained config (task, labels, data and head settings) the runner reads.
CONFIG_FILE = "sesame_config.yaml"


#: onnxruntime graph fusions sesame's sessions leave out. Its fused SkipLayerNormalization CPU kernel (residual add
#: and layer norm in one) is slower than the two nodes it replaces on this project's CPU (x86-64 with AVX-512 VNNI,
#: 1-2 threads): MiniLM-L6's int8 graphs ran 1.2-1.5x faster without it, fp32 ones 1.08x, with outputs equal to
#: float rounding (``benchmarks/inference.py``: ``ort_int8`` against ``ort_int8_all_fusions``).
UNFUSED = ("SkipLayerNormFusion",)


def new_session(path: str | Path, threads: int | None = None, providers: Sequence[str] | None = None,
                profile_prefix: str | Path | None = None, all_fusions: bool = False) -> Any:
    """An onnxruntime session (``threads``: intra-op threads; None lets onnxruntime choose). With
    ``profile_prefix`` it records onnxruntime's own profile, written by ``session.end_profiling()``;
    ``all_fusions`` keeps every onnxruntime fusion (``UNFUSED`` too), for comparisons."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    return ort.InferenceSession(str(path), sess_options=options, providers=list(providers or ["CPUExecutionProvider"]),
                                disabled_optimizers=[] if all_fusions else list(UNFUSED))


_NUMPY_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
                "tensor(float)": np.float32}


def session_feed(session: Any, batch: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The session's inputs from a batch (``token_type_ids`` zeros where the graph wants them and the
    batch has none, as transformers' encoders default them; other batch keys are left out)."""
    feed = {}
    for arg in session.get_inputs():
        if arg.name in batch:
            value = batch[arg.name]
        elif arg.name == "token_type_ids":
            value = torch.zeros_like(batch["input_ids"])
        else:
            raise ConfigError(f"the ONNX graph needs the input {arg.name!r}, which the batch does not have "
                              f"(it has {', '.join(batch)})")
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        feed[arg.name] = array.astype(_NUMPY_TYPES.get(arg.type, array.dtype), copy=False)
    return feed


def run_session(session: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The graph's outputs on ``batch`` as float32 CPU tensors, in output order."""
    return tuple(torch.from_numpy(np.asarray(o, dtype=np.float32)) for o in session.run(None, session_feed(session, batch)))


def run_session_by_row(session: Any, batch: dict[str, torch.Tensor], output_axes: Sequence[str]) -> tuple[torch.Tensor, ...]:
    """The graph's outputs on ``batch`` computed one example at a time, each cut to its own length, and put
    back together in the batch's shape (``output_axes``: the outputs' leading axes, ``TaskExport.output_axes``;
    positions past an example's length get :func:`~sesame.heads.masking.masked_value`, which no decoder reads).

    Why: onnxruntime's dynamic int8 graph quantises each matrix product's activations with one scale per
    call, from the whole activation tensor, so an example's probabilities would depend on the other
    examples of its batch and on their padding. Alone and unpadded, an example gets the same outputs in any
    batch, bit for bit. The price is one session call per example."""
    mask = batch["attention_mask"]
    rows, width = mask.shape[0], mask.shape[-1]
    if rows == 0:
        return run_session(session, batch)
    results = []
    for row in range(rows):
        real = mask[row].reshape(-1, width).any(dim=0).nonzero()
        length = int(real.max()) + 1 if len(real) else width
        alone = {name: value[row : row + 1] for name, value in batch.items()
                 if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == rows}
        alone = {name: value[..., :length] if value.ndim > 1 and value.shape[-1] == width else value
                 for name, value in alone.items()}
        results.append(run_session(session, alone))
    length_axis = list(output_axes).index("length") if "length" in output_axes else None
    outputs = []
    for parts in zip(*results):
        if length_axis is not None:
            padded = []
            for part in parts:
                shape = list(part.shape)
                shape[length_axis] = width - part.shape[length_axis]
                padded.append(torch.cat([part, torch.full(shape, masked_value(torch.float32))], dim=length_axis))
            parts = padded
        outputs.append(torch.cat(parts, dim=0))
    return tuple(outputs)
