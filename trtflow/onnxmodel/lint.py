"""`load`'s lint report: every problem onnx.checker and ONNX Runtime find in a model, at once.

`onnx.checker.check_model` stops at its first complaint and names the node only inside its text;
a user fixing an exporter wants the whole list, each problem with the node (or tensor) it is about.
So the checker runs node by node and tensor by tensor over every graph (If/Loop/Scan bodies too),
strict shape inference adds what it finds, and the step adds ONNX Runtime's refusal, if any, and
for a quantized model what TensorRT refuses or the quantizer left behind (`qdq_lint.LINT_KINDS`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, computed_field

from trtflow.schema.reports import Report

if TYPE_CHECKING:
    import onnx

Source = Literal["onnx.checker", "onnx.shape_inference", "onnxruntime", "trtflow.qdq"]
_NODE = re.compile(r"Node \(([^)]*)\)|Name: (\S+) OpType|node name: ([^)]+)\)|Node\(([^)]+)\)")


class LintProblem(BaseModel):
    """One complaint: who made it, about which node (or tensor, when no node), and its text."""

    source: Source
    node: str | None = None
    op_type: str | None = None
    tensor: str | None = None
    graph: str | None = None
    message: str


class LintReport(Report):
    """What `load` with `lint: true` writes (`lint.json`)."""

    KIND: ClassVar[str] = "load-lint"
    SCHEMA_VERSION: ClassVar[int] = 1

    model: str
    problems: list[LintProblem]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return not self.problems


def node_named(message: str) -> str | None:
    """The node a checker or ONNX Runtime message names (`Node (X)`, `Name: X OpType`, `node name: X)`), if any."""
    found = _NODE.search(message)
    return next((group for group in found.groups() if group), None) if found else None


def checker_problems(model: onnx.ModelProto) -> list[LintProblem]:
    """Every node and tensor onnx.checker refuses, in every graph, then strict shape inference's
    complaint and the whole-model check's, where they say something the parts did not."""
    import onnx

    from trtflow.onnxmodel.files import iter_graphs

    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version
    context.opset_imports = {entry.domain: entry.version for entry in model.opset_import}
    lexical = onnx.checker.C.LexicalScopeContext()
    problems: list[LintProblem] = []
    for graph in iter_graphs(model.graph):
        for value in (*graph.input, *graph.output, *graph.value_info):
            try:
                onnx.checker.check_value_info(value, context)
            except onnx.checker.ValidationError as error:
                problems.append(
                    LintProblem(
                        source="onnx.checker",
                        tensor=value.name,
                        graph=graph.name,
                        message=_text(error),
                    )
                )
        for node in graph.node:
            try:
                onnx.checker.C.check_node(node.SerializeToString(), context, lexical)
            except (onnx.checker.ValidationError, TypeError) as error:
                problems.append(
                    LintProblem(
                        source="onnx.checker",
                        node=node.name,
                        op_type=node.op_type,
                        graph=graph.name,
                        message=_text(error),
                    )
                )
    said = {problem.message for problem in problems}
    for source, check in (
        (
            "onnx.shape_inference",
            lambda: onnx.shape_inference.infer_shapes(model, strict_mode=True),
        ),
        ("onnx.checker", lambda: onnx.checker.check_model(model)),
    ):
        try:
            check()
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
            text = _text(error)
            if not any(text in known or known in text for known in said):
                problems.append(LintProblem(source=source, node=node_named(text), message=text))
                said.add(text)
    return problems


def runtime_problem(message: str) -> LintProblem:
    """ONNX Runtime's refusal as a problem, with the node it names."""
    return LintProblem(source="onnxruntime", node=node_named(message), message=message)


def _text(error: Exception) -> str:
    return " ".join(str(error).split())


def problem_lines(report: LintReport, limit: int = 10) -> list[str]:
    """One line per problem (the first `limit`), naming its node or tensor: for logs and errors."""
    lines = []
    for problem in report.problems[:limit]:
        where = (
            f"node `{problem.node}`"
            if problem.node
            else f"tensor `{problem.tensor}`"
            if problem.tensor
            else "model"
        )
        lines.append(f"{problem.source} at {where}: {problem.message}")
    if len(report.problems) > limit:
        lines.append(f"... and {len(report.problems) - limit} more in lint.json")
    return lines
