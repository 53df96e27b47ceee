"""The TensorRT double is only as good as its surface: every class, method, property and enum member
it offers must exist in the real bindings (`tensorrt_rtx_bindings`, TensorRT 10/11's API without weak
typing) with a call arity the real signature accepts. A difference is either listed below as a
TensorRT 10/11-only member with the documentation page that shows it, or a failure, so a member the
double invents (and trtflow might come to rely on) cannot pass unnoticed."""

from __future__ import annotations

import enum
import importlib
import inspect
import math
import re
from typing import Any

import pytest

from .trt_doubles import DOUBLES, GENERATIONS

real = pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

BUILDER = "https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/Builder.html"
BUILDER_11 = "https://docs.nvidia.com/deeplearning/tensorrt/11.0.0/_static/python-api/infer/Core/Builder.html"
CONFIG = "https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/BuilderConfig.html"
REMOVED_IN_11 = "https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html"
WEAK_TYPING_DEPRECATED = "https://docs.nvidia.com/deeplearning/tensorrt/latest/getting-started/release-notes-10/10.12.0.html"

# Members the doubles offer that TensorRT-RTX lacks, per generation, each with the page showing it
# exists in that TensorRT: weak typing (FP16/INT8/... builder flags, layer precisions), the tactic
# sources TensorRT 10 still had, and the Python-plugin network flags.
TENSORRT_ONLY: dict[str, dict[str, str]] = {
    "10.x": {
        "Builder.platform_has_fast_fp16": BUILDER,
        **{
            f"BuilderFlag.{flag}": CONFIG
            for flag in (
                "FP16",
                "BF16",
                "INT8",
                "FP8",
                "INT4",
                "FP4",
                "OBEY_PRECISION_CONSTRAINTS",
                "PREFER_PRECISION_CONSTRAINTS",
                "REJECT_EMPTY_ALGORITHMS",
                "WEIGHTLESS",
            )
        },
        **{
            f"ILayer.{member}": WEAK_TYPING_DEPRECATED
            for member in (
                "precision",
                "precision_is_set",
                "reset_precision",
                "set_output_type",
                "output_type_is_set",
                "reset_output_type",
            )
        },
        "NetworkDefinitionCreationFlag.EXPLICIT_BATCH": BUILDER,
        "NetworkDefinitionCreationFlag.PREFER_AOT_PYTHON_PLUGINS": BUILDER,
        "NetworkDefinitionCreationFlag.PREFER_JIT_PYTHON_PLUGINS": BUILDER,
        **{f"TacticSource.{source}": CONFIG for source in ("CUBLAS", "CUBLAS_LT", "CUDNN")},
    },
    "11.x": {
        "NetworkDefinitionCreationFlag.PREFER_AOT_PYTHON_PLUGINS": BUILDER_11,
        "NetworkDefinitionCreationFlag.PREFER_JIT_PYTHON_PLUGINS": BUILDER_11,
    },
}
# The double's own error for a call its generation forbids: no TensorRT has it, trtflow never names it.
DOUBLE_OWN = {"DoubleViolation"}

Arity = tuple[int, float]


def _double_arity(function: Any) -> Arity:
    """(fewest, most) positional arguments after `self` the double's method takes."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    most = (
        math.inf if any(p.kind is p.VAR_POSITIONAL for p in parameters) else float(len(positional))
    )
    return sum(1 for p in positional if p.default is p.empty), most


def _split_arguments(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() else parts


def _real_arities(function: Any, name: str) -> list[Arity] | None:
    """The (fewest, most) arguments of each overload in pybind11's signature lines (`name(self: ..,
    a: .., b: .. = 0) -> ..`, numbered when overloaded); None where the bindings give no signature."""
    arities: list[Arity] = []
    for line in re.finditer(
        rf"^(?:\d+\. )?{re.escape(name)}\((.*)\) ->", function.__doc__ or "", re.M
    ):
        arguments = [a for a in _split_arguments(line.group(1)) if not a.startswith("self")]
        arities.append((sum(1 for a in arguments if "=" not in a), float(len(arguments))))
    return arities or None


def _double_surface(namespace: dict[str, Any]) -> dict[str, tuple[str, Arity | None]]:
    """Dotted name -> (kind, arity) for everything public the double's module offers."""
    surface: dict[str, tuple[str, Arity | None]] = {}

    def enum_members(prefix: str, kind: type[enum.Enum]) -> None:
        surface[prefix] = ("class", None)
        for member in kind.__members__:
            surface[f"{prefix}.{member}"] = ("member", None)

    for name, value in namespace.items():
        if name.startswith("_") or name in DOUBLE_OWN:
            continue
        if isinstance(value, type) and issubclass(value, enum.Enum):
            enum_members(name, value)
        elif isinstance(value, type):
            surface[name] = ("class", None)
            for attribute in dir(value):
                if attribute.startswith("_") and attribute != "__init__":
                    continue
                if attribute in dir(object) and attribute != "__init__":
                    continue
                member = inspect.getattr_static(value, attribute)
                key = f"{name}.{attribute}"
                if isinstance(member, enum.Enum):
                    surface[key] = ("member", None)
                elif isinstance(member, type) and issubclass(member, enum.Enum):
                    enum_members(key, member)
                elif inspect.isfunction(member):
                    surface[key] = ("method", _double_arity(member))
                elif isinstance(member, property) or inspect.ismemberdescriptor(member):
                    surface[key] = ("attribute", None)
                elif attribute != "__init__":
                    surface[key] = ("value", None)
        else:
            surface[name] = ("value", None)
    return surface


def _differences(namespace: dict[str, Any]) -> dict[str, str]:
    """Each member of the double the real bindings lack or take differently -> what differs."""
    differences: dict[str, str] = {}
    for key, (kind, arity) in sorted(_double_surface(namespace).items()):
        *path, last = key.split(".")
        owner: Any = real
        for part in path:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, last):
            differences[key] = f"the double has this {kind}; {real.__name__} has not"
            continue
        found = inspect.getattr_static(owner, last)
        if kind == "attribute" and not isinstance(found, property):
            differences[key] = f"an attribute in the double, a {type(found).__name__} for real"
        elif kind == "method" and isinstance(found, property):
            differences[key] = "a method in the double, a property for real"
        elif kind == "method" and arity is not None:
            overloads = _real_arities(getattr(owner, last), last)
            if overloads is None:
                if last != "__init__":  # no constructor in the bindings: the library makes them
                    differences[key] = "the bindings give no signature to check the arity against"
            elif not any(low <= arity[0] and arity[1] <= high for low, high in overloads):
                differences[key] = f"takes {arity} arguments in the double, {overloads} for real"
    return differences


@pytest.fixture
def double_namespace(monkeypatch):
    monkeypatch.syspath_prepend(str(DOUBLES))
    module = importlib.import_module("trt_double")
    return lambda generation: module.generation_namespace(GENERATIONS[generation])


@pytest.mark.parametrize("generation", list(TENSORRT_ONLY))
def test_every_member_of_the_double_exists_in_the_real_bindings(double_namespace, generation):
    namespace = double_namespace(generation)
    assert len(_double_surface(namespace)) > 200  # the walk saw the classes, not an empty module
    differences = _differences(namespace)
    unexplained = {k: v for k, v in differences.items() if k not in TENSORRT_ONLY[generation]}
    assert unexplained == {}, (
        "the double offers what TensorRT-RTX does not, with no page saying TensorRT has it"
    )
    stale = set(TENSORRT_ONLY[generation]) - set(differences)
    assert stale == set(), "allow-listed members the real bindings have after all (drop them)"


def test_arity_is_read_from_the_real_signatures():
    assert _real_arities(real.Builder.create_network, "create_network") == [(0, 1.0)]
    assert _real_arities(real.OnnxParser.parse, "parse") == [(1, 2.0)]
    assert _real_arities(real.IBuilderConfig.set_memory_pool_limit, "set_memory_pool_limit") == [
        (2, 2.0)
    ]


def test_a_member_the_double_invents_fails(double_namespace, monkeypatch):
    namespace = double_namespace("11.x")
    monkeypatch.setattr(
        namespace["Builder"], "build_engine_quickly", lambda self, network: None, raising=False
    )
    monkeypatch.setattr(
        namespace["OnnxParser"], "parse_from_file", lambda self, model, strict: True
    )
    monkeypatch.setattr(
        namespace["IBuilderConfig"], "fp16_everywhere", property(lambda self: 1), raising=False
    )
    differences = _differences(namespace)
    assert set(differences) == {
        "Builder.build_engine_quickly",
        "OnnxParser.parse_from_file",
        "IBuilderConfig.fp16_everywhere",
    } | set(TENSORRT_ONLY["11.x"])
    assert (
        "(2, 2.0) arguments in the double, [(1, 1.0)] for real"
        in differences["OnnxParser.parse_from_file"]
    )


def test_an_invented_enum_member_fails(double_namespace, monkeypatch):
    namespace = double_namespace("10.x")
    flags = namespace["BuilderFlag"]
    planted = enum.IntEnum("BuilderFlag", [*flags.__members__, "TURBO"], start=0)
    monkeypatch.setitem(namespace, "BuilderFlag", planted)
    unexplained = set(_differences(namespace)) - set(TENSORRT_ONLY["10.x"])
    assert unexplained == {"BuilderFlag.TURBO"}
