"""Peak memory of `surgeon-sanitize` against `polygraphy surgeon sanitize --fold-constants`.

    python bench/sanitize_memory.py [--mb 2200] [--width 4096] [--torch]

Writes a model with `--mb` MiB of external weights and torch-style shape chains
(tests/sanitize/make_big_model.py; the default is past protobuf's 2 GB limit), then folds it with
- trtflow: one `surgeon-sanitize` step (cold workspace);
- Polygraphy: `polygraphy surgeon sanitize model.onnx --fold-constants -o folded.onnx`
  (`--save-external-data` past 2 GB; Polygraphy 0.53 still fails to write such a model after
  folding it, and its peak until then is printed).
Each is a child process; wall time and peak RSS (from wait4) are printed with the ratios, and both
outputs are checked to give the input model's outputs in ONNX Runtime.
With `--torch` (needs torch installed; it is no trtflow dependency) the same is done first on a real
`torch.onnx.export` of a module that reshapes by its input's shape, to show its chains fold too.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
from run_compare import measured, measured_run  # noqa: E402 - the other benches' child-process measurement
from sanitize.make_big_model import make_big_model  # noqa: E402
from sanitize.models import SHAPE_OPS, run_model  # noqa: E402

RECIPE = """trtflow: 1
name: bench
steps:
  clean: {uses: surgeon-sanitize, with: {model: model.onnx}}
"""


def export_torch_model(path: Path) -> dict[str, np.ndarray]:
    """A real torch export whose forward reshapes by `x.shape`; returns a feed for it."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, tokens, _ = x.shape
            heads = self.proj(x).reshape(batch, tokens, 4, -1).transpose(1, 2)
            return heads.reshape(batch * 4, tokens, -1).softmax(-1).reshape(x.shape)

    example = torch.randn(2, 8, 64)
    # the exporter's own folding would leave nothing to fold: keep the Shape chains it traced
    torch.onnx.export(
        Heads(), (example,), str(path), input_names=["x"], dynamo=False, do_constant_folding=False
    )
    return {"x": example.numpy()}


def ops_of(path: Path) -> list[str]:
    import onnx

    return [node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node]


def compare(work: Path, feed: dict[str, np.ndarray], big: bool) -> None:
    """Sanitize work/model.onnx both ways; print time, memory, nodes, and check the outputs.

    Polygraphy 0.53 folds a model past 2 GB, then fails to write it (protobuf cannot size it): its
    peak until then is still the memory it needs, and is printed with the failure."""
    (work / "recipe.yaml").write_text(RECIPE)
    trtflow = [
        sys.executable,
        "-m",
        "trtflow",
        "run",
        "recipe.yaml",
        "--workspace",
        "ws",
        "--out",
        "out",
    ]
    polygraphy = [
        shutil.which("polygraphy", path=str(Path(sys.executable).parent)),
        "surgeon",
        "sanitize",
        "model.onnx",
        "--fold-constants",
        "-o",
        "polygraphy/folded.onnx",
    ]
    if big:
        polygraphy.append("--save-external-data")
    (work / "polygraphy").mkdir(exist_ok=True)
    runs = {
        "polygraphy sanitize": (
            work / "polygraphy" / "folded.onnx",
            *measured_run(polygraphy, work),
        ),
        "trtflow surgeon-sanitize": (
            work / "out" / "bench" / "clean" / "model.onnx",
            *measured(trtflow, work),
        ),
    }
    _, poly_seconds, poly_mb, _ = runs["polygraphy sanitize"]
    reference = run_model(work / "model.onnx", feed)
    print(
        f"{'':26}{'wall s':>9}{'peak MiB':>10}{'nodes':>8}{'shape ops':>11}{'time ratio':>12}{'memory ratio':>14}"
    )
    for label, (path, seconds, mb, *failure) in runs.items():
        if failure and failure[0] is not None:
            print(
                f"{label:26}{seconds:9.2f}{mb:10.0f}  failed: {failure[0].strip().splitlines()[-1]}"
            )
            continue
        ops = ops_of(path)
        for expected, actual in zip(reference, run_model(path, feed), strict=True):
            np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)
        print(
            f"{label:26}{seconds:9.2f}{mb:10.0f}{len(ops):8}{sum(op in SHAPE_OPS for op in ops):11}"
            f"{seconds / poly_seconds:12.2f}{mb / poly_mb:14.2f}"
        )
    print(
        f"input: {len(ops_of(work / 'model.onnx'))} nodes; the outputs written give the input model's outputs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=2200, help="MiB of external weights")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--torch", action="store_true", help="also fold a real torch export")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="trtflow-bench-"))
    try:
        if args.torch:
            (work / "torch").mkdir()
            feed = export_torch_model(work / "torch" / "model.onnx")
            print("torch.onnx.export model:")
            compare(work / "torch", feed, big=False)
        (work / "big").mkdir()
        layers = make_big_model(work / "big" / "model.onnx", args.mb, args.width)
        print(
            f"model: {layers} weights of {args.width}x{args.width} float32 "
            f"({(work / 'big' / 'model.onnx.data').stat().st_size / 2**20:.0f} MiB external data)"
        )
        feed = {
            "x": np.random.default_rng(1).standard_normal((2, 4, args.width)).astype(np.float32)
        }
        compare(work / "big", feed, big=(work / "big" / "model.onnx.data").stat().st_size >= 2**31)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
