"""Test double of `tensorrt`, in the generation named by TRTFLOW_TEST_TENSORRT (see trt_double.py)."""

import os

from trt_double import generation_namespace

globals().update(generation_namespace(os.environ.get("TRTFLOW_TEST_TENSORRT", "10.13.0.35")))
