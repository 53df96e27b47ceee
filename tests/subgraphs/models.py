"""Models whose network sits in nested If branches, the way TorchScript tracing and spox export them.

A voice-activity detector scales its input, then picks its 16 kHz or 8 kHz weights in an If on the
sample rate; each branch holds the whole network, weights as Constant nodes, reading the scaled
input and the state from the outer scope. Inside, TorchScript's `LSTMCell`/`GRUCell` leave an If on "is the input batched?" whose
branches return tensors of different rank, and the exporter declares branch outputs with the
wrong rank or with literal 0 dims. ONNX Runtime merges such declarations leniently; onnx's shape
inference copies them into the types it infers, which made `load`'s output unopenable (an LSTM
reading a rank-4 input) or fail at run time (a 0-sized output buffer).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SAMPLES, HIDDEN, FEATURES = 512, 128, 64
SHAPES = {"input": [1, SAMPLES], "state": [2, 1, HIDDEN]}


def _constant(name: str, values: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=name, value=numpy_helper.from_array(values, name)
    )


def _float(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _batched_if(
    prefix: str, x: str, out: str, then_declared, else_declared
) -> list[onnx.NodeProto]:
    """TorchScript's `if x.dim() == 2: x else x.unsqueeze(0)`: branches of different rank, declared as given."""
    then_branch = helper.make_graph(
        [helper.make_node("Identity", [x], [f"{prefix}_same"], name=f"{prefix}_Identity")],
        f"{prefix}_then",
        [],
        [_float(f"{prefix}_same", then_declared)],
    )
    else_branch = helper.make_graph(
        [
            _constant(f"{prefix}_axis", np.array([0], np.int64)),
            helper.make_node(
                "Unsqueeze",
                [x, f"{prefix}_axis"],
                [f"{prefix}_unsqueezed"],
                name=f"{prefix}_Unsqueeze",
            ),
        ],
        f"{prefix}_else",
        [],
        [_float(f"{prefix}_unsqueezed", else_declared)],
    )
    return [
        helper.make_node("Shape", [x], [f"{prefix}_shape"], name=f"{prefix}_Shape"),
        helper.make_node("Size", [f"{prefix}_shape"], [f"{prefix}_rank"], name=f"{prefix}_Size"),
        _constant(f"{prefix}_two", np.array(2, np.int64)),
        helper.make_node(
            "Equal",
            [f"{prefix}_rank", f"{prefix}_two"],
            [f"{prefix}_batched"],
            name=f"{prefix}_Equal",
        ),
        helper.make_node(
            "If",
            [f"{prefix}_batched"],
            [out],
            name=f"{prefix}_If",
            then_branch=then_branch,
            else_branch=else_branch,
        ),
    ]


def _recurrent_branch(
    prefix: str, cell: str, rng: np.random.Generator, declared
) -> onnx.GraphProto:
    """One sample rate's network: features, the batched-If, an LSTM or GRU, a sigmoid head; new state."""
    gates = {"LSTM": 4, "GRU": 3}[cell]
    weight = lambda *shape: rng.normal(0, 0.2, shape).astype(np.float32)  # noqa: E731
    nodes = [
        _constant(f"{prefix}_proj", weight(SAMPLES, FEATURES)),
        helper.make_node(
            "MatMul", ["scaled", f"{prefix}_proj"], [f"{prefix}_features"], name=f"{prefix}_MatMul"
        ),
        *_batched_if(
            f"{prefix}_cell", f"{prefix}_features", f"{prefix}_batch_first", *declared["cell"]
        ),
        _constant(f"{prefix}_seq_axis", np.array([0], np.int64)),
        helper.make_node(
            "Unsqueeze",
            [f"{prefix}_batch_first", f"{prefix}_seq_axis"],
            [f"{prefix}_sequence"],
            name=f"{prefix}_Unsqueeze",
        ),
        _constant(f"{prefix}_W", weight(1, gates * HIDDEN, FEATURES)),
        _constant(f"{prefix}_R", weight(1, gates * HIDDEN, HIDDEN)),
        _constant(f"{prefix}_B", weight(1, 2 * gates * HIDDEN)),
        _constant(f"{prefix}_halves", np.array([1, 1], np.int64)),
        helper.make_node(
            "Split",
            ["state", f"{prefix}_halves"],
            [f"{prefix}_h0", f"{prefix}_c0"],
            axis=0,
            name=f"{prefix}_Split",
        ),
    ]
    if cell == "LSTM":
        nodes.append(
            helper.make_node(
                "LSTM",
                [
                    f"{prefix}_sequence",
                    f"{prefix}_W",
                    f"{prefix}_R",
                    f"{prefix}_B",
                    "",
                    f"{prefix}_h0",
                    f"{prefix}_c0",
                ],
                [f"{prefix}_Y", f"{prefix}_h", f"{prefix}_c"],
                hidden_size=HIDDEN,
                name=f"{prefix}_LSTM",
            )
        )
    else:  # a GRU has no cell state: the second half of `state` passes through scaled
        nodes += [
            helper.make_node(
                "GRU",
                [
                    f"{prefix}_sequence",
                    f"{prefix}_W",
                    f"{prefix}_R",
                    f"{prefix}_B",
                    "",
                    f"{prefix}_h0",
                ],
                [f"{prefix}_Y", f"{prefix}_h"],
                hidden_size=HIDDEN,
                linear_before_reset=1,
                name=f"{prefix}_GRU",
            ),
            helper.make_node("Tanh", [f"{prefix}_c0"], [f"{prefix}_c"], name=f"{prefix}_Tanh"),
        ]
    nodes += [
        helper.make_node(
            "Concat",
            [f"{prefix}_h", f"{prefix}_c"],
            [f"{prefix}_state"],
            axis=0,
            name=f"{prefix}_Concat",
        ),
        _constant(f"{prefix}_head", weight(HIDDEN, 1)),
        helper.make_node(
            "Squeeze",
            [f"{prefix}_h", f"{prefix}_seq_axis"],
            [f"{prefix}_last"],
            name=f"{prefix}_Squeeze",
        ),
        helper.make_node(
            "MatMul",
            [f"{prefix}_last", f"{prefix}_head"],
            [f"{prefix}_logit"],
            name=f"{prefix}_Head",
        ),
        helper.make_node(
            "Sigmoid", [f"{prefix}_logit"], [f"{prefix}_prob"], name=f"{prefix}_Sigmoid"
        ),
    ]
    return helper.make_graph(
        nodes,
        prefix,
        [],
        [_float(f"{prefix}_prob", declared["prob"]), _float(f"{prefix}_state", declared["state"])],
    )


def _detector(name: str, cells: tuple[str, str], declared, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes = [
        _constant(
            "gain", np.array(0.5, np.float32)
        ),  # the branches read its output from the outer scope
        helper.make_node("Mul", ["input", "gain"], ["scaled"], name="Mul_gain"),
        _constant("sr_16k", np.array(16000, np.int64)),
        helper.make_node("Equal", ["sr", "sr_16k"], ["is_16k"], name="Equal_0"),
        helper.make_node(
            "If",
            ["is_16k"],
            ["output", "stateN"],
            name="If_0",
            then_branch=_recurrent_branch("_if_then_branch", cells[0], rng, declared),
            else_branch=_recurrent_branch("_if_else_branch", cells[1], rng, declared),
        ),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [
            _float("input", [None, None]),
            _float("state", [2, None, HIDDEN]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [_float("output", [None, 1]), _float("stateN", [2, None, HIDDEN])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="spox"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def vad_wrong_rank() -> onnx.ModelProto:
    """LSTMs; the batched-If's rank-2 branch is declared rank 3 (literal 0 dims): onnx types the
    LSTM's input rank 4 and ONNX Runtime refused `load`'s output (`First input tensor must have rank 3`)."""
    return _detector(
        "vad_wrong_rank",
        ("LSTM", "LSTM"),
        {"cell": ([0, 0, 0], None), "prob": [0, 0], "state": [0, 0, 0]},
        seed=0,
    )


def vad_zero_dims() -> onnx.ModelProto:
    """An LSTM (16 kHz) and a GRU (8 kHz); both batched-If branches declared `[0, 0]`: onnx's inferred
    types carry the 0s and ONNX Runtime failed at run time on a 0-sized output buffer."""
    return _detector(
        "vad_zero_dims",
        ("LSTM", "GRU"),
        {"cell": ([0, 0], [0, 0]), "prob": None, "state": None},
        seed=1,
    )


CORPUS = {"vad_wrong_rank": vad_wrong_rank, "vad_zero_dims": vad_zero_dims}


FOLDED_WIDTH = 8


def folded_branch() -> onnx.ModelProto:
    """silero_vad's decoder in small: `x` [batch, 8, frames]; an If squeezes a single frame away
    (`frames == 1`), and a second If on the result's rank runs an LSTM on the rank-2 case and a
    ReduceMean over frames on the rank-3 one. With `frames` dynamic ONNX Runtime runs it at every
    optimization level. Pinned to one frame, its graph optimizer (ORT_ENABLE_BASIC and up) folds the
    first If, learns the rank, and type-checks the ReduceMean branch that never runs against a
    rank-2 input: `axis must be in [-rank, rank-1]`. With optimizations off it opens and runs."""
    width, rng = FOLDED_WIDTH, np.random.default_rng(3)
    squeeze = helper.make_graph(
        [
            _constant("frame_axis", np.array([2], np.int64)),
            helper.make_node("Squeeze", ["x", "frame_axis"], ["one_frame"], name="Squeeze_frame"),
        ],
        "squeeze_branch",
        [],
        [_float("one_frame", [None, width])],
    )
    keep = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["frames"], name="Identity_frames")],
        "keep_branch",
        [],
        [_float("frames", [None, width, None])],
    )
    recurrent = helper.make_graph(
        [
            _constant("seq_axis", np.array([0], np.int64)),
            helper.make_node("Unsqueeze", ["y", "seq_axis"], ["sequence"], name="Unsqueeze_seq"),
            _constant("W", rng.uniform(-0.5, 0.5, (1, 4 * width, width)).astype(np.float32)),
            _constant("R", rng.uniform(-0.5, 0.5, (1, 4 * width, width)).astype(np.float32)),
            helper.make_node(
                "LSTM", ["sequence", "W", "R"], ["Y", "Y_h"], hidden_size=width, name="rnn_LSTM"
            ),
            _constant("state_axes", np.array([0], np.int64)),
            helper.make_node("Squeeze", ["Y_h", "state_axes"], ["last"], name="Squeeze_state"),
        ],
        "rnn_branch",
        [],
        [_float("last", [None, width])],
    )
    mean = helper.make_graph(
        [helper.make_node("ReduceMean", ["y"], ["pooled"], axes=[2], keepdims=0, name="Mean")],
        "mean_branch",
        [],
        [_float("pooled", [None, width])],
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="Shape_x"),
        _constant("frame_index", np.array(2, np.int64)),
        helper.make_node("Gather", ["x_shape", "frame_index"], ["frame_count"], name="Gather_0"),
        _constant("one", np.array(1, np.int64)),
        helper.make_node("Equal", ["frame_count", "one"], ["single"], name="Equal_single"),
        helper.make_node(
            "If", ["single"], ["y"], name="If_frames", then_branch=squeeze, else_branch=keep
        ),
        helper.make_node("Shape", ["y"], ["y_shape"], name="Shape_y"),
        helper.make_node("Size", ["y_shape"], ["y_rank"], name="Size_y"),
        _constant("two", np.array(2, np.int64)),
        helper.make_node("Equal", ["y_rank", "two"], ["rank_2"], name="Equal_rank"),
        helper.make_node(
            "If", ["rank_2"], ["features"], name="If_rnn", then_branch=recurrent, else_branch=mean
        ),
        _constant("gain", np.array(0.5, np.float32)),
        helper.make_node("Mul", ["features", "gain"], ["scaled"], name="Mul_gain"),
        helper.make_node("Tanh", ["scaled"], ["output"], name="Tanh_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "folded_branch",
        [_float("x", [None, width, None])],
        [_float("output", [None, width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
