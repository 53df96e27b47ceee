"""Reading the `.npy` and `.npz` files users hand trtflow, safely and with messages about the file.

numpy's own errors name neither the file nor the array (`Object arrays cannot be loaded when
allow_pickle=False`), a damaged archive raises `zipfile.BadZipFile`, and a damaged header that
claims terabytes is a bare MemoryError. Nothing is ever unpickled: a file of Python objects can run
code when loaded.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from trtflow.errors import TensorFileError

# what numpy raises for a file that is not a numpy array it will load
NOT_AN_ARRAY = (OSError, ValueError, EOFError, MemoryError, zipfile.BadZipFile)


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


def load_archive(path: Path) -> dict[str, np.ndarray]:
    """Every array of one `.npz` file, by name."""
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
        return {name: _member(archive, path, name) for name in archive.files}


def _member(archive: np.lib.npyio.NpzFile, path: Path, name: str) -> np.ndarray:
    try:
        return archive[name]
    except NOT_AN_ARRAY as error:
        raise _unreadable(f"{path}: array `{name}`", error) from None
