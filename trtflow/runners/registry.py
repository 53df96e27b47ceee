"""The runner backends `run-runners` accepts, and the discriminated union of their configs.

Config modules import nothing heavy at module level, so building the union is cheap.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Annotated, Union

from pydantic import Field

from trtflow.runners.base import RunnerConfig

BACKENDS: dict[str, str] = {
    "onnxruntime": "trtflow.runners.onnxruntime:Config",
    "emulated": "trtflow.runners.emulated:Config",
    "saved": "trtflow.runners.saved:Config",
    "tensorrt": "trtflow.runners.tensorrt:Config",
}


def config_type(backend: str) -> type[RunnerConfig]:
    module_name, _, class_name = BACKENDS[backend].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


@cache
def runner_entry():
    """The type of one entry under `runners:` — the config of the backend it names."""
    configs = tuple(config_type(backend) for backend in BACKENDS)
    return Annotated[Union[configs], Field(discriminator="backend")]  # noqa: UP007 (a union of a runtime tuple)


def realizes_plans(backend: str) -> bool:
    """Whether `backend`'s runners can realize precision plans (its config declares their precisions)."""
    return bool(config_type(backend).plan_precisions)


@cache
def plan_runner_entry():
    """The type of a runner entry that realizes precision plans (`bisect-precision`'s `runner`)."""
    configs = tuple(config_type(backend) for backend in BACKENDS if realizes_plans(backend))
    return Annotated[Union[configs], Field(discriminator="backend")]  # noqa: UP007 (a union of a runtime tuple)
