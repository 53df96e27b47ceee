"""What each generation can do, decided in one place (`trtflow.trt.api`)."""

from __future__ import annotations

import pytest

from trtflow.errors import BackendUnavailable, ParamError
from trtflow.trt.api import TensorRT, version_tuple


def test_typing_follows_the_generation(trt, trt_generation):
    major = version_tuple(trt_generation)[0]
    assert trt.resolve_typing("auto") == ("strong" if major >= 11 else "weak")
    if major >= 11:
        with pytest.raises(ParamError, match="removed weak typing") as error:
            trt.resolve_typing("weak")
        assert error.value.param == "typing"
    else:
        assert trt.resolve_typing("weak") == "weak"
    if major < 10:
        with pytest.raises(ParamError, match="no strongly typed networks"):
            trt.resolve_typing("strong")
    else:
        assert trt.resolve_typing("strong") == "strong"


def test_network_flags_are_those_the_generation_wants(trt, trt_generation):
    flags = trt.module.NetworkDefinitionCreationFlag
    major = version_tuple(trt_generation)[0]
    if major < 10:
        assert trt.network_flags("weak") == 1 << int(flags.EXPLICIT_BATCH)
    elif major == 10:
        assert trt.network_flags("weak") == 0
        assert trt.network_flags("strong") == 1 << int(flags.STRONGLY_TYPED)
    else:
        assert trt.network_flags("strong") == 0  # strong typing is always on; the flag is ignored


def test_precision_flags_and_data_types(trt, trt_generation):
    major = version_tuple(trt_generation)[0]
    assert trt.precision_flag("fp32") is None
    if major >= 11:
        with pytest.raises(ParamError):
            trt.precision_flag("fp16")
    else:
        assert trt.precision_flag("fp16") == trt.module.BuilderFlag.FP16
    if major < 10:
        with pytest.raises(ParamError, match="no bfloat16"):
            trt.data_type("bf16")
    else:
        assert trt.data_type("bf16") == trt.module.bfloat16


def test_tactic_sources_are_checked_against_the_version(trt, trt_generation):
    mask = trt.tactic_mask(["JIT_convolutions"])
    assert mask == 1 << int(trt.module.TacticSource.JIT_CONVOLUTIONS)
    if version_tuple(trt_generation)[0] >= 11:
        with pytest.raises(
            ParamError,
            match="no tactic source cudnn; it has: edge_mask_convolutions, jit_convolutions",
        ):
            trt.tactic_mask(["cudnn"])
    else:
        assert trt.tactic_mask(["cudnn", "cublas"]) != 0


def test_numpy_types_cover_bf16(trt, trt_generation):
    import numpy as np

    assert trt.numpy_dtype(trt.module.float16) == np.float16
    if hasattr(trt.module, "bfloat16"):
        assert trt.numpy_dtype(trt.module.bfloat16).name == "bfloat16"


def test_missing_or_old_tensorrt_is_backend_unavailable(use_double, monkeypatch):
    import sys

    monkeypatch.setitem(
        sys.modules, "tensorrt", None
    )  # what `import tensorrt` meets on a machine without it
    with pytest.raises(
        BackendUnavailable, match="install trtflow\\[tensorrt\\] on a machine with an NVIDIA GPU"
    ):
        TensorRT.load()
    monkeypatch.delitem(sys.modules, "tensorrt")
    use_double("8.6.1")
    import tensorrt

    monkeypatch.setattr(tensorrt, "__version__", "8.5.3")
    with pytest.raises(BackendUnavailable, match="too old"):
        TensorRT.load()
