"""`trtflow doctor`: what this machine offers trtflow, without failing on anything missing."""

from __future__ import annotations

import platform
import re
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
    """What the driver's own tool sees (`name, compute capability, driver` per GPU), independent of
    cuda-python."""
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


def _gpu_capability(smi: str) -> tuple[str, str] | None:
    """(name, compute capability) of the first GPU: CUDA's answer, else nvidia-smi's first line."""
    from trtflow.trt.environment import cuda

    found = cuda()
    if found is not None and found.gpu is not None:
        return found.gpu.name, found.gpu.compute_capability
    fields = [field.strip() for field in smi.splitlines()[0].split(",")] if smi else []
    if len(fields) >= 2 and re.fullmatch(r"\d+\.\d+", fields[1]):
        return fields[0], fields[1]
    return None


def _rtx_facts(smi: str) -> dict[str, str]:
    """TensorRT-RTX's version, the compute capabilities it runs engines on, and what it can do on
    this machine: it builds anywhere (CPU included) but loads engines only on the GPUs it lists, so
    a data-centre GPU such as an H200 (9.0) builds RTX engines it cannot run."""
    from trtflow.errors import BackendUnavailable
    from trtflow.trt.api import RTX_INSTALL_HINT, TensorRT
    from trtflow.trt.environment import NOT_INSTALLED, resolve_library, tensorrt_rtx_version

    shown = {
        "library: auto": f"{resolve_library('auto')} (build-engine and runners, library: auto)"
    }
    if tensorrt_rtx_version() == NOT_INSTALLED:
        shown["tensorrt-rtx"] = f"{NOT_INSTALLED}: {RTX_INSTALL_HINT}"
        return shown
    try:
        rtx = TensorRT.load("tensorrt-rtx")
    except BackendUnavailable as error:
        shown["tensorrt-rtx"] = f"{tensorrt_rtx_version()}, but it does not import: {error}"
        return shown
    supported = rtx.compute_capabilities
    shown["tensorrt-rtx"] = rtx.name
    shown["tensorrt-rtx runs on"] = "compute capability " + ", ".join(supported)
    gpu = _gpu_capability(smi)
    if gpu is None:
        verdict = "builds engines (CPU included), but cannot run them: no GPU found here"
    elif gpu[1] in supported:
        verdict = f"builds and runs engines on {gpu[0]} (compute capability {gpu[1]})"
    else:
        verdict = (
            f"builds engines, but cannot run them: {gpu[0]} has compute capability {gpu[1]}, "
            "which TensorRT-RTX does not run on (use TensorRT, trtflow[tensorrt], on this GPU)"
        )
    shown["tensorrt-rtx here"] = verdict
    return shown


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
    facts.update(_rtx_facts(facts["nvidia-smi"]))
    facts["graphviz (dot)"] = (
        shutil.which("dot")
        or "not found: install Graphviz for SVG output (apt-get install graphviz)"
    )
    return facts
