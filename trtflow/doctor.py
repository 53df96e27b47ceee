"""`trtflow doctor`: what this machine offers trtflow, without failing on anything missing."""

from __future__ import annotations

import platform
import shutil
import subprocess


def _version(module: str) -> str:
    from trtflow.errors import BackendUnavailable
    from trtflow.packages import installed_version

    try:
        return installed_version(module)
    except BackendUnavailable:
        return "not installed"


def _gpu() -> str:
    """What the driver's own tool sees, independent of cuda-python."""
    if not shutil.which("nvidia-smi"):
        return "none found (no nvidia-smi)"
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi failed: {error}"
    return result.stdout.strip() or f"nvidia-smi failed: {result.stderr.strip()}"


def environment_facts() -> dict[str, str]:
    facts = {
        "python": f"{platform.python_version()} ({platform.machine()}, {platform.system()})",
        "trtflow": _version("trtflow"),
        "numpy": _version("numpy"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime"),
    }
    try:
        import onnxruntime

        facts["onnxruntime providers"] = ", ".join(onnxruntime.get_available_providers())
    except ImportError as error:
        facts["onnxruntime providers"] = f"cannot import onnxruntime: {error}"
    from trtflow.trt.environment import facts as tensorrt_facts

    facts.update(tensorrt_facts())
    facts["cuda-python"] = _version("cuda")
    facts["nvidia-smi"] = _gpu()
    facts["graphviz (dot)"] = (
        shutil.which("dot")
        or "not found: install Graphviz for SVG output (apt-get install graphviz)"
    )
    return facts
