"""One property over every registered step kind (issue 31 item 15): a param a kind declares
cosmetic never changes an output's bytes, and every other param changes the step key.

Driven from the registry: a new kind, or a new param, is covered without editing this file, but
for a new cosmetic param, which needs two values to run the step with (`COSMETIC_EXAMPLES`)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from conftest import run_cli
from run_compare.models import mlp_chain, save
from trt.trt_doubles import GENERATIONS, double_env
from trt.trt_models import overflow_model

from trtflow.executor.keys import identify_paths, keyed_params, material, step_key
from trtflow.steps import registry


def _key(kind: type, values: dict) -> str:
    """The step key of `kind` with `values` as its params, as `resolve` makes it (without the
    machine's facts, which no param changes)."""
    params = kind.Params.model_construct(**values)  # placeholders: no valid model needs building
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's warning that placeholders are not the types
        keyed = keyed_params(kind, params)
    return step_key(material(kind.kind, kind.version, identify_paths(keyed, {}, {}), {}, {}))


def test_every_param_but_the_cosmetic_ones_changes_the_step_key(plugin_env, monkeypatch):
    for name, value in plugin_env.items():  # the test-only kinds are registered kinds too
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(plugin_env["PYTHONPATH"].split(os.pathsep)[0])
    registry._plugins.cache_clear()
    try:
        kinds = {kind: registry.get(kind) for kind in registry.kinds()}
    finally:
        registry._plugins.cache_clear()
    assert {"load", "compare", "test-sleep"} <= set(kinds)
    wrong = []
    for name, kind in kinds.items():
        fields = list(kind.Params.model_fields)
        base = {field: f"<{field}>" for field in fields}
        for field in fields:
            changed = _key(kind, {**base, field: f"<another {field}>"}) != _key(kind, base)
            if changed == (field in kind.Params.cosmetic):
                wrong.append(f"{name}.{field}: {'changes' if changed else 'keeps'} the key")
    assert wrong == []


# a step of the kind with a cosmetic param at `{value}`, and the param's two values
COSMETIC_EXAMPLES: dict[tuple[str, str], tuple[str, tuple[str, str]]] = {
    ("compare", "gate"): (
        "{uses: compare, with: {results: '${steps.run.results}', reference: fp32, "
        "atol: 1, rtol: 1, gate: {value}}}",
        ("false", "true"),
    ),
    ("build-engine", "timing_cache"): (
        "{uses: build-engine, with: {model: engine.onnx, timing_iterations: 0, "
        "timing_cache: {value}}}",
        ("a.cache", "b.cache"),
    ),
    ("test-sleep", "label"): ("{uses: test-sleep, with: {label: {value}}}", ("a", "b")),
}


def _recipe(folder: Path, variant: int) -> Path:
    steps = "".join(
        f"  {kind}-{field}: " + step.replace("{value}", values[variant]) + "\n"
        for (kind, field), (step, values) in COSMETIC_EXAMPLES.items()
    )
    recipe = folder / f"variant{variant}.yaml"
    recipe.write_text(
        "trtflow: 1\nname: cosmetic\nsteps:\n"
        "  run: {uses: run-runners, with: {model: model.onnx, runners: "
        "[{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]}}\n"
        + steps
    )
    return recipe


def _output_files(folder: Path) -> dict[str, bytes]:
    """The bytes of every file of the step's outputs, by path: what the entry's manifest lists as
    outputs, not its own record of the run (timings)."""
    outputs = json.loads((folder / "manifest.json").read_text())["outputs"]
    found: dict[str, bytes] = {}
    for output in outputs.values():
        if output["kind"] == "value":
            continue
        path = folder / output["path"]
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                found[file.relative_to(folder).as_posix()] = file.read_bytes()
    return found


def test_a_cosmetic_param_never_changes_an_outputs_bytes(tmp_path, plugin_env):
    """Each variant runs in a workspace of its own: in one, the second value would be a cache hit
    of the first (a cosmetic param is not in the key), proving nothing."""
    declared = {
        (name, field) for name in registry.BUILTIN for field in registry.get(name).Params.cosmetic
    } | {("test-sleep", "label")}
    assert declared == set(COSMETIC_EXAMPLES), "give each cosmetic param two values to run with"
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    overflow_model(tmp_path / "engine.onnx")
    env = {
        **plugin_env,
        **double_env(GENERATIONS["10.x"]),
        "PYTHONPATH": os.pathsep.join(
            [double_env("")["PYTHONPATH"].split(os.pathsep)[0], plugin_env["PYTHONPATH"]]
        ),
    }
    for variant in (0, 1):
        ran = run_cli(
            "run", _recipe(tmp_path, variant), "--workspace", tmp_path / f"ws{variant}",
            "--out", tmp_path / f"out{variant}", cwd=tmp_path, env=env,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
    for kind, field in COSMETIC_EXAMPLES:
        one, other = (
            _output_files(tmp_path / f"out{variant}" / "cosmetic" / f"{kind}-{field}")
            for variant in (0, 1)
        )
        assert one and one.keys() == other.keys(), (kind, field)
        changed = [name for name in one if one[name] != other[name]]
        assert changed == [], f"{kind}.{field} is declared cosmetic and changed {changed}"
