"""`load`'s lint: every check of `onnxmodel.lint` in order, then ONNX Runtime node by node.

ONNX Runtime refuses a model at its first bad node, so one run names one problem. Like
`polygraphy check lint`, when the whole model does not open or run, every node of the top-level
graph runs alone, in order, on what the nodes before it computed (zeros for the graph's inputs, of
the pinned `shapes`, unknown dims as 1): each node that fails is reported, and the nodes that read
a failed node's output are skipped rather than reported again. `CHECKS` is the list a new kind of
check joins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trtflow.onnxmodel.lint import (
    LintCheck,
    LintProblem,
    LintReport,
    LintSubject,
    checker_problems,
    graph_problems,
    node_named,
    node_reads,
    unbounded_dds_problems,
)

if TYPE_CHECKING:
    import onnx

CUSTOM_OP_SIGNS = ("No opset import for domain", "is not a registered function/op")
"""ONNX Runtime's words for an op it lacks: a plugin for TensorRT, reported as a warning (Polygraphy's rule)."""


def _level(message: str) -> str:
    return "warning" if any(sign in message for sign in CUSTOM_OP_SIGNS) else "error"


def _zeros(model: onnx.ModelProto, shapes) -> dict[str, Any]:
    """Zeros for every tensor input of the graph (of its `shapes` entry, unknown dims as 1)."""
    import numpy as np
    from onnx import helper

    initializers = {tensor.name for tensor in model.graph.initializer}
    feed = {}
    for value in model.graph.input:
        tensor_type = value.type.tensor_type
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        dims = (shapes or {}).get(value.name) or [
            dim.dim_value if dim.HasField("dim_value") else 1 for dim in tensor_type.shape.dim
        ]
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        feed[value.name] = np.zeros(dims, object if dtype.kind in "USO" else dtype)
    return feed


def _alone(model: onnx.ModelProto, node: onnx.NodeProto, given: dict[str, Any], reads: list[str]):
    """A model of `node` alone: the values it reads from `given` as inputs, the initializers it
    reads, the model's opsets and local functions."""
    import onnx
    from onnx import helper

    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    inputs = []
    for name in reads:
        if name in given:
            value = given[name]
            elem = (
                onnx.TensorProto.STRING
                if value.dtype.kind in "USO"
                else helper.np_dtype_to_tensor_dtype(value.dtype)
            )
            inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
    graph = helper.make_graph(
        [node],
        node.name or "node",
        inputs,
        [onnx.ValueInfoProto(name=output) for output in node.output if output],
        [initializers[name] for name in reads if name in initializers and name not in given],
    )
    alone = helper.make_model(graph, opset_imports=model.opset_import, functions=model.functions)
    alone.ir_version = model.ir_version
    return alone


def node_by_node(model: onnx.ModelProto, shapes=None) -> list[LintProblem]:
    """ONNX Runtime's refusal of each top-level node run alone (see the module docstring)."""
    import numpy as np

    from trtflow.ort_sessions import open_session, runner_session_options

    initializers = {tensor.name for tensor in model.graph.initializer}
    values = _zeros(model, shapes)
    last_read = {
        name: index for index, node in enumerate(model.graph.node) for name in node_reads(node)
    }
    problems = []
    for index, node in enumerate(model.graph.node):
        reads = sorted(node_reads(node))
        if any(name not in values and name not in initializers for name in reads):
            continue  # reads what a failed (or skipped) node did not compute
        try:
            session = open_session(
                _alone(model, node, values, reads).SerializeToString(),
                runner_session_options(),
                providers=["CPUExecutionProvider"],
            )
            outputs = session.run(None, {name: values[name] for name in reads if name in values})
        except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
            message = " ".join(str(error).split())
            problems.append(
                LintProblem(
                    source="onnxruntime",
                    level=_level(message),  # type: ignore[arg-type]
                    node=node.name or None,
                    op_type=node.op_type,
                    tensor=None if node.name else next(iter(node.output), None),
                    message=message,
                )
            )
            continue
        for name, output in zip([o for o in node.output if o], outputs):
            if isinstance(
                output, np.ndarray
            ):  # a sequence or map cannot be fed on: its readers skip
                values[name] = output
        for name in reads:
            if last_read.get(name) == index and name not in {o.name for o in model.graph.output}:
                values.pop(name, None)
    return problems


def runtime_problems(subject: LintSubject) -> list[LintProblem]:
    """Nothing when ONNX Runtime opens the file and runs it on zeros (or, with inputs of unknown
    dims and no `shapes`, opens it); otherwise its refusal node by node, or as it said it when no
    node alone fails (a model-level refusal)."""
    from trtflow.ort_sessions import session_refusal

    inputs = subject.model.graph.input
    static = all(
        dim.HasField("dim_value") for value in inputs for dim in value.type.tensor_type.shape.dim
    )
    refusal = session_refusal(
        subject.path, run=bool(subject.shapes) or static, shapes=subject.shapes
    )
    if refusal is None:
        return []
    return node_by_node(subject.model, subject.shapes) or [
        LintProblem(source="onnxruntime", node=node_named(refusal), message=refusal)
    ]


def quantization_problems(subject: LintSubject) -> list[LintProblem]:
    """What TensorRT refuses in a quantized model or its quantizer left behind (`qdq_lint`)."""
    from trtflow.onnxmodel.qdq_lint import lint_problems

    return lint_problems(subject.model)


CHECKS: list[LintCheck] = [
    checker_problems,
    graph_problems,
    unbounded_dds_problems,
    runtime_problems,
    quantization_problems,
]
"""Every lint check, in the order the report lists their problems."""


def lint(subject: LintSubject) -> LintReport:
    """Every problem every check finds in the model."""
    return LintReport(
        model=subject.path.name,
        problems=[problem for check in CHECKS for problem in check(subject)],
    )
