"""`trtflow doctor` with the real TensorRT-RTX bindings: the library, its version, the compute
capabilities it runs engines on (read from the bindings' `ComputeCapability` here, independently),
and what it can do with this machine's GPU. The GPU is the one nvidia-smi reports: a stand-in
nvidia-smi on PATH plays an H200 (9.0: builds, cannot run) and an RTX 4090 (8.9: builds and runs)."""

from __future__ import annotations

import importlib.util
import os
import re
import stat
from importlib import metadata
from pathlib import Path

import pytest

rtx = pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

from trtflow.trt import environment  # noqa: E402

found = environment.cuda()
REAL_GPU = found.gpu if found is not None else None
# Where CUDA sees a GPU, doctor reports that one, not nvidia-smi's stand-in.
no_real_gpu = pytest.mark.skipif(
    REAL_GPU is not None,
    reason=f"CUDA sees {REAL_GPU and REAL_GPU.name} here; see the real-GPU test",
)
VERSION = metadata.version("tensorrt-rtx-cu13-bindings")
CAPABILITIES = [
    f"{digits[:-1]}.{digits[-1]}"
    for name in rtx.ComputeCapability.__members__
    if (digits := name.removeprefix("SM")).isdigit()
]


def _rows(stdout: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    last = ""
    for line in stdout.splitlines():
        if "│" not in line:
            continue
        name, found = (part.strip() for part in line.split("│")[:2])
        last = name or last
        rows[last] = f"{rows[last]} {found}" if not name else found
    return rows


def _doctor(trtflow, tmp_path: Path, smi_line: str | None) -> dict[str, str]:
    path = os.environ.get("PATH", "")
    if smi_line is not None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho '{smi_line}'\n", encoding="utf-8")
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
        path = f"{bin_dir}{os.pathsep}{path}"
    else:
        path = os.pathsep.join(
            p for p in path.split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()
        )
    result = trtflow("doctor", cwd=tmp_path, env={"PATH": path})
    assert result.returncode == 0, result.stdout + result.stderr
    return _rows(result.stdout)


def test_doctor_names_the_library_its_version_and_compute_capabilities(trtflow, tmp_path):
    assert len(CAPABILITIES) >= 5 and "9.0" not in CAPABILITIES
    rows = _doctor(trtflow, tmp_path, None)
    assert rows["tensorrt-rtx"] == f"TensorRT-RTX {VERSION}"
    assert rows["tensorrt-rtx runs on"] == "compute capability " + ", ".join(CAPABILITIES)
    if REAL_GPU is None:
        assert rows["tensorrt-rtx here"] == (
            "builds engines (CPU included), but cannot run them: no GPU found here"
        )
    expected = "tensorrt" if importlib.util.find_spec("tensorrt") else "tensorrt-rtx"
    assert rows["library: auto"].startswith(f"{expected} ")


@no_real_gpu
def test_doctor_says_an_h200_can_build_but_not_run(trtflow, tmp_path):
    rows = _doctor(trtflow, tmp_path, "NVIDIA H200, 9.0, 570.124.06")
    here = re.sub(r"\s+", " ", rows["tensorrt-rtx here"])
    assert here == (
        "builds engines, but cannot run them: NVIDIA H200 has compute capability 9.0, which "
        "TensorRT-RTX does not run on (use TensorRT, trtflow[tensorrt], on this GPU)"
    )


@no_real_gpu
def test_doctor_says_an_rtx_gpu_builds_and_runs(trtflow, tmp_path):
    rows = _doctor(trtflow, tmp_path, "NVIDIA GeForce RTX 4090, 8.9, 570.124.06")
    assert re.sub(r"\s+", " ", rows["tensorrt-rtx here"]) == (
        "builds and runs engines on NVIDIA GeForce RTX 4090 (compute capability 8.9)"
    )


@pytest.mark.skipif(REAL_GPU is None, reason="no GPU visible to CUDA through cuda-python")
def test_doctor_judges_the_real_gpu(trtflow, tmp_path):
    assert REAL_GPU is not None
    here = re.sub(r"\s+", " ", _doctor(trtflow, tmp_path, None)["tensorrt-rtx here"])
    cc = REAL_GPU.compute_capability
    if cc in CAPABILITIES:
        assert here.startswith(f"builds and runs engines on {REAL_GPU.name}"), here
    else:
        assert here.startswith(
            f"builds engines, but cannot run them: {REAL_GPU.name} has compute capability {cc}"
        ), here
