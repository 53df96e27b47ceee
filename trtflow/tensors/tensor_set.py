"""Tensor sets: the arrays runners produced (or were fed), on disk as `.npz` packs plus one index.

A tensor set is a folder:
    index.json                     what is where, and what each tensor is in the model
    <runner>/<iteration>.npz       every tensor of one runner's iteration, one `.npy` member each
The index lists every array (runner, iteration, tensor, file, member offset, dtype, shape), the
model facts of every tensor (producing node, op, topological index — what `compare` needs to say
"first"), and per runner its status (a runner that crashed is recorded, not silently missing).

A pack is a plain uncompressed `.npz` (`np.load(".../0.npz")["tensor"]` reads it), written with
fixed member dates so the same arrays give the same bytes. One file per iteration rather than one
per tensor: a mark-all run of a real model is hundreds of tensors, and every file is a create, a
hash, a blob link and, in a remote cache, a request (PP-OCRv4's classifier: 567 tensors).
Arrays are appended as they arrive, so a run never holds more than one chunk of outputs in memory,
and read back memory-mapped at their recorded offset, so comparing two 10 GB sets does not load
them. Sets of format 1 (one `.npy` per tensor, written before packs) are still read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trtflow.errors import TensorFileError
from trtflow.tensors.array_files import load_array, packed_array
from trtflow.tensors.packs import PackWriter

INDEX = "index.json"
FORMAT = 2
READ_FORMATS = (1, 2)  # 1: one .npy per tensor
INPUTS = "inputs"  # the runner name under which a set of inputs (feeds) is stored


@dataclass(frozen=True)
class StoredArray:
    runner: str
    iteration: int
    tensor: str
    file: str  # relative to the set's folder
    dtype: str
    shape: list[int]
    offset: int | None = None  # where the array's `.npy` member starts in a pack; None: a .npy file


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
    written: dict[Path, tuple[str, int]] = field(default_factory=dict)
    """Every file of the closed set: (sha256, size), computed as it was written."""
    _packs: dict[str, PackWriter] = field(default_factory=dict)  # by file, relative to the folder
    _open: dict[str, str] = field(
        default_factory=dict
    )  # each runner's open pack: its latest iteration
    _members: dict[str, set[str]] = field(default_factory=dict)  # member names taken, by file

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def add(self, runner: str, iteration: int, tensor: str, array: np.ndarray) -> None:
        array = np.asarray(array)
        if (
            array.dtype == object
        ):  # ONNX strings: numpy str, as a .npy of objects needs pickle to read
            array = array.astype(str)
        relative = f"{_file_stem(runner)}/{iteration}.npz"
        taken = self._members.setdefault(relative, set())
        stem = _file_stem(tensor)
        member, suffix = f"{stem}.npy", 1
        while member in taken:
            member = f"{stem}_{suffix}.npy"
            suffix += 1
        taken.add(member)
        try:
            offset = self._pack(runner, relative).add(member, array)
        except BaseException:
            self._abandon()
            raise
        self.arrays.append(
            StoredArray(
                runner, iteration, tensor, relative, str(array.dtype), list(array.shape), offset
            )
        )
        self.runners.setdefault(runner, {"status": "ok"})

    def _pack(self, runner: str, relative: str) -> PackWriter:
        """The pack `relative` of `runner`, open; the runner's other iteration is done for now
        (a sliced run comes back to it with the next slice), so its file closes."""
        current = self._open.get(runner)
        if current != relative:
            if current is not None:
                self._packs[current].suspend()
            if relative not in self._packs:
                (self.folder / relative).parent.mkdir(parents=True, exist_ok=True)
                self._packs[relative] = PackWriter(self.folder / relative)
            self._open[runner] = relative
        return self._packs[relative]

    def add_feed(self, runner: str, iteration: int, feed: dict[str, np.ndarray]) -> None:
        """One feed; its iteration counts even when empty (a model without inputs, a run of saved runners)."""
        for tensor, array in feed.items():
            self.add(runner, iteration, tensor, array)
        facts = self.runners.setdefault(runner, {"status": "ok"})
        facts["iterations"] = max(facts.get("iterations", 0), iteration + 1)

    def record_runner(self, runner: str, **facts) -> None:
        """Status, error message, timings... of one runner."""
        self.runners.setdefault(runner, {"status": "ok"}).update(facts)

    def _abandon(self) -> None:
        """Close every open pack, ignoring what fails: the set's writing failed (a full disk), its
        folder is discarded, and the error on its way says why. A pack left to the garbage
        collector failed again as the process ended (`Exception ignored in ... __del__ ...
        OSError`), after the clear message."""
        for pack in self._packs.values():
            with contextlib.suppress(OSError):
                pack.suspend()
        self._packs.clear()
        self._open.clear()

    def close(self) -> TensorSet:
        try:
            for relative, pack in self._packs.items():
                self.written[self.folder / relative] = pack.finish(), pack.size
        finally:
            self._abandon()  # the packs after one that failed to close (a full disk)
        index = {
            "format": FORMAT,
            "tensors": self.tensors,
            "runners": self.runners,
            "arrays": [vars(a) for a in self.arrays],  # asdict deep-copies: 0.1 ms per array
        }
        text = json.dumps(index, indent=1).encode()
        (self.folder / INDEX).write_bytes(text)
        self.written[self.folder / INDEX] = hashlib.sha256(text).hexdigest(), len(text)
        return TensorSet.open(self.folder)


class _RunnerFacts(BaseModel):
    """What an index says of a runner: the keys read here are typed, the rest (timings) kept as written."""

    model_config = ConfigDict(extra="allow")

    status: str = "ok"
    iterations: int = Field(0, ge=0)
    error: str | None = None


class _TensorFacts(BaseModel):
    model_config = ConfigDict(extra="allow")

    node: str | None = None
    op: str | None = None
    topo: int | None = None


class _Index(BaseModel):
    format: int
    tensors: dict[str, _TensorFacts] = Field(default_factory=dict)
    runners: dict[str, _RunnerFacts] = Field(default_factory=dict)
    arrays: list[StoredArray]

    @field_validator("arrays")
    @classmethod
    def _inside_the_set(cls, arrays: list[StoredArray]) -> list[StoredArray]:
        for stored in arrays:
            relative = PurePosixPath(stored.file)
            if relative.is_absolute() or ".." in relative.parts or not relative.parts:
                raise ValueError(f"`{stored.file}` is not a file inside the set")
            if stored.offset is not None and stored.offset < 0:
                raise ValueError(f"`{stored.file}`: offset {stored.offset} is before the file")
        return arrays


def _read_index(path: Path) -> _Index:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise TensorFileError(f"{path}: cannot read the tensor set's index: {error}") from None
    except (ValueError, RecursionError) as error:
        raise TensorFileError(
            f"{path}: the tensor set's index is not valid JSON: {error}"
        ) from None
    if not isinstance(raw, dict) or raw.get("format") not in READ_FORMATS:
        found = raw.get("format") if isinstance(raw, dict) else None
        raise TensorFileError(
            f"{path}: not a tensor set index of format 1 or {FORMAT} (format {found!r}); "
            "it is written by trtflow's run-runners"
        )
    try:
        return _Index.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        at = ".".join(str(part) for part in first["loc"])
        what = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise TensorFileError(f"{path}: damaged tensor set index: `{at}`: {what}{more}") from None


@dataclass
class TensorSet:
    """A tensor set opened for reading."""

    folder: Path
    tensors: dict[str, dict]
    runners: dict[str, dict]
    arrays: dict[tuple[str, int, str], StoredArray]

    @classmethod
    def open(cls, folder: Path) -> TensorSet:
        """The set in `folder`; TensorFileError when its index is damaged, hand-edited wrong, or of
        another format (sets are also what users copy between machines and hand back)."""
        index = _read_index(Path(folder) / INDEX)
        arrays = {(a.runner, a.iteration, a.tensor): a for a in index.arrays}
        return cls(
            Path(folder),
            {name: facts.model_dump(exclude_unset=True) for name, facts in index.tensors.items()},
            {name: facts.model_dump(exclude_unset=True) for name, facts in index.runners.items()},
            arrays,
        )

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
        return sorted(
            names, key=lambda t: (self.tensors.get(t, {}).get("topo", 1 << 30), stored_order[t])
        )

    def load(self, runner: str, iteration: int, tensor: str) -> np.ndarray:
        stored = self.arrays[(runner, iteration, tensor)]
        if stored.offset is None:
            return load_array(self.folder / stored.file, mmap=True)
        return packed_array(self.folder / stored.file, stored.offset, tensor)

    def iteration(self, runner: str, iteration: int) -> dict[str, np.ndarray]:
        return {
            t: self.load(runner, iteration, t)
            for t in self.tensor_names(runner)
            if (runner, iteration, t) in self.arrays
        }

    def feeds(self, runner: str = INPUTS) -> Iterator[dict[str, np.ndarray]]:
        for iteration in range(self.iterations(runner)):
            yield self.iteration(runner, iteration)

    def failure(self, runner: str) -> str | None:
        facts = self.runners.get(runner, {})
        return facts.get("error") if facts.get("status") != "ok" else None
