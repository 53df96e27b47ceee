"""What a precision rewrite adds to a graph: conversion nodes and initializers, each made once.

`emulate` (rounding through the low format) and `lower` (storing tensors in the low type) walk a
graph node by node and insert conversions next to the node they rewire. Both need the same
bookkeeping, kept here so it is written once: the nodes made since the last flush (`take` hands
them over to be placed before or after the node being rewired), the new initializers, and the
names already made, so a tensor several nodes read is converted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trtflow.onnxmodel.formats import Format

if TYPE_CHECKING:
    import numpy as np
    import onnx


@dataclass
class GraphAdditions:
    fmt: Format  # the low format of the plan being realized
    initializers: dict[str, onnx.TensorProto]  # the graph's FP32 initializers, by name
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    new_initializers: list[onnx.TensorProto] = field(default_factory=list)
    made: set[str] = field(default_factory=set)

    def node(self, op: str, inputs: list[str], output: str, **attributes) -> str:
        """Add a node writing `output` (named `trtflow::<output>`); returns `output`."""
        from onnx import helper

        self.nodes.append(
            helper.make_node(op, inputs, [output], name=f"trtflow::{output}", **attributes)
        )
        self.made.add(output)
        return output

    def constant(self, name: str, values: np.ndarray) -> str:
        """An initializer `name` holding `values`, added the first time it is asked for."""
        from onnx import numpy_helper

        if name not in self.made:
            self.new_initializers.append(numpy_helper.from_array(values, name))
            self.made.add(name)
        return name

    def take(self) -> list[onnx.NodeProto]:
        """The nodes made since the last call, in the order they were made."""
        taken, self.nodes = self.nodes, []
        return taken
