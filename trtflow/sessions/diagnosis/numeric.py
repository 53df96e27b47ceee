"""Numeric alternatives to keeping nodes in high precision: graph edits that make them safe.

The one measured most often on real models: a LayerNorm (or any mean) written as `ReduceSum(x)`
followed by a scalar `Mul`/`Div` (`Sum(x) * 1/N`). The sum of N squares passes 65504 in FP16 while
the mean never does. Scaling before summing — `ReduceSum(x * 1/N)` — is the same arithmetic, and
each stored value stays in range. The edit is written as an ONNX-GraphSurgeon script the user runs
on their own model (`python fp16_safe_sums.py model.onnx fixed.onnx`), and `verify` runs that very
script and judges the edited model with every node in low precision.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

SCRIPT = '''"""FP16-safe sums (written by trtflow diagnose): ReduceSum(x) * c -> ReduceSum(x * c).

The same arithmetic; each stored value stays in FP16's range (the sum of N squares does not).
Usage: python {name} model.onnx fixed.onnx
"""
import sys

import onnx
import onnx_graphsurgeon as gs

PAIRS = {pairs}  # (ReduceSum node, the Mul/Div node scaling its result)

graph = gs.import_onnx(onnx.load(sys.argv[1]))
nodes = {{node.name: node for node in graph.nodes}}
for reduce_name, scale_name in PAIRS:
    reduce, scale = nodes[reduce_name], nodes[scale_name]
    factor = next(t for t in scale.inputs if t is not reduce.outputs[0])
    scaled = gs.Variable(reduce_name + "/prescaled", dtype=reduce.inputs[0].dtype)
    graph.nodes.append(
        gs.Node(scale.op, name=reduce_name + "/prescale", inputs=[reduce.inputs[0], factor], outputs=[scaled])
    )
    reduce.inputs[0] = scaled
    scale.op, scale.attrs = "Identity", {{}}
    scale.inputs = [reduce.outputs[0]]
graph.cleanup().toposort()
onnx.save(gs.export_onnx(graph), sys.argv[2])
'''
SCRIPT_NAME = "fp16_safe_sums.py"


def scaled_sums(keep: Sequence[str], model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(ReduceSum, scaling node) pairs among the kept nodes: a ReduceSum read only by a Mul/Div with
    a scalar constant (the `Sum(x) * 1/N` of a mean)."""
    from onnx import numpy_helper

    kept = set(keep)
    scalars = {t.name for t in model.graph.initializer if numpy_helper.to_array(t).size == 1}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for tensor in node.input:
            readers.setdefault(tensor, []).append(node)
    pairs = []
    for node in model.graph.node:
        if node.op_type != "ReduceSum" or node.name not in kept:
            continue
        read = readers.get(node.output[0], [])
        if len(read) != 1 or read[0].op_type not in ("Mul", "Div"):
            continue
        scale = read[0]
        other = [t for t in scale.input if t != node.output[0]]
        divides_sum = scale.op_type == "Mul" or scale.input[0] == node.output[0]
        if len(other) == 1 and other[0] in scalars and divides_sum:
            pairs.append((node.name, scale.name))
    return pairs


def alternatives(
    keep: Sequence[str], model: onnx.ModelProto, precision: str
) -> list[dict[str, Any]]:
    """The numeric alternatives to the keep set that apply to this model (FP16/BF16 only)."""
    if precision not in ("fp16", "bf16"):
        return []
    pairs = scaled_sums(keep, model)
    if not pairs:
        return []
    return [
        {
            "kind": "scaled_sum",
            "script": SCRIPT_NAME,
            "pairs": [list(p) for p in pairs],
            "words": f"scale before summing ({SCRIPT_NAME}: ReduceSum(x) * c -> ReduceSum(x * c) for "
            f"{', '.join(f'`{r}`' for r, _ in pairs)}): the same arithmetic, and every stored value "
            f"stays in {precision.upper()}'s range",
        }
    ]


def write_script(folder: Path, pairs: list[list[str]]) -> Path:
    path = folder / SCRIPT_NAME
    path.write_text(SCRIPT.format(name=SCRIPT_NAME, pairs=json.dumps([tuple(p) for p in pairs])))
    return path


def apply_script(script: Path, model: Path, output: Path) -> str | None:
    """Run the script as the user would; its error, or None."""
    done = subprocess.run(
        [sys.executable, str(script), str(model), str(output)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not output.is_file():
        return (
            (done.stderr or done.stdout).strip().splitlines()[-1:][0]
            if (done.stderr or done.stdout)
            else "failed"
        )
    return None
