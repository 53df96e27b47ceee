"""Reading the `.npy` and `.npz` files users hand trtflow, safely and with messages about the file.

numpy's own errors name neither the file nor the array (`Object arrays cannot be loaded when
allow_pickle=False`), a damaged archive raises `zipfile.BadZipFile`, and a damaged header that
claims terabytes is a bare MemoryError. Nothing is ever unpickled: a file of Python objects can run
code when loaded. A `.npz` may be compressed, and a small one can expand a thousandfold (0.78 MB to
892 MB of zeros), so its members' `.npy` headers are read, and their shapes judged, before any
member is expanded.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from trtflow.errors import TensorFileError
from trtflow.memory import available_memory, human_size

# what numpy raises for a file that is not a numpy array it will load
NOT_AN_ARRAY = (OSError, ValueError, EOFError, MemoryError, zipfile.BadZipFile)

# judges one member of a `.npz` from its header before it is expanded: (where, name, shape, dtype);
# raises ValueError to refuse it
HeaderCheck = Callable[[str, str, tuple[int, ...], np.dtype], None]


def _unreadable(where: object, error: BaseException, kind: str = "numpy array") -> TensorFileError:
    if isinstance(error, MemoryError):
        reason = "its header declares an array larger than the memory here (a damaged file?)"
    elif "allow_pickle" in str(error) or "Python objects" in str(
        error
    ):  # numpy's wordings (np.load, mmap)
        reason = (
            "it holds pickled Python objects; trtflow reads numeric arrays only and never unpickles"
        )
    else:
        reason = str(error) or type(error).__name__
    return TensorFileError(f"{where}: not a readable {kind}: {reason}")


def load_array(path: Path, *, mmap: bool = False) -> np.ndarray:
    """One `.npy` file (memory-mapped with `mmap`)."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise TensorFileError(f"{path}: missing") from None
    except NOT_AN_ARRAY as error:
        raise _unreadable(path, error) from None


def load_array_bytes(data: bytes, where: str) -> np.ndarray:
    """One array saved with `np.save` into `data` (as Polygraphy embeds them); `where` names it."""
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except NOT_AN_ARRAY as error:
        raise _unreadable(where, error) from None


def load_archive(path: Path, check: HeaderCheck | None = None) -> dict[str, np.ndarray]:
    """Every array of one `.npz` file, by name. Every member's header is read first: `check`
    judges each declared shape, and arrays that would not fit in memory together are refused,
    before anything is expanded."""
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise TensorFileError(f"{path}: missing") from None
    except NOT_AN_ARRAY as error:
        raise _unreadable(path, error, ".npz archive") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise TensorFileError(
            f"{path}: one .npy array, not a .npz archive of arrays named after the inputs"
        )
    with archive:
        _check_headers(archive, path, check)
        return {name: _member(archive, path, name) for name in archive.files}


def _check_headers(archive: np.lib.npyio.NpzFile, path: Path, check: HeaderCheck | None) -> None:
    members = archive.zip
    assert members is not None  # open until `archive` closes
    declared = 0
    for name in archive.files:
        where = f"{path}: array `{name}`"
        member = f"{name}.npy" if f"{name}.npy" in members.namelist() else name
        try:
            with members.open(member) as handle:
                if handle.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
                    continue  # not an array: numpy gives its bytes as they are
                handle.seek(0)
                shape, _, dtype = _read_header(handle)
        except NOT_AN_ARRAY as error:
            raise _unreadable(where, error) from None
        if dtype.hasobject:  # refused as numpy refuses it, whatever its shape
            raise _unreadable(where, ValueError("Object arrays cannot be loaded: Python objects"))
        if check is not None:
            check(where, name, shape, dtype)
        declared += math.prod(shape) * dtype.itemsize
    available = available_memory()
    if available is not None and declared > available:
        raise TensorFileError(
            f"{path}: its arrays would take {human_size(declared)} once expanded, more than the "
            f"{human_size(available)} of memory available here (refused from their headers); "
            "give fewer or smaller arrays"
        )


def _read_header(handle: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, Fortran order and dtype of the `.npy` whose bytes `handle` is at the start of;
    it is left at the array's data."""
    version = np.lib.format.read_magic(handle)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    return read_header(handle)


def _member(archive: np.lib.npyio.NpzFile, path: Path, name: str) -> np.ndarray:
    try:
        return archive[name]
    except NOT_AN_ARRAY as error:
        raise _unreadable(f"{path}: array `{name}`", error) from None


def packed_array(path: Path, offset: int, name: str) -> np.ndarray:
    """The array whose `.npy` bytes start at `offset` in `path` (a pack), memory-mapped read-only."""
    where = f"{path}: array `{name}`"
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            shape, fortran, dtype = _read_header(handle)
            start = handle.tell()
    except FileNotFoundError:
        raise TensorFileError(f"{path}: missing") from None
    except NOT_AN_ARRAY as error:
        raise _unreadable(where, error) from None
    if dtype.hasobject:
        raise _unreadable(where, ValueError("Object arrays cannot be loaded: Python objects"))
    if not np.prod(shape, dtype=np.int64) or not dtype.itemsize:
        return np.empty(shape, dtype, order="F" if fortran else "C")
    try:
        mapped = np.memmap(
            path, dtype, mode="r", offset=start, shape=shape or (1,), order="F" if fortran else "C"
        )
        return mapped.reshape(shape)  # a 0-d array is mapped as 1 element (np.memmap's least)
    except NOT_AN_ARRAY as error:
        raise _unreadable(where, error) from None
