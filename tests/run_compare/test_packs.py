"""A tensor set's packs are written front to back and hashed on the way (`tensors/packs.py`), yet they
are the bytes `zipfile` writes, byte for byte, so `np.load` and every zip tool read them; the digest
the writer hands the store is the file's sha256."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import run_counting_calls

from trtflow.tensors.packs import _FIXED_DATE, PackWriter
from trtflow.tensors.tensor_set import TensorSet, TensorSetWriter

ARRAYS = {
    "a.npy": np.arange(12, dtype=np.float32).reshape(3, 4),
    "scalar.npy": np.array(7, dtype=np.int64),
    "empty.npy": np.zeros((0, 3), dtype=np.float16),
    "big_endian.npy": np.arange(5, dtype=">f4"),
    "flags.npy": np.array([True, False, True]),
    "strided.npy": np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2],
    "words.npy": np.array(["tap", "all"]),
}


def _zipfile_pack(path: Path, members: dict[str, np.ndarray], mode: str = "w") -> list[int]:
    """What trtflow wrote through `zipfile` before: each member opened for writing, force_zip64."""
    offsets = []
    with zipfile.ZipFile(path, mode) as pack:
        for member, array in members.items():
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, np.lib.format.header_data_from_array_1_0(array)
            )
            info = zipfile.ZipInfo(member, date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            assert pack.fp is not None
            with pack.open(info, "w", force_zip64=True) as handle:
                offsets.append(pack.fp.tell())
                handle.write(header.getvalue())
                handle.write(array.reshape(-1).view(np.uint8).data)
    return offsets


def _packed(path: Path, parts: list[dict[str, np.ndarray]]) -> tuple[list[int], str]:
    """`parts` written with `PackWriter`, the file closed between parts: (offsets, digest)."""
    writer = PackWriter(path)
    offsets = []
    for part in parts:
        offsets += [writer.add(member, array) for member, array in part.items()]
        writer.suspend()
    digest = writer.finish()
    assert writer.size == path.stat().st_size
    return offsets, digest


def test_a_pack_is_the_bytes_zipfile_writes_and_its_digest_is_its_sha256(tmp_path):
    expected = _zipfile_pack(tmp_path / "zipfile.npz", ARRAYS)
    offsets, digest = _packed(tmp_path / "pack.npz", [ARRAYS])
    written = (tmp_path / "pack.npz").read_bytes()
    assert written == (tmp_path / "zipfile.npz").read_bytes()
    assert offsets == expected
    assert digest == hashlib.sha256(written).hexdigest()
    with np.load(tmp_path / "pack.npz") as loaded:
        for member, array in ARRAYS.items():
            np.testing.assert_array_equal(loaded[member.removesuffix(".npy")], array)


def test_a_pack_written_over_several_slices_is_what_zipfile_appends(tmp_path):
    first = dict(list(ARRAYS.items())[:3])
    second = dict(list(ARRAYS.items())[3:])
    _zipfile_pack(tmp_path / "zipfile.npz", first)
    _zipfile_pack(tmp_path / "zipfile.npz", second, mode="a")
    _, digest = _packed(tmp_path / "pack.npz", [first, second])
    assert (tmp_path / "pack.npz").read_bytes() == (tmp_path / "zipfile.npz").read_bytes()
    assert digest == hashlib.sha256((tmp_path / "pack.npz").read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "limit", ["ZIP64_LIMIT", "ZIP_FILECOUNT_LIMIT"], ids=["offsets", "member count"]
)
def test_the_zip64_records_of_large_packs_are_zipfiles(tmp_path, monkeypatch, limit):
    """Members past 2 GiB, or past 65,535 members, take zip64 records: shown here with zipfile's
    own limits lowered (both writers read them when they write)."""
    monkeypatch.setattr(zipfile, limit, 60 if limit == "ZIP64_LIMIT" else 2)
    _zipfile_pack(tmp_path / "zipfile.npz", ARRAYS)
    _packed(tmp_path / "pack.npz", [ARRAYS])
    assert (tmp_path / "pack.npz").read_bytes() == (tmp_path / "zipfile.npz").read_bytes()


def test_a_tensor_set_knows_the_digest_of_every_file_it_wrote(tmp_path):
    writer = TensorSetWriter(tmp_path / "set")
    for slice_index in range(2):  # a sliced run: each iteration's pack is written twice
        for iteration in range(2):
            writer.add("ort", iteration, f"t{slice_index}", np.full(3, iteration, np.float32))
    writer.add("inputs", 0, "x", np.ones(2))
    opened = writer.close()
    files = sorted(p for p in (tmp_path / "set").rglob("*") if p.is_file())
    assert sorted(writer.written) == files
    for path, (digest, size) in writer.written.items():
        assert (digest, size) == (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_size,
        )
    np.testing.assert_array_equal(opened.load("ort", 1, "t1"), np.full(3, 1, np.float32))
    assert TensorSet.open(tmp_path / "set").iterations("ort") == 2


def test_the_store_takes_a_digest_hashed_while_written_while_the_size_holds(tmp_path):
    from trtflow.executor.gc import verify_entry
    from trtflow.executor.store import Store

    store, key = Store(tmp_path / "store"), "cd" * 32
    work_dir = store.begin(key)
    for name in ("kept.bin", "rewritten.bin", "unclaimed.bin"):
        (work_dir / name).write_bytes(b"1234")
    claimed = "0" * 64  # not these bytes' digest: taken as told, so the file was not read again
    hashed = {"kept.bin": (claimed, 4), "rewritten.bin": (claimed, 3)}
    entry = store.commit(key, work_dir, {}, {}, {}, hashed=hashed)
    real = hashlib.sha256(b"1234").hexdigest()
    files = entry.manifest["files"]
    assert [files[name]["sha256"] for name in sorted(files)] == [claimed, real, real]
    assert verify_entry(store, entry) == [
        "kept.bin: content changed (sha256 mismatch)"
    ]  # verify reads every file


def test_a_run_does_not_read_back_the_tensors_it_wrote_to_hash_them(tmp_path):
    (tmp_path / "recipe.yaml").write_text(
        f"""trtflow: 1
name: taps
steps:
  taps:
    uses: surgeon-insert-tap
    with: {{model: {Path(__file__).parents[2] / "pipelines" / "models" / "overflow_demo.onnx"}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {{seed: 1, iterations: 2, shapes: {{x: [1, 16, 64]}}}}
      runners: [{{name: ort, backend: onnxruntime}}]
"""
    )
    done, read = run_counting_calls(
        tmp_path, "trtflow.executor.store:file_digest", "run", "recipe.yaml", "--workspace", "ws"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(Path(path).name for path in read) == ["model.onnx", "taps.json"], read
