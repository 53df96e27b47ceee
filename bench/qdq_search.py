"""Trials of bisect-precision's Q/DQ search against a one-node-at-a-time search, on real quantized models.

    python bench/qdq_search.py [--iterations 16]

Models (tests/quant/corpus.py): PaddleOCR's real text-direction classifier quantized with ONNX
Runtime's quantize_static (QDQ, symmetric INT8, per-channel), with one activation calibrated on a
range 50x too small (`activation`, at Conv@25) or one weight quantized with a 16x too small scale
(`weight`, at Conv@10); an LSTM model whose Softmax output is quantized coarsely (`softmax`, at
the MatMul `mix` reading it); and PP-OCRv4's real transformer (two SVTR blocks) with its MatMuls
quantized, block 2's attention probabilities (`svtr/softmax`, at p2o.MatMul.16) or its second
LayerNorm's normalized values (`svtr/layernorm`, at p2o.Mul.191) quantized coarsely. Check: the
mean over samples of each sample's largest output error (`max_abs_error`, 0.12 for the classifier
and the transformer, 0.05 for the LSTM), 16 generated samples, verified on 16 fresh ones. Each method runs through `trtflow run` in a fresh workspace:
- `minimal`: ours (1-minimal over any nodes, candidates ordered by each pair's own error);
- `linear`: Polygraphy's `debug precision --mode linear` order — dequantize one more node at a time,
  in graph order, until the check passes (what users do by hand with Q/DQ pairs);
- `bisect`: Polygraphy's `--mode bisect` order over the same candidates.
Beside them, what ranking nodes by single-pair error alone picks: the top node, and how many nodes
lose 10% or more of their tensor on their own (the screening's suspects).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.quant import corpus  # noqa: E402
from trtflow.onnxmodel.files import name_nodes  # noqa: E402

RECIPE = """trtflow: 1
name: bench
steps:
  hunt:
    uses: bisect-precision
    with:
      model: {model}
      precision: qdq
      mode: {mode}
      data: {{seed: 1, iterations: {iterations}, ranges: {{'*': [-1, 1]}}}}
      check: {{metric: max_abs_error, max: {bound}}}
"""


def models(folder: Path) -> list[tuple[str, Path, str, float]]:
    """(name, file, faulty node, check bound) per planted fault."""
    classifier = corpus.quantize(corpus.prepared(corpus.CLS, corpus.CLS_SHAPE), corpus.CLS_SHAPE)
    name_nodes(classifier)
    found = []
    for fault, plant, node in (
        ("cls/activation", corpus.plant_activation_range, "Conv@25"),
        ("cls/weight", corpus.plant_weight_clip, "Conv@10"),
    ):
        model = onnx.ModelProto()
        model.CopyFrom(classifier)
        plant(model, node, 50 if "activation" in fault else 16)
        path = folder / f"{fault.replace('/', '_')}.onnx"
        onnx.save(model, path)
        found.append((fault, path, node, 0.12))
    lstm = corpus.quantize(corpus.lstm_model(), corpus.LSTM_SHAPE)
    name_nodes(lstm)
    faulty = corpus.plant_quantized_output(lstm, "softmax", 0.1)
    onnx.save(lstm, folder / "lstm_softmax.onnx")
    found.append(("lstm/softmax", folder / "lstm_softmax.onnx", faulty, 0.05))
    svtr = corpus.prepared(corpus.SVTR, corpus.SVTR_SHAPE)
    svtr = corpus.quantize(svtr, corpus.SVTR_SHAPE, op_types=["MatMul"])
    name_nodes(svtr)
    for fault, (producer, scale) in corpus.SVTR_PLANTS.items():
        model = onnx.ModelProto()
        model.CopyFrom(svtr)
        faulty = corpus.plant_quantized_output(model, producer, scale)
        path = folder / f"svtr_{fault}.onnx"
        onnx.save(model, path)
        found.append((f"svtr/{fault}", path, faulty, 0.12))
    return found


def run(folder: Path, model: Path, mode: str, bound: float, iterations: int) -> tuple[dict, float]:
    work = Path(tempfile.mkdtemp(dir=folder))
    recipe = work / "recipe.yaml"
    recipe.write_text(RECIPE.format(model=model, mode=mode, bound=bound, iterations=iterations))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trtflow", "run", str(recipe), "--workspace", str(work / "ws"),
         "--out", str(work / "out")],
        check=True, capture_output=True, cwd=work,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    return json.loads((work / "out" / "bench" / "hunt" / "report.json").read_text()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=16)
    arguments = parser.parse_args()
    header = f"{'model':<15} {'cands':>5} {'method':<8} {'trials':>6} {'kept':>4} {'has fault':>9} {'fresh':>5} {'wall s':>6}"
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        print(header)
        for name, path, faulty, bound in models(folder):
            for mode in ("minimal", "linear", "bisect"):
                report, seconds = run(folder, path, mode, bound, arguments.iterations)
                kept = [entry["name"] for entry in report["keep"]]
                fresh = report["final"] is not None and all(
                    v.get("passed", True) for v in report["final"].values() if isinstance(v, dict)
                )
                print(
                    f"{name:<15} {report['candidates']:>5} {mode:<8} {report['evaluations']:>6} "
                    f"{len(kept):>4} {str(faulty in kept):>9} {str(fresh):>5} {seconds:>6.1f}"
                )
            suspects = report["screening"]["suspects"]
            top = suspects[0]["node"] if suspects else None
            strong = [s["node"] for s in suspects if s["score"] >= 1]
            print(
                f"{name:<15} single-pair ranking: top node {top} "
                f"({'the fault' if top == faulty else 'not the fault'}); {len(strong)} node(s) lose "
                f">=10% alone{' (fault among them)' if faulty in strong else ''}"
            )


if __name__ == "__main__":
    main()
