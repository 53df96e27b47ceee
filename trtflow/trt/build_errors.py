"""A failed build, explained: TensorRT's reason without the noise, located at the recipe key, with
the fix where trtflow can tell what it is.

TensorRT reports a failed build only through its log, in its own terms. Two things make that hard
to act on: CUDA's "cudaError 35: CUDA driver version is insufficient" lines, which TensorRT-RTX
logs on a machine without a driver whatever went wrong (it builds there; the lines are not the
reason), and messages about ONNX dimension names the user never sees. The one recognized here:
dims sharing one `dim_param` are one size to TensorRT, so a profile that gives them different values
fails with "Input dimensions with this name have different constant values" — PP-OCR's exports
name both height and width `?`. The error then names the inputs and dims, and the fix: pin the
shapes when loading the model (`load` `shapes:`), so the names are gone before the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.errors import ParamError, StepError

if TYPE_CHECKING:
    from trtflow.trt.builder import ShapeRange

DRIVER_NOISE = re.compile(r"cudaError 35\b|CUDA driver version is insufficient")
_SAME_NAME = re.compile(r"\((.*?): Input dimensions with this name have different constant values")


def reasons(errors: list[str]) -> list[str]:
    """The errors that are reasons: CUDA's no-driver lines go unless nothing else was said."""
    kept = [message for message in errors if not DRIVER_NOISE.search(message)]
    return kept or errors


def _named_dims(model_file: Path, dim_name: str) -> list[tuple[str, int]]:
    """(input, axis) of every graph input dim called `dim_name`."""
    from trtflow.onnxmodel.files import load_model

    graph = load_model(model_file, load_weights=False).graph
    return [
        (value.name, axis)
        for value in graph.input
        for axis, dim in enumerate(value.type.tensor_type.shape.dim)
        if dim.HasField("dim_param") and dim.dim_param == dim_name
    ]


def _shared_name_error(
    model_file: Path, dim_name: str, shapes: dict[str, ShapeRange], why: str, key: str
) -> ParamError | None:
    dims = _named_dims(model_file, dim_name)
    if len(dims) < 2:
        return None
    given = [
        f"{name}[{axis}] = {shapes[name].opt[axis]}" if name in shapes else f"{name}[{axis}]"
        for name, axis in dims
    ]
    first = dims[0][0]
    example = (
        f"{{{first}: {list(shapes[first].opt)}}}" if first in shapes else f"{{{first}: [...]}}"
    )
    load = f"`load` with `shapes: {example}`"
    return ParamError(
        key if shapes else "model",
        f"the model names {len(dims)} input dims `{dim_name}` ({', '.join(given)}): TensorRT "
        "takes dims of one name as one size, and these get different values (TensorRT: "
        f"{why.strip()}). Pin the shapes when loading the model — {load}, and build from "
        "`${steps.<that step>.model}` (run-runners' ONNX Runtime feeds take theirs from "
        "`data: {shapes: ...}`); or rename the dims in the model",
    )


def build_failure(
    library: str,
    model_file: Path,
    shapes: dict[str, ShapeRange],
    errors: list[str],
    key: str = "shapes",
) -> ParamError | StepError:
    """What to raise for a build that returned no engine: a recipe error where the cause is in
    the recipe or model and trtflow knows the fix, else the library's own reasons."""
    said = reasons(errors)
    for message in said:
        found = _SAME_NAME.search(message)
        if found and (
            error := _shared_name_error(model_file, found.group(1), shapes, message, key)
        ):
            return error
    detail = "\n  ".join(said) or "TensorRT gave no reason; see the build log"
    return StepError(f"{library} could not build the engine:\n  {detail}")
