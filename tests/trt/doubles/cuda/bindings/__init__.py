"""`cuda.bindings` of cuda-python >= 12.6; absent when TRTFLOW_TEST_CUDA_LAYOUT=legacy (cuda-python < 12.6)."""

import os

if os.environ.get("TRTFLOW_TEST_CUDA_LAYOUT") == "legacy":
    raise ImportError("No module named 'cuda.bindings' (test double: legacy cuda-python layout)")
