"""`cuda.cudart`: the module path of cuda-python < 12.6, present only with TRTFLOW_TEST_CUDA_LAYOUT=legacy."""

import os

if os.environ.get("TRTFLOW_TEST_CUDA_LAYOUT") != "legacy":
    raise ImportError("No module named 'cuda.cudart' (test double: current cuda-python layout)")

from cuda_double import *  # noqa: E402,F401,F403
