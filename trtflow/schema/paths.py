"""Paths in step params: resolved against the recipe's folder, and remembered for the cache key.

A step's params model types every file it reads as `InputPath`. While the params validate, the
`PathResolver` in the validation context resolves relative paths, checks the file exists, and
records whether it is an artifact of an earlier step (identified by its store digest) or a user
file (identified by hashing its content). The executor then replaces each recorded path in the
params by that identity when it computes the step key, so moving a project or renaming a model
file does not invalidate the cache, while editing the file does.

A user file's `companions` (the files beside it its reader declares: a model's external data) are
asked for while the params validate, so a file that names one it must not (outside its folder) is a
recipe problem located at its param, raised before anything hashes or opens that companion.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo


@dataclass
class PathResolver:
    base_dir: Path
    artifacts: dict[str, str] = field(default_factory=dict)  # store path -> artifact digest
    user_files: set[str] = field(default_factory=set)  # filled while validating
    used_artifacts: set[str] = field(default_factory=set)
    value_outputs: dict[str, str] = field(
        default_factory=dict
    )  # str(value) -> the reference that gave it
    companions: Callable[[Path], object] | None = None
    """Asked for each user file; raises `InputError` (a ValueError) for a file naming a companion
    it must not. None: not asked (loading a recipe for `run` or `status`, which ask when keying)."""

    def resolve(self, value: Path) -> Path:
        text = str(value)
        if "${" in text:  # validate-time placeholder for an artifact not computed yet
            return value
        resolved = value if value.is_absolute() else self.base_dir / value
        resolved_text = str(resolved)
        if resolved_text in self.artifacts:
            self.used_artifacts.add(resolved_text)
            return resolved
        if not resolved.exists() and text in self.value_outputs:
            raise ValueError(
                f"`{self.value_outputs[text]}` is a value ({text!r}), not a file or folder; "
                "refer to one of that step's file outputs"
            )
        if not resolved.exists():
            raise ValueError(
                broken_link(resolved)
                or f"file not found: {resolved} (relative paths start at the recipe's folder {self.base_dir})"
            )
        _refuse_special_file(resolved)
        if self.companions is not None and resolved.is_file():
            self.companions(resolved)
        self.user_files.add(resolved_text)
        return resolved


def broken_link(path: Path) -> str | None:
    """Why a path that does not resolve is not simply missing: a symlink loop, or a link to
    nothing (`exists()` says False for both); None for any other path."""
    try:
        path.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            return (
                f"symlink loop: {path} leads back to itself through symbolic links; "
                "point it (or the link it goes through) at the real file"
            )
    if path.is_symlink():
        return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
    return None


def _refuse_special_file(path: Path) -> None:
    """Refuse a FIFO, a device or a socket: hashing it for the cache key would wait for a writer
    forever (a FIFO) or never reach the end (`/dev/zero`), before the step could say anything."""
    mode = path.stat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ValueError(
            f"{path} is not a regular file or folder (it is a FIFO, a device or a socket); "
            "give the path of the file itself, e.g. copy the model to disk first"
        )


def _resolve_input_path(value: Path, info: ValidationInfo) -> Path:
    resolver = (info.context or {}).get("paths")
    return resolver.resolve(value) if isinstance(resolver, PathResolver) else value


InputPath = Annotated[Path, AfterValidator(_resolve_input_path)]
"""A file or folder a step reads: a user file or an earlier step's output."""

MODEL_SUFFIXES = (".onnx", ".engine", ".plan", ".trt")


def _a_model_file(path: Path) -> Path:
    """Refuse a folder at once: as a user file it would be hashed in full for the step key (every
    file under `/usr/share`, minutes) before the step could say it wants one file."""
    if not path.is_dir():
        return path
    with os.scandir(path) as entries:
        models = sorted(
            entry.name
            for entry in itertools.islice(entries, 10000)
            if entry.name.lower().endswith(MODEL_SUFFIXES) and entry.is_file()
        )
    listed = f": it holds {', '.join(models[:5])}" if models else " (a .onnx model or an engine)"
    raise ValueError(f"{path} is a folder, not a model file; give the file itself{listed}")


ModelFile = Annotated[Path, AfterValidator(_resolve_input_path), AfterValidator(_a_model_file)]
"""A model file a step reads (ONNX, or a TensorRT engine where the step takes one): an `InputPath`
that is never a folder."""
