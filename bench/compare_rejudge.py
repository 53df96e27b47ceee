"""A tolerance edit on a real model: `compare` re-judging its memo against measuring again.

    python bench/compare_rejudge.py [--model ch_PP-OCRv4_rec_infer.onnx] [--shape x:1,3,48,320]

PP-OCRv4 rec (a real model from its wheel, `bench/real_models.py`): load -> surgeon-insert-tap
(tensors: all) -> run-runners (onnxruntime FP32, emulated FP16) -> compare, cold. Then the same
recipe with `--set steps.diff.with.atol=...`, twice:
- before: the compare memo removed from the store first, so compare measures every tensor again
  (what every tolerance edit cost before the memo: the statistics were not kept apart);
- after: with the memo the cold run left, so compare only judges.
It prints each run's wall time (whole process), the compare step's own seconds (its manifest),
and the ratios; the two reports must be the same bytes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from real_models import real_model  # noqa: E402

RECIPE = """trtflow: 1
name: rejudge
steps:
  model: {{uses: load, with: {{path: {file}, shapes: {shapes}}}}}
  taps: {{uses: surgeon-insert-tap, with: {{model: "${{steps.model.model}}", tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {{seed: 1, iterations: 1}}
      runners: [{{name: fp32, backend: onnxruntime}}, {{name: fp16, backend: emulated, precision: fp16}}]
  diff: {{uses: compare, with: {{results: "${{steps.run.results}}", reference: fp32}}}}
"""


def _run(folder: Path, *extra: str) -> tuple[float, float, bytes]:
    """(wall s, compare step s, its report) of one `trtflow run`."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "trtflow", "run", "recipe.yaml", "--workspace", "ws", *extra],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(done.stdout + done.stderr)
    diff = folder / "trtflow-out" / "rejudge" / "diff"
    seconds = json.loads((diff / "manifest.json").read_text())["seconds"]
    return wall, seconds, (diff / "report.json").read_bytes()


def _drop_memos(workspace: Path) -> int:
    """Remove the compare memo entries from the store (as if they had never been kept)."""
    dropped = 0
    for manifest in (workspace / "store").glob("??/*/manifest.json"):
        if json.loads(manifest.read_text()).get("uses") == "compare (memo)":
            shutil.rmtree(manifest.parent)
            dropped += 1
    return dropped


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="ch_PP-OCRv4_rec_infer.onnx")
    parser.add_argument("--shape", default="x:1,3,48,320")
    args = parser.parse_args()
    name, dims = args.shape.split(":")
    folder = Path(tempfile.mkdtemp(prefix="trtflow-rejudge-"))
    try:
        shutil.copyfile(real_model(args.model), folder / args.model)
        shapes = json.dumps({name: [int(d) for d in dims.split(",")]})
        (folder / "recipe.yaml").write_text(RECIPE.format(file=args.model, shapes=shapes))
        cold_wall, cold_compare, _ = _run(folder)
        print(f"cold run: {cold_wall:.2f} s wall, compare {cold_compare:.2f} s")
        before = after = None
        for atol in ("0.001", "0.01"):  # a new value each time: never an entry already cached
            edit = ("--set", f"steps.diff.with.atol={atol}")
            if before is None:
                dropped = _drop_memos(folder / "ws")
                assert dropped, "the cold run left no compare memo"
                before = _run(folder, *edit)
            else:
                after = _run(folder, *edit)
        assert before and after
        print(f"{'atol edit':28}{'wall s':>9}{'compare s':>11}")
        print(f"{'before (measures again)':28}{before[0]:9.2f}{before[1]:11.2f}")
        print(f"{'after (re-judges the memo)':28}{after[0]:9.2f}{after[1]:11.2f}")
        print(
            f"ratios after/before: wall {after[0] / before[0]:.2f}, "
            f"compare {after[1] / max(before[1], 1e-3):.3f}"
        )
        fresh = folder / "fresh"
        fresh.mkdir()
        shutil.copyfile(folder / args.model, fresh / args.model)
        shutil.copyfile(folder / "recipe.yaml", fresh / "recipe.yaml")
        same = _run(fresh, "--set", "steps.diff.with.atol=0.01")[2] == after[2]
        print(f"re-judged report == a fresh run's with that atol: {same}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
