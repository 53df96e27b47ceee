"""Taps: intermediate tensors made visible as model outputs, like Polygraphy's `mark all`.

A tap marks an existing tensor as a graph output under its own name, so a tapped tensor keeps
its identity (name, producing node, topological index) in every result and report. Graph inputs
and initializers are not computed by the model and cannot be tapped; tensors inside If/Loop/Scan
bodies are listed as not tapped rather than failing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trtflow.onnxmodel.catalog import TensorInfo

if TYPE_CHECKING:
    import onnx


def select(
    tensors: dict[str, TensorInfo],
    patterns: Iterable[str] | None,
    ops: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
) -> list[str]:
    """Computed tensors matching any name or glob in `patterns` (None: all), produced by one of
    `ops` (None: any), minus `exclude` globs — in topological order."""
    patterns = list(patterns) if patterns is not None else None
    ops = set(ops) if ops else None
    exclude = list(exclude)
    chosen = []
    for name, info in tensors.items():
        if info.node is None:
            continue
        if patterns is not None and not any(
            p == name or fnmatch.fnmatchcase(name, p) for p in patterns
        ):
            continue
        if ops is not None and info.op not in ops:
            continue
        if any(p == name or fnmatch.fnmatchcase(name, p) for p in exclude):
            continue
        chosen.append(name)
    return chosen


def subgraph_tensors(model: onnx.ModelProto) -> list[str]:
    """Tensors computed inside If/Loop/Scan bodies: visible to no tap."""
    from trtflow.onnxmodel.files import iter_graphs

    graphs = list(iter_graphs(model.graph))[1:]
    return list(
        dict.fromkeys(
            output for graph in graphs for node in graph.node for output in node.output if output
        )
    )


def mark_outputs(
    model: onnx.ModelProto,
    names: Iterable[str],
    tensors: dict[str, TensorInfo],
    replace: bool = False,
) -> None:
    """Make `names` graph outputs, in place (typed where the type is known); `replace` drops the
    model's own outputs first."""
    from trtflow.onnxmodel.proto import value_info

    if replace:
        del model.graph.output[:]
    present = {o.name for o in model.graph.output}
    for name in names:
        if name in present:
            continue
        info = tensors.get(name)
        if info is not None and info.elem_type:
            shape = list(info.shape) if info.shape is not None else None
            model.graph.output.append(value_info(name, info.elem_type, shape))
        else:
            model.graph.output.append(value_info(name))
        present.add(name)
