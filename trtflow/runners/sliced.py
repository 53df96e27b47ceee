"""Memory slicing: one runner entry asked for its tensors a slice at a time, beside `IsolatedRunner`.

With `outputs: all` (every computed tensor) or a long list, what ONNX Runtime returns at once is
every requested tensor, and it keeps all of a session's graph outputs alive during a run even when
fewer are fetched. So the requested tensors are split into slices whose estimated size fits a
memory budget (`plan_slices`), and each slice is run by a runner of its own (`SlicedRunner.slice`),
one after another: peak memory follows the budget, not the model; the price is one more pass of
the model per slice. Each slice's runner is isolated in a child process when the entry says so
(`isolate: true`), so slicing and isolation compose.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.lazy import lazy_import
from trtflow.runners.base import Runner, RunnerConfig, failing_as

if TYPE_CHECKING:
    import numpy as np
    import onnx
else:
    np = lazy_import("numpy")

UNKNOWN_SIZE_FALLBACK = 64 << 20  # bytes assumed for a tensor nothing tells the size of


@dataclass(frozen=True)
class SlicedRunner:
    """`config`'s runner on `target`, once per slice of the requested tensors (`None`: the model's
    own outputs, in one slice)."""

    config: RunnerConfig
    target: Path | None
    slices: list[list[str] | None]

    @property
    def name(self) -> str:
        return self.config.name

    def __len__(self) -> int:
        return len(self.slices)

    @contextmanager
    def slice(self, index: int) -> Iterator[Runner]:
        """The runner of slice `index`, active inside and deactivated on the way out whatever
        happened; whatever it raises is this runner's failure (`failing_as`)."""
        runner = self._runner(self.slices[index])
        try:
            with failing_as(self.name):
                runner.activate()
            yield runner
        finally:
            with failing_as(self.name):
                runner.deactivate()

    def _runner(self, outputs: list[str] | None) -> Runner:
        if self.config.isolate:  # imported only here: it brings multiprocessing (2 ms)
            from trtflow.runners.isolated import IsolatedRunner

            return IsolatedRunner(self.config, self.target, outputs)
        return self.config.create(self.target, outputs)


def plan_slices(
    model: onnx.ModelProto, tensors: dict[str, Any], names: list[str], budget_bytes: int
) -> list[list[str]]:
    """Consecutive slices of `names` whose estimated total size fits the budget (at least one
    tensor each); `tensors` is the model's catalog with the feed's input shapes."""
    sizes = estimated_bytes(model, tensors)
    slices: list[list[str]] = []
    current: list[str] = []
    used = 0
    for name in names:
        size = sizes.get(name, UNKNOWN_SIZE_FALLBACK)
        if current and used + size > budget_bytes:
            slices.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    return slices + ([current] if current else [])


def estimated_bytes(model: onnx.ModelProto, tensors: dict[str, Any]) -> dict[str, int]:
    """Bytes of every top-level tensor, for slicing. Shape inference leaves dims unknown where a shape
    is computed at run time (a Reshape to `[b, s, heads, -1]` built from Shape/Gather/Concat, a Slice
    with computed ends); such a tensor is taken to be as large as its node's largest input (a Concat:
    their sum), which holds for the reshapes, transposes, slices and elementwise ops most of them are.
    A fixed guess per unknown tensor instead split an exported BERT-base into 41 passes, not 3."""

    def known_bytes(info: Any) -> tuple[int, bool]:  # (bytes of the known dims, all dims known)
        if info is None or info.shape is None:
            return 0, False
        itemsize = np.dtype(info.dtype).itemsize if info.dtype else 4
        dims = [d for d in info.shape if isinstance(d, int) and d >= 0]
        return int(np.prod(dims, dtype=np.int64)) * itemsize, len(dims) == len(info.shape)

    sizes: dict[str, int] = {}
    for name, info in tensors.items():
        size, complete = known_bytes(info)
        if info.node is None:
            sizes[name] = size if complete else UNKNOWN_SIZE_FALLBACK
    for node in model.graph.node:
        read = [sizes.get(name, 0) for name in node.input if name]
        guess = sum(read) if node.op_type == "Concat" else max(read, default=UNKNOWN_SIZE_FALLBACK)
        for name in node.output:
            size, complete = known_bytes(tensors.get(name))
            sizes[name] = size if complete else max(size, guess)
    return sizes


def with_input_shapes(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A weightless copy of the model whose inputs have the feed's shapes, for size estimates."""
    from trtflow.onnxmodel.proto import messages

    pinned = messages().ModelProto()
    pinned.CopyFrom(model)
    for value_info in pinned.graph.input:
        if value_info.name in feed:
            shape = value_info.type.tensor_type.shape
            shape.Clear()
            for size in feed[value_info.name].shape:
                shape.dim.add().dim_value = size
    return pinned
