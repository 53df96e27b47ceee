"""`<out>/<recipe>/<step>`: where users find a step's files without knowing cache keys.

It is a symlink to the step's store entry (a copy where the filesystem refuses links), so the
files sit side by side exactly as the step wrote them: `model.onnx` finds `model.onnx.data`
through it (onnx refuses external data reached through a file symlink), and value outputs are in
the entry's `values.json`. A new link is made beside the old one and renamed over it, which is
atomic, so concurrent runs sharing one `--out` never see a half-made folder.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from pathlib import Path

from trtflow.executor.store import Entry


def publish(entry: Entry, folder: Path) -> None:
    try:
        if os.readlink(folder) == str(entry.path):
            return  # already there (a cached rerun): nothing to write, even on a full disk
    except OSError:
        pass
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = folder.with_name(f".{folder.name}.{secrets.token_hex(4)}")
    try:
        os.symlink(entry.path, fresh, target_is_directory=True)
    except OSError:  # no symlinks on this filesystem
        shutil.copytree(entry.path, fresh)
    try:
        os.replace(fresh, folder)  # over a symlink, nothing or an empty folder: atomic
        return
    except OSError as error:
        if error.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
    # a real folder (a copy, or an older layout) cannot be replaced atomically: swap under a lock
    old = folder.with_name(f".{folder.name}.old.{secrets.token_hex(4)}")
    from filelock import FileLock  # imported when taken: a cached run takes no lock

    with FileLock(folder.with_name(f".{folder.name}.lock")):
        try:
            os.rename(folder, old)
        except FileNotFoundError:
            os.replace(fresh, folder)
            return
        os.replace(fresh, folder)
    if old.is_symlink():  # another run linked it while this one waited for the lock
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)


def broken_links(out_folders: set[Path], store_root: Path, removed_keys: set[str]) -> list[Path]:
    """Output links `<out>/<recipe>/<step>` into `store_root` whose entry is gone or is in
    `removed_keys`: after `cache gc` they would point nowhere. Every recipe folder under each
    `<out>` is looked at, so the links of a recipe gc has no record of go too."""
    broken = []
    for recipe_folder in (
        folder for out in out_folders if out.is_dir() for folder in out.iterdir()
    ):
        if not recipe_folder.is_dir() or recipe_folder.is_symlink():
            continue
        for link in recipe_folder.iterdir():
            if not link.is_symlink():
                continue
            target = Path(os.readlink(link))
            if target.parent.parent == store_root and (
                target.name in removed_keys or not target.exists()
            ):
                broken.append(link)
    return broken
