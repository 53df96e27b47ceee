"""Writing a tensor set's packs: uncompressed `.npz` files, front to back, hashed as they are written.

A pack is what `zipfile` writes for `ZipFile.open(info, "w", force_zip64=True)` members, byte for
byte (`tests/run_compare/test_packs.py` holds that), so `np.load` and every zip tool read it. It is
not written through `zipfile`, which writes each member's header before its data and then seeks
back to patch in the CRC: the bytes of a file written that way can only be hashed by reading it
again, and the store did, for every file a step wrote (PP-OCRv4's detector: 167 MB of taps, a
second pass over them). Here each member's CRC is taken from the array before its header is
written, so the file is written once, in order, and its sha256 is known when it closes
(`PackWriter.finish`); the store takes it from the step instead of reading the file back
(`StepContext.hashed_while_written`). The hashing runs on a thread of its own (`Sha256Thread`), so a
member is hashed while the next one is checksummed and written.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from trtflow.sha256_thread import Sha256Thread

_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: a member's date never changes its bytes
# the zip records `zipfile` writes on close (APPNOTE.TXT 4.3.12, 4.3.14-16), as its module spells them
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L"), b"PK\x01\x02"
_END64 = struct.Struct("<4sQ2H2L4Q"), b"PK\x06\x06"
_LOCATOR = struct.Struct("<4sLQL"), b"PK\x06\x07"
_END = struct.Struct("<4s4H2LH"), b"PK\x05\x06"


def _npy_header(array: np.ndarray) -> bytes:
    header = io.BytesIO()
    fields = np.lib.format.header_data_from_array_1_0(array)
    try:
        np.lib.format.write_array_header_1_0(header, fields)
    except ValueError:  # a header over 64 KiB (a dtype with very many fields)
        header = io.BytesIO()
        np.lib.format.write_array_header_2_0(header, fields)
    return header.getvalue()


class PackWriter:
    """One pack being written: members appended with `add`, the central directory and the digest
    at `finish`. Between the two the file may be closed (`suspend`) and appended to again: a
    sliced run writes an iteration's pack once per slice."""

    def __init__(self, path: Path):
        self.path = path
        self.size = 0  # bytes written so far
        self._sha256 = hashlib.sha256()
        self._hasher: Sha256Thread | None = None  # while the file is open
        self._members: list[zipfile.ZipInfo] = []
        self._file: io.BufferedWriter | None = None

    def add(self, member: str, array: np.ndarray) -> int:
        """Append `array` as `member` (a `.npy`); where its `.npy` bytes start in the file, so a
        reader maps it without the zip (`array_files.packed_array`)."""
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)  # (which would make a 0-d array 1-d)
        header = _npy_header(array)
        data = array.reshape(-1).view(np.uint8).data
        info = zipfile.ZipInfo(member, date_time=_FIXED_DATE)
        info.compress_type = zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        info.CRC = zlib.crc32(data, zlib.crc32(header))
        info.file_size = info.compress_size = len(header) + array.nbytes
        info.header_offset = self.size
        self._write(info.FileHeader(zip64=True))
        offset = self.size
        self._write(header)
        self._write(data)
        self._members.append(info)
        return offset

    def _write(self, data: bytes | memoryview) -> None:
        if self._file is None:
            self._file = open(self.path, "ab" if self.size else "wb")  # noqa: SIM115 - kept open
            self._hasher = Sha256Thread(self._sha256)
        try:
            self._file.write(data)
        except OSError as error:
            # a short write can come without the errno that lets the executor say the disk is full
            if error.errno is None and shutil.disk_usage(self.path.parent).free < len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path)) from error
            raise
        assert self._hasher is not None  # made with the file
        self._hasher.update(data)
        self.size += memoryview(data).nbytes

    def suspend(self) -> None:
        """Close the file until the next `add` (or `finish`); what it holds stays counted (and
        hashed)."""
        if self._hasher is not None:
            hasher, self._hasher = self._hasher, None
            hasher.finish()
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def finish(self) -> str:
        """Write the central directory (as `zipfile` does on close) and close; the file's sha256."""
        start = self.size
        for info in self._members:
            self._write(_central_entry(info))
        self._write(_end_records(len(self._members), start, self.size - start))
        self.suspend()
        return self._sha256.hexdigest()


def _central_entry(info: zipfile.ZipInfo) -> bytes:
    """`info`'s central directory record, as `ZipFile._write_end_record` writes it for a member
    `ZipFile.open(info, "w", force_zip64=True)` wrote (whose local header made it version 4.5)."""
    zip64: list[int] = []
    sizes = info.compress_size, info.file_size
    if info.file_size > zipfile.ZIP64_LIMIT or info.compress_size > zipfile.ZIP64_LIMIT:
        zip64 += [info.file_size, info.compress_size]
        sizes = 0xFFFFFFFF, 0xFFFFFFFF
    offset = info.header_offset
    if offset > zipfile.ZIP64_LIMIT:
        zip64.append(offset)
        offset = 0xFFFFFFFF
    extra = struct.pack(f"<HH{len(zip64)}Q", 1, 8 * len(zip64), *zip64) if zip64 else b""
    name = info.filename.encode("ascii")  # tensor_set's member names are [A-Za-z0-9._-]
    year, month, day, hour, minute, second = info.date_time
    layout, signature = _CENTRAL
    record = layout.pack(
        signature,
        info.create_version,
        info.create_system,
        info.extract_version,
        info.reserved,
        info.flag_bits,
        info.compress_type,
        hour << 11 | minute << 5 | second // 2,
        (year - 1980) << 9 | month << 5 | day,
        info.CRC,
        *sizes,
        len(name),
        len(extra),
        0,  # comment
        0,  # disk number
        info.internal_attr,
        info.external_attr,
        offset,
    )
    return record + name + extra


def _end_records(count: int, start: int, size: int) -> bytes:
    """The end of central directory record, preceded by its zip64 form where a count or an offset
    does not fit the classic one (as `ZipFile._write_end_record`)."""
    records = b""
    if (
        count > zipfile.ZIP_FILECOUNT_LIMIT
        or start > zipfile.ZIP64_LIMIT
        or size > zipfile.ZIP64_LIMIT
    ):
        records += _END64[0].pack(
            _END64[1],
            44,
            45,
            45,
            0,
            0,
            count,
            count,
            size,
            start,
        )
        records += _LOCATOR[0].pack(_LOCATOR[1], 0, start + size, 1)
        count, size, start = min(count, 0xFFFF), min(size, 0xFFFFFFFF), min(start, 0xFFFFFFFF)
    return records + _END[0].pack(_END[1], 0, 0, count, count, size, start, 0)
