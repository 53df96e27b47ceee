"""Calibrate and quantize a float ONNX model with the quantizers users deploy with.

- ONNX Runtime's `quantize_static` (QDQ format), in process. Its defaults suit ONNX Runtime's own
  integer kernels (asymmetric UINT8 activations, which remove Relu/Clip; per-tensor weights), not
  TensorRT, which takes only symmetric signed pairs: `symmetric` (the default here) asks for
  symmetric INT8 activations and weights. `float_weights` (default) keeps each weight's float values
  behind its own Q/DQ pair and biases in float, as ModelOpt writes them, so dequantizing a node
  gives back its real weights (a model whose weights are stored quantized has lost them).
- NVIDIA ModelOpt's ONNX PTQ (`python -m modelopt.onnx.quantization`, INT8 and FP8), as a child
  process: its onnx/onnxruntime pins conflict with trtflow's, so it usually lives in a venv of its
  own, found through `TRTFLOW_MODELOPT_PYTHON` (else this Python, if ModelOpt imports here, else
  `/opt/modelopt-venv/bin/python` where it exists, the venv the AutoCast round trip also uses).
  Calibration runs on ONNX Runtime's CPU provider; the parts left unquantized stay FP32
  (`--high_precision_dtype fp32`: its default converts them to FP16).

Both calibrate on the feeds they are given (the step's `data:` / `inputs:`) and exclude
`nodes_to_exclude` (for ModelOpt as anchored regexes, since it matches names with `re.match`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

MODELOPT_PYTHON = "TRTFLOW_MODELOPT_PYTHON"
DEFAULT_MODELOPT_PYTHON = "/opt/modelopt-venv/bin/python"
MODELOPT_INSTALL = (
    "install it into a virtual environment of its own (its onnx/onnxruntime pins conflict with "
    "trtflow's): `python -m venv /opt/modelopt-venv && /opt/modelopt-venv/bin/pip install "
    f"'nvidia-modelopt[onnx]'`, then `export {MODELOPT_PYTHON}=/opt/modelopt-venv/bin/python`"
)
Feed = dict[str, "np.ndarray"]


class QuantizerUnavailable(Exception):
    """The quantizer asked for cannot run here, or not with these settings; the message says how
    to make it run."""


class QuantizerFailed(Exception):
    """The quantizer ran and failed; the message holds the end of its output."""


@dataclass(frozen=True)
class QuantizeSettings:
    """What to ask the quantizer (the `quantize` step's params, less the model and the data)."""

    quantizer: Literal["onnxruntime", "modelopt"] = "onnxruntime"
    precision: Literal["int8", "fp8"] = "int8"
    symmetric: bool = True
    per_channel: bool = True
    float_weights: bool = True
    calibration: Literal["minmax", "entropy", "percentile"] = "minmax"
    op_types: tuple[str, ...] | None = None
    nodes_to_exclude: tuple[str, ...] = ()
    extra_options: dict[str, Any] = field(default_factory=dict)  # ONNX Runtime's extra_options
    modelopt_args: tuple[str, ...] = ()  # more ModelOpt command-line arguments
    # ONNX Runtime's activation type: None follows `symmetric` (INT8 if so, else UINT8); a user who
    # called quantize_static with QInt8 asymmetric activations says "int8" with symmetric False
    activation_type: Literal["int8", "uint8"] | None = None
    weight_type: Literal["int8", "uint8"] = "int8"


def quantize(
    source: Path,
    target: Path,
    feeds: Sequence[Feed],
    settings: QuantizeSettings,
    log: Callable[[str], None],
) -> list[str] | None:
    """Write `source` quantized to `target`; returns the ModelOpt command line, its files named
    MODEL.onnx, quantized.onnx and calibration.npz (None for ONNX Runtime, which runs in
    process)."""
    if settings.quantizer == "modelopt":
        return _modelopt(source, target, feeds, settings, log)
    _onnxruntime(source, target, feeds, settings)
    return None


def _onnxruntime(
    source: Path, target: Path, feeds: Sequence[Feed], settings: QuantizeSettings
) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if settings.precision != "int8":
        raise QuantizerUnavailable(
            "trtflow runs ONNX Runtime's quantize_static for INT8; for FP8 say `quantizer: modelopt`"
        )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(feeds)

        def get_next(self) -> Feed | None:
            return next(self.feeds, None)

    options: dict[str, Any] = {}
    if settings.symmetric:
        options |= {"ActivationSymmetric": True, "WeightSymmetric": True}
    if settings.float_weights:
        options |= {"AddQDQPairToWeight": True, "QuantizeBias": False}
    method = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[settings.calibration]
    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    activations = settings.activation_type or ("int8" if settings.symmetric else "uint8")
    quantize_static(
        source,
        target,
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=settings.per_channel,
        activation_type=types[activations],
        weight_type=types[settings.weight_type],
        op_types_to_quantize=list(settings.op_types) if settings.op_types else None,
        nodes_to_exclude=list(settings.nodes_to_exclude),
        calibrate_method=method,
        extra_options=options | settings.extra_options,
    )


def _private_copy(source: Path, folder: Path) -> Path:
    """`source` and its external data files copied into `folder`: ModelOpt's preprocessing writes
    its shape-inferred model over the file it is given (`infer_shapes_path(path, path)`), which
    rewrote the user's own float model (measured: PP-OCRv4's SVTR neck gained 4 value_info entries
    in the repository's `pipelines/models/`)."""
    import shutil

    from trtflow.onnxmodel.files import external_data_files

    folder.mkdir()
    for name in [source.name, *external_data_files(source)]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.parent / name, folder / name)
    return folder / source.name


def modelopt_python() -> str:
    """The interpreter that runs ModelOpt: `TRTFLOW_MODELOPT_PYTHON`, else this one if ModelOpt's
    ONNX quantization imports here, else the default venv's where it exists."""
    given = os.environ.get(MODELOPT_PYTHON)
    if given:
        if not Path(given).exists():
            raise QuantizerUnavailable(
                f"{MODELOPT_PYTHON}={given} does not exist; point it at the Python of the venv "
                f"ModelOpt is installed in, or {MODELOPT_INSTALL}"
            )
        return given
    from importlib.util import find_spec

    try:
        found = find_spec("modelopt.onnx.quantization") is not None
    except ModuleNotFoundError:
        found = False
    if not found and Path(DEFAULT_MODELOPT_PYTHON).is_file():
        # the round trip's AutoCast runs there too: without it, diagnose's ModelOpt quantizer was
        # "not installed" while AutoCast in the same step ran
        return DEFAULT_MODELOPT_PYTHON
    if not found:
        raise QuantizerUnavailable(
            f"ModelOpt (nvidia-modelopt) is not installed here; {MODELOPT_INSTALL}"
        )
    return sys.executable


def modelopt_version() -> str:
    """The nvidia-modelopt version of `modelopt_python()`'s environment, read from its package
    metadata (importing ModelOpt takes seconds); "not installed" when there is none."""
    from importlib.metadata import PackageNotFoundError, distribution, distributions

    try:
        python = modelopt_python()
    except QuantizerUnavailable:
        return "not installed"
    if python == sys.executable:
        try:
            return distribution("nvidia-modelopt").version
        except PackageNotFoundError:
            return "unknown"
    venv = Path(python).parent.parent  # <venv>/bin/python
    paths = [str(packages) for packages in sorted(venv.glob("lib/python*/site-packages"))]
    found = [d.version for d in distributions(path=paths) if d.name == "nvidia-modelopt"]
    return found[0] if found else f"unknown ({python})"


def _modelopt(
    source: Path,
    target: Path,
    feeds: Sequence[Feed],
    settings: QuantizeSettings,
    log: Callable[[str], None],
) -> list[str]:
    import numpy as np

    if settings.calibration == "percentile":
        raise QuantizerUnavailable("ModelOpt calibrates with minmax or entropy, not percentile")
    python = modelopt_python()
    command = [
        *("-m", "modelopt.onnx.quantization", "--onnx_path", "MODEL.onnx"),
        *("--output_path", "quantized.onnx", "--quantize_mode", settings.precision),
        *("--calibration_data_path", "calibration.npz", "--calibration_eps", "cpu"),
        *("--high_precision_dtype", "fp32"),
        *("--calibration_method", "max" if settings.calibration == "minmax" else "entropy"),
    ]
    if settings.op_types:
        command += ["--op_types_to_quantize", *settings.op_types]
    if settings.nodes_to_exclude:
        command += ["--nodes_to_exclude"]
        command += [f"^{re.escape(node)}$" for node in settings.nodes_to_exclude]
    command += list(settings.modelopt_args)
    with tempfile.TemporaryDirectory(prefix="trtflow-modelopt-") as folder:
        data = Path(folder, "calibration.npz")
        # one array per input, the samples stacked on the batch axis (ModelOpt splits them again)
        stacked: dict[str, Any] = {
            name: np.concatenate([f[name] for f in feeds]) for name in feeds[0]
        }
        np.savez(data, **stacked)
        given = _private_copy(source, Path(folder, "model"))
        files = {"MODEL.onnx": str(given), "quantized.onnx": str(target)}
        files["calibration.npz"] = str(data)
        done = subprocess.run(
            [python, *(files.get(argument, argument) for argument in command)],
            capture_output=True,
            text=True,
            cwd=folder,
            check=False,
        )
    output = (done.stdout + done.stderr).strip()
    for line in output.splitlines():
        log(f"modelopt: {line}")
    if done.returncode != 0 or not target.exists():
        tail = "\n".join(output.splitlines()[-12:])
        raise QuantizerFailed(f"ModelOpt ({python}) failed (exit {done.returncode}):\n{tail}")
    return ["python", *command]
