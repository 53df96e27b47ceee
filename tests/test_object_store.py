"""The local store is an object store: blobs named by sha256, stored once, entries checked out as
hard links; `cache verify` checks blobs and entries, `cache gc` collects blobs no entry uses."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from conftest import ledger_lines, write_recipe

TWINS = """
trtflow: 1
name: twins
steps:
  a: {uses: test-sleep, with: {text: same, size_kb: 200}}
  b: {uses: test-sleep, with: {text: same, size_kb: 200, seconds: 0.01}}
  c: {uses: test-sleep, with: {text: other}}
"""


C_FILES = ("out.txt", "values.json")


def _blobs(workspace: Path) -> dict[str, Path]:
    return {path.name: path for path in (workspace / "store" / "blobs").glob("??/*")}


def _run(trtflow, tmp_path: Path, plugin_env: dict, text: str = TWINS):
    recipe = write_recipe(tmp_path, text)
    result = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stdout + result.stderr
    return recipe, tmp_path / ".trtflow", tmp_path / "trtflow-out" / "twins"


def test_a_file_many_entries_hold_is_stored_once_and_checked_out_as_links(
    trtflow, tmp_path, plugin_env
):
    _, workspace, out = _run(trtflow, tmp_path, plugin_env)
    a, b = (out / step / "out.txt" for step in ("a", "b"))
    assert a.resolve().parent != b.resolve().parent, "two entries (two keys)"
    assert a.stat().st_ino == b.stat().st_ino, "one blob, checked out in both entries"
    digest = hashlib.sha256(a.read_bytes()).hexdigest()
    blobs = _blobs(workspace)
    assert blobs[digest].stat().st_ino == a.stat().st_ino and blobs[digest].stat().st_nlink == 3
    # a's and b's out.txt and values.json are equal; c's two files differ: 4 blobs for 6 files
    assert len(blobs) == 4
    stored = sum(path.stat().st_size for path in blobs.values())
    assert stored < 2 * a.stat().st_size, "the 200 KB file is on disk once"
    manifest = (out / "a" / "manifest.json").read_text()
    assert str(workspace) not in manifest, "entries name their files by digest, never by path"
    assert json.loads(manifest)["files"]["out.txt"] == {"sha256": digest, "size": a.stat().st_size}


def test_gc_collects_the_blobs_no_entry_uses_and_says_so(trtflow, tmp_path, plugin_env):
    recipe, workspace, out = _run(trtflow, tmp_path, plugin_env)
    old_c = {hashlib.sha256((out / "c" / name).read_bytes()).hexdigest() for name in C_FILES}
    _run(trtflow, tmp_path, plugin_env, TWINS.replace("text: other", "text: edited"))
    before = _blobs(workspace)
    assert old_c <= set(before) and len(before) == 6
    gc = trtflow("cache", "gc", "--keep", recipe, cwd=tmp_path, env=plugin_env)
    assert gc.returncode == 0, gc.stderr
    # c's old out.txt and values.json go; a and b keep theirs
    assert "1 entries, 2 unreferenced blobs" in gc.stdout, gc.stdout
    assert set(before) - set(_blobs(workspace)) == old_c
    again = trtflow("cache", "gc", cwd=tmp_path, env=plugin_env)
    assert "0 entries, 0 unreferenced blobs" in again.stdout, again.stdout
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout
    assert "verified 3 entries: 0 damaged; 4 blobs: 0 damaged" in verify.stdout


def test_verify_finds_a_damaged_blob_in_every_entry_that_holds_it(trtflow, tmp_path, plugin_env):
    recipe, workspace, out = _run(trtflow, tmp_path, plugin_env)
    shared = out / "a" / "out.txt"
    blob = _blobs(workspace)[hashlib.sha256(shared.read_bytes()).hexdigest()]
    blob.chmod(0o644)
    content = bytearray(blob.read_bytes())
    content[0] ^= 0xFF  # same size: only hashing finds it
    blob.write_bytes(bytes(content))
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 1, verify.stdout
    assert verify.stdout.count("out.txt: content changed (sha256 mismatch) — removed") == 2
    assert f"damaged blob {blob.name[:12]}" in verify.stdout and not blob.exists()
    rerun = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0, rerun.stderr
    assert [line.split()[1] for line in ledger_lines(plugin_env)].count("a") == 2
    clean = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert clean.returncode == 0 and "3 entries: 0 damaged; 4 blobs: 0 damaged" in clean.stdout


def test_verify_makes_blobs_again_from_sound_checkouts(trtflow, tmp_path, plugin_env):
    """Deleting `store/blobs` loses nothing the entries hold: their links keep the bytes."""
    recipe, workspace, out = _run(trtflow, tmp_path, plugin_env)
    shutil.rmtree(workspace / "store" / "blobs")
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 0 and "3 entries: 0 damaged; 4 blobs: 0 damaged" in verify.stdout
    assert len(_blobs(workspace)) == 4
    assert (out / "a" / "out.txt").stat().st_ino == (out / "b" / "out.txt").stat().st_ino
    cached = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert "3 cached" in cached.stdout and len(ledger_lines(plugin_env)) == 3


def test_an_entry_of_the_older_store_format_is_recomputed_and_collected(
    trtflow, tmp_path, plugin_env
):
    recipe, workspace, out = _run(trtflow, tmp_path, plugin_env)
    entry = (out / "c").resolve()
    manifest = json.loads((entry / "manifest.json").read_text())
    (entry / "manifest.json").chmod(0o644)
    (entry / "manifest.json").write_text(json.dumps({**manifest, "format": 1}))
    old_key = "ab" + "0" * 62  # an old entry no recipe reaches any more
    (workspace / "store" / "ab").mkdir(exist_ok=True)
    entry.rename(workspace / "store" / "ab" / old_key)
    rerun = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0, rerun.stderr
    assert [line.split()[1] for line in ledger_lines(plugin_env)].count("c") == 2
    gc = trtflow("cache", "gc", cwd=tmp_path, env=plugin_env)
    assert "removed 0 temporary folders, 1 entries" in gc.stdout, gc.stdout
    assert not (workspace / "store" / "ab" / old_key).exists()
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 0 and "verified 3 entries: 0 damaged" in verify.stdout
