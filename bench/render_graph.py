"""render-graph's HTML viewer at 3,000 / 30,000 / 100,000 nodes: render time, HTML size, and time to
first paint and to interactive in headless Chromium (goal: a 30,000-node model interactive in
under 2 s, a group opened in under 0.5 s).

    python bench/render_graph.py [--nodes 3000,30000,100000] [--mode detailed|simplified]

The models are transformer stacks named by module scope as PyTorch's exporter names them
(tests/graph/transformer.py), with a compare report whose first divergence sits 60% of the way
in, so the page opens where a user would look. The peer is the 3,000-node model in the same run:
each size prints its times as ratios to it, so the scaling (not the machine) is what is read.
Chromium is driven through tests/graph/chromium.py (`apt-get install -y chromium`).
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH, REPO = Path(__file__).resolve().parent, Path(__file__).resolve().parents[1]
# Run as a script, bench/ heads sys.path, and bench/bisect.py would shadow the stdlib `bisect`.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != BENCH]

import argparse  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import onnx  # noqa: E402

from tests.graph.chromium import Chromium  # noqa: E402
from tests.graph.transformer import blocks_for, divergence_report, transformer  # noqa: E402
from trtflow.graph.from_onnx import load_onnx  # noqa: E402
from trtflow.graph.overlay import read_compare_report, with_errors  # noqa: E402
from trtflow.graph.render import write_graph  # noqa: E402
from trtflow.graph.simplify import simplify  # noqa: E402
from trtflow.graph.style import View  # noqa: E402

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def render(nodes: int, mode: str, folder: Path) -> dict[str, float]:
    folder.mkdir(parents=True)
    model = transformer(blocks_for(nodes))
    onnx.save(model, str(folder / "model.onnx"))
    divergence_report(model, folder / "report.json")
    started = time.perf_counter()
    graph = load_onnx(folder / "model.onnx")
    loaded = time.perf_counter()
    if mode == "simplified":
        graph = simplify(graph)
    graph = with_errors(graph, read_compare_report(folder / "report.json"))
    write_graph(graph, View(mode=mode, color_by="error"), ["html"], folder)
    done = time.perf_counter()
    return {
        "nodes": len(graph.ops()),
        "read s": loaded - started,
        "render s": done - loaded,
        "html MB": (folder / "graph.html").stat().st_size / 1e6,
    }


def browse(browser: Chromium, page: Path) -> dict[str, float]:
    browser.open(page)
    browser.wait_for("document.body.dataset.ready === 'true'")
    paint = browser.evaluate(
        "(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null"
    )
    browser.wait_for("trtflowViewer.timings.graphPaintedMs > 0")
    timings = browser.evaluate("trtflowViewer.timings")
    shown = browser.evaluate(  # before any group is toggled: what the user sees at open
        "trtflowViewer.drawn().filter(b => b.kind === 'node' && b.inside).length"
    )
    block = browser.evaluate("trtflowViewer.toggle('layers.0')")  # one block: 62 nodes
    run = browser.evaluate(  # the first run of blocks under `encoder` (its first part, when split)
        "(() => { const g = " + "JSON.parse(document.getElementById('graph-data').textContent)"
        ".groups.find(g => g.label.startsWith('encoder · part 1/')); "
        "return g ? trtflowViewer.toggle(g.label) : null; })()"
    )
    errors = browser.console_errors()
    if errors:
        raise SystemExit(f"{page}: the page reported errors: {errors[:3]}")
    return {
        "first paint ms": paint,
        "interactive ms": timings["interactiveMs"],
        "graph painted ms": timings["graphPaintedMs"],
        "open block ms": block,
        "open run ms": run,
        "shown at open": shown,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="3000,30000,100000")
    parser.add_argument("--mode", default="detailed", choices=("detailed", "simplified"))
    args = parser.parse_args()
    executable = next((path for name in CHROMIUM if (path := shutil.which(name))), None)
    if executable is None:
        raise SystemExit("Chromium is not installed (`apt-get install -y chromium`)")
    sizes = [int(n) for n in args.nodes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        browser = Chromium(executable, timeout=300)
        try:
            for nodes in sizes:
                drawn = render(nodes, args.mode, Path(scratch) / str(nodes))
                drawn.update(browse(browser, Path(scratch) / str(nodes) / "graph.html"))
                rows.append(drawn)
        finally:
            browser.close()
    peer = rows[0]
    print(f"render-graph HTML viewer, {args.mode} mode, error overlay; Chromium {executable}")
    for row in rows:
        ratio = {
            key: row[key] / peer[key] if peer[key] else float("nan")
            for key in ("render s", "html MB", "interactive ms")
        }
        print(
            f"{row['nodes']:>7,} nodes: read {row['read s']:.2f} s, render {row['render s']:.2f} s "
            f"(x{ratio['render s']:.1f}), HTML {row['html MB']:.1f} MB (x{ratio['html MB']:.1f}); "
            f"Chromium: first paint {row['first paint ms'] or float('nan'):.0f} ms, graph painted "
            f"{row['graph painted ms']:.0f} ms, interactive "
            f"{row['interactive ms']:.0f} ms (x{ratio['interactive ms']:.1f} the "
            f"{peer['nodes']:,}-node peer), {row['shown at open']} nodes wholly on screen at open; open a block "
            f"{row['open block ms']:.0f} ms"
            + (f", a run of blocks {row['open run ms']:.0f} ms" if row["open run ms"] else "")
        )
    goal = [row for row in rows if row["nodes"] >= 30_000]
    if goal:
        row = goal[0]
        met = (
            row["interactive ms"] < 2000
            and max(row["open block ms"], row["open run ms"] or 0) < 500
        )
        print(
            f"goal at {row['nodes']:,} nodes: interactive < 2 s and a group opened < 0.5 s -> "
            f"{'met' if met else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
