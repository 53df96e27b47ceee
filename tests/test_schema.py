"""`trtflow schema` accepts every recipe the loader accepts (JSON Schema Draft 2020-12), so an editor
never underlines a recipe that runs: the example recipes, and a corpus with every step kind and every
form a `with:` value takes — shorthands, references at any depth, numbers PyYAML leaves as text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import REPO, run_cli, write_recipe

DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"

# Every step kind; between them every with: form: a `${...}` reference for a whole value, a list
# item, a map value and a tuple member; `1e-2` (a string to PyYAML) where a number goes; the
# `script.py:function` and `{script, function}` loaders; `focus` as text and as a mapping.
CORPUS = {
    "load-and-taps": """
trtflow: 1
name: load-and-taps
vars: {model: m.onnx, check: full, ops: [MatMul]}
steps:
  model: {uses: load, with: {path: "${vars.model}", check: "${vars.check}", shapes: {x: [1, 8]}}}
  plain: {uses: load, with: {path: m.onnx, check: false}}
  all: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  some:
    uses: surgeon-insert-tap
    with: {model: "${steps.model.model}", tensors: ["ln/*", "${vars.model}"], ops: "${vars.ops}", exclude: [y]}
  part: {uses: surgeon-extract, with: {model: "${steps.model.model}", inputs: [x], outputs: ["${vars.model}"]}}
  sane:
    uses: surgeon-sanitize
    with: {model: "${steps.model.model}", override_shapes: {x: [1, n]}, fold_size_limit_mb: 16, script: feeds.py:feeds}
""",
    "run-and-compare": """
trtflow: 1
name: run-and-compare
vars: {hi: 10, atol: 1e-2, iterations: 2}
steps:
  gen:
    uses: run-runners
    with:
      model: m.onnx
      data: {seed: 2, iterations: "${vars.iterations}", ranges: {"*": [0, "${vars.hi}"], x: [-1e-1, 1e1]}}
      outputs: all
      warmup: 1
      runners:
        - {name: fp32, backend: onnxruntime, providers: [CPUExecutionProvider], precision: fp32}
        - {name: fp16, backend: emulated, precision: fp16, keep: [ln/Pow]}
        - {name: ort16, backend: onnxruntime, precision: fp16, isolate: true}
  loaded:
    uses: run-runners
    with: {model: m.onnx, loader: "feeds.py:feeds", outputs: [y], runners: [{name: a, backend: onnxruntime}]}
  mapped:
    uses: run-runners
    with: {model: m.onnx, loader: {script: feeds.py, function: feeds}, iterations: 2, runners: [{name: a, backend: onnxruntime}]}
  replayed:
    uses: run-runners
    with:
      inputs: "${steps.gen.inputs}"
      runners: [{name: saved, backend: saved, path: "${steps.gen.results}", runner: fp32}]
  diff:
    uses: compare
    gate: true
    with: {results: "${steps.gen.results}", reference: fp32, candidates: [fp16], atol: 1e-2, rtol: {"*": 1e-3, "ln/*": "${vars.atol}"},
           error_stat: quantile, quantile: 0.9, metrics: [cosine, snr]}
  loose: {uses: compare, with: {results: "${steps.gen.results}", reference: fp32, atol: "${vars.atol}", rtol: 1.0e-3}}
""",
    "bisect-and-engine": """
trtflow: 1
name: bisect-and-engine
vars: {precision: fp16, atol: 1e-1, data: {seed: 1, iterations: 2}}
steps:
  run:
    uses: run-runners
    with: {model: m.onnx, data: "${vars.data}", runners: [{name: fp32, backend: onnxruntime}]}
  hunt:
    uses: bisect-precision
    matrix: {precision: [fp16, bf16]}
    with:
      model: m.onnx
      reference: {results: "${steps.run.results}", runner: fp32}
      precision: "${matrix.precision}"
      mode: bisect
      direction: reverse
      max_trials: 20
      nodes: {include: ["ln/*"], exclude: [], ops: [Pow]}
      check: {atol: "${vars.atol}", rtol: {"ln/*": 1e-2}, error_stat: max}
  judged:
    uses: bisect-precision
    with: {model: m.onnx, data: {seed: 3}, check: {command: [sh, check.sh], files: [check.sh]}, replay: replay.json}
  cut:
    uses: reduce
    with:
      model: m.onnx
      data: {seed: 3, iterations: 2}
      reference: {name: fp32, backend: onnxruntime}
      candidate: {name: half, backend: emulated, precision: "${vars.precision}"}
      check: {atol: "${vars.atol}", rtol: 1e-2}
      max_trials: 30
  engine:
    uses: build-engine
    with: {model: "${steps.hunt@fp16.model}", precision: fp16, keep: "${steps.hunt@fp16.keep}", workspace_mb: 256,
           shapes: {x: [1, 8]}, tactic_sources: [CUBLAS], optimization_level: 3, timing_cache: false}
  mapped:
    uses: build-engine
    with: {model: m.onnx, layer_precisions: {ln/Pow: fp32, "ln/*": "${vars.precision}"}, typing: weak, constraints: prefer}
  trt:
    uses: run-runners
    with: {engine: "${steps.engine.engine}", inputs: "${steps.run.inputs}",
           runners: [{name: trt, backend: tensorrt, layer_timing: true}]}
  proof:
    uses: round-trip
    with: {model: m.onnx, precision: fp16, keep: "${steps.hunt@fp16.keep}", mixed_model: "${steps.hunt@fp16.model}",
           tools: [onnxconverter-common, tensorrt-rtx], data: "${vars.data}", check: {atol: "${vars.atol}"}}
  why:
    uses: diagnose
    with: {model: m.onnx, precision: "${vars.precision}", data: "${vars.data}", check: {metric: cosine, min: 0.999},
           max_trials: 30, tools: [onnxconverter-common]}
  int8:
    uses: quantize
    with: {model: m.onnx, data: "${vars.data}", per_channel: false, calibration: minmax,
           nodes_to_exclude: "${steps.hunt@fp16.quantizer_exclusions}"}
  requantized:
    uses: round-trip
    with: {model: m.onnx, precision: qdq, keep: [ln/Pow], quantizer: {per_channel: true, calibrate_method: entropy},
           data: {seed: 4}, check: {metric: max_abs_error, max: 1e-1}}
""",
    "graphs": """
trtflow: 1
name: graphs
vars: {radius: 3, nodes: "ln/.*"}
steps:
  plain: {uses: render-graph, with: {model: m.onnx, focus: "${vars.nodes}", formats: [html, dot]}}
  focused:
    uses: render-graph
    with: {model: m.onnx, mode: detailed, color_by: op, show_shapes: true, highlight: [ln/Pow, "${vars.nodes}"],
           focus: {nodes: "ln/.*", radius: "${vars.radius}"}, title: demo, svg_timeout_s: 1e1}
  engine: {uses: render-graph, with: {engine_graph: graph.json, show_timing: false, show_reformats: true}}
  cap: {uses: inspect-capability, with: {model: m.onnx, library: tensorrt-rtx}}
  rejected: {uses: render-graph, with: {model: m.onnx, capability: "${steps.cap.capability}"}}
""",
}


@pytest.fixture(scope="module")
def recipe_schema() -> dict:
    result = run_cli("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _schema_errors(schema: dict, recipe: Path) -> list[str]:
    document = yaml.safe_load(recipe.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


@pytest.mark.parametrize(
    "recipe", sorted((REPO / "pipelines").glob("*.yaml")), ids=lambda path: path.name
)
def test_the_schema_accepts_every_example_recipe(recipe_schema, recipe):
    assert _schema_errors(recipe_schema, recipe) == []


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    shutil.copy(DEMO, folder / "m.onnx")
    (folder / "feeds.py").write_text("def feeds():\n    return []\n")
    for name in ("check.sh", "replay.json", "graph.json"):
        (folder / name).write_text("{}\n")
    return folder


def test_the_corpus_covers_every_step_kind(recipe_schema):
    used = {
        step["uses"] for text in CORPUS.values() for step in yaml.safe_load(text)["steps"].values()
    }
    kinds = set(recipe_schema["$defs"]["StepSpec"]["properties"]["uses"]["enum"])
    assert "load" in kinds and kinds <= used, kinds - used


@pytest.mark.parametrize("name", CORPUS)
def test_the_schema_accepts_what_trtflow_validate_accepts(recipe_schema, corpus_folder, name):
    recipe = write_recipe(corpus_folder, CORPUS[name], f"{name}.yaml")
    result = run_cli("validate", recipe, cwd=corpus_folder)
    assert result.returncode == 0, result.stderr
    assert _schema_errors(recipe_schema, recipe) == []


@pytest.mark.parametrize(
    "with_,where",
    [
        ("{path: m.onnx, paht: m.onnx}", "steps.a.with"),
        ("{path: m.onnx, check: maybe}", "steps.a.with.check"),
        ("{path: m.onnx, shapes: {x: [1, two]}}", "steps.a.with.shapes"),
    ],
)
def test_the_schema_still_rejects_what_the_loader_rejects(
    recipe_schema, corpus_folder, with_, where
):
    recipe = write_recipe(
        corpus_folder,
        f"trtflow: 1\nname: bad\nsteps:\n  a: {{uses: load, with: {with_}}}\n",
        "bad.yaml",
    )
    assert run_cli("validate", recipe, cwd=corpus_folder).returncode == 2
    assert any(error.startswith(where + ":") for error in _schema_errors(recipe_schema, recipe))
