"""A model as regions are cut from it: nodes in topological order, who reads and computes what, a
region's boundary, its removable boundary nodes, a node's ancestors, the region as a model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from trtflow.onnxmodel.catalog import TensorInfo


@dataclass(frozen=True)
class RegionGraph:
    """The model with its nodes in topological order and who reads what."""

    model: onnx.ModelProto
    tensors: dict[str, TensorInfo]
    order: list[str]  # node names
    ops: dict[str, str]
    reads: dict[str, list[str]]  # node -> tensors it reads that are not weights
    writes: dict[str, list[str]]  # node -> tensors it computes
    producer: dict[str, str]  # tensor -> node
    graph_outputs: frozenset[str]

    @classmethod
    def of(cls, model: onnx.ModelProto, tensors: dict[str, TensorInfo]) -> RegionGraph:
        weights = {t.name for t in model.graph.initializer}
        nodes = list(model.graph.node)
        return cls(
            model,
            tensors,
            [n.name for n in nodes],
            {n.name: n.op_type for n in nodes},
            {n.name: [t for t in dict.fromkeys(n.input) if t and t not in weights] for n in nodes},
            {n.name: [t for t in n.output if t] for n in nodes},
            {t: n.name for n in nodes for t in n.output if t},
            frozenset(o.name for o in model.graph.output),
        )

    def boundary(self, region: frozenset[str]) -> tuple[list[str], list[str]]:
        """A region's inputs (tensors it reads that it does not compute) and outputs (tensors it
        computes that nothing in it reads, and graph outputs), in graph order."""
        nodes = [n for n in self.order if n in region]
        made = {t for n in nodes for t in self.writes[n]}
        read = {t for n in nodes for t in self.reads[n]}
        inputs = list(dict.fromkeys(t for n in nodes for t in self.reads[n] if t not in made))
        outputs = [
            t for n in nodes for t in self.writes[n] if t not in read or t in self.graph_outputs
        ]
        return inputs, outputs

    def removable(self, region: frozenset[str]) -> list[str]:
        """Boundary nodes: those reading nothing the region computes, or computing nothing it reads."""
        made = {t for n in region for t in self.writes[n]}
        read = {t for n in region for t in self.reads[n]}
        return [
            n
            for n in self.order
            if n in region
            and (
                not any(t in made for t in self.reads[n])
                or not any(t in read for t in self.writes[n])
            )
        ]

    def ancestors(self, node: str) -> list[str]:
        """`node` and every node it depends on, in graph order."""
        found, stack = {node}, [node]
        while stack:
            for tensor in self.reads[stack.pop()]:
                parent = self.producer.get(tensor)
                if parent is not None and parent not in found:
                    found.add(parent)
                    stack.append(parent)
        return [n for n in self.order if n in found]

    def extract(self, region: frozenset[str]) -> onnx.ModelProto:
        """The region as a standalone model (onnx's Extractor, typed from the catalog)."""
        from onnx import helper
        from onnx.utils import Extractor

        inputs, outputs = self.boundary(region)
        extractor = Extractor(self.model)
        for name in (*inputs, *outputs):  # types from our inference (onnx's Extractor infers none)
            if name not in extractor.value_infos:
                info = self.tensors[name]
                shape = list(info.shape) if info.shape is not None else None
                extractor.value_infos[name] = helper.make_tensor_value_info(
                    name, info.elem_type, shape
                )
        extracted = extractor.extract_model(inputs, outputs)
        extracted.graph.name = "reduced"
        return extracted
