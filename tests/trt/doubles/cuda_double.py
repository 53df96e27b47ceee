"""A strict test double of cuda-python's runtime module (`cuda.bindings.runtime`, or `cuda.cudart`).

Only what trtflow calls exists, with the real names, parameter names and return shapes (every call
returns a tuple whose first item is a `cudaError_t`; checked against cuda-bindings 13.5's
docstrings). Device memory is host memory behind fake addresses: copies read and write the real
host pointers trtflow passes, and reject a direction that does not match the addresses, an
address that was never allocated, a copy past the end of an allocation or an unknown stream.
`allocations()` lets tests check that every buffer was freed.

Environment: TRTFLOW_TEST_GPU=none makes the machine GPU-less (device queries fail); any other value
names the GPU (default "NVIDIA Test GPU").
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import os


class cudaError_t(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInvalidDevicePointer = 17
    cudaErrorInvalidMemcpyDirection = 21
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidResourceHandle = 400


class cudaMemcpyKind(enum.IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3
    cudaMemcpyDefault = 4


class cudaStream_t:
    __slots__ = ("_address",)

    def __init__(self, init_value: int = 0):
        self._address = int(init_value)

    def __int__(self) -> int:
        return self._address

    def getPtr(self) -> int:
        return self._address


class cudaDeviceProp:
    __slots__ = ("name", "major", "minor", "totalGlobalMem")

    def __init__(self) -> None:
        self.name = (os.environ.get("TRTFLOW_TEST_GPU") or "NVIDIA Test GPU").encode()
        self.major, self.minor = 8, 6
        self.totalGlobalMem = 24 * 2**30


_memory: dict[int, bytearray] = {}
_streams: set[int] = set()
_addresses = itertools.count(0x7F00_0000_0000, 0x1_0000)
_stream_ids = itertools.count(0x5000, 0x10)

RUNTIME_VERSION = 12060
DRIVER_VERSION = 12040


def _has_gpu() -> bool:
    return os.environ.get("TRTFLOW_TEST_GPU", "") != "none"


def allocations() -> dict[int, int]:
    """Live device allocations: address -> bytes (test helper, not part of cuda-python)."""
    return {address: len(block) for address, block in _memory.items()}


def device_bytes(address: int, count: int) -> bytes:
    """What the device holds at `address` (used by the TensorRT double to run engines)."""
    block = _memory.get(address)
    if block is None or count > len(block):
        raise ValueError(f"no device allocation of {count} bytes at {address:#x}")
    return bytes(block[:count])


def write_device(address: int, data: bytes) -> None:
    block = _memory.get(address)
    if block is None or len(data) > len(block):
        raise ValueError(f"output of {len(data)} bytes does not fit the buffer at {address:#x}")
    block[: len(data)] = data


def cudaGetDeviceCount():
    return (cudaError_t.cudaSuccess, 1) if _has_gpu() else (cudaError_t.cudaErrorNoDevice, 0)


def cudaGetDeviceProperties(device: int):
    if not isinstance(device, int):
        raise TypeError("device must be an int")
    if not _has_gpu() or device != 0:
        return (
            cudaError_t.cudaErrorNoDevice if not _has_gpu() else cudaError_t.cudaErrorInvalidValue,
            None,
        )
    return cudaError_t.cudaSuccess, cudaDeviceProp()


def cudaRuntimeGetVersion():
    return cudaError_t.cudaSuccess, RUNTIME_VERSION


def cudaDriverGetVersion():
    return cudaError_t.cudaSuccess, DRIVER_VERSION if _has_gpu() else 0


def cudaGetErrorName(error: cudaError_t):
    return cudaError_t.cudaSuccess, cudaError_t(error).name.encode()


def cudaGetErrorString(error: cudaError_t):
    return cudaError_t.cudaSuccess, f"{cudaError_t(error).name} (test double)".encode()


def cudaMalloc(size: int):
    if not isinstance(size, int) or size < 0:
        raise TypeError(f"size must be a non-negative int, got {size!r}")
    if not _has_gpu():
        return cudaError_t.cudaErrorNoDevice, 0
    address = next(_addresses)
    _memory[address] = bytearray(size)
    return cudaError_t.cudaSuccess, address


def cudaFree(devPtr: int):
    if _memory.pop(int(devPtr), None) is None:
        return (cudaError_t.cudaErrorInvalidDevicePointer,)
    return (cudaError_t.cudaSuccess,)


def _copy(dst: int, src: int, count: int, kind: cudaMemcpyKind) -> cudaError_t:
    if not isinstance(kind, cudaMemcpyKind) or not all(
        isinstance(v, int) for v in (dst, src, count)
    ):
        raise TypeError("cudaMemcpy(dst: int, src: int, count: int, kind: cudaMemcpyKind)")
    if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
        if dst not in _memory or src in _memory or count > len(_memory[dst]):
            return cudaError_t.cudaErrorInvalidValue
        _memory[dst][:count] = ctypes.string_at(src, count)
        return cudaError_t.cudaSuccess
    if kind == cudaMemcpyKind.cudaMemcpyDeviceToHost:
        if src not in _memory or dst in _memory or count > len(_memory[src]):
            return cudaError_t.cudaErrorInvalidValue
        ctypes.memmove(dst, bytes(_memory[src][:count]), count)
        return cudaError_t.cudaSuccess
    return cudaError_t.cudaErrorInvalidMemcpyDirection  # trtflow never copies any other way


def cudaMemcpy(dst, src, count: int, kind: cudaMemcpyKind):
    return (_copy(dst, src, count, kind),)


def cudaMemcpyAsync(dst, src, count: int, kind: cudaMemcpyKind, stream):
    if int(stream) not in _streams:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    return (_copy(dst, src, count, kind),)


def cudaStreamCreate():
    if not _has_gpu():
        return cudaError_t.cudaErrorNoDevice, None
    handle = next(_stream_ids)
    _streams.add(handle)
    return cudaError_t.cudaSuccess, cudaStream_t(handle)


def cudaStreamSynchronize(stream):
    return (
        cudaError_t.cudaSuccess
        if int(stream) in _streams
        else cudaError_t.cudaErrorInvalidResourceHandle,
    )


def cudaStreamDestroy(stream):
    if int(stream) not in _streams:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    _streams.discard(int(stream))
    return (cudaError_t.cudaSuccess,)


def is_stream(handle: int) -> bool:
    return handle in _streams


__all__ = [name for name in dir() if name.startswith("cuda")]
