"""A GPT-style decoder built with onnx.helper, the shape of a `torch.onnx.export` of one, at any size.

`bench/large_model.py` writes it at about 1B parameters (fp32, ~4 GB of external data) and
`tests/scale/test_large_model.py` at about 50M: one builder, so the test runs the bench's path.

The graph is what a torch export without constant folding leaves (opset 17, no fused ops):
token + position embeddings (Gather), then per layer LayerNorm written out (ReduceMean, Sub, Pow,
ReduceMean, Add, Sqrt, Div, Mul, Add), one QKV MatMul split into heads through Shape -> Gather ->
Unsqueeze -> Concat -> Reshape chains, causal attention (MatMul, Div, Where with -10000 as the mask, as
GPT-2 has it, Softmax, MatMul), the heads merged back the same way, the output projection and
the residual Add, a second LayerNorm, an MLP with exact Gelu (Div, Erf, Add, Mul, Mul) and the
second residual; then a final LayerNorm and the vocabulary head. About 100 nodes per layer.

Weights are random (GPT-2's initialization, N(0, 0.02)), made and written one at a time, so a
model of several GB is made with one weight in memory. One thing is not random: the last layer's
MLP bias writes a few "massive activation" channels (values of a few hundred, as trained LLMs have
in a handful of channels), so the final LayerNorm's Pow overflows FP16 (300² > 65504): a real FP16
failure for compare, bisect-precision and reduce to find, at the end of a long chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sanitize.models import write_model

MASSIVE_CHANNELS = (3, 17)
MASSIVE_VALUE = 300.0  # its square, 90,000, is past FP16's largest value, 65,504


@dataclass(frozen=True)
class GptConfig:
    """The sizes of a decoder; `tokens` is the static sequence length its input is exported with."""

    layers: int
    width: int
    heads: int
    vocab: int = 32000
    tokens: int = 64

    @property
    def ffn(self) -> int:
        return 4 * self.width

    @property
    def parameters(self) -> int:
        per_layer = 12 * self.width**2 + 13 * self.width  # qkv, out, fc, proj + biases + 2 norms
        return self.layers * per_layer + (2 * self.vocab + self.tokens + 2) * self.width


# ~1.0B parameters and ~10k nodes (Qwen2-0.5B's width and heads, 100 layers); ~50M for CI.
LARGE = GptConfig(layers=100, width=896, heads=14)
MID = GptConfig(layers=24, width=896, heads=14)
SMALL = GptConfig(layers=3, width=1024, heads=16, vocab=4000, tokens=16)


class _Graph:
    """Nodes named the way a torch export names them (`/h.3/attn/MatMul_1`)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self._counts: dict[str, int] = {}

    def op(
        self, scope: str, op_type: str, inputs: list[str], outputs: int = 1, **attrs
    ) -> list[str]:
        key = f"{scope}/{op_type}"
        count = self._counts.get(key, 0)
        self._counts[key] = count + 1
        name = key if count == 0 else f"{key}_{count}"
        names = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=name, **attrs))
        return names

    def one(self, scope: str, op_type: str, inputs: list[str], **attrs) -> str:
        return self.op(scope, op_type, inputs, **attrs)[0]

    def constant(self, scope: str, value: np.ndarray) -> str:
        return self.one(scope, "Constant", [], value=numpy_helper.from_array(value))

    def layer_norm(self, scope: str, x: str, weight: str) -> str:
        mean = self.one(scope, "ReduceMean", [x], axes=[-1], keepdims=1)
        centered = self.one(scope, "Sub", [x, mean])
        square = self.one(scope, "Pow", [centered, self.constant(scope, np.array(2, np.float32))])
        variance = self.one(scope, "ReduceMean", [square], axes=[-1], keepdims=1)
        eps = self.constant(scope, np.array(1e-5, np.float32))
        std = self.one(scope, "Sqrt", [self.one(scope, "Add", [variance, eps])])
        normed = self.one(scope, "Div", [centered, std])
        return self.one(
            scope, "Add", [self.one(scope, "Mul", [normed, f"{weight}.weight"]), f"{weight}.bias"]
        )

    def dim(self, scope: str, x: str, index: int) -> str:
        """x.shape[index] as a 1-D tensor, as an export computes it."""
        gathered = self.one(
            scope,
            "Gather",
            [self.one(scope, "Shape", [x]), self.constant(scope, np.array(index, np.int64))],
        )
        return self.one(
            scope, "Unsqueeze", [gathered, self.constant(scope, np.array([0], np.int64))]
        )

    def split_heads(self, scope: str, x: str, config: GptConfig) -> str:
        """[b, t, width] -> [b, heads, t, width/heads]."""
        batch, tokens = self.dim(scope, x, 0), self.dim(scope, x, 1)
        head_shape = self.constant(
            scope, np.array([config.heads, config.width // config.heads], np.int64)
        )
        shape = self.one(scope, "Concat", [batch, tokens, head_shape], axis=0)
        return self.one(
            scope, "Transpose", [self.one(scope, "Reshape", [x, shape])], perm=[0, 2, 1, 3]
        )

    def merge_heads(self, scope: str, x: str, config: GptConfig) -> str:
        """[b, heads, t, width/heads] -> [b, t, width]."""
        merged = self.one(scope, "Transpose", [x], perm=[0, 2, 1, 3])
        batch, tokens = self.dim(scope, merged, 0), self.dim(scope, merged, 1)
        width = self.constant(scope, np.array([config.width], np.int64))
        return self.one(
            scope, "Reshape", [merged, self.one(scope, "Concat", [batch, tokens, width], axis=0)]
        )

    def linear(self, scope: str, x: str, weight: str) -> str:
        return self.one(
            scope, "Add", [self.one(scope, "MatMul", [x, f"{weight}.weight"]), f"{weight}.bias"]
        )


def _block(g: _Graph, i: int, x: str, config: GptConfig) -> str:
    attn, mlp = f"/h.{i}/attn", f"/h.{i}/mlp"
    normed = g.layer_norm(f"/h.{i}/ln_1", x, f"h.{i}.ln_1")
    qkv = g.linear(attn, normed, f"h.{i}.attn.c_attn")
    split = g.constant(attn, np.array([config.width] * 3, np.int64))
    q, k, v = (
        g.split_heads(attn, t, config)
        for t in g.op(attn, "Split", [qkv, split], outputs=3, axis=-1)
    )
    scores = g.one(attn, "MatMul", [q, g.one(attn, "Transpose", [k], perm=[0, 1, 3, 2])])
    scale = g.constant(attn, np.array(np.sqrt(config.width // config.heads), np.float32))
    masked_bias = g.constant(attn, np.array(-1e4, np.float32))
    masked = g.one(attn, "Where", ["causal_mask", g.one(attn, "Div", [scores, scale]), masked_bias])
    context = g.one(attn, "MatMul", [g.one(attn, "Softmax", [masked], axis=-1), v])
    projected = g.linear(attn, g.merge_heads(attn, context, config), f"h.{i}.attn.c_proj")
    x = g.one(f"/h.{i}", "Add", [x, projected])
    hidden = g.linear(mlp, g.layer_norm(f"/h.{i}/ln_2", x, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc")
    erf = g.one(
        mlp, "Erf", [g.one(mlp, "Div", [hidden, g.constant(mlp, np.array(np.sqrt(2), np.float32))])]
    )
    gelu = g.one(
        mlp,
        "Mul",
        [
            g.one(
                mlp,
                "Mul",
                [hidden, g.one(mlp, "Add", [erf, g.constant(mlp, np.array(1, np.float32))])],
            ),
            g.constant(mlp, np.array(0.5, np.float32)),
        ],
    )
    return g.one(f"/h.{i}", "Add", [x, g.linear(mlp, gelu, f"h.{i}.mlp.c_proj")])


def gpt_graph(config: GptConfig) -> onnx.ModelProto:
    """The decoder's graph, without its weights (`gpt_weights` gives them, in initializer order)."""
    g = _Graph()
    tokens = g.dim("", "input_ids", 1)
    positions = g.one(
        "",
        "Range",
        [
            g.constant("", np.array(0, np.int64)),
            g.one("", "Squeeze", [tokens, g.constant("", np.array([0], np.int64))]),
            g.constant("", np.array(1, np.int64)),
        ],
    )
    x = g.one(
        "",
        "Add",
        [
            g.one("/wte", "Gather", ["wte.weight", "input_ids"]),
            g.one("/wpe", "Gather", ["wpe.weight", positions]),
        ],
    )
    for i in range(config.layers):
        x = _block(g, i, x, config)
    g.one("/lm_head", "MatMul", [g.layer_norm("/ln_f", x, "ln_f"), "lm_head.weight"])
    g.nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        g.nodes,
        "gpt",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, config.tokens])],
        [
            helper.make_tensor_value_info(
                "logits", TensorProto.FLOAT, [1, config.tokens, config.vocab]
            )
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="trtflow-bench"
    )
    model.ir_version = 8
    return model


def gpt_weights(config: GptConfig, seed: int = 0) -> Iterator[tuple[str, np.ndarray]]:
    """(name, values) of every initializer of `gpt_graph(config)`, made one at a time."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    width = config.width
    yield "causal_mask", np.tril(np.ones((config.tokens, config.tokens), bool))[None, None]
    yield "wte.weight", normal(config.vocab, width)
    yield "wpe.weight", normal(config.tokens, width)
    norm = [np.ones(width, np.float32), np.zeros(width, np.float32)]
    for i in range(config.layers):
        for name, fan_in, fan_out in (
            ("attn.c_attn", width, 3 * width),
            ("attn.c_proj", width, width),
            ("mlp.c_fc", width, config.ffn),
            ("mlp.c_proj", config.ffn, width),
        ):
            yield f"h.{i}.{name}.weight", normal(fan_in, fan_out)
            bias = np.zeros(fan_out, np.float32)
            if name == "mlp.c_proj" and i == config.layers - 1:
                bias[list(MASSIVE_CHANNELS)] = MASSIVE_VALUE
            yield f"h.{i}.{name}.bias", bias
        for norm_name in ("ln_1", "ln_2"):
            yield from zip((f"h.{i}.{norm_name}.weight", f"h.{i}.{norm_name}.bias"), norm)
    yield from zip(("ln_f.weight", "ln_f.bias"), norm)
    yield "lm_head.weight", normal(width, config.vocab)


def write_gpt(path: Path, config: GptConfig, seed: int = 0) -> None:
    """Write the decoder at `path`, its weights as external data in `path.data`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_model(path, gpt_graph(config), gpt_weights(config, seed), external=True)


TAIL_LAYERS = 2  # layers before the final LayerNorm that the `tail` steps search

RECIPE = """trtflow: 1
name: large-model
vars:
  data: {{seed: 1, iterations: 1, ranges: {{"*": [0, {last_token}]}}}}
  check: {{atol: 1.0e-2, rtol: 1.0e-2, error_stat: median}}
steps:
  model: {{uses: load, with: {{path: "{model}"}}}}
  taps: {{uses: surgeon-insert-tap, with: {{model: "${{steps.model.model}}", tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: ${{vars.data}}
      memory_budget_mb: {budget_mb}
      runners:
        - {{name: fp32, backend: onnxruntime}}
        - {{name: fp16, backend: emulated, precision: fp16}}
        - {{name: bf16, backend: emulated, precision: bf16}}
  diff:
    uses: compare
    with: {{results: "${{steps.run.results}}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2, error_stat: median}}
  hunt:
    uses: bisect-precision
    with: {{model: "${{steps.model.model}}", data: "${{vars.data}}", precision: fp16, check: "${{vars.check}}"}}
  cut:
    uses: reduce
    with:
      model: ${{steps.model.model}}
      data: ${{vars.data}}
      reference: {{name: fp32, backend: onnxruntime}}
      candidate: {{name: fp16, backend: emulated, precision: fp16}}
      check: ${{vars.check}}
  tail:
    uses: surgeon-extract  # the way out where a search cannot hold the whole model: its last layers
    with: {{model: "${{steps.model.model}}", inputs: ["{tail_input}"], outputs: [logits]}}
  hunt_tail:
    uses: bisect-precision
    with: {{model: "${{steps.tail.model}}", data: {{seed: 1, iterations: 1}}, precision: fp16, check: "${{vars.check}}"}}
  cut_tail:
    uses: reduce
    with:
      model: ${{steps.tail.model}}
      data: {{seed: 1, iterations: 1}}
      reference: {{name: fp32, backend: onnxruntime}}
      candidate: {{name: fp16, backend: emulated, precision: fp16}}
      check: ${{vars.check}}
  graph:
    uses: render-graph
    with: {{model: "${{steps.model.model}}", overlay: "${{steps.diff.report}}", formats: [html]}}
"""


def recipe_text(model: Path, config: GptConfig, budget_mb: int) -> str:
    """The recipe the bench and the test run on the decoder at `model`: load, taps on every
    tensor, onnxruntime + emulated FP16 + emulated BF16, compare, bisect-precision, reduce and
    render-graph with compare's overlay; and bisect-precision and reduce again on the last
    `TAIL_LAYERS` layers cut out with surgeon-extract (the way out they name where the whole model
    does not fit)."""
    return RECIPE.format(
        model=model,
        last_token=config.vocab - 1,
        budget_mb=budget_mb,
        tail_input=f"/h.{config.layers - TAIL_LAYERS - 1}/Add_1_output_0",
    )
