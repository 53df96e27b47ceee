"""Which ONNX nodes TensorRT's parser takes: Polygraphy's `inspect capability`, on any machine with
TensorRT or TensorRT-RTX (the parser needs no GPU), before anyone waits for a build.

`OnnxParser.supports_model_v2` splits the graph into subgraphs around the nodes it cannot import;
a node in no subgraph is one the parser rejects (its reason comes from the parser's errors). The
library's per-subgraph verdict is kept as it says it: when the model as a whole is not supported,
TensorRT-RTX 1.7 marks every subgraph unsupported too, so nodes there are "unconfirmed", not
"supported". The node names are trtflow's stable names (`onnxmodel.files.name_nodes`), as in
engine layers and keep sets.

A node inside an If branch or a local function is reported by the parser under its own name, with
`error.node()` the index of the top-level node that holds it and `local_function_stack()` the
path down to it (`branch (If) -> then (then_branch)`); the rejection is mapped to that top-level
node — the one a graph draws and a user replaces — with the inner node and the call stack kept
beside the reason, as Polygraphy's `inspect capability` shows them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from trtflow.errors import BackendUnavailable
from trtflow.trt.api import TensorRT
from trtflow.trt.log import TensorRTLog, make_logger

CAPABILITY_FORMAT = 1
Status = Literal["supported", "unsupported", "unconfirmed"]


@dataclass(frozen=True)
class NodeSupport:
    node: str
    op: str
    status: Status
    reason: str = ""
    inner: str = ""  # the node inside this one (If branch, local function) the parser rejects
    inner_op: str = ""
    stack: str = ""  # the parser's call stack down to `inner`: "branch (If) -> then (then_branch)"

    def where(self) -> str:
        """`inner_frob (Frobnicate) in branch (If) -> then (then_branch)`; empty for a flat node."""
        if not self.inner or self.inner == self.node:
            return ""
        return f"{self.inner} ({self.inner_op})" + (f" in {self.stack}" if self.stack else "")

    def explained(self) -> str:
        """The parser's reason, after the inner node it is about."""
        reason = self.reason or "no reason given"
        return f"{self.where()}: {reason}" if self.where() else reason


@dataclass(frozen=True)
class ParserProblem:
    """One parser error, mapped to the top-level node that holds the node it is about."""

    index: int  # the top-level node's index; -1 when the parser names none
    node: str  # the top-level node's name
    op: str
    inner: str  # the node the parser names (itself, or one inside `node`)
    inner_op: str
    stack: str
    reason: str


def parser_problems(parser: Any, nodes: list[tuple[str, str]]) -> list[ParserProblem]:
    """The parser's errors, each at its top-level node (`nodes`: (name, op) in graph order).
    TensorRT 8.6 gives only the index; 10+ and TensorRT-RTX also the inner node and its stack."""
    problems = []
    for number in range(parser.num_errors):
        error = parser.get_error(number)
        index = int(error.node())
        node, op = nodes[index] if 0 <= index < len(nodes) else ("", "")
        inner, inner_op = (
            (error.node_name(), error.node_operator())
            if hasattr(error, "node_name")
            else (node, op)
        )
        stack = (
            " -> ".join(str(frame) for frame in error.local_function_stack())
            if hasattr(error, "local_function_stack")
            else ""
        )
        if not node:  # no index: the error names a top-level node, or none
            node, op = inner, inner_op
            index = next((i for i, (name, _) in enumerate(nodes) if name == inner and inner), -1)
        problems.append(ParserProblem(index, node, op, inner, inner_op, stack, error.desc()))
    return problems


@dataclass(frozen=True)
class Capability:
    library: str  # "TensorRT-RTX 1.7.1.116"
    model: str  # the file's name
    supported: bool  # the parser takes the whole model
    nodes: list[NodeSupport]
    subgraphs: list[tuple[bool, list[str]]]  # (the library's verdict, node names)

    def document(self) -> dict[str, Any]:
        return {
            "format": CAPABILITY_FORMAT,
            "library": self.library,
            "model": self.model,
            "supported": self.supported,
            "nodes": [asdict(node) for node in self.nodes],
            "subgraphs": [{"supported": ok, "nodes": names} for ok, names in self.subgraphs],
        }

    def rejected(self) -> dict[str, str]:
        """{node name: the parser's reason (after the inner node it is about)} for each node it
        rejects: what render-graph marks."""
        return {node.node: node.explained() for node in self.nodes if node.status == "unsupported"}

    @classmethod
    def from_document(cls, document: Any, path: Path) -> Capability:
        """A capability JSON written by build-engine (`document()`), read back; anything else is an
        InputError naming the file and what it lacks."""
        from trtflow.errors import InputError

        try:
            if document.get("format") != CAPABILITY_FORMAT:
                raise ValueError(f"format {document.get('format')!r}, not {CAPABILITY_FORMAT}")
            return cls(
                str(document["library"]),
                str(document["model"]),
                bool(document["supported"]),
                [NodeSupport(**node) for node in document["nodes"]],
                [(bool(s["supported"]), list(s["nodes"])) for s in document["subgraphs"]],
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise InputError(
                f"{path} is no capability report ({error}); give build-engine's `capability` "
                "output, or a library name (tensorrt, tensorrt-rtx, auto)"
            ) from None

    def lines(self) -> list[str]:
        """What `trtflow inspect MODEL --capability` prints."""
        rejected = [node for node in self.nodes if node.status == "unsupported"]
        head = (
            f"{self.library}'s ONNX parser takes all {len(self.nodes)} nodes"
            if self.supported
            else f"{self.library}'s ONNX parser rejects {len(rejected)} of {len(self.nodes)} nodes"
        )
        lines = [head, *_table(rejected)]
        if not self.supported:
            lines.append(
                f"  {len(self.subgraphs)} subgraph(s) around them: "
                + "; ".join(
                    f"{names[0]}..{names[-1]} ({len(names)} nodes)" if len(names) > 1 else names[0]
                    for _, names in self.subgraphs
                    if names
                )
            )
        return lines


def _table(rejected: list[NodeSupport]) -> list[str]:
    """The rejected nodes as Polygraphy's `inspect capability` summary lists them: node (the
    top-level one), operator, the call stack and inner node where the parser looked inside it,
    and the reason."""
    if not rejected:
        return []
    rows = [("node", "operator", "call stack", "reason")]
    rows += [
        (node.node, node.op, node.where() or "-", node.reason or "no reason given")
        for node in rejected
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    return [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3]
        for row in rows
    ]


def supports_capability(trt: TensorRT) -> bool:
    """TensorRT 10+ and TensorRT-RTX have `supports_model_v2`; 8.6 does not."""
    return hasattr(trt.module.OnnxParser, "supports_model_v2")


def parser_capability(trt: TensorRT, model_path: Path) -> Capability:
    """Ask the parser, node by node, whether it takes `model_path`."""
    from trtflow.onnxmodel.files import load_model, name_nodes

    if not supports_capability(trt):
        raise BackendUnavailable(f"{trt.name}'s parser has no supports_model_v2 (TensorRT 10+)")
    model = load_model(model_path)
    name_nodes(model)
    nodes = [(node.name, node.op_type) for node in model.graph.node]
    logger = make_logger(trt.module, TensorRTLog())
    builder = trt.module.Builder(logger)
    if builder is None:
        raise BackendUnavailable(f"{trt.name} could not start its builder here")
    network = builder.create_network(trt.network_flags(trt.resolve_typing("auto")))
    parser = trt.module.OnnxParser(network, logger)
    supported = bool(parser.supports_model_v2(model.SerializeToString(), str(model_path)))
    problems = {
        problem.index: problem for problem in reversed(parser_problems(parser, nodes))
    }  # the first error of each node
    subgraphs: list[tuple[bool, list[str]]] = []
    verdict: dict[int, bool] = {}
    for index in range(parser.num_subgraphs):
        ok = bool(parser.is_subgraph_supported(index))
        members = [int(i) for i in parser.get_subgraph_nodes(index)]
        subgraphs.append((ok, [nodes[i][0] for i in members]))
        verdict.update(dict.fromkeys(members, ok))
    support = []
    for i, (name, op) in enumerate(nodes):
        if supported or verdict.get(i):
            support.append(NodeSupport(name, op, "supported"))
        elif i in verdict:
            support.append(NodeSupport(name, op, "unconfirmed"))
        elif (problem := problems.get(i)) is not None:
            support.append(
                NodeSupport(
                    name,
                    op,
                    "unsupported",
                    problem.reason,
                    problem.inner if problem.inner != name else "",
                    problem.inner_op if problem.inner != name else "",
                    problem.stack,
                )
            )
        else:
            support.append(NodeSupport(name, op, "unsupported"))
    return Capability(trt.name, model_path.name, supported, support, subgraphs)
