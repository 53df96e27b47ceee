"""The engine-layer map: which ONNX nodes each fused TensorRT layer runs, which tensors it writes.

The map is one noun with three uses: the tensors to tap (`surgeon-insert-tap`'s
`tensors: engine-layers`), the tensors that stay inside fused kernels (`emulated`'s
`engine_graph`, rounded nowhere), and the grouping of a `compare` report per engine layer. It is
built from an engine graph by `trtflow.tensors.engine_layers`; here are the map itself and the
one reader of the `[ONNX Layer: ...]` metadata TensorRT 10+ writes, which TensorRT layer
constraints read too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.errors import InputError

if TYPE_CHECKING:
    import onnx

# `[ONNX Layer: <node> | <local function>...]`: the node name is what comes before the first `|`.
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]|]+?)\s*(?:\|[^\]]*)?\]")


def onnx_layer_names(metadata: str | None) -> list[str]:
    """The ONNX node names in a layer's metadata (several, joined by `\\x1f`, for a fused layer)."""
    return _ONNX_LAYER.findall(metadata or "")


@dataclass(frozen=True)
class EngineLayer:
    name: str  # the TensorRT layer name, as the engine graph spells it
    nodes: tuple[str, ...]  # the ONNX nodes it computes, in graph order
    outputs: tuple[str, ...]  # the ONNX tensors it writes to memory (its boundary tensors)

    def as_json(self) -> dict:
        return {"name": self.name, "nodes": list(self.nodes), "outputs": list(self.outputs)}


@dataclass(frozen=True)
class EngineLayerMap:
    """Engine layers in execution order, each with its ONNX nodes and output tensors."""

    engine_graph: str  # where the layers came from, for messages
    layers: tuple[EngineLayer, ...]
    uncovered: tuple[
        str, ...
    ] = ()  # ONNX nodes no engine layer computes (an engine of another model?)

    @property
    def outputs(self) -> list[str]:
        """Every boundary tensor, in engine order: the tensors that can be tapped without breaking a fusion."""
        return [tensor for layer in self.layers for tensor in layer.outputs]

    def layer_of(self) -> dict[str, EngineLayer]:
        """`{tensor: the layer writing it}` for every boundary tensor."""
        return {tensor: layer for layer in self.layers for tensor in layer.outputs}

    def internal_tensors(self, model: onnx.ModelProto) -> frozenset[str]:
        """The tensors `model` computes that no engine layer writes: they stay inside fused kernels."""
        boundary = set(self.outputs)
        return frozenset(
            o for node in model.graph.node for o in node.output if o and o not in boundary
        )

    def as_json(self) -> dict:
        return {
            "engine_graph": self.engine_graph,
            "layers": [layer.as_json() for layer in self.layers],
            "uncovered_nodes": list(self.uncovered),
        }

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.as_json(), indent=1), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> EngineLayerMap:
        """A map `surgeon-insert-tap` wrote (its `engine_layers` output); ValueError says what one looks like."""
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
            layers = tuple(
                EngineLayer(str(entry["name"]), tuple(entry["nodes"]), tuple(entry["outputs"]))
                for entry in document["layers"]
            )
            return cls(
                str(document.get("engine_graph", Path(path).name)),
                layers,
                tuple(document.get("uncovered_nodes", ())),
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(
                f"{path}: not an engine-layer map (surgeon-insert-tap's `engine_layers` output, "
                f'{{"layers": [{{"name", "nodes", "outputs"}}]}}): {error}'
            ) from None
