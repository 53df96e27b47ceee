"""`lazy_import`: a module that is imported the first time it is used, as Polygraphy does it.

Step modules are imported to validate a recipe and compute keys, even when every step is cached
and nothing runs; numpy alone costs ~150 ms there. Modules that need numpy only inside functions
bind `np = lazy_import("numpy")` and pay for it only when a step really computes.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class _LazyModule(ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_module"] = None

    def __getattr__(self, attribute: str):
        module = self.__dict__["_module"]
        if module is None:
            module = self.__dict__["_module"] = importlib.import_module(self.__name__)
        return getattr(module, attribute)


def lazy_import(name: str) -> ModuleType:
    return _LazyModule(name)
