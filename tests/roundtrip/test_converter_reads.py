"""onnxconverter-common on a real model whose fix it used to undo: Silero VAD (the If-less export of
the `silero-vad` 6.2.3 wheel) with a planted E[x²]−E[x]² loudness normalization, fed audio with a
DC offset of 100 (`models/NOTE.md`). The diagnosis keeps the normalization's 6 nodes and the If.
The converter, given the user's file and that block list, rounds `norm/mean` (read three times)
and the graph input (read twice by `Mul(input, input)`) through FP16, and its output does not load
in ONNX Runtime: the blocked If's branches read the outer `norm/normalized` and the model's
weights, which it converts to FP16 around branches it leaves FP32.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import onnx
from roundtrip_models import kept_if_model

MODEL = Path(__file__).resolve().parent / "models" / "silero_vad_normalized.onnx"
KEEP = [
    "norm/mean",
    "norm/square",
    "norm/mean_square",
    "norm/mean_squared",
    "norm/variance",
    "norm/centered",
    "node_cond__1",
]
DATA = (
    "{seed: 1, iterations: 4, ranges: {input: [99, 101], state: [0, 0], sr: [16000, 16000]}, "
    "shapes: {input: [1, 512], state: [2, 1, 128]}}"
)


def round_trip(trtflow, folder: Path, model: str, keep: list[str], data: str) -> dict:
    """The converter's round trip of `keep` through `trtflow run`: its report."""
    (folder / "recipe.yaml").write_text(
        textwrap.dedent(f"""\
        trtflow: 1
        name: trip
        steps:
          proof:
            uses: round-trip
            with:
              model: {model}
              precision: fp16
              keep: {json.dumps(keep)}
              tools: [onnxconverter-common]
              data: {data}
              check: {{atol: 0.01, rtol: 0.01}}
        """)
    )
    done = trtflow(
        "run", folder / "recipe.yaml", "--workspace", folder / "ws", "--out", folder / "out",
        cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((folder / "out" / "trip" / "proof" / "report.json").read_text())


def test_silero_vads_fix_survives_onnxconverter_common_and_loads_in_onnxruntime(trtflow, tmp_path):
    shutil.copy(MODEL, tmp_path / "silero.onnx")
    content = round_trip(trtflow, tmp_path, "silero.onnx", KEEP, DATA)
    [converter] = content["tools"]
    assert converter["loads_in_onnxruntime"] is True, converter["onnxruntime_error"]
    assert converter["passed"] is True, converter["why"]
    assert content["samples"] == "fresh" and content["count"] == 4
    assert not any("in FP16 on its way" in note for note in converter["notes"])
    notes = " ".join(content["export_notes"])
    assert "3 value(s) (input, norm/mean, norm/normalized) reach each read" in notes
    assert "31 float initializer(s) read inside kept nodes' subgraphs" in notes
    block_list = json.loads(
        (tmp_path / "out" / "trip" / "proof" / "exports" / "node_block_list.json").read_text()
    )
    assert block_list[: len(KEEP)] == KEEP
    assert {"input::fp64", "norm/mean::fp64", "norm/normalized::fp64"} <= set(block_list)


def test_a_kept_ifs_outer_weights_move_into_its_branches_without_shadowing(trtflow, tmp_path):
    """The kept If's branches read `big` (5e4, which the converter would clamp to 1e4), `w` (which
    the lowered `scale` reads too) and the lowered `scaled`: in the converter's copy `big` moves
    into both branches, `w` stays for `scale` and each branch holds its own `w::inside` (no name
    defined in a branch and around it), and the output loads and passes."""
    kept_if_model(tmp_path / "kept_if.onnx")
    content = round_trip(
        trtflow,
        tmp_path,
        "kept_if.onnx",
        ["branch"],
        "{seed: 1, iterations: 3, ranges: {x: [-1, 1]}}",
    )
    [converter] = content["tools"]
    assert converter["loads_in_onnxruntime"] is True, converter["onnxruntime_error"]
    assert converter["passed"] is True, converter["why"]
    given = onnx.load(
        str(tmp_path / "out" / "trip" / "proof" / "exports" / "onnxconverter-common_input.onnx")
    )
    assert {t.name for t in given.graph.initializer} == {"w", "floor"}
    [branch] = [node for node in given.graph.node if node.op_type == "If"]
    for attribute in branch.attribute:
        assert {t.name for t in attribute.g.initializer} == {"big", "w::inside"} - (
            {"big"} if attribute.name == "else_branch" else set()
        )
    assert "2 float initializer(s) read inside kept nodes' subgraphs (big, w)" in " ".join(
        content["export_notes"]
    )
