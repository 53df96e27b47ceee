"""Tensor sets: the arrays runners produced (or were fed), on disk as `.npy` plus one index.

A tensor set is a folder:
    index.json                     what is where, and what each tensor is in the model
    <runner>/<iteration>/<tensor>.npy
The index lists every array (runner, iteration, tensor, file, dtype, shape), the model facts of
every tensor (producing node, op, topological index — what `compare` needs to say "first"), and
per runner its status (a runner that crashed is recorded, not silently missing) and timings.

Arrays are written one at a time as they arrive, so a run never holds more than one chunk of
outputs in memory, and read back memory-mapped, so comparing two 10 GB sets does not load them.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

INDEX = "index.json"
FORMAT = 1
INPUTS = "inputs"  # the runner name under which a set of inputs (feeds) is stored


@dataclass(frozen=True)
class StoredArray:
    runner: str
    iteration: int
    tensor: str
    file: str  # relative to the set's folder
    dtype: str
    shape: list[int]


def _file_stem(tensor: str) -> str:
    """A portable file name for a tensor name (which may hold '/', ':' or anything else)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", tensor)[:120] or "tensor"


@dataclass
class TensorSetWriter:
    """Builds a tensor set; `close()` writes the index (a set without index is unreadable)."""

    folder: Path
    tensors: dict[str, dict] = field(default_factory=dict)  # tensor -> {node, op, topo, ...}
    arrays: list[StoredArray] = field(default_factory=list)
    runners: dict[str, dict] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def add(self, runner: str, iteration: int, tensor: str, array: np.ndarray) -> None:
        array = np.asarray(array)
        stem = _file_stem(tensor)
        relative = f"{_file_stem(runner)}/{iteration}/{stem}.npy"
        suffix = 1
        while relative in self._taken:
            relative = f"{_file_stem(runner)}/{iteration}/{stem}_{suffix}.npy"
            suffix += 1
        self._taken.add(relative)
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            np.save(path, array, allow_pickle=False)
        except OSError as error:
            # numpy reports a short write as "N requested and M written", without the errno that
            # lets the executor tell the user the disk is full
            if error.errno is None and shutil.disk_usage(path.parent).free < array.nbytes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from error
            raise
        self.arrays.append(StoredArray(runner, iteration, tensor, relative, str(array.dtype), list(array.shape)))
        self.runners.setdefault(runner, {"status": "ok"})

    def add_feed(self, runner: str, iteration: int, feed: dict[str, np.ndarray]) -> None:
        """One feed; its iteration counts even when empty (a model without inputs, a run of saved runners)."""
        for tensor, array in feed.items():
            self.add(runner, iteration, tensor, array)
        facts = self.runners.setdefault(runner, {"status": "ok"})
        facts["iterations"] = max(facts.get("iterations", 0), iteration + 1)

    def record_runner(self, runner: str, **facts) -> None:
        """Status, error message, timings... of one runner."""
        self.runners.setdefault(runner, {"status": "ok"}).update(facts)

    def close(self) -> "TensorSet":
        index = {"format": FORMAT, "tensors": self.tensors, "runners": self.runners,
                 "arrays": [asdict(a) for a in self.arrays]}
        (self.folder / INDEX).write_text(json.dumps(index, indent=1))
        return TensorSet.open(self.folder)


@dataclass
class TensorSet:
    """A tensor set opened for reading."""

    folder: Path
    tensors: dict[str, dict]
    runners: dict[str, dict]
    arrays: dict[tuple[str, int, str], StoredArray]

    @classmethod
    def open(cls, folder: Path) -> "TensorSet":
        index_path = Path(folder) / INDEX
        index = json.loads(index_path.read_text())
        if index.get("format") != FORMAT:
            raise ValueError(f"{index_path}: unknown tensor set format {index.get('format')!r}")
        arrays = {(a["runner"], a["iteration"], a["tensor"]): StoredArray(**a) for a in index["arrays"]}
        return cls(Path(folder), index["tensors"], index["runners"], arrays)

    @staticmethod
    def is_tensor_set(path: Path) -> bool:
        return path.is_dir() and (path / INDEX).is_file()

    def iterations(self, runner: str) -> int:
        stored = 1 + max((i for r, i, _ in self.arrays if r == runner), default=-1)
        return max(stored, self.runners.get(runner, {}).get("iterations", 0))

    def tensor_names(self, runner: str) -> list[str]:
        """The tensors a runner produced, in topological order (unknown tensors last, in stored order)."""
        names = list(dict.fromkeys(t for r, _, t in self.arrays if r == runner))
        stored_order = {name: position for position, name in enumerate(names)}
        return sorted(names, key=lambda t: (self.tensors.get(t, {}).get("topo", 1 << 30), stored_order[t]))

    def load(self, runner: str, iteration: int, tensor: str) -> np.ndarray:
        stored = self.arrays[(runner, iteration, tensor)]
        return np.load(self.folder / stored.file, mmap_mode="r", allow_pickle=False)

    def iteration(self, runner: str, iteration: int) -> dict[str, np.ndarray]:
        return {t: self.load(runner, iteration, t) for t in self.tensor_names(runner)
                if (runner, iteration, t) in self.arrays}

    def feeds(self, runner: str = INPUTS) -> Iterator[dict[str, np.ndarray]]:
        for iteration in range(self.iterations(runner)):
            yield self.iteration(runner, iteration)

    def failure(self, runner: str) -> str | None:
        facts = self.runners.get(runner, {})
        return facts.get("error") if facts.get("status") != "ok" else None
