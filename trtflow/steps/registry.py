"""Which step kinds exist, imported only when used.

Built-in kinds are listed by module so that validating a recipe imports just the steps it uses.
Third-party kinds come from the `trtflow.steps` entry-point group (name = kind, value =
`module:Class`) or, without packaging, from modules named in `TRTFLOW_STEP_PLUGINS`
(comma-separated; every `Step` subclass with a `kind` in them is registered).
"""

from __future__ import annotations

import importlib
import os
from functools import cache

from trtflow.errors import UsageError
from trtflow.steps.base import Step

BUILTIN: dict[str, str] = {
    "load": "trtflow.steps.load:Load",
    "surgeon-insert-tap": "trtflow.steps.surgeon_insert_tap:SurgeonInsertTap",
    "surgeon-extract": "trtflow.steps.surgeon_extract:SurgeonExtract",
    "surgeon-sanitize": "trtflow.steps.surgeon_sanitize:SurgeonSanitize",
    "run-runners": "trtflow.steps.run_runners:RunRunners",
    "compare": "trtflow.steps.compare:Compare",
    "build-engine": "trtflow.steps.build_engine:BuildEngine",
    "inspect-capability": "trtflow.steps.inspect_capability:InspectCapability",
    "render-graph": "trtflow.steps.render_graph:RenderGraph",
    "bisect-precision": "trtflow.steps.bisect_precision:BisectPrecision",
    "reduce": "trtflow.steps.reduce:Reduce",
    "quantize": "trtflow.steps.quantize:Quantize",
    "round-trip": "trtflow.steps.round_trip:RoundTripStep",
    "diagnose": "trtflow.steps.diagnose:Diagnose",
}


@cache
def _plugins() -> dict[str, str]:
    found: dict[str, str] = {}
    from importlib.metadata import entry_points

    for entry in entry_points(group="trtflow.steps"):
        found[entry.name] = entry.value
    for module_name in filter(
        None, (m.strip() for m in os.environ.get("TRTFLOW_STEP_PLUGINS", "").split(","))
    ):
        try:
            module = importlib.import_module(module_name)
        except (
            Exception
        ) as error:  # the user's setting or the plugin's code, not trtflow: a usage error
            raise UsageError(
                f"TRTFLOW_STEP_PLUGINS names `{module_name}`, which cannot be imported "
                f"({type(error).__name__}: {error}); it expects comma-separated module names "
                "importable from this Python (check PYTHONPATH), or unset it"
            ) from None
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Step)
                and obj is not Step
                and getattr(obj, "kind", None)
            ):
                found[obj.kind] = f"{module_name}:{obj.__name__}"
    return found


def kinds() -> list[str]:
    return sorted({**_plugins(), **BUILTIN})


def _target(kind: str) -> str | None:
    return BUILTIN.get(kind) or _plugins().get(kind)


def exists(kind: str) -> bool:
    return _target(kind) is not None


@cache
def get(kind: str) -> type[Step]:
    target = _target(kind)
    if target is None:
        raise KeyError(kind)
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)
