"""Per-layer precision constraints for weakly typed TensorRT (<= 10) builds.

Before TensorRT 11, a plan was applied by enabling the low-precision builder flag, setting
`ILayer.precision` (and output types) to FP32 on the kept layers and asking the builder to obey
the constraints. TensorRT's ONNX parser names each layer after the ONNX node it came from, so the
map is keyed by node name (`trtflow.onnxmodel.files.name_nodes` names); `build-engine` applies an entry to
every layer whose metadata names the node (`[ONNX Layer: <node>]`, TensorRT 10), or else to the layer
of exactly that name (`trtflow.trt.constraints`). Every candidate node is listed, kept ones as `fp32`,
so the map says the whole plan, not only its exceptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.plan import PrecisionPlan

HIGH_PRECISION = "fp32"


def layer_map(model: onnx.ModelProto, plan: PrecisionPlan) -> dict[str, str]:
    """`{node name: "fp32" | plan.precision}` for every node a plan can place, in graph order."""
    from trtflow.onnxmodel.files import with_stable_names
    from trtflow.precision.lower import unlowerable_nodes
    from trtflow.precision.sites import precision_sites

    with_names = with_stable_names(model)
    fixed = unlowerable_nodes(with_names)
    return {
        site.node: HIGH_PRECISION
        if site.node in plan.keep or site.node in fixed
        else plan.precision
        for site in precision_sites(with_names, plan.low)
    }
