"""A node the real TensorRT-RTX parser rejects (on the CPU) is a recipe error at `model:` naming the
ONNX node, its op and the parser's own reason, not a stack trace: a custom-domain op with no plugin,
and a valid ONNX attribute value TensorRT does not implement."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)


def _model(path: Path, node: onnx.NodeProto, opsets: list, initializers=()) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="first"), node],
        "rejected",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "width"])],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def custom_op_model(path: Path) -> Path:
    node = helper.make_node("Frobnicate", ["a"], ["y"], name="frob", domain="com.example")
    return _model(path, node, [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def crop_resize_model(path: Path) -> Path:
    """Resize's `tf_crop_and_resize` is valid ONNX (the checker takes it) that TensorRT lacks."""
    node = helper.make_node(
        "Resize",
        ["a", "roi", "scales"],
        ["y"],
        name="crop",
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
    )
    initializers = [
        helper.make_tensor("roi", TensorProto.FLOAT, [4], [0, 0, 1, 1]),
        helper.make_tensor("scales", TensorProto.FLOAT, [2], [1, 2]),
    ]
    model = _model(path, node, [helper.make_opsetid("", 17)], initializers)
    onnx.checker.check_model(onnx.load(str(model)), full_check=True)
    return model


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (
            custom_op_model,
            [
                "node `frob` (Frobnicate, domain com.example: a custom op needs a TensorRT plugin)",
                "Plugin not found",
            ],
        ),
        (
            crop_resize_model,
            ["node `crop` (Resize)", "TensorRT only supports half_pixel"],
        ),
    ],
    ids=["custom-domain-op", "unsupported-attribute"],
)
def test_a_node_the_real_parser_rejects_is_a_located_recipe_error(trtflow, tmp_path, make, says):
    model = make(tmp_path / "rejected.onnx")
    recipe = tmp_path / "parse.yaml"
    recipe.write_text(
        "trtflow: 1\n"
        "name: parse\n"
        "steps:\n"
        "  engine:\n"
        "    uses: build-engine\n"
        "    with:\n"
        "      library: tensorrt-rtx\n"
        f"      model: {model}\n",
        encoding="utf-8",
    )
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out")
    text = result.stdout + result.stderr
    assert result.returncode == 2, text
    assert "parse.yaml:8" in text and "steps.engine.with.model" in text, text
    assert "TensorRT-RTX" in text and "ONNX parser rejects rejected.onnx" in text, text
    for words in says:
        assert words in text, text
    assert "Traceback" not in text
    assert not list((tmp_path / "out").rglob("*.engine"))
