"""Write a model with external data of a given size and torch-style shape chains to fold.

    python tests/sanitize/make_big_model.py OUT.onnx [--mb 2200] [--width 4096]

The weights (`--mb` MiB of float32 `width` x `width` matrices, in `OUT.onnx.data`) are made and
written one at a time, so a model past protobuf's 2 GB limit is made with one weight in memory.
The tests use it at ~100 MB (past 2 GB with TRTFLOW_BIG_TESTS=1); so does bench/sanitize_memory.py.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, as pytest sees it
from sanitize.models import shape_chain_model, weights, write_model  # noqa: E402 - runs as a script from anywhere


def make_big_model(path: Path, mb: float, width: int = 4096) -> int:
    """Write the model at `path` (+ `path.data`); returns how many weight matrices it has."""
    layers = max(1, math.ceil(mb * 2**20 / (width * width * 4)))
    write_model(
        path, shape_chain_model(width=width, layers=layers), weights(width, layers), external=True
    )
    return layers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--mb", type=float, default=2200)
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args()
    layers = make_big_model(args.path, args.mb, args.width)
    print(f"{args.path}: {layers} weights of {args.width}x{args.width} float32")


if __name__ == "__main__":
    main()
