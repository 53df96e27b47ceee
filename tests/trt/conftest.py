"""Fixtures that put the strict TensorRT and CUDA doubles of one generation in place of the real ones.

In-process tests get `trt_generation` (parametrized over 8.6, 10.x and 11.x): the doubles' folder
on `sys.path`, TRTFLOW_TEST_TENSORRT naming the version, and fresh modules. Tests that go through
`trtflow run` in a child process pass `double_env(version)` as its environment, which does the
same through PYTHONPATH.
"""

from __future__ import annotations

import sys

import pytest

from .trt_doubles import DOUBLE_MODULES, DOUBLES, GENERATIONS


def _forget_doubles() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in DOUBLE_MODULES:
            del sys.modules[name]
    from trtflow.trt import environment

    environment.tensorrt_version.cache_clear()
    environment.cuda.cache_clear()


@pytest.fixture
def use_double(monkeypatch):
    """`use_double(version, **env)`: make `import tensorrt` / `cuda.bindings` load the doubles."""

    def install(version: str, **extra: str) -> None:
        _forget_doubles()
        monkeypatch.syspath_prepend(str(DOUBLES))
        monkeypatch.setenv("TRTFLOW_TEST_TENSORRT", version)
        for key, value in extra.items():
            monkeypatch.setenv(key, value)

    yield install
    _forget_doubles()


@pytest.fixture(params=list(GENERATIONS), ids=list(GENERATIONS))
def trt_generation(request, use_double) -> str:
    """Runs the test once per TensorRT generation; returns the double's version string."""
    version = GENERATIONS[request.param]
    use_double(version)
    return version


@pytest.fixture
def trt(trt_generation):
    from trtflow.trt.api import TensorRT

    return TensorRT.load()
