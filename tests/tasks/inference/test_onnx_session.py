"""sesame's onnxruntime sessions leave out the fusions of ``UNFUSED`` (a residual add and layer norm stay two
nodes instead of onnxruntime's fused SkipLayerNormalization, slower on the CPUs measured) with the same
outputs; ``all_fusions=True`` keeps onnxruntime's defaults for comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.conftest import require


def residual_layer_norm(path: Path, hidden: int = 8) -> None:
    """``LayerNorm(x + skip)``: the pattern onnxruntime fuses into SkipLayerNormalization."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "skip"], ["sum"]),
         helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12)],
        "residual_layer_norm",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "length", hidden]) for n in ("x", "skip")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length", hidden])],
        [numpy_helper.from_array(rng.normal(size=hidden).astype(np.float32), "gamma"),
         numpy_helper.from_array(rng.normal(size=hidden).astype(np.float32), "beta")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def ops_run(path: Path, scratch: Path, all_fusions: bool) -> tuple[set[str], np.ndarray]:
    """The operator kinds onnxruntime ran (its profile) and the output on a fixed input."""
    from sesame.tasks.inference.onnx_session import new_session

    session = new_session(path, threads=1, profile_prefix=scratch / f"profile_{all_fusions}", all_fusions=all_fusions)
    rng = np.random.default_rng(1)
    feed = {n: rng.normal(size=(2, 5, 8)).astype(np.float32) for n in ("x", "skip")}
    (out,) = session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    return {e["args"]["op_name"] for e in events if e.get("cat") == "Node" and "op_name" in e.get("args", {})}, out


def test_sessions_keep_the_residual_add_and_layer_norm_unfused_with_the_same_outputs(tmp_path: Path) -> None:
    require("onnxruntime")
    from sesame.tasks.inference.onnx_session import UNFUSED

    assert "SkipLayerNormFusion" in UNFUSED
    residual_layer_norm(tmp_path / "model.onnx")
    fused_ops, fused = ops_run(tmp_path / "model.onnx", tmp_path, all_fusions=True)
    ops, out = ops_run(tmp_path / "model.onnx", tmp_path, all_fusions=False)
    assert "SkipLayerNormalization" in fused_ops and "LayerNormalization" not in fused_ops  # onnxruntime's default
    assert "SkipLayerNormalization" not in ops and {"Add", "LayerNormalization"} <= ops
    np.testing.assert_allclose(out, fused, rtol=1e-5, atol=1e-5)
