"""TensorRT and CUDA, imported lazily, and every difference between TensorRT generations in one place.

trtflow supports three generations that differ where accuracy debugging lives (each fact, with the
documentation page it was checked against, is listed in `tests/trt/API_FACTS.md`; the test doubles
of each generation are built from that list):
- 8.6: weak typing only — precision comes from builder flags (`BuilderFlag.FP16`) plus per-layer
  constraints (`ILayer.precision`, `set_output_type`, obeyed or preferred by
  `OBEY_/PREFER_PRECISION_CONSTRAINTS`); an ONNX network must be created with `EXPLICIT_BATCH`;
  no BF16, no INT64; parser errors carry a node index but not its name.
- 10.x: both. Weak typing as above (deprecated from 10.12: "Superseded by strong typing"), or a
  strongly typed network (`NetworkDefinitionCreationFlag.STRONGLY_TYPED`) whose precision is the
  model's own types; `EXPLICIT_BATCH` is ignored (networks are always explicit batch).
- 11.x: strong typing only. The precision flags, the constraint flags, `ILayer.precision` and
  `set_output_type` are gone; `STRONGLY_TYPED` is kept but ignored. A mixed-precision build is the
  lowered ONNX model of a precision plan. The inspector's `Bindings` became `"I/O Tensors"`, and
  the cuBLAS/cuDNN tactic sources are gone.

TensorRT-RTX (`tensorrt_rtx_bindings`, versions 1.x) is a second library with the TensorRT 10/11 API
and strong typing only, whose wheels install on any machine: it builds engines on a CPU (the
`test` extra installs it, so CI builds real engines), and runs them only on the RTX compute
capabilities it lists (`ComputeCapability`). `TensorRT.load(library)` picks one of the two;
`auto` takes TensorRT where it imports, else TensorRT-RTX.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from trtflow.errors import BackendUnavailable, ParamError
from trtflow.trt.environment import INSTALL_HINT, RTX

MINIMUM_VERSION = (8, 6)

Typing = Literal["auto", "strong", "weak"]
TypingMode = Literal["strong", "weak"]  # what `auto` resolves to
Library = Literal["tensorrt", "tensorrt-rtx", "auto"]
_MODULES = {"tensorrt": "tensorrt", RTX: "tensorrt_rtx_bindings"}
RTX_INSTALL_HINT = "pip install 'trtflow[tensorrt-rtx]' (builds on any machine; runs on RTX GPUs)"
Constraints = Literal["obey", "prefer"]
BuildPrecision = Literal["fp32", "fp16", "bf16"]

_DATA_TYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_PRECISION_FLAGS = {"fp16": "FP16", "bf16": "BF16"}
_CONSTRAINT_FLAGS = {"obey": "OBEY_PRECISION_CONSTRAINTS", "prefer": "PREFER_PRECISION_CONSTRAINTS"}


def version_tuple(text: str) -> tuple[int, ...]:
    """`"10.13.0.35"` -> `(10, 13, 0, 35)`; the numeric parts of a version string."""
    return tuple(int(part) for part in re.findall(r"\d+", text))


def import_tensorrt(library: Library = "tensorrt") -> tuple[str, Any]:
    """`(library, module)`: the library asked for, or for `auto` TensorRT if it imports, else
    TensorRT-RTX."""
    if library == "auto":
        try:
            return "tensorrt", importlib.import_module("tensorrt")
        except ImportError:
            library = "tensorrt-rtx"
    try:
        return library, importlib.import_module(_MODULES[library])
    except ImportError as error:
        if library == RTX:
            raise BackendUnavailable(
                f"TensorRT-RTX is not installed here ({error}): {RTX_INSTALL_HINT}"
            ) from None
        raise BackendUnavailable(
            f"TensorRT is not installed here ({error}): {INSTALL_HINT}"
        ) from None


def import_cudart() -> Any:
    """The CUDA runtime bindings of cuda-python: `cuda.bindings.runtime` (12.6 and later), else the
    older `cuda.cudart` module path that cuda-python 12.x still ships (deprecated there)."""
    for module in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return importlib.import_module(module)
        except ImportError:
            continue
    raise BackendUnavailable(
        f"cuda-python is not installed here (it allocates TensorRT's device memory): {INSTALL_HINT}"
    )


@dataclass(frozen=True)
class TensorRT:
    """The imported `tensorrt` module and what its generation can do."""

    module: Any
    version: tuple[int, ...]
    library: str = "tensorrt"  # or "tensorrt-rtx"

    @classmethod
    def load(cls, library: Library = "tensorrt") -> TensorRT:
        imported, module = import_tensorrt(library)
        version = version_tuple(getattr(module, "__version__", "0"))
        if imported == RTX:
            return cls(module, version, RTX)
        if version[:2] < MINIMUM_VERSION:
            raise BackendUnavailable(
                f"TensorRT {module.__version__} is too old: trtflow supports TensorRT 8.6 and newer; "
                f"{INSTALL_HINT}"
            )
        return cls(module, version)

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def rtx(self) -> bool:
        return self.library == RTX

    @property
    def name(self) -> str:
        """`"TensorRT 10.13.0.35"` or `"TensorRT-RTX 1.7.1.116"`, as messages say it."""
        return f"{'TensorRT-RTX' if self.rtx else 'TensorRT'} {self.version_text}"

    @property
    def compute_capabilities(self) -> list[str]:
        """The compute capabilities TensorRT-RTX runs engines on (`["7.5", "8.0", ...]`); empty for
        TensorRT, which runs on every GPU its CUDA supports."""
        if not self.rtx:
            return []
        members = getattr(self.module, "ComputeCapability", None)
        names = getattr(members, "__members__", {})
        numbers = [m.group(1) for n in names if (m := re.fullmatch(r"SM(\d+)", n))]
        return [f"{number[:-1]}.{number[-1]}" for number in numbers]

    # --- typing -------------------------------------------------------------------------------------

    @property
    def weak_typing(self) -> bool:
        """Builder precision flags and per-layer precision constraints exist (removed in 11.0,
        never in TensorRT-RTX)."""
        return not self.rtx and self.version[0] < 11

    @property
    def weak_typing_deprecated(self) -> bool:
        return (10, 12) <= self.version[:2] and self.weak_typing

    @property
    def strong_typing(self) -> bool:
        """A network can be strongly typed: always on 11.x, through `STRONGLY_TYPED` on 10.x (and 9.x)."""
        return not self.weak_typing or hasattr(
            self.module.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"
        )

    def resolve_typing(self, requested: Typing) -> TypingMode:
        """`auto` is what each generation does by default: weak up to 10.x, strong on 11.x."""
        if requested == "weak" and self.rtx:
            raise ParamError(
                "typing",
                f"{self.name} is strongly typed only (no BuilderFlag.FP16, no precision "
                "constraints); use `typing: strong` (or leave it out) with `precision:` and "
                "`keep:` (the plan's lowered model), or build the lowered model bisect-precision "
                "writes",
            )
        if requested == "weak" and not self.weak_typing:
            raise ParamError(
                "typing",
                f"TensorRT {self.version_text} removed weak typing (BuilderFlag.FP16, precision "
                "constraints); use `typing: strong` (the default here): the precision plan "
                "is lowered into the ONNX model's own types",
            )
        if requested == "strong" and not self.strong_typing:
            raise ParamError(
                "typing",
                f"TensorRT {self.version_text} has no strongly typed networks (they arrived "
                "in TensorRT 10); use `typing: weak` or `auto`",
            )
        if requested == "auto":
            return "weak" if self.weak_typing else "strong"
        return requested

    def network_flags(self, typing: TypingMode) -> int:
        """`create_network` flags: EXPLICIT_BATCH on 8.x (the ONNX parser needs it; 10.x ignores it,
        11.x removed it); STRONGLY_TYPED for a strong network on 10.x (11.x ignores it)."""
        flags = self.module.NetworkDefinitionCreationFlag
        if self.rtx:
            return 1 << int(flags.STRONGLY_TYPED)
        if self.version[0] < 10:
            value = 1 << int(flags.EXPLICIT_BATCH)
            return value | (1 << int(flags.STRONGLY_TYPED)) if typing == "strong" else value
        if typing == "strong" and self.weak_typing:
            return 1 << int(flags.STRONGLY_TYPED)
        return 0

    def precision_flag(self, precision: BuildPrecision) -> Any | None:
        """The builder flag that lets a weakly typed build choose `precision` kernels (None for fp32)."""
        if precision == "fp32":
            return None
        name = _PRECISION_FLAGS[precision]
        if not hasattr(self.module.BuilderFlag, name):
            raise ParamError(
                "precision",
                f"TensorRT {self.version_text} cannot build {precision} (no BuilderFlag.{name})",
            )
        return getattr(self.module.BuilderFlag, name)

    def constraint_flag(self, constraints: Constraints) -> Any:
        return getattr(self.module.BuilderFlag, _CONSTRAINT_FLAGS[constraints])

    def data_type(self, precision: BuildPrecision) -> Any:
        name = _DATA_TYPES[precision]
        if not hasattr(self.module, name):
            raise ParamError("precision", f"TensorRT {self.version_text} has no {name} data type")
        return getattr(self.module, name)

    # --- names --------------------------------------------------------------------------------------

    @cached_property
    def tactic_sources(self) -> dict[str, Any]:
        """`{"edge_mask_convolutions": TacticSource.EDGE_MASK_CONVOLUTIONS, ...}` — what this version has."""
        members = getattr(self.module.TacticSource, "__members__", {})
        return {name.lower(): member for name, member in members.items()}

    def tactic_mask(self, names: list[str]) -> int:
        available = self.tactic_sources
        unknown = [name for name in names if name.lower() not in available]
        if unknown:
            raise ParamError(
                "tactic_sources",
                f"TensorRT {self.version_text} has no tactic source "
                f"{', '.join(unknown)}; it has: {', '.join(available)}",
            )
        mask = 0
        for name in names:
            mask |= 1 << int(available[name.lower()])
        return mask

    @cached_property
    def _numpy_types(self) -> list[tuple[Any, np.dtype]]:
        import ml_dtypes

        pairs = [
            ("float32", np.float32),
            ("float16", np.float16),
            ("bfloat16", ml_dtypes.bfloat16),
            ("int8", np.int8),
            ("int32", np.int32),
            ("int64", np.int64),
            ("bool", np.bool_),
            ("uint8", np.uint8),
            ("fp8", ml_dtypes.float8_e4m3fn),
        ]
        return [
            (getattr(self.module, name), np.dtype(dtype))
            for name, dtype in pairs
            if hasattr(self.module, name)
        ]

    def numpy_dtype(self, data_type: Any) -> np.dtype:
        """TensorRT's `DataType` as numpy's (`tensorrt.nptype` knows neither BF16 nor FP8)."""
        for candidate, dtype in self._numpy_types:
            if candidate == data_type:
                return dtype
        raise BackendUnavailable(f"trtflow cannot hold TensorRT data type {data_type} in numpy")
