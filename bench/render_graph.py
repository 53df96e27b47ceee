"""How long render-graph takes on a 3,000-node ONNX model, simplified (the goal: under 60 s here).

    python bench/render_graph.py [--layers 86] [--formats html,dot,svg]

The model is a stack of transformer blocks written the way exporters write them — hand-written
LayerNorm and GELU, attention with reshapes whose target shapes are computed from `Shape` — so it
has what the simplified view folds: pointwise chains, shape plumbing and constants. The script
prints the node counts before and after folding, the time of each phase, and, as the peer, the
same model drawn in detailed mode (every node) with the same formats, in the same process.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH, REPO = Path(__file__).resolve().parent, Path(__file__).resolve().parents[1]
# Run as a script, bench/ heads sys.path, and bench/bisect.py would shadow the stdlib `bisect`.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != BENCH]

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from trtflow.graph.from_onnx import load_onnx  # noqa: E402
from trtflow.graph.render import write_graph  # noqa: E402
from trtflow.graph.simplify import simplify  # noqa: E402
from trtflow.graph.style import View  # noqa: E402
from trtflow.graph.svg import graphviz_version  # noqa: E402

HIDDEN, HEADS, SEQUENCE = 16, 2, 8


class ModelBuilder:
    def __init__(self):
        self.nodes, self.initializers, self.count = [], [], 0
        self.rng = np.random.default_rng(0)

    def constant(self, values) -> str:
        name = f"c{len(self.initializers)}"
        array = np.asarray(values)
        array = array.astype(np.float32) if array.dtype.kind == "f" else array.astype(np.int64)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attributes) -> str:
        self.count += 1
        output = f"t{self.count}"
        self.nodes.append(
            helper.make_node(
                op_type, inputs, [output], name=f"{op_type}_{self.count}", **attributes
            )
        )
        return output

    def linear(self, x: str, inputs: int, outputs: int) -> str:
        weight = self.constant(self.rng.normal(0, 0.1, (inputs, outputs)))
        return self.op("Add", [self.op("MatMul", [x, weight]), self.constant(np.zeros(outputs))])

    def layer_norm(self, x: str) -> str:
        axes = self.constant([-1])
        centered = self.op("Sub", [x, self.op("ReduceMean", [x, axes], keepdims=1)])
        variance = self.op(
            "ReduceMean", [self.op("Pow", [centered, self.constant(2.0)]), axes], keepdims=1
        )
        normalized = self.op(
            "Div", [centered, self.op("Sqrt", [self.op("Add", [variance, self.constant(1e-5)])])]
        )
        return self.op(
            "Add",
            [
                self.op("Mul", [normalized, self.constant(np.ones(HIDDEN))]),
                self.constant(np.zeros(HIDDEN)),
            ],
        )

    def gelu(self, x: str) -> str:
        erf = self.op("Erf", [self.op("Div", [x, self.constant(1.4142135)])])
        return self.op(
            "Mul",
            [self.op("Mul", [x, self.op("Add", [erf, self.constant(1.0)])]), self.constant(0.5)],
        )

    def heads(self, x: str) -> str:
        """[B, S, H] -> [B, heads, S, H/heads] with the target shape computed from Shape, like exporters do."""
        batch = self.op(
            "Unsqueeze",
            [
                self.op("Gather", [self.op("Shape", [x]), self.constant(0)], axis=0),
                self.constant([0]),
            ],
        )
        shape = self.op("Concat", [batch, self.constant([-1, HEADS, HIDDEN // HEADS])], axis=0)
        return self.op("Transpose", [self.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def block(self, x: str) -> str:
        normed = self.layer_norm(x)
        q, k, v = (self.heads(self.linear(normed, HIDDEN, HIDDEN)) for _ in range(3))
        scores = self.op(
            "Div",
            [
                self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                self.constant(2.0),
            ],
        )
        context = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        merged = self.op(
            "Reshape",
            [self.op("Transpose", [context], perm=[0, 2, 1, 3]), self.constant([0, 0, HIDDEN])],
        )
        x = self.op("Add", [x, self.linear(merged, HIDDEN, HIDDEN)])
        hidden = self.gelu(self.linear(self.layer_norm(x), HIDDEN, 4 * HIDDEN))
        return self.op("Add", [x, self.linear(hidden, 4 * HIDDEN, HIDDEN)])


def transformer(layers: int) -> onnx.ModelProto:
    builder = ModelBuilder()
    x = "x"
    for _ in range(layers):
        x = builder.block(x)
    builder.nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
    graph = helper.make_graph(
        builder.nodes,
        "transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQUENCE, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", SEQUENCE, HIDDEN])],
        builder.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def render(path: Path, mode: str, formats: list[str], folder: Path) -> dict[str, float]:
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    graph = load_onnx(path)
    seconds["read + shape inference"] = time.perf_counter() - started
    seconds["nodes"] = len(graph.ops())
    if mode == "simplified":
        started = time.perf_counter()
        graph = simplify(graph)
        seconds["fold"] = time.perf_counter() - started
    seconds["nodes shown"] = len(graph.ops())
    for fmt in formats:
        started = time.perf_counter()
        write_graph(graph, View(mode=mode), [fmt], folder / mode, svg_timeout_s=600)
        seconds[fmt] = time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--layers", type=int, default=49, help="transformer blocks (49 make 3,039 nodes)"
    )
    parser.add_argument("--formats", default="html,dot,svg" if graphviz_version() else "html,dot")
    parser.add_argument(
        "--skip-detailed", action="store_true", help="do not run the detailed-mode peer"
    )
    args = parser.parse_args()
    formats = args.formats.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        path = folder / "transformer.onnx"
        onnx.save(transformer(args.layers), str(path))
        print(f"graphviz: {graphviz_version() or 'not installed'}; formats: {', '.join(formats)}")
        results = {"simplified": render(path, "simplified", formats, folder)}
        if not args.skip_detailed:
            results["detailed"] = render(path, "detailed", formats, folder)
    timed = [key for key in results["simplified"] if key not in ("nodes", "nodes shown")]
    for mode, seconds in results.items():
        total = sum(seconds.get(key, 0.0) for key in timed)
        phases = ", ".join(f"{key} {seconds[key]:.2f} s" for key in timed if key in seconds)
        print(
            f"{mode:>10}: {int(seconds['nodes'])} nodes -> {int(seconds['nodes shown'])} shown; "
            f"total {total:.2f} s ({phases})"
        )
    if "detailed" in results:
        simplified_total = sum(results["simplified"].get(key, 0.0) for key in timed)
        detailed_total = sum(results["detailed"].get(key, 0.0) for key in timed)
        print(
            f"simplified / detailed time: {simplified_total / detailed_total:.2f}; "
            f"goal: simplified under 60 s -> {'met' if simplified_total < 60 else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
