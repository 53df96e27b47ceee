"""Environment facts: cheap, never failing, and what engines depend on."""

from __future__ import annotations

import subprocess
import sys

from trtflow.trt import environment


def test_fingerprint_names_tensorrt_gpu_and_compute_capability(use_double):
    use_double("11.4.0.106", TRTFLOW_TEST_GPU="NVIDIA A100-SXM4-80GB")
    assert environment.fingerprint() == {
        "tensorrt": "11.4.0.106",
        "gpu": "NVIDIA A100-SXM4-80GB",
        "compute_capability": "8.6",
    }
    facts = environment.facts()
    assert facts["cuda driver"] == "12.4" and facts["cuda runtime"] == "12.6"
    assert facts["gpu"].startswith("NVIDIA A100-SXM4-80GB (compute capability 8.6, 24576 MiB)")


def test_no_gpu_and_no_cuda_python_are_facts_not_failures(use_double, monkeypatch):
    use_double("10.13.0.35", TRTFLOW_TEST_GPU="none")
    assert environment.fingerprint()["gpu"] == "none"
    assert environment.facts()["gpu"] == "none visible to CUDA"
    environment.cuda.cache_clear()
    for name in [name for name in sys.modules if name.startswith("cuda.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cuda", None)  # what a machine without cuda-python has
    assert environment.cuda() is None
    assert environment.facts()["cuda runtime"].startswith("unknown")
    assert environment.facts()["gpu"].startswith("cannot tell: cuda-python is not installed"), (
        "not `none`: CUDA was never asked"
    )


def test_without_tensorrt_nothing_heavy_is_imported():
    """On a machine without TensorRT the fingerprint is instant: no tensorrt, no cuda, no onnx imported."""
    code = (
        "import sys; from trtflow.trt.environment import fingerprint; print(fingerprint()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'cuda', 'onnx', 'onnxruntime')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == [
        "{'tensorrt': 'not installed', 'gpu': 'none', 'compute_capability': 'none'}",
        "[]",
    ]
