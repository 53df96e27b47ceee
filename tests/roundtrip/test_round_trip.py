"""round-trip through `trtflow run`: a keep set applied by the real tools, each output judged again.

Also the judge's own footing: the emulated runner runs a converted FP16 model as stored (the
overflow ONNX Runtime's CPU provider hides shows), and a tool missing here is reported as such.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxconverter_common import float16
from roundtrip_models import (
    converter_traps_model,
    mask_model,
    normalization_model,
    overflow_model,
)

from trtflow.precision.stored import emulate_stored, stored_precision
from trtflow.sessions.roundtrip.tools import modelopt_python, onnxconverter_common

CHECK = "{atol: 0.01, rtol: 0.01}"


def recipe(folder: Path, model: str, keep: str, tools: str, ranges: str) -> Path:
    path = folder / "recipe.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        trtflow: 1
        name: trip
        vars:
          data: {{seed: 1, iterations: 3, ranges: {ranges}}}
        steps:
          model: {{uses: load, with: {{path: {model}}}}}
          hunt:
            uses: bisect-precision
            with: {{model: "${{steps.model.model}}", data: "${{vars.data}}", precision: fp16, check: {CHECK}}}
          proof:
            uses: round-trip
            with:
              model: {model}
              precision: fp16
              keep: {keep}
              mixed_model: ${{steps.hunt.model}}
              tools: {tools}
              data: ${{vars.data}}
              check: {CHECK}
        """)
    )
    return path


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "trip" / "proof" / "report.json").read_text())


def by_tool(content: dict) -> dict[str, dict]:
    return {entry["tool"]: entry for entry in content["tools"]}


def run(trtflow, tmp_path: Path, path: Path, env: dict | None = None):
    return trtflow(
        "run",
        path,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
        env=env,
    )


def test_emulated_runner_runs_a_converted_model_as_stored(tmp_path):
    """onnxconverter-common's FP16 model: ONNX Runtime's CPU provider hides the overflow, the
    stored emulation shows it (inf), and an FP32 model is no converted one."""
    source = onnx.load(str(overflow_model(tmp_path / "m.onnx")))
    converted = float16.convert_float_to_float16(source, keep_io_types=True)
    feed = {"x": np.random.default_rng(0).uniform(0, 10, [2, 64]).astype(np.float32)}
    hidden = ort.InferenceSession(converted.SerializeToString()).run(None, feed)[0]
    shown = ort.InferenceSession(emulate_stored(converted).SerializeToString()).run(None, feed)[0]
    assert np.isfinite(hidden).all()
    assert np.isinf(shown).all()
    assert stored_precision(converted) == "fp16" and stored_precision(source) is None


def test_converter_round_trip_passes_with_the_keep_set_and_fails_without(trtflow, tmp_path):
    overflow_model(tmp_path / "m.onnx")
    done = run(
        trtflow,
        tmp_path,
        recipe(
            tmp_path,
            "m.onnx",
            "${steps.hunt.keep}",
            "[onnxconverter-common, tensorrt-rtx]",
            '{"*": [0, 10]}',
        ),
    )
    assert done.returncode == 0, done.stderr
    tools = by_tool(report(tmp_path))
    assert tools["onnxconverter-common"]["passed"] is True
    assert tools["tensorrt-rtx"]["passed"] is True
    assert report(tmp_path)["samples"] == "fresh" and report(tmp_path)["seed"] == 1 + 7919
    block_list = json.loads(
        (tmp_path / "out" / "trip" / "proof" / "exports" / "node_block_list.json").read_text()
    )
    assert "sum" in block_list
    done = run(
        trtflow,
        tmp_path,
        recipe(tmp_path, "m.onnx", "[]", "[onnxconverter-common]", '{"*": [0, 10]}'),
    )
    assert done.returncode == 0, done.stderr
    failed = by_tool(report(tmp_path))["onnxconverter-common"]
    assert failed["applied"] is True and failed["passed"] is False
    assert "FAILS" in failed["why"]


def test_a_kept_mask_constant_reaches_the_converter_as_an_initializer(trtflow, tmp_path):
    """The converter wraps a blocked Constant in FP16 Casts (NaN); the exported copy holds it as an
    initializer the converter keeps in FP32, and the round trip passes."""
    mask_model(tmp_path / "mask.onnx")
    ranges = '{"x": [-1, 1], "mask": [0, 1]}'
    done = run(
        trtflow,
        tmp_path,
        recipe(tmp_path, "mask.onnx", "${steps.hunt.keep}", "[onnxconverter-common]", ranges),
    )
    assert done.returncode == 0, done.stderr
    content = report(tmp_path)
    assert by_tool(content)["onnxconverter-common"]["passed"] is True
    assert any("mask_min" in note and "initializer" in note for note in content["export_notes"])
    exported = tmp_path / "out" / "trip" / "proof" / "exports"
    given = onnx.load(str(exported / "onnxconverter-common_input.onnx"))
    assert "minimum" in {t.name for t in given.graph.initializer}
    assert "mask_min" not in json.loads((exported / "node_block_list.json").read_text())


def test_a_kept_value_read_twice_reaches_the_converters_kept_nodes_in_fp32(trtflow, tmp_path):
    """onnxconverter-common would round `mean` (three kept reads) and `x` (read twice by the kept
    `square`) through FP16 despite the block list, and the cancellation the keep set fixed would
    come back. The copy it is given reads them through FP64 copies, so it passes; the export notes
    say how, and no kept value is left in FP16 (the verdict's notes would name it)."""
    normalization_model(tmp_path / "norm.onnx")
    path = recipe(
        tmp_path,
        "norm.onnx",
        "${steps.hunt.keep}",
        "[onnxconverter-common, tensorrt-rtx]",
        '{"x": [99, 101]}',
    )
    done = run(trtflow, tmp_path, path)
    assert done.returncode == 0, done.stderr
    content = report(tmp_path)
    tools = by_tool(content)
    converter = tools["onnxconverter-common"]
    assert converter["passed"] is True, converter["why"]
    assert converter["loads_in_onnxruntime"] is True, converter["onnxruntime_error"]
    assert not any("in FP16 on its way" in note for note in converter["notes"])
    assert "2 value(s) (mean, x) reach each read" in " ".join(content["export_notes"])
    exported = tmp_path / "out" / "trip" / "proof" / "exports"
    block_list = json.loads((exported / "node_block_list.json").read_text())
    assert {"x::fp64", "mean::fp64", "x::square.1", "mean::center.1"} <= set(block_list)
    assert tools["tensorrt-rtx"]["passed"] is True
    markdown = (tmp_path / "out" / "trip" / "proof" / "summary.md").read_text()
    assert "FP64 copy" in markdown


def test_a_kept_value_the_converter_still_rounds_is_named(tmp_path):
    """Handed the user's file as it is (no prepared copy), onnxconverter-common rounds `mean` (three
    kept reads) and `x` (read twice by the kept `square`) through FP16: the tool's notes name both,
    so a value some future converter still rounds is said, not hidden."""
    source = normalization_model(tmp_path / "norm.onnx")
    keep = ["mean", "square", "mean_square", "mean_squared", "variance", "eps", "std", "center"]
    applied = onnxconverter_common(source, keep, tmp_path / "converted.onnx")
    notes = " ".join(applied.notes)
    assert "`mean` (output of kept `mean`) in FP16" in notes and "graph input `x`" in notes


def test_the_converters_output_of_a_kept_node_loads_in_onnxruntime(trtflow, tmp_path):
    """A Cast to FLOAT, a weight kept and lowered nodes share, a graph output read inside: each makes
    onnxconverter-common write a file ONNX Runtime refuses. The copy the converter is given (and the
    block list) avoid all three, and the report says how."""
    converter_traps_model(tmp_path / "traps.onnx")
    path = recipe(
        tmp_path, "traps.onnx", "[kept]", "[onnxconverter-common]", '{"x": [-1, 1], "ids": [0, 3]}'
    )
    done = run(trtflow, tmp_path, path)
    assert done.returncode == 0, done.stderr
    content = report(tmp_path)
    converter = by_tool(content)["onnxconverter-common"]
    assert converter["loads_in_onnxruntime"] is True, converter["onnxruntime_error"]
    assert converter["passed"] is True
    notes = " ".join(content["export_notes"])
    assert "(scale)" in notes and "(ids_float)" in notes and "(h)" in notes
    exported = tmp_path / "out" / "trip" / "proof" / "exports"
    assert json.loads((exported / "node_block_list.json").read_text()) == ["kept", "ids_float"]


def test_a_tool_missing_here_is_reported_with_how_to_install_it(trtflow, tmp_path):
    overflow_model(tmp_path / "m.onnx")
    env = {"TRTFLOW_MODELOPT_PYTHON": str(tmp_path / "no-python")}
    done = run(
        trtflow,
        tmp_path,
        recipe(tmp_path, "m.onnx", "${steps.hunt.keep}", "[autocast]", '{"*": [0, 10]}'),
        env,
    )
    assert done.returncode == 0, done.stderr
    entry = by_tool(report(tmp_path))["autocast"]
    assert entry["applied"] is False and entry["passed"] is None
    assert "not installed here" in entry["why"] and "nvidia-modelopt" in entry["why"]


@pytest.mark.skipif(
    modelopt_python() is None, reason="ModelOpt is not installed (/opt/modelopt-venv)"
)
def test_autocast_round_trip(trtflow, tmp_path):
    mask_model(tmp_path / "mask.onnx")
    ranges = '{"x": [-1, 1], "mask": [0, 1]}'
    done = run(
        trtflow, tmp_path, recipe(tmp_path, "mask.onnx", "${steps.hunt.keep}", "[autocast]", ranges)
    )
    assert done.returncode == 0, done.stderr
    entry = by_tool(report(tmp_path))["autocast"]
    assert entry["applied"] is True and entry["passed"] is True
    exported = tmp_path / "out" / "trip" / "proof" / "exports"
    arguments = (exported / "autocast_args.txt").read_text()
    assert "'^mask_min$'" in arguments
    assert "--calibration_data autocast_calibration" in arguments  # the recipe's 3 samples
    assert len(list((exported / "autocast_calibration").glob("*.npz"))) == 3


def test_the_step_key_of_a_machine_without_an_optional_tool_is_computed(monkeypatch):
    """A tool missing here is a verdict in the report, not a step that cannot start: the
    fingerprint names it "none" (found on the H200, which has no TensorRT-RTX)."""
    from trtflow import packages
    from trtflow.errors import BackendUnavailable
    from trtflow.steps import round_trip

    def missing(module: str, *distributions: str) -> str:
        if module.startswith("tensorrt"):
            raise BackendUnavailable(f"`{module}` is not installed")
        return "1.0"

    monkeypatch.setattr(packages, "installed_version", missing)
    params = round_trip.Params(model="m.onnx", precision="fp16", keep=[], check={"atol": 0.01})
    assert round_trip.RoundTripStep().fingerprint(params)["tensorrt-rtx"] == "none"


@pytest.mark.skipif(
    modelopt_python() is None, reason="ModelOpt is not installed (/opt/modelopt-venv)"
)
def test_autocast_keeps_the_inputs_the_kept_nodes_read_in_fp32(trtflow, tmp_path):
    """Values near 100 feed a kept E[x²]−E[x]²: AutoCast by default makes the graph input FP16 and
    the kept nodes read it rounded (the cancellation is back); the exported arguments keep the
    model's inputs and outputs FP32, as the verified mixed model does, and the round trip passes."""
    normalization_model(tmp_path / "norm.onnx")
    path = recipe(tmp_path, "norm.onnx", "${steps.hunt.keep}", "[autocast]", '{"x": [99, 101]}')
    done = run(trtflow, tmp_path, path)
    assert done.returncode == 0, done.stderr
    entry = by_tool(report(tmp_path))["autocast"]
    assert entry["applied"] is True and entry["passed"] is True, entry["why"]
    exported = tmp_path / "out" / "trip" / "proof" / "exports"
    assert "--keep_io_types" in (exported / "autocast_args.txt").read_text()
