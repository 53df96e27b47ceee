"""Imports point one way: `cli -> executor -> steps -> sessions -> {runners, precision, tensors, graph, trt} ->
{onnxmodel, ort_sessions} -> third party`, with `schema`, `errors`, `packages`, `lazy`, `memory` and
`user_code` shared by every layer (docs/architecture.md, "Layout").

The check reads every module's imports with `ast` — imports inside functions and under
TYPE_CHECKING included, since a lazy import still ties one module to another — so a shortcut
across layers fails here instead of surfacing later as a cycle or a step that cannot move.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trtflow"

# Each unit (a top-level module or package of trtflow) belongs to one layer; a higher layer may
# import any lower one. Within a layer, only what `SIDEWAYS` lists is allowed.
LAYERS: dict[str, set[str]] = {
    "shared": {
        "__init__",
        "errors",
        "schema",
        "packages",
        "lazy",
        "memory",
        "user_code",
        "sha256_thread",
    },
    "bottom": {"onnxmodel", "ort_sessions"},
    "libraries": {"runners", "precision", "tensors", "graph", "trt"},
    "sessions": {"sessions"},
    "steps": {"steps"},
    "executor": {"executor"},
    "interface": {
        "__main__",
        "cli",
        "display",
        "doctor",
        "inspect",
        "inspect_details",
        "inspect_json",
    },
}
RANK = {unit: rank for rank, units in enumerate(LAYERS.values()) for unit in units}

SIDEWAYS: dict[str, set[str]] = {
    "shared": {"errors", "schema"},  # schema raises the shared errors
    "bottom": {"errors", "schema", "packages", "lazy", "memory", "user_code"},
    # runners realize precision plans, mark tensors as outputs and drive TensorRT; a TensorRT
    # build takes its layer constraints from a plan. tensors and precision never import each other.
    "runners": {"precision", "tensors", "trt"},
    "trt": {"precision"},
    "precision": set(),
    "tensors": {"graph"},  # an engine-layer map is built from the engine graph graph/ reads
    "graph": set(),
    "interface": {
        "__main__",
        "cli",
        "display",
        "doctor",
        "inspect",
        "inspect_details",
        "inspect_json",
    },
}

# Modules of a unit that others may use although the unit as a whole sits higher or sideways.
STEP_SHARED = {"trtflow.steps.base", "trtflow.steps.registry"}
HEAVY = {"onnx", "onnxruntime", "tensorrt", "onnx_graphsurgeon"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file; `from pkg import sub` names `pkg.sub`
    when `sub` is a module, so importing a submodule through its package is seen too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if candidate in MODULES else base))
    return found


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(unit: str) -> str:
    return next(layer for layer, units in LAYERS.items() if unit in units)


def _refusal(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported` (both trtflow modules), or None when it may."""
    source, target = _unit(importer), _unit(imported)
    if source == "steps" and target == "steps":
        if (
            importer in STEP_SHARED
            or imported in STEP_SHARED
            or importer == "trtflow.steps"
            or imported == "trtflow.steps"
        ):
            return None
        return "a step never imports another step: move what they share to the layer it belongs in"
    if source == target:
        return None
    if source == "executor" and _layer(target) == "bottom":
        return "the executor does not know model formats: a step's outputs and params declare their files"
    if source == "executor" and target == "steps":
        return (
            None
            if imported in STEP_SHARED | {"trtflow.steps"}
            else "the executor knows steps only through steps.base and steps.registry"
        )
    if RANK[target] < RANK[source]:
        return None
    if RANK[target] == RANK[source] and target in SIDEWAYS.get(
        source, SIDEWAYS.get(_layer(source), set())
    ):
        return None
    return f"{_layer(source)} ({source}) may not import {_layer(target)} ({target})"


def test_every_unit_has_a_layer():
    assert sorted({_unit(m) for m in MODULES} - set(RANK)) == []


def test_imports_point_one_way():
    violations = []
    for module, path in MODULES.items():
        for line, imported in _imports(module, path):
            if not imported.startswith("trtflow"):
                continue
            reason = _refusal(module, imported)
            if reason:
                violations.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: imports {imported}: {reason}"
                )
    violations = list(dict.fromkeys(violations))  # `from m import a, b` is one import
    assert violations == [], "\n".join(violations)


EXECUTOR = [m for m in MODULES if _unit(m) == "executor"]


@pytest.mark.parametrize("module", EXECUTOR)
def test_executor_knows_no_model_format(module):
    """No ONNX import and no ONNX file rule (`.onnx`, `.data` sidecars) in the executor's code:
    which files belong to an output is declared by the output (`Output.companions`)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    heavy = [imported for _, imported in _imports(module, path) if imported.split(".")[0] in HEAVY]
    rules = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (".onnx" in node.value or ".data" in node.value)
    ]
    assert (heavy, rules) == ([], [])


def test_the_checker_sees_lazy_and_sideways_imports():
    """The rules bite: the shortcuts this layout removed would be reported."""
    assert _refusal("trtflow.tensors.inputs", "trtflow.precision.plan")
    assert _refusal("trtflow.precision.sites", "trtflow.tensors.taps")
    assert _refusal("trtflow.steps.render_graph", "trtflow.steps.run_runners")
    assert _refusal("trtflow.executor.hashing", "trtflow.onnxmodel.files")
    assert _refusal("trtflow.graph.overlay", "trtflow.steps.base")
    assert _refusal("trtflow.onnxmodel.files", "trtflow.tensors.catalog")
    assert _refusal("trtflow.runners.emulated", "trtflow.precision.emulate") is None
    assert _refusal("trtflow.sessions.precision.search", "trtflow.steps.base")
    assert _refusal("trtflow.runners.base", "trtflow.sessions.precision.search")
    assert _refusal("trtflow.steps.bisect_precision", "trtflow.sessions.precision.search") is None
    lazy = [
        imported
        for _, imported in _imports(
            "trtflow.steps.surgeon_extract", MODULES["trtflow.steps.surgeon_extract"]
        )
    ]
    assert "onnx" in lazy  # imported inside a function only (load no longer imports onnx at all)


# Sessions: each is its own package (or module) of trtflow.sessions; what several share lives in
# trtflow.sessions.trials, so one session's internals can change without breaking another.
SESSION_PACKAGES = ("trtflow.sessions.precision", "trtflow.sessions.reduce")


def _session(module: str) -> str | None:
    """The session package (or top-level sessions module) `module` belongs to."""
    if not module.startswith("trtflow.sessions."):
        return None
    return ".".join(module.split(".")[:3])


def _private_names(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, `module.name`) for each `_name` imported from another trtflow module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        if base.startswith("trtflow") and base != module:
            found += [
                (node.lineno, f"{base}.{alias.name}")
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def _session_refusal(importer: str, imported: str) -> str | None:
    """Why one session module may not import `imported`, or None when it may."""
    source, target = _session(importer), _session(imported)
    if source is None or target is None or source == target:
        return None
    if source in SESSION_PACKAGES and target in SESSION_PACKAGES:
        return (
            f"{source} and {target} are separate sessions: what both need belongs in "
            "trtflow.sessions.trials"
        )
    return None


SESSION_MODULES = [m for m in MODULES if _session(m) is not None]


def test_sessions_share_only_through_trials():
    violations = [
        f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: imports {imported}: {reason}"
        for module in SESSION_MODULES
        for line, imported in _imports(module, MODULES[module])
        if (reason := _session_refusal(module, imported))
    ]
    assert violations == [], "\n".join(violations)


def test_no_session_imports_a_private_name():
    """A session's `_private` names are free to change: another session module (or a step) that
    imports one ties itself to internals (reduce once imported the precision search's `_activated`)."""
    users = SESSION_MODULES + [m for m in MODULES if _unit(m) == "steps"]
    violations = [
        f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: imports {name}"
        for module in users
        for line, name in _private_names(module, MODULES[module])
        if _session(name.rpartition(".")[0]) is not None
    ]
    assert violations == [], "\n".join(violations)


def test_the_session_rules_bite(tmp_path):
    assert _session_refusal("trtflow.sessions.reduce.search", "trtflow.sessions.precision.search")
    assert _session_refusal("trtflow.sessions.precision.outcome", "trtflow.sessions.reduce.report")
    assert _session_refusal("trtflow.sessions.reduce.search", "trtflow.sessions.trials") is None
    assert (
        _session_refusal("trtflow.sessions.precision.search", "trtflow.sessions.precision.spaces")
        is None
    )
    planted = tmp_path / "search.py"
    planted.write_text("from trtflow.sessions.trials import _hidden, activated\n")
    assert _private_names("trtflow.sessions.reduce.search", planted) == [
        (1, "trtflow.sessions.trials._hidden")
    ]
