"""The whole recipe on a ~1B-parameter GPT-style decoder with external data, against Polygraphy.

    python bench/large_model.py [--size large|mid|small] [--budget-mb 1024] [--limit-gb 16]
                                [--no-polygraphy] [--cache DIR]

The model (tests/scale/gpt_model.py, the builder the CI test uses at ~50M): `large` is 100 layers
of width 896 (1.02B parameters, 4.1 GB fp32 in `model.onnx.data`, ~10.8k nodes), `mid` 24 layers
of width 896 (~0.29B), `small` the CI test's ~50M. It is written once into `--cache` (default
~/.cache/trtflow-bench/large-model/<layers>x<width>-.../), never into the repository, with one weight in memory
at a time. Inputs are one sample of 1 x 64 token ids, so the weights dominate memory.

The recipe: load -> surgeon-insert-tap (every tensor) -> run-runners (onnxruntime, emulated fp16,
emulated bf16, `memory_budget_mb`) -> compare -> bisect-precision (fp16) -> reduce (fp16) on the
whole model (both refuse up front, naming the way out, where it would not fit in memory) -> the
way out: surgeon-extract of the last layers (`tail`), bisect-precision and reduce on it -> render-graph of the whole model with compare's overlay (the HTML viewer opens at the first
divergence). Each step is its own `trtflow run --only STEP` in a cold workspace (the steps before
it cached), so its peak memory is its own: the peak is the summed RSS of the whole process tree,
sampled every 50 ms, and each child also runs under `prlimit --as` and a watchdog that kills it
past `--limit-gb`, so neither tool can take the machine down. A step that refuses (exit 3 with its
reason) is printed with the reason; the recipe goes on with the steps that do not need it.

Polygraphy gets the same model and input: `polygraphy run model.onnx --onnxrt --onnx-outputs mark
all --val-range input_ids:[0,VOCAB) --save-outputs outputs.json`, under the same limits; its wall,
peak and outcome (or the reason it stopped) are printed.
The machine is shared: absolute seconds vary with its load; the peaks do not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from scale.gpt_model import LARGE, MID, SMALL, GptConfig, recipe_text, write_gpt  # noqa: E402

SIZES = {"large": LARGE, "mid": MID, "small": SMALL}
STEPS = ("model", "taps", "run", "diff", "hunt", "cut", "tail", "hunt_tail", "cut_tail", "graph")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cached_model(config: GptConfig, folder: Path) -> Path:
    """The model for `config` in `folder`, written there first when absent (rename last: a killed
    build leaves no half model)."""
    path = folder / "model.onnx"
    if not path.exists():
        scratch = folder / "building"
        shutil.rmtree(scratch, ignore_errors=True)
        started = time.perf_counter()
        write_gpt(scratch / "model.onnx", config)
        (scratch / "model.onnx.data").rename(folder / "model.onnx.data")
        (scratch / "model.onnx").rename(path)
        scratch.rmdir()
        print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
    return path


def _tree_rss(root: int) -> int:
    """Summed resident bytes of `root` and every descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
        todo += children.get(pid, [])
    return total


@dataclass
class Measured:
    seconds: float
    peak_mb: float
    exit_code: int
    output: str
    killed: bool  # by the watchdog, past the limit


def measured(argv: list[str], cwd: Path, limit_gb: float) -> Measured:
    """Run `argv` under `prlimit --as` and an RSS watchdog; its wall and whole-tree peak."""
    limit = int(limit_gb * 2**30)
    # address space is more than resident memory (thread stacks, allocator arenas): the hard
    # backstop sits above the watchdog, which is what normally stops a child
    address_space = limit + (8 << 30)
    started = time.perf_counter()
    child = subprocess.Popen(
        ["prlimit", f"--as={address_space}", "--", *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    peak, killed = 0, False

    def watch() -> None:
        nonlocal peak, killed
        while child.poll() is None:
            rss = _tree_rss(child.pid)
            peak = max(peak, rss)
            if rss > limit and not killed:
                killed = True
                os.killpg(child.pid, 9)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output = child.communicate()[0]
    watcher.join()
    return Measured(time.perf_counter() - started, peak / 2**20, child.returncode, output, killed)


def step_outcome(workspace: Path, step: str) -> dict:
    """The step's outcome in the newest run record: its own seconds (the command's wall adds
    start-up), and why it failed."""
    records = sorted((workspace / "runs").glob("*.json"))
    outcomes = json.loads(records[-1].read_text())["steps"] if records else []
    return next((o for o in outcomes if o["step_id"] == step), {})


def reason(output: str) -> str:
    """The line of a failed command's output that says why (trtflow's `error:`, Python's last
    `...Error:`), else its last line."""
    lines = [line for line in output.splitlines() if "error" in line.lower() or "Killed" in line]
    return (lines[0] if lines else output.strip().splitlines()[-1] if output.strip() else "")[:400]


def run_trtflow(
    model: Path, config: GptConfig, work: Path, budget_mb: int, limit_gb: float
) -> None:
    (work / "recipe.yaml").write_text(recipe_text(model, config, budget_mb))
    print("\n| step | wall (s) | step's own (s) | peak RSS, process tree (MiB) | outcome |")
    print("|---|---|---|---|---|")
    for step in STEPS:
        run = measured(
            [
                sys.executable,
                "-m",
                "trtflow",
                "run",
                "recipe.yaml",
                "--only",
                step,
                "--workspace",
                "ws",
            ],
            work,
            limit_gb,
        )
        recorded = step_outcome(work / "ws", step)
        outcome = (
            f"KILLED past {limit_gb} GB"
            if run.killed
            else "ok"
            if run.exit_code == 0
            else f"exit {run.exit_code}: {recorded.get('message') or reason(run.output)}"
        )
        own_text = f"{recorded['seconds']:.1f}" if "seconds" in recorded else "—"
        print(
            f"| {step} | {run.seconds:.1f} | {own_text} | {run.peak_mb:,.0f} | {outcome} |",
            flush=True,
        )
    summary = work / "trtflow-out" / "large-model"
    report = summary / "diff" / "report.json"
    if report.exists():
        found = json.loads(report.read_text())
        for mark in ("first_divergence", "first_nonfinite"):
            where = found.get(mark) or {}
            print(
                f"\ncompare's {mark}: `{where.get('node')}` ({where.get('op')}), runner {where.get('runner')}"
            )
    drawn = summary / "graph" / "graph" / "summary.json"
    if drawn.exists():
        facts = json.loads(drawn.read_text())
        print(
            f"render-graph: {facts['source_nodes']} nodes drawn as {facts['nodes']} ({facts['mode']})"
        )
    for name in ("diff", "hunt", "cut", "hunt_tail", "cut_tail"):
        text = (
            next((summary / name).glob("summary.md"), None) if (summary / name).exists() else None
        )
        if text is not None:
            print(f"\n{name}: " + " ".join(text.read_text().split("\n")[2:4])[:600])


def run_polygraphy(model: Path, config: GptConfig, work: Path, limit_gb: float) -> None:
    argv = [
        "polygraphy", "run", str(model), "--onnxrt", "--onnx-outputs", "mark", "all",
        "--val-range", f"input_ids:[0,{config.vocab - 1}]", "--save-outputs", "outputs.json",
    ]  # fmt: skip
    run = measured(argv, work, limit_gb)
    outputs = work / "outputs.json"
    size = f", outputs.json {outputs.stat().st_size / 2**20:,.0f} MiB" if outputs.exists() else ""
    outcome = (
        f"KILLED by the watchdog past {limit_gb} GB RSS"
        if run.killed
        else "ok"
        if run.exit_code == 0
        else f"exit {run.exit_code}: {reason(run.output)}"
    )
    print(f"\nPolygraphy `{' '.join(argv[1:])}`:")
    print(f"  wall {run.seconds:.1f} s, peak RSS {run.peak_mb:,.0f} MiB{size}: {outcome}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="large")
    parser.add_argument("--budget-mb", type=int, default=1024)
    parser.add_argument("--limit-gb", type=float, default=16.0)
    parser.add_argument("--no-polygraphy", action="store_true")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache/trtflow-bench/large-model"
    )
    args = parser.parse_args()
    config = SIZES[args.size]
    folder = (
        args.cache / f"{config.layers}x{config.width}-vocab{config.vocab}-tokens{config.tokens}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    model = cached_model(config, folder)
    print(
        f"{args.size}: {config.parameters / 1e9:.2f}B parameters, "
        f"{(model.parent / 'model.onnx.data').stat().st_size / 2**30:.2f} GiB external data, "
        f"{config.layers} layers of width {config.width}, input 1 x {config.tokens} tokens; "
        f"memory_budget_mb {args.budget_mb}, each command limited to {args.limit_gb} GB"
    )
    work = Path(tempfile.mkdtemp(prefix="trtflow-large-"))
    try:
        run_trtflow(model, config, work, args.budget_mb, args.limit_gb)
        if not args.no_polygraphy:
            run_polygraphy(model, config, work, args.limit_gb)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
