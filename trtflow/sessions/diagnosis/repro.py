"""A cause cut out as a standalone repro that fails on its own, as `reduce` writes one.

The region is the cause's nodes (for a quantized model, with the Q/DQ pairs they read), cut with
`onnx.utils.Extractor`; it is fed the FP32 run's own tensors at its boundary, so a failure is the
region's and not inherited. The folder holds `model.onnx`, `inputs/NNNNN.npz`, `inputs.json`
(Polygraphy JSON) and `recipe.yaml`, which runs FP32 and the low precision on it and compares
them (`trtflow run recipe.yaml` exits 1 when the failure reproduces). Whether it does is measured
here, with the same tolerance: 1% of the region's largest FP32 output value.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.lazy import lazy_import

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.sessions.diagnosis.probe import Probe
else:
    np = lazy_import("numpy")

LOCAL_TOLERANCE = 0.01  # of the region's largest FP32 output value


def region(
    nodes: Sequence[str], model: onnx.ModelProto, precision: str
) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of the region made of `nodes` (and, for qdq, the pairs they read)."""
    members = set(nodes)
    producer = {o: node for node in model.graph.node for o in node.output}
    if precision == "qdq":
        for node in model.graph.node:
            if node.name in set(nodes):
                for tensor in node.input:
                    upstream = producer.get(tensor)
                    while upstream is not None and upstream.op_type in (
                        "DequantizeLinear",
                        "QuantizeLinear",
                    ):
                        members.add(upstream.name)
                        upstream = producer.get(upstream.input[0])
    # a Constant node the region reads (axes, shapes: exporters and onnx's inliner write them as
    # nodes) goes with it, as an initializer would: it has no inputs, and no probe taps it
    constants = {o: n.name for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    members |= {
        constants[t]
        for node in model.graph.node
        if node.name in members
        for t in node.input
        if t in constants
    }
    initializers = {t.name for t in model.graph.initializer}
    inside = [node for node in model.graph.node if node.name in members]
    written = {o for node in inside for o in node.output}
    inputs = list(
        dict.fromkeys(
            t
            for node in inside
            for t in node.input
            if t and t not in written and t not in initializers
        )
    )
    read_outside = {t for node in model.graph.node if node.name not in members for t in node.input}
    graph_outputs = {o.name for o in model.graph.output}
    outputs = [t for node in inside for t in node.output if t in read_outside or t in graph_outputs]
    return inputs, outputs or [inside[-1].output[0]]


def write_repro(
    folder: Path,
    nodes: Sequence[str],
    model: onnx.ModelProto,
    precision: str,
    probe: Probe,
) -> tuple[bool | None, str]:
    """Cut the cause into `folder`; (whether the region fails on its own, what to say about it)."""
    import yaml

    from trtflow.onnxmodel.files import save_model

    inputs, outputs = region(nodes, model, precision)
    try:
        cut = _extract(model, inputs, outputs)
    except Exception as refused:  # noqa: BLE001 - onnx's extractor refuses some regions
        return None, f"the region cannot be cut out ({str(refused)[:160]})"
    feeds = _boundary_values(inputs, probe)
    if feeds is None:
        return None, "the region's inputs are not float tensors the probe tapped; no repro"
    folder.mkdir(parents=True, exist_ok=True)
    save_model(cut, folder / "model.onnx")
    (folder / "inputs").mkdir(exist_ok=True)
    for index, feed in enumerate(feeds):
        np.savez(folder / "inputs" / f"{index:05d}.npz", **feed)  # type: ignore[arg-type]
    from trtflow.tensors import polygraphy_json

    polygraphy_json.write_inputs(feeds, folder / "inputs.json")
    failed, tolerance, error = _reproduces(cut, feeds, precision)
    recipe = _recipe(precision, tolerance)
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    where = f"`{folder.name}/` ({len(nodes)} node(s), inputs {', '.join(inputs) or 'none'})"
    if failed:
        return (
            True,
            f"{where} fails on its own: relative error {error:.3g} past {LOCAL_TOLERANCE:g} (`trtflow run recipe.yaml` exits 1)",
        )
    return (
        False,
        f"{where} does NOT fail on its own (relative error {error:.3g}): the cause needs what follows it to matter",
    )


def _extract(model: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    import onnx
    import onnx.utils

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    return onnx.utils.Extractor(inferred).extract_model(inputs, outputs)


def _boundary_values(inputs: list[str], probe: Probe) -> list[dict[str, np.ndarray]] | None:
    feeds: list[dict[str, np.ndarray]] = [{} for _ in probe.feeds]
    for name in inputs:
        values = probe.reference_tensor(name) or [
            feed[name] for feed in probe.feeds if name in feed
        ]
        if len(values) != len(feeds):
            return None
        for feed, value in zip(feeds, values):
            feed[name] = np.asarray(value)
    return feeds


def _reproduces(
    cut: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], precision: str
) -> tuple[bool, float, float]:
    """Whether the region in low precision leaves the tolerance; the tolerance; the relative error."""
    from trtflow.precision.plan import PrecisionPlan
    from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
    from trtflow.runners.onnxruntime import OnnxruntimeRunner

    plan = PrecisionPlan(precision, frozenset())  # type: ignore[arg-type]
    reference = OnnxruntimeRunner(
        "fp32",
        cut,
        None,
        session_options=EMULATION_SESSION_OPTIONS,
        transform=_reference_transform(precision),
    )
    low = OnnxruntimeRunner(
        "low", cut, None, session_options=EMULATION_SESSION_OPTIONS, transform=plan.emulate
    )
    worst, scale = 0.0, 0.0
    reference.activate()
    low.activate()
    try:
        for feed in feeds:
            want, got = reference.infer(feed), low.infer(feed)
            for name, value in want.items():
                value64, got64 = value.astype(np.float64), np.asarray(got[name], np.float64)
                finite = np.isfinite(value64)
                scale = max(scale, float(np.abs(value64[finite]).max(initial=0.0)))
                if (finite & ~np.isfinite(got64)).any():
                    worst = float("inf")
                elif finite.any():
                    worst = max(worst, float(np.abs(got64 - value64)[finite].max()))
    finally:
        reference.deactivate()
        low.deactivate()
    relative = worst / scale if scale > 0 else worst
    return relative > LOCAL_TOLERANCE, LOCAL_TOLERANCE * scale, relative


def _reference_transform(precision: str):
    if precision != "qdq":
        return None
    from trtflow.onnxmodel.qdq import dequantize

    return dequantize


def _recipe(precision: str, atol: float) -> dict[str, Any]:
    reference: dict[str, Any] = {"name": "fp32", "backend": "onnxruntime"}
    if precision == "qdq":
        reference["quantization"] = "dequantized"
    return {
        "trtflow": 1,
        "name": "cause-repro",
        "steps": {
            "run": {
                "uses": "run-runners",
                "with": {
                    "model": "model.onnx",
                    "inputs": "inputs.json",
                    "runners": [
                        reference,
                        {"name": "low", "backend": "emulated", "precision": precision},
                    ],
                },
            },
            "check": {
                "uses": "compare",
                "gate": True,
                "with": {
                    "results": "${steps.run.results}",
                    "reference": "fp32",
                    "atol": float(atol),
                    "rtol": 0.0,
                },
            },
        },
    }
