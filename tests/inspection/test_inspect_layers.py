"""`trtflow inspect MODEL --layers [--attrs] [--weights] [--values]` on a real ONNX model (PaddleOCR's
text-direction classifier) and a real engine graph (NVIDIA's TREX ResNet18 QAT), through the CLI."""

from __future__ import annotations

import numpy as np
import onnx
from graph.conftest import ENGINE_GRAPHS
from onnx import numpy_helper
from quant.corpus import CLS, CLS_SHAPE, prepared
from run_compare.models import if_reading_outer_weights, save


def _block(stdout: str, head: str) -> list[str]:
    """The lines of the layer whose first line starts with `head`, up to the next layer."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("layer ")), len(lines)
    )
    return lines[start:end]


def test_onnx_layers_list_every_node_with_types_shapes_attributes(trtflow, tmp_path):
    plain = trtflow("inspect", CLS, "--layers", cwd=tmp_path)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    model = onnx.load(str(CLS))
    assert f"{len(model.graph.node)} layers:" in plain.stdout
    assert plain.stdout.count("\nlayer ") == len(model.graph.node)
    assert "attr " not in plain.stdout and "weight " not in plain.stdout
    first_conv = _block(plain.stdout, "layer 213 ")
    assert first_conv == [
        "layer 213 Conv@0 (Conv)",  # an unnamed node, named as every trtflow report names it
        "  in  x: float32 [-1, 3, ?, ?]",
        "  in  conv1_weights: float32 [8, 3, 3, 3]",  # made by a Constant: its shape inferred
        "  out conv2d_53.tmp_0: float32 [-1, 8, unk__0, unk__1]",
    ]
    detailed = trtflow("inspect", CLS, "--layers", "--attrs", cwd=tmp_path)
    assert _block(detailed.stdout, "layer 213 ")[4:] == [
        "  attr dilations = [1, 1]",
        "  attr group = 1",
        "  attr kernel_shape = [3, 3]",
        "  attr pads = [1, 1, 1, 1]",
        "  attr strides = [2, 2]",
    ]


def test_onnx_weights_give_statistics_and_values_of_each_initializer(trtflow, tmp_path):
    model = prepared(CLS, CLS_SHAPE)  # Constant nodes become initializers, as exporters write them
    path = tmp_path / "cls.onnx"
    onnx.save(model, str(path))
    conv = next(node for node in model.graph.node if node.op_type == "Conv")
    weight = numpy_helper.to_array(
        next(init for init in model.graph.initializer if init.name == conv.input[1])
    )
    shown = trtflow("inspect", path, "--weights", cwd=tmp_path)  # --weights lists the layers too
    assert shown.returncode == 0, shown.stdout + shown.stderr
    block = _block(shown.stdout, f"layer {list(model.graph.node).index(conv)} ")
    head = f"  weight {conv.input[1]}: float32 {list(weight.shape)}"
    at = block.index(head)
    spread, where = block[at + 1], block[at + 2]
    assert spread == (
        f"    min {weight.min():.6g} max {weight.max():.6g} mean {weight.astype(np.float64).mean():.6g} "
        f"median {np.median(weight):.6g} std {weight.astype(np.float64).std():.6g}"
    )
    argmax = list(np.unravel_index(int(weight.argmax()), weight.shape))
    assert f"p99 {np.percentile(weight.astype(np.float64), 99):.6g}" in where
    assert where.endswith(
        f"argmax {[int(i) for i in argmax]} argmin "
        f"{[int(i) for i in np.unravel_index(int(weight.argmin()), weight.shape)]}"
    )
    assert "attr " not in shown.stdout  # attributes only with --attrs
    everything = trtflow("inspect", path, "--weights", "--values", cwd=tmp_path)
    values = _block(everything.stdout, f"layer {list(model.graph.node).index(conv)} ")
    printed = " ".join(values[values.index(head) + 3 :]).replace("[", " ").replace("]", " ")
    assert np.allclose(np.array(printed.split(), dtype=np.float32), weight.ravel(), rtol=1e-6)


def test_engine_graph_layers_show_formats_tactics_fusions_and_weight_counts(trtflow, tmp_path):
    graph = ENGINE_GRAPHS / "resnet-qat.onnx.engine.graph.json"
    shown = trtflow("inspect", graph, "--layers", "--attrs", "--weights", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "37 layers:" in shown.stdout
    conv = _block(shown.stdout, "layer 1 ")
    assert conv[:3] == [
        "layer 1 conv1.weight + QuantizeLinear_7 + Conv_9 (CaskConvolution)",
        "  in  onnx::DequantizeLinear_125: [32, 3, 224, 224] Four wide channel vectorized row "
        "major Int8 format",
        "  out onnx::MaxPool_136: [32, 64, 112, 112] Row major linear FP32",
    ]
    assert "  attr Kernel = [7, 7]" in conv
    assert "  attr TacticName = ampere_fp32_icudnn_int8x4_128x64_relu_medium_nn_v1" in conv
    assert "  attr fused ONNX nodes = conv1.weight, QuantizeLinear_7, Conv_9" in conv
    assert conv[-2:] == ["  weight Weights: Int8, 9408 values", "  weight Bias: Float, 64 values"]


def test_layers_of_a_file_without_layers_is_a_usage_error(trtflow, tmp_path):
    np.savez(tmp_path / "feeds.npz", x=np.zeros(3, np.float32))
    refused = trtflow("inspect", tmp_path / "feeds.npz", "--layers", cwd=tmp_path)
    assert refused.returncode == 2
    assert "--layers reads an ONNX model (.onnx), an engine graph JSON" in refused.stderr
    report = tmp_path / "layer_precisions.json"
    report.write_text('{"a": "fp16"}')
    refused = trtflow("inspect", report, "--layers", cwd=tmp_path)
    assert refused.returncode == 2 and "only when it is an engine graph" in refused.stderr
    values = trtflow("inspect", CLS, "--values", cwd=tmp_path)
    assert values.returncode == 2 and "use --layers --weights --values" in values.stderr


def test_subgraph_layers_are_listed_under_their_node(trtflow, tmp_path):
    save(if_reading_outer_weights(), tmp_path / "if.onnx")
    shown = trtflow("inspect", tmp_path / "if.onnx", "--layers", "--weights", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "2 layers (4 with those in subgraphs):" in shown.stdout
    branch = _block(shown.stdout, "layer 1 choose (If)")
    at = branch.index("  then_branch: 1 layers")
    assert branch[at + 1 : at + 7] == [
        "    layer 0 sum (Add)",  # named after its output, as every trtflow report names it
        "      in  a: float32 [4]",
        "      in  w: float32 [4]",  # the outer graph's weight, read from inside the branch
        "      out sum: float32 [4]",
        "      weight w: float32 [4]",
        "        min 3 max 3 mean 3 median 3 std 0",
    ]
    assert "  else_branch: 1 layers" in branch and "    layer 0 difference (Sub)" in branch
