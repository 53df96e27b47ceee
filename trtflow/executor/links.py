"""`<out>/<recipe>/<step>/`: where users find a step's files without knowing cache keys.

Each output (and its sidecars, such as `model.onnx.data`) is a symlink into the store, or a copy
where the filesystem refuses links. Value outputs are written to `values.json`. The folder is
built beside the old one and swapped in, so a reader never sees it half-made; a lock per step
folder keeps concurrent runs sharing one `--out` from swapping at the same time.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

from filelock import FileLock

from trtflow.executor.store import Entry


def _link_or_copy(target: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(target, link, target_is_directory=target.is_dir())
    except OSError:
        if target.is_dir():
            shutil.copytree(target, link)
        else:
            shutil.copy2(target, link)


def publish(entry: Entry, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(f".{folder.name}.{secrets.token_hex(4)}")
    staging.mkdir()
    values = {}
    for name, output in entry.outputs.items():
        if output["kind"] == "value":
            values[name] = output["value"]
        elif output["kind"] == "folder":
            _link_or_copy(entry.path / output["path"], staging / output["path"])
        else:
            for member in output["members"]:
                _link_or_copy(entry.path / member, staging / member)
    if values:
        (staging / "values.json").write_text(json.dumps(values, indent=1, sort_keys=True))
    old = folder.with_name(f".{folder.name}.old.{secrets.token_hex(4)}")
    with FileLock(folder.with_name(f".{folder.name}.lock")):
        try:
            os.rename(folder, old)
        except FileNotFoundError:
            old = None
        os.rename(staging, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
