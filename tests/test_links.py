"""Output links: replacing whatever sits at `<out>/<recipe>/<step>` leaves one link and nothing else."""

import os

import pytest

from trtflow.executor.links import publish
from trtflow.executor.store import Entry


def _entry(tmp_path, name):
    path = tmp_path / "store" / name
    path.mkdir(parents=True)
    (path / "out.txt").write_text(name)
    return Entry(name, path, {"outputs": {}})


@pytest.mark.parametrize("before", ["nothing", "link", "folder", "empty folder"])
def test_publish_replaces_what_was_there(tmp_path, before):
    folder = tmp_path / "out" / "recipe" / "step"
    folder.parent.mkdir(parents=True)
    if before == "link":
        os.symlink(_entry(tmp_path, "older").path, folder, target_is_directory=True)
    elif before == "folder":
        folder.mkdir()
        (folder / "stale.txt").write_text("from an older layout")
    elif before == "empty folder":
        folder.mkdir()
    publish(_entry(tmp_path, "newer"), folder)
    assert folder.is_symlink() and (folder / "out.txt").read_text() == "newer"
    assert sorted(p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock")) == [
        "step"
    ]
