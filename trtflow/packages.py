"""The version of an installed library, whichever distribution installed it.

Cache keys name library versions (`fingerprint`), and one module ships under several
distribution names: `import onnxruntime` comes from `onnxruntime`, `onnxruntime-gpu`,
`onnxruntime-directml`, `onnxruntime-openvino`...; `import onnx` from `onnx` or `onnx-weekly`.
`importlib.metadata.version("onnxruntime")` fails on a machine with only `onnxruntime-gpu`, so
every fingerprint asks here instead. Metadata comes first (cheap, and a fully cached run must not
import the framework); the module's own `__version__` is the last resort, for installs without
metadata (a build on PYTHONPATH).
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib import metadata

from trtflow.errors import BackendUnavailable


@cache
def installed_version(module: str, *distributions: str) -> str:
    """The version of the distribution that provides `import module`: `distributions` (default: the
    module's own name) are tried first, then whatever distribution installed the module, then its
    `__version__`."""
    for distribution in distributions or (module,):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    for distribution in metadata.packages_distributions().get(module, []):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    try:
        return str(importlib.import_module(module).__version__)
    except (ImportError, AttributeError):
        raise BackendUnavailable(
            f"`{module}` is not installed (or has no version): pip install {module}"
        ) from None
