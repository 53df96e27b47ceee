"""Where the TensorRT/CUDA doubles live and how a child process is pointed at them."""

from __future__ import annotations

import os
from pathlib import Path

DOUBLES = Path(__file__).parent / "doubles"
GENERATIONS = {"8.6": "8.6.1", "10.x": "10.13.0.35", "11.x": "11.4.0.106"}
DOUBLE_MODULES = ("tensorrt", "cuda", "trt_double", "cuda_double")


def double_env(version: str, **extra: str) -> dict[str, str]:
    """Environment for `trtflow` in a child process that imports the doubles of `version`."""
    return {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(DOUBLES), os.environ.get("PYTHONPATH", "")])
        ),
        "TRTFLOW_TEST_TENSORRT": version,
        **extra,
    }
