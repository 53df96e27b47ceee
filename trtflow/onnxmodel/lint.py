"""`load`'s lint report: every problem onnx.checker, the graph and ONNX Runtime show in a model, at once.

`onnx.checker.check_model` stops at its first complaint and names the node only inside its text;
a user fixing an exporter wants the whole list, each problem with the node (or tensor) it is about,
as `polygraphy check lint` gives it. So the checker runs node by node and tensor by tensor over
every graph (If/Loop/Scan bodies too), strict shape inference adds what it finds, the graph's
structure adds duplicate node names, inputs no output depends on, dead nodes and tensors whose size
depends on data with no bound (`unbounded_dds_problems`), and `sessions/lint.py` adds ONNX
Runtime's refusals node by node. Each check is one function of a `LintSubject`; `sessions/lint.py`
holds the list, so a new kind of check (quantized models) is one more function there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, computed_field

from trtflow.schema.reports import Report

if TYPE_CHECKING:
    import onnx

Source = Literal["onnx.checker", "onnx.shape_inference", "onnxruntime", "graph", "trtflow.qdq"]
Level = Literal["error", "warning"]
_NODE = re.compile(
    r"Node \(([^)]*)\)|Name: (\S+) OpType|node name: ([^)]+)\)|Node\(([^)]+)\)"
    r"|running \w+ node\. Name:'([^']+)'"  # ONNX Runtime failing at run time (the outermost first)
)


class LintProblem(BaseModel):
    """One complaint: who made it, how bad (an `error` fails the lint, a `warning` does not, as
    Polygraphy's exceptions and warnings), about which node (or tensor, when no node), its text."""

    source: Source
    level: Level = "error"
    node: str | None = None
    op_type: str | None = None
    tensor: str | None = None
    graph: str | None = None
    message: str


class LintReport(Report):
    """What `load` with `lint: true` writes (`lint.json`)."""

    KIND: ClassVar[str] = "load-lint"
    SCHEMA_VERSION: ClassVar[int] = 2  # 2: problems have a level; graph problems

    model: str
    problems: list[LintProblem]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """No problem of level `error` (warnings, such as dead nodes, do not fail a lint)."""
        return not any(problem.level == "error" for problem in self.problems)

    def summary_lines(self) -> list[str]:
        errors = sum(problem.level == "error" for problem in self.problems)
        verdict = "passed" if self.passed else "FAILED"
        counts = f"{errors} error(s), {len(self.problems) - errors} warning(s)"
        return [f"{self.model}: {verdict}, {counts}", *problem_lines(self)]


@dataclass(frozen=True)
class LintSubject:
    """What every lint check reads: the model as the user wrote it, its file, the pinned input dims."""

    model: onnx.ModelProto
    path: Path
    shapes: Mapping[str, Sequence[int]] | None = None


LintCheck = Callable[[LintSubject], list[LintProblem]]
"""One kind of check; `sessions/lint.py` runs them all in order."""


def node_named(message: str) -> str | None:
    """The node a checker or ONNX Runtime message names (`Node (X)`, `Name: X OpType`, `node name: X)`,
    `running Op node. Name:'X'`), if any."""
    found = _NODE.search(message)
    return next((group for group in found.groups() if group), None) if found else None


def checker_problems(subject: LintSubject) -> list[LintProblem]:
    """Every node and tensor onnx.checker refuses, in every graph, then strict shape inference's
    complaint and the whole-model check's, where they say something the parts did not."""
    import onnx

    model = subject.model
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


def node_reads(node: onnx.NodeProto) -> set[str]:
    """What `node` reads: its inputs and the outer-scope values its subgraphs read."""
    from trtflow.onnxmodel.files import iter_graphs

    names = set(node.input)
    for attribute in node.attribute:
        subgraphs = [attribute.g] if attribute.HasField("g") else []
        for subgraph in [*subgraphs, *attribute.graphs]:
            graphs = list(iter_graphs(subgraph))
            inner = {name for graph in graphs for inner in graph.node for name in inner.output}
            inner |= {v.name for graph in graphs for v in (*graph.input, *graph.initializer)}
            names |= {
                name for graph in graphs for each in graph.node for name in each.input
            } - inner
    return names - {""}


def graph_problems(subject: LintSubject) -> list[LintProblem]:
    """Duplicate node names (an error, as Polygraphy says: nodes are named by them everywhere), then
    the inputs no output depends on and the dead nodes (warnings: harmless, but worth removing)."""
    from collections import Counter

    graph = subject.model.graph
    problems = [
        LintProblem(
            source="graph",
            node=name,
            message=f"{count} nodes are named `{name}`; node names must be unique (taps, precision "
            "plans and TensorRT's layer names tell nodes apart by them)",
        )
        for name, count in Counter(node.name for node in graph.node if node.name).items()
        if count > 1
    ]
    producers = {output: node for node in graph.node for output in node.output if output}
    live_tensors: set[str] = set()
    live_nodes: set[int] = set()
    pending = [output.name for output in graph.output]
    while pending:
        name = pending.pop()
        if name in live_tensors:
            continue
        live_tensors.add(name)
        producer = producers.get(name)
        if producer is not None and id(producer) not in live_nodes:
            live_nodes.add(id(producer))
            pending.extend(node_reads(producer))
    initializers = {tensor.name for tensor in graph.initializer}
    problems += [
        LintProblem(
            source="graph",
            level="warning",
            tensor=value.name,
            message=f"input `{value.name}` does not affect any output; it can be removed",
        )
        for value in graph.input
        if value.name not in initializers and value.name not in live_tensors
    ]
    problems += [
        LintProblem(
            source="graph",
            level="warning",
            node=node.name or None,
            op_type=node.op_type,
            tensor=None if node.name else next(iter(node.output), None),
            message="does not affect any output; it can be removed",
        )
        for node in graph.node
        if id(node) not in live_nodes
    ]
    return problems


def unbounded_dds_problems(subject: LintSubject) -> list[LintProblem]:
    """Tensors whose runtime value sets a size with no upper bound (`onnxmodel.dds`), as warnings:
    ONNX Runtime runs them, TensorRT needs a bound (surgeon-sanitize's `unbounded_dds_upper_bound`)."""
    from trtflow.onnxmodel.dds import unbounded_dds

    return [
        LintProblem(
            source="graph",
            level="warning",
            node=found.node or None,
            op_type=found.op_type,
            tensor=found.tensor,
            message=f"`{found.tensor}` sets the output size of this {found.op_type} at run time "
            "with no upper bound (unbounded data-dependent shape); bound it with surgeon-sanitize's "
            "`unbounded_dds_upper_bound`",
        )
        for found in unbounded_dds(subject.model)
    ]


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
        level = "warning: " if problem.level == "warning" else ""
        lines.append(f"{level}{problem.source} at {where}: {problem.message}")
    if len(report.problems) > limit:
        lines.append(f"... and {len(report.problems) - limit} more in lint.json")
    return lines
