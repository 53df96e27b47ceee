"""Facts about this machine's TensorRT, CUDA and GPU: engine cache keys and `trtflow doctor`.

An engine is only valid for the TensorRT version and GPU that built it, so these facts enter the
key of every step that builds or runs engines. They are asked for on every `trtflow run` and
`status`, so they must be cheap: the TensorRT version comes from package metadata (importing
`tensorrt` loads hundreds of megabytes of libraries), and the GPU is asked once per process through
the CUDA runtime. Nothing here fails: a missing piece is reported as such, and the step that needs
it raises `BackendUnavailable` when it runs.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

NOT_INSTALLED = "not installed"
INSTALL_HINT = "install trtflow[tensorrt] on a machine with an NVIDIA GPU"
RTX = "tensorrt-rtx"
_RTX_DISTRIBUTIONS = ("tensorrt-rtx-cu13-bindings", "tensorrt-rtx-cu12-bindings", "tensorrt-rtx")
NO_GPU = "none"

# pip's "tensorrt" metapackage and its CUDA-specific siblings; the Debian/tarball wheels are "tensorrt" too.
_TENSORRT_DISTRIBUTIONS = (
    "tensorrt",
    "tensorrt-cu13",
    "tensorrt-cu12",
    "tensorrt-cu11",
    "tensorrt-cu13-bindings",
    "tensorrt-cu12-bindings",
    "tensorrt-cu11-bindings",
    "tensorrt_bindings",
)


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str  # "8.6"
    memory_mb: int


@dataclass(frozen=True)
class CudaFacts:
    driver: str  # the CUDA version the driver supports, "12.4"; NOT_INSTALLED without a driver
    runtime: str  # the CUDA runtime cuda-python links, "12.6"
    gpu: Gpu | None


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or a stub without a spec
        return False


@lru_cache(maxsize=1)
def tensorrt_version() -> str:
    """The importable TensorRT's version, or `NOT_INSTALLED`; imports it only if no metadata says."""
    if not _module_exists("tensorrt"):
        return NOT_INSTALLED
    for distribution in _TENSORRT_DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    try:  # a tarball install on PYTHONPATH has no metadata
        return str(importlib.import_module("tensorrt").__version__)
    except Exception as error:  # noqa: BLE001 - a broken install is a fact to report, not a crash
        return f"broken ({error})"


def resolve_library(library: str) -> str:
    """`auto` -> `tensorrt` where it can be imported, else `tensorrt-rtx` (without importing either)."""
    if library != "auto":
        return library
    return "tensorrt" if _module_exists("tensorrt") else RTX


@lru_cache(maxsize=1)
def tensorrt_rtx_version() -> str:
    """TensorRT-RTX's version from its wheel's metadata, or `NOT_INSTALLED`."""
    if not _module_exists("tensorrt_rtx_bindings"):
        return NOT_INSTALLED
    for distribution in _RTX_DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    try:
        return str(importlib.import_module("tensorrt_rtx_bindings").__version__)
    except Exception as error:  # noqa: BLE001 - a broken install is a fact to report, not a crash
        return f"broken ({error})"


def _cuda_version(number: int) -> str:
    """CUDA encodes 12.4 as 12040."""
    return f"{number // 1000}.{number % 1000 // 10}" if number else NOT_INSTALLED


@lru_cache(maxsize=1)
def cuda() -> CudaFacts | None:
    """Driver, runtime and the first visible GPU (CUDA_VISIBLE_DEVICES applies); None without cuda-python."""
    runtime_module = next(
        (name for name in ("cuda.bindings.runtime", "cuda.cudart") if _module_exists(name)), None
    )
    if runtime_module is None:
        return None
    try:
        cudart = importlib.import_module(runtime_module)
        success = cudart.cudaError_t.cudaSuccess
        driver_error, driver = cudart.cudaDriverGetVersion()
        runtime_error, runtime = cudart.cudaRuntimeGetVersion()
        properties_error, properties = cudart.cudaGetDeviceProperties(0)
    except Exception:  # noqa: BLE001 - no driver library, a broken install: no usable CUDA
        return None
    gpu = None
    if properties_error == success:
        name = (
            properties.name.decode(errors="replace")
            if isinstance(properties.name, bytes)
            else str(properties.name)
        )
        gpu = Gpu(
            name.rstrip("\x00").strip(),
            f"{properties.major}.{properties.minor}",
            int(properties.totalGlobalMem) // 2**20,
        )
    return CudaFacts(
        _cuda_version(driver if driver_error == success else 0),
        _cuda_version(runtime if runtime_error == success else 0),
        gpu,
    )


def fingerprint(library: str = "tensorrt") -> dict[str, str]:
    """What an engine depends on: TensorRT (or TensorRT-RTX) version, GPU name and compute
    capability (step keys)."""
    resolved = resolve_library(library)
    version = tensorrt_rtx_version() if resolved == RTX else tensorrt_version()
    gpu = (
        (cuda() or CudaFacts(NOT_INSTALLED, NOT_INSTALLED, None)).gpu
        if version != NOT_INSTALLED
        else None
    )
    return {
        ("tensorrt" if resolved == "tensorrt" else RTX): version,
        "gpu": gpu.name if gpu else NO_GPU,
        "compute_capability": gpu.compute_capability if gpu else NO_GPU,
    }


def facts() -> dict[str, str]:
    """Everything `trtflow doctor` shows about TensorRT and CUDA."""
    found = cuda()
    version = tensorrt_version()
    shown = {
        "tensorrt": f"{version}: {INSTALL_HINT}" if version == NOT_INSTALLED else version,
        "cuda driver": found.driver if found else f"unknown (cuda-python {NOT_INSTALLED})",
        "cuda runtime": found.runtime if found else f"unknown (cuda-python {NOT_INSTALLED})",
    }
    if found and found.gpu:
        shown["gpu"] = (
            f"{found.gpu.name} (compute capability {found.gpu.compute_capability}, {found.gpu.memory_mb} MiB)"
        )
    elif found:
        shown["gpu"] = "none visible to CUDA"
    elif _module_exists(
        "cuda"
    ):  # `cuda()` asked and failed: no driver library, or a broken install
        shown["gpu"] = (
            "cannot tell: cuda-python could not query the CUDA driver (is the NVIDIA driver installed?)"
        )
    else:  # nobody asked CUDA: saying "none" would be a guess
        shown["gpu"] = (
            f"cannot tell: cuda-python is {NOT_INSTALLED}, so CUDA cannot be asked (see nvidia-smi below)"
        )
    return shown
