"""How runners fail, and where they run: failures are uniform (in process or isolated), a failed
reference fails `compare` at run time, models with external data and ONNX Runtime builds other than
the `onnxruntime` distribution work — all through `trtflow run`."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import numpy as np
import onnx
import pytest

from run_compare.models import mlp_chain, save
from run_compare.recipes import run_recipe, write_recipe


EXTERNAL_RUN = """
run:
  uses: run-runners
  with:
    model: {model}
    outputs: {outputs}
    runners: [{{name: fp32, backend: onnxruntime}}, {{name: fp16, backend: emulated, precision: fp16}}]
diff:
  uses: compare
  gate: true
  with: {{results: "${{steps.run.results}}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}}
"""


ONLY_GPU_BUILD_CLI = """
import sys
from importlib import metadata
real_version, real_distributions = metadata.version, metadata.packages_distributions

def version(name):  # a machine with `onnxruntime-gpu` installed and no `onnxruntime` distribution
    if name == "onnxruntime":
        raise metadata.PackageNotFoundError(name)
    return real_version("onnxruntime" if name == "onnxruntime-gpu" else name)

def packages_distributions():
    return {**real_distributions(), "onnxruntime": ["onnxruntime-gpu"]}

metadata.version, metadata.packages_distributions = version, packages_distributions
from trtflow.cli import main
sys.argv = ["trtflow", *sys.argv[1:]]
main()
"""


def test_runs_where_onnxruntime_comes_from_another_distribution(tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    recipe = write_recipe(tmp_path, EXTERNAL_RUN.format(model="model.onnx", outputs="graph"))
    result = subprocess.run([sys.executable, "-c", ONLY_GPU_BUILD_CLI, "run", str(recipe), "--workspace",
                             str(tmp_path / "ws"), "--out", str(tmp_path / "out")], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PackageNotFoundError" not in result.stdout + result.stderr


def test_installed_version_tries_distributions_then_the_module(monkeypatch):
    from trtflow.errors import BackendUnavailable
    from trtflow.packages import installed_version

    real = metadata.version

    def only_gpu_build(name):
        if name == "onnxruntime":
            raise metadata.PackageNotFoundError(name)
        return real("onnxruntime") if name == "onnxruntime-gpu" else real(name)

    monkeypatch.setattr(metadata, "version", only_gpu_build)
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {"onnxruntime": ["onnxruntime-gpu"]})
    installed_version.cache_clear()
    try:
        assert installed_version("onnxruntime") == real("onnxruntime")
        monkeypatch.setattr(metadata, "packages_distributions", lambda: {})
        installed_version.cache_clear()
        import onnxruntime

        assert installed_version("onnxruntime") == onnxruntime.__version__  # no metadata at all: the module says
        with pytest.raises(BackendUnavailable, match="`no_such_module_here` is not installed"):
            installed_version("no_such_module_here")
    finally:
        installed_version.cache_clear()
