"""``--int8-weights``: onnxruntime's dynamic int8 with one weight scale per output column (the default)
or one per matrix. On a matrix whose columns differ in size, one scale for all rounds the small
columns to a few levels; a scale per column keeps them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require


def matmul_graph(path: Path, weight: np.ndarray) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rows, cols = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", cols])],
        [numpy_helper.from_array(weight.astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def weight_scales(path: Path) -> list[np.ndarray]:
    """The float scales of the graph's int8 weights."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    return [init[name] for name in init if name.endswith("_scale") and name.startswith("w")]


def test_per_channel_weights_keep_small_columns_that_one_scale_rounds_away(tmp_path: Path) -> None:
    require("onnxruntime")
    import onnxruntime as ort

    from sesame.tasks.export.onnx import quantize_int8

    rng = np.random.default_rng(0)
    weight = rng.normal(size=(16, 4)) * np.array([1.0, 1.0, 0.01, 0.01])  # two columns 100x smaller
    x = rng.normal(size=(8, 16)).astype(np.float32)
    matmul_graph(tmp_path / "model.onnx", weight)
    exact = x @ weight.astype(np.float32)
    errors = {}
    for scheme in ("per_channel", "per_tensor"):
        target = tmp_path / f"{scheme}.onnx"
        nodes = quantize_int8(tmp_path / "model.onnx", target, weights=scheme)
        assert nodes == {"MatMulInteger": 1, "DynamicQuantizeLinear": 1}
        (scale,) = weight_scales(target)
        assert scale.size == (4 if scheme == "per_channel" else 1)
        got = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        errors[scheme] = np.abs(got - exact)[:, 2:].max() / np.abs(exact[:, 2:]).max()  # the small columns
    assert errors["per_channel"] < 0.05 < errors["per_tensor"], errors


def test_an_unknown_weight_scheme_is_named_with_the_choices(tmp_path: Path) -> None:
    from sesame.tasks.core.errors import ConfigError
    from sesame.tasks.export.onnx import quantize_int8

    with pytest.raises(ConfigError, match="--int8-weights per_row: use one of per_channel, per_tensor"):
        quantize_int8(tmp_path / "model.onnx", tmp_path / "int8.onnx", weights="per_row")
