"""Small models rebuilt from ONNX's backend node tests where trtflow's CPU path once broke
(`tools/sweep_node_tests.py` found them): string tensors, sequences in and out, an opset-8 Scan.

Each model carries a float path too (an Add or a Mul), so the emulated runners have something to
round and the switchable model has sites."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def _model(nodes, inputs, outputs, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "node_test", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def string_concat() -> onnx.ModelProto:
    """StringConcat (opset 20) beside an Add: string inputs and a string output."""
    return _model(
        [
            helper.make_node("StringConcat", ["x", "y"], ["joined"], name="concat"),
            helper.make_node("Add", ["a", "a"], ["twice"], name="add"),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("y", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("joined", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("twice", TensorProto.FLOAT, [2]),
        ],
        20,
    )


def split_to_sequence() -> onnx.ModelProto:
    """SplitToSequence into uneven parts (a sequence output whose items differ in shape), then the
    first part doubled."""
    split = helper.make_tensor("parts", TensorProto.INT64, [2], [1, 2])
    return _model(
        [
            helper.make_node("Constant", [], ["parts"], name="parts", value=split),
            helper.make_node("SplitToSequence", ["x", "parts"], ["seq"], name="split", axis=0),
            helper.make_node("Mul", ["x", "x"], ["square"], name="square"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [
            helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("square", TensorProto.FLOAT, [3, 2]),
        ],
        11,
    )


def sequence_input() -> onnx.ModelProto:
    """SequenceAt on a sequence input: no feed file holds a sequence."""
    return _model(
        [
            helper.make_node("SequenceAt", ["seq", "position"], ["item"], name="at"),
            helper.make_node("Add", ["item", "item"], ["twice"], name="add"),
        ],
        [
            helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("position", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("twice", TensorProto.FLOAT, [2])],
        11,
    )


def scan_opset8() -> onnx.ModelProto:
    """ONNX's test_scan_sum (Scan-8: running sums over a batch of sequences), its output doubled.
    Opset 8 has no Where, which the switchable model selected with."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
            helper.make_node("Identity", ["sum_out"], ["scan_out"]),
        ],
        "scan_body",
        [
            helper.make_tensor_value_info("sum_in", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("next", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("sum_out", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2]),
        ],
    )
    return _model(
        [
            helper.make_node(
                "Scan", ["", "initial", "x"], ["y", "z"], name="scan", num_scan_inputs=1, body=body
            ),
            helper.make_node("Add", ["z", "z"], ["twice"], name="twice"),
        ],
        [
            helper.make_tensor_value_info("initial", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("twice", TensorProto.FLOAT, [1, 3, 2]),
        ],
        8,
    )


def fp16_inside() -> onnx.ModelProto:
    """ONNX's *_fp16_expanded functions in small: a float input cast to FP16, a Sigmoid computed in
    FP16, the result cast back. ONNX Runtime's CPU provider computes the Sigmoid in FP32 and skips
    the FP16 rounding of its output unless that tensor is a graph output (a tap)."""
    return _model(
        [
            helper.make_node("Cast", ["x"], ["half"], name="to_half", to=TensorProto.FLOAT16),
            helper.make_node("Sigmoid", ["half"], ["gate"], name="gate"),
            helper.make_node("Cast", ["gate"], ["y"], name="to_float", to=TensorProto.FLOAT),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16])],
        13,
    )


def batchnorm_training() -> onnx.ModelProto:
    """ONNX's test_batchnorm_example_training_mode: BatchNormalization-15 in training mode, whose
    running mean and variance outputs ONNX Runtime computes in place over its inputs."""
    return _model(
        [
            helper.make_node(
                "BatchNormalization",
                ["x", "s", "bias", "mean", "var"],
                ["y", "output_mean", "output_var"],
                name="norm",
                training_mode=1,
            )
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5]),
            *(
                helper.make_tensor_value_info(n, TensorProto.FLOAT, [3])
                for n in ("s", "bias", "mean", "var")
            ),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 5]),
            helper.make_tensor_value_info("output_mean", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("output_var", TensorProto.FLOAT, [3]),
        ],
        15,
    )


def _parsed(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def attention_and_rms_norm() -> onnx.ModelProto:
    """Opset 23's Attention and RMSNormalization, ops ONNX Runtime runs through their function
    bodies: the schema types Attention's V (T2) and RMSNormalization's X (T) apart from the other
    inputs, the bodies compute them together."""
    return _parsed(
        """
        <ir_version: 10, opset_import: ["" : 23]>
        attention (float[2,4,24] Q, float[2,6,24] K, float[2,6,24] V, float[24] W) => (float[2,4,24] Y) {
            A = Attention <kv_num_heads: int = 3, q_num_heads: int = 3> (Q, K, V)
            Y = RMSNormalization <axis: int = -1> (A, W)
        }
        """
    )


def tree_ensemble() -> onnx.ModelProto:
    """ai.onnx.ml's TreeEnsemble (ONNX's test_ai_onnx_ml_tree_ensemble_set_membership): its split
    thresholds are FP32 tensors in attributes that must have its input's type."""
    return _parsed(
        """
        <ir_version: 10, opset_import: ["ai.onnx.ml" : 5, "" : 21]>
        trees (float[6,1] X) => (float[6,4] Y) {
            Z = ai.onnx.ml.TreeEnsemble <aggregate_function: int = 1, leaf_targetids: ints = [0, 1, 2, 3],
                leaf_weights: tensor = float[4] leaf_weights {1,10,1000,100},
                membership_values: tensor = float[8] membership_values {1.2,3.7,8,9,nan,12,7,nan},
                n_targets: int = 4, nodes_falseleafs: ints = [1, 0, 1], nodes_falsenodeids: ints = [2, 2, 3],
                nodes_featureids: ints = [0, 0, 0], nodes_modes: tensor = uint8[3] nodes_modes {0,6,6},
                nodes_splits: tensor = float[3] nodes_splits {11,232344,nan}, nodes_trueleafs: ints = [0, 1, 1],
                nodes_truenodeids: ints = [1, 0, 1], post_transform: int = 0, tree_roots: ints = [0]> (X)
            Y = Add (Z, Z)
        }
        """
    )


def upsample_opset9() -> onnx.ModelProto:
    """ONNX's test_upsample_nearest: Upsample, gone after opset 9; FP8 emulation converts the model
    to opset 19, whose adapter adds unnamed nodes."""
    return _parsed(
        """
        <ir_version: 4, opset_import: ["" : 9]>
        upsample (float[1,1,2,2] X, float[4] scales) => (float[1,1,4,6] Y) {
            Y = Upsample <mode: string = "nearest"> (X, scales)
        }
        """
    )
