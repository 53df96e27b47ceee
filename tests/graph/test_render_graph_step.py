"""`render-graph` end to end through `trtflow run`, on the recipes users copy from pipelines/."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import requires_graphviz
from trt.trt_doubles import GENERATIONS, double_env

from trtflow.graph.style import FIRST_NONFINITE_BORDER, HIGHLIGHT_BORDER, PRECISION_COLORS

from .conftest import ENGINE_GRAPHS, REPO
from .outputs import op_nodes, svg_node_shapes, svg_rings, viewer_data

PIPELINES = REPO / "pipelines"


def run(trtflow, recipe: Path, tmp_path: Path, *extra: str, env: dict | None = None):
    return trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        *extra,
        cwd=tmp_path,
        env=env,
    )


def summary(out: Path, step: str) -> dict:
    return json.loads((out / step / "graph" / "summary.json").read_text())


def test_engine_graph_recipe_renders_every_fixture_in_both_modes(trtflow, tmp_path):
    done = run(trtflow, PIPELINES / "render-engine-graphs.yaml", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "render-engine-graphs"
    for step, stem in (
        ("resnet", "resnet"),
        ("resnet-qat", "resnet-qat"),
        ("mobilenet-qat", "mobilenet.qat"),
    ):
        layers = json.loads((ENGINE_GRAPHS / f"{stem}.onnx.engine.graph.json").read_text())[
            "Layers"
        ]
        detailed, simplified = summary(out, f"{step}-detailed"), summary(out, step)
        assert detailed["nodes"] == detailed["source_nodes"] == len(layers)
        assert simplified["source_nodes"] == len(layers) > simplified["nodes"]
        expected_files = {"graph.html", "graph.dot"} | (
            {"graph.svg"} if shutil.which("dot") else set()
        )
        assert set(detailed["files"]) == expected_files
        assert detailed["total_timing_ms"] == pytest.approx(simplified["total_timing_ms"])
    focused = summary(out, "mobilenet-qat-classifier")
    assert focused["nodes"] < 10 and any(
        note.startswith("focus on `classifier`") for note in focused["notes"]
    )

    again = run(trtflow, PIPELINES / "render-engine-graphs.yaml", tmp_path)
    assert again.returncode == 0 and "7 cached" in again.stdout  # nothing drawn twice


def test_fp16_overlay_recipe_draws_errors_and_kept_nodes(trtflow, tmp_path):
    done = run(trtflow, PIPELINES / "render-fp16-overlay.yaml", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "render-fp16-overlay"
    report = json.loads((out / "diff" / "report.json").read_text())
    kept = {node["name"] for node in json.loads((out / "hunt" / "keep.json").read_text())["nodes"]}
    assert report["first_nonfinite"] and kept

    errors = op_nodes(viewer_data(out / "errors" / "graph" / "graph.html"))
    assert errors[report["first_nonfinite"]["node"]]["ring"] == "#000000"
    assert {name for name, node in errors.items() if node["border"] == HIGHLIGHT_BORDER} == kept
    assert sum("max_abs" in " ".join(node["lines"]) for node in errors.values()) >= len(errors) - 1

    mixed = op_nodes(viewer_data(out / "mixed-precision" / "graph" / "graph.html"))
    for name in kept:
        assert mixed[name]["fill"] == PRECISION_COLORS["fp32"]
    assert sum(node["fill"] == PRECISION_COLORS["fp16"] for node in mixed.values()) > len(mixed) / 2

    simplified = summary(out, "errors-simplified")
    assert simplified["nodes"] < simplified["source_nodes"] and simplified["color_by"] == "error"
    folded = op_nodes(viewer_data(out / "errors-simplified" / "graph" / "graph.html"))
    assert {
        name for name, node in folded.items() if node["border"] == HIGHLIGHT_BORDER
    } == kept  # none folded away


def write_recipe(tmp_path: Path, render_with: str) -> Path:
    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", tmp_path / "demo.onnx")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"""trtflow: 1
name: graph
steps:
  model:
    uses: load
    with: {{path: demo.onnx}}
  graph:
    uses: render-graph
    with: {render_with}
""")
    return recipe


def test_simplified_view_draws_each_highlighted_node_alone(trtflow, tmp_path):
    recipe = write_recipe(
        tmp_path,
        '{model: "${steps.model.model}", highlight: [ln/ReduceSum, ln/Div_var], formats: [html]}',
    )
    done = run(trtflow, recipe, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    drawn = op_nodes(viewer_data(tmp_path / "out" / "graph" / "graph" / "graph" / "graph.html"))
    outlined = {
        name: node["parts"] for name, node in drawn.items() if node["border"] == HIGHLIGHT_BORDER
    }
    assert outlined == {
        "ln/ReduceSum": [],
        "ln/Div_var": [],
    }  # drawn, and nothing unkept folded into them
    assert "ln/Sqrt" in drawn["ln/Add_eps"]["parts"]  # the rest of the chain still folds
    shown = summary(tmp_path / "out" / "graph", "graph")
    assert shown["nodes"] < shown["source_nodes"]


RUNNERS_RECIPE = """trtflow: 1
name: runners
steps:
  model: {uses: load, with: {path: demo.onnx}}
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: {seed: 1, iterations: 2, ranges: {"*": [0, 10]}, shapes: {x: [1, 16, 64]}}
      runners:
        - {name: fp32, backend: onnxruntime}
        - {name: fp16, backend: emulated, precision: fp16}
        - {name: bf16, backend: emulated, precision: bf16}
  diff:
    uses: compare
    with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}
  worst:
    uses: render-graph
    with: {model: "${steps.model.model}", overlay: "${steps.diff.report}", formats: [html, dot]}
  bf16:
    uses: render-graph
    with: {model: "${steps.model.model}", overlay: "${steps.diff.report}", overlay_runner: bf16, formats: [html, dot]}
"""


def test_error_overlay_says_whose_errors_it_draws_and_draws_the_runner_asked_for(trtflow, tmp_path):
    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", tmp_path / "demo.onnx")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RUNNERS_RECIPE)
    done = run(trtflow, recipe, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "runners"
    for step, shown in (
        ("worst", "max_abs, worst of runners fp16, bf16 against fp32"),
        ("bf16", "max_abs of runner bf16 against fp32"),
    ):
        assert summary(out, step)["error_overlay"] == shown
        title = f"model.onnx — simplified, colored by error ({shown})"
        assert viewer_data(out / step / "graph" / "graph.html")["title"] == title
        assert f'label="{title}' in (out / step / "graph" / "graph.dot").read_text()
    worst = op_nodes(viewer_data(out / "worst" / "graph" / "graph.html"))["ln/ReduceSum"]
    assert (
        "max_abs Inf" in worst["lines"] and worst["ring"] == FIRST_NONFINITE_BORDER
    )  # fp16 overflows
    assert ["error: runner", "fp16"] in worst["summary"]
    bf16 = op_nodes(viewer_data(out / "bf16" / "graph" / "graph.html"))
    assert (
        bf16["ln/ReduceSum"]["ring"] is None and "max_abs Inf" not in bf16["ln/ReduceSum"]["lines"]
    )
    assert {
        tuple(row) for node in bf16.values() for row in node["summary"] if row[0] == "error: runner"
    } == {("error: runner", "bf16")}

    typo = run(trtflow, recipe, tmp_path, "--set", "steps.bf16.with.overlay_runner=bf61")
    assert typo.returncode == 2
    assert (
        "steps.bf16.with.overlay_runner: the compare report report.json checked no runner `bf61` (did you mean "
        "`bf16`?); it checked fp16, bf16"
    ) in typo.stdout + typo.stderr


def test_two_sources_are_a_recipe_error(trtflow, tmp_path):
    recipe = write_recipe(tmp_path, '{model: "${steps.model.model}", engine_graph: demo.onnx}')
    done = run(trtflow, recipe, tmp_path)
    assert done.returncode == 2 and "exactly one of `model`" in done.stdout + done.stderr


def test_focus_matching_nothing_names_the_param(trtflow, tmp_path):
    recipe = write_recipe(tmp_path, '{model: "${steps.model.model}", focus: "no_such_node"}')
    done = run(trtflow, recipe, tmp_path)
    assert done.returncode == 2
    assert (
        "focus" in done.stdout + done.stderr and "no node name matches" in done.stdout + done.stderr
    )


@requires_graphviz
def test_svg_rings_a_kept_first_nonfinite_in_black_around_its_highlight_border(trtflow, tmp_path):
    (tmp_path / "report.json").write_text(
        json.dumps(
            {
                "tensors": [],
                "first_nonfinite": {
                    "tensor": "ln.sum_sq",
                    "node": "ln/ReduceSum",
                    "op": "ReduceSum",
                    "runner": "fp16",
                },
            }
        )
    )
    recipe = write_recipe(
        tmp_path,
        '{model: "${steps.model.model}", overlay: report.json, highlight: [ln/ReduceSum], '
        "mode: detailed, formats: [svg]}",
    )
    done = run(trtflow, recipe, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    drawing = tmp_path / "out" / "graph" / "graph" / "graph" / "graph.svg"
    assert [shape.get("stroke") for shape in svg_node_shapes(drawing)["ln/ReduceSum"]] == [
        HIGHLIGHT_BORDER
    ]
    assert svg_rings(drawing) == {
        "ln/ReduceSum": FIRST_NONFINITE_BORDER
    }  # the legend's black outer ring


def without_graphviz(tmp_path: Path) -> dict:
    """An environment whose PATH holds only python: no `dot`, wherever the tests run."""
    python_only = tmp_path / "bin"
    python_only.mkdir()
    (python_only / "python").symlink_to(sys.executable)
    return {"PATH": str(python_only)}


def test_without_graphviz_svg_gives_way_to_dot_with_install_advice(trtflow, tmp_path):
    recipe = write_recipe(tmp_path, '{model: "${steps.model.model}", formats: [svg, html]}')
    recipe.write_text(
        recipe.read_text()
        + """  default:
    uses: render-graph
    with: {model: "${steps.model.model}"}
"""
    )
    done = run(trtflow, recipe, tmp_path, env=without_graphviz(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("graph", "default"):
        drawn = summary(tmp_path / "out" / "graph", step)
        assert drawn["files"] == ["graph.dot", "graph.html"]
        assert any(
            note.startswith(
                "no SVG: Graphviz's `dot` is not installed; install Graphviz (`apt-get install "
                "graphviz`"
            )
            for note in drawn["notes"]
        )
    assert done.stdout.count("dot -Tsvg graph.dot -o graph.svg") == 1  # once per run, not per step


def test_svg_alone_without_graphviz_fails_with_install_advice(trtflow, tmp_path):
    recipe = write_recipe(tmp_path, '{model: "${steps.model.model}", formats: [svg]}')
    done = run(trtflow, recipe, tmp_path, env=without_graphviz(tmp_path))
    assert done.returncode == 3
    assert (
        "apt-get install graphviz" in done.stdout + done.stderr
        and "Traceback" not in done.stdout + done.stderr
    )


def test_engine_file_without_tensorrt_fails_with_advice(trtflow, tmp_path):
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed here")
    (tmp_path / "model.engine").write_bytes(b"not really an engine")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("""trtflow: 1
name: engine
steps:
  model:
    uses: load
    with: {path: model.engine}
  graph:
    uses: render-graph
    with: {engine: "${steps.model.engine}"}
""")
    done = run(trtflow, recipe, tmp_path)
    assert done.returncode == 3
    assert (
        "trtflow[tensorrt]" in done.stdout + done.stderr
        and "engine_graph" in done.stdout + done.stderr
    )


ENGINE_RECIPE = """trtflow: 1
name: engine
steps:
  model:
    uses: load
    with: {path: demo.onnx, shapes: {x: [1, 16, 64]}}
  engine:
    uses: build-engine
    with: {model: "${steps.model.model}", precision: fp16}
  graph:
    uses: render-graph
    with: {engine_graph: "${steps.engine.engine_graph}", profile: "${steps.engine.profile}", mode: detailed}
  inspected:
    uses: render-graph
    with: {engine: "${steps.engine.engine}", mode: detailed, highlight: [ln/ReduceSum]}
"""


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_engines_built_by_each_tensorrt_generation_are_drawn(trtflow, tmp_path, generation):
    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", tmp_path / "demo.onnx")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(ENGINE_RECIPE)
    done = run(trtflow, recipe, tmp_path, env=double_env(GENERATIONS[generation]))
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "engine"
    document = json.loads((out / "engine" / "engine_graph.json").read_text())
    layers = {layer["Name"] for layer in document["Layers"]}
    profile = [r for r in json.loads((out / "engine" / "profile.json").read_text()) if "name" in r]

    drawn = op_nodes(viewer_data(out / "graph" / "graph" / "graph.html"))
    assert set(drawn) == layers
    assert summary(out, "graph")["total_timing_ms"] == pytest.approx(
        sum(r["averageMs"] for r in profile), rel=1e-3
    )
    inspected = op_nodes(viewer_data(out / "inspected" / "graph" / "graph.html"))
    assert (
        set(inspected) == layers
    )  # the engine file, read through the inspector, is the same graph
    assert [name for name, node in inspected.items() if node["border"] == HIGHLIGHT_BORDER] == [
        "ln/ReduceSum"
    ]


def test_an_overlay_is_read_by_its_report_kind(trtflow, tmp_path):
    """A trtflow report says what it is: a bisect-precision report, or a compare report of another
    schema version, given as `overlay:` is refused at the param with what to do; JSON of other tools
    (no `kind`) is still read tolerantly."""
    for document, says in (
        (
            {"kind": "bisect-precision", "schema_version": 1},
            "a bisect-precision report; expected a compare report",
        ),
        (
            {"kind": "compare", "schema_version": 1},
            "schema version 1; this trtflow reads version 4",
        ),
    ):
        (tmp_path / "report.json").write_text(json.dumps(document))
        recipe = write_recipe(
            tmp_path, '{model: "${steps.model.model}", overlay: report.json, formats: [dot]}'
        )
        done = run(trtflow, recipe, tmp_path)
        output = done.stdout + done.stderr
        assert done.returncode == 2 and "steps.graph.with.overlay" in output and says in output, (
            output
        )
