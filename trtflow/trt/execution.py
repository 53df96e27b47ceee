"""Running a serialized engine on numpy feeds: device memory, shapes, the named-tensor API, timing.

Shared by the `tensorrt` runner and the TensorRT judge of `bisect-precision`. It uses only the
named-tensor API that TensorRT 8.6, 10 and 11 all have (`set_input_shape`, `set_tensor_address`,
`execute_async_v3`) — the binding-index API is gone in 10 — and cuda-python's runtime for device
memory and the stream. Device buffers are kept between inferences and grown when a dynamic shape
needs more, so a run of many samples allocates once.

Debug tensors (TensorRT 10+ and TensorRT-RTX): tensors `build-engine` marked with `mark_debug`
are read at run time through an `IDebugListener` on the execution context, so intermediate
tensors are compared without the ONNX being rewritten to expose them as outputs (which would
change what TensorRT fuses). TensorRT calls the listener during the enqueue with the tensor's
address, valid only for the call: it is copied to the host there, on the enqueue's stream.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import numpy as np

from trtflow.errors import StepError
from trtflow.trt.api import TensorRT, import_cudart
from trtflow.trt.inspector import deserialize
from trtflow.trt.log import TensorRTLog, make_logger
from trtflow.trt.profiler import LayerTimes, make_profiler
from trtflow.trt.profiles import engine_profiles, pick_profile


class CudaCalls:
    """The few CUDA runtime calls an engine needs, with errors turned into StepError."""

    def __init__(self) -> None:
        self.runtime = import_cudart()

    def check(self, result: Any, what: str) -> Any:
        error, *values = result if isinstance(result, tuple) else (result,)
        if error != self.runtime.cudaError_t.cudaSuccess:
            _, name = self.runtime.cudaGetErrorName(error)
            raise StepError(
                f"CUDA failed to {what}: {name.decode() if isinstance(name, bytes) else name}"
            )
        return values[0] if len(values) == 1 else (values or None)

    def stream_handle(self, stream: Any) -> int:
        """The address TensorRT wants as `stream_handle`; cuda-python 12.9.1 deprecated `int(stream)`."""
        try:
            return importlib.import_module("cuda.bindings.utils").get_cuda_native_handle(stream)
        except ImportError:
            return int(stream)


DebugTensors = Literal["all"] | tuple[str, ...]


def debug_api_missing(trt: TensorRT) -> str | None:
    """Why `trt` cannot read debug tensors at run time (TensorRT 8.6 has no IDebugListener), or None."""
    if hasattr(trt.module, "IDebugListener") and hasattr(
        trt.module.IExecutionContext, "set_debug_listener"
    ):
        return None
    return (
        f"{trt.name} has no IDebugListener (debug tensors need TensorRT 10 or later, or "
        "TensorRT-RTX); tap the model with surgeon-insert-tap before build-engine instead"
    )


def _capsule_address(capsule: Any) -> int:
    """The pointer TensorRT's bindings hand `process_debug_tensor` inside a PyCapsule."""
    import ctypes

    if isinstance(capsule, int):
        return capsule
    get_name, get_pointer = (
        ctypes.pythonapi.PyCapsule_GetName,
        ctypes.pythonapi.PyCapsule_GetPointer,
    )
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get_pointer(capsule, get_name(capsule)) or 0)


def make_debug_listener(session: EngineSession, sink: dict[str, np.ndarray]) -> Any:
    """An `IDebugListener` that copies each debug tensor into `sink` under its name (the ONNX
    tensor's: `mark_debug` keeps the network's tensor names, which the ONNX parser takes from the
    model). Defined here because its base class exists only once TensorRT is imported; TensorRT
    requires the base `__init__` to be called explicitly."""
    module: Any = session.trt.module
    cuda = session.cuda

    class Listener(module.IDebugListener):
        def __init__(self) -> None:
            module.IDebugListener.__init__(self)

        def process_debug_tensor(
            self, addr: Any, location: Any, type: Any, shape: Any, name: str, stream: int
        ) -> None:
            host = np.empty(tuple(int(d) for d in shape), dtype=session.trt.numpy_dtype(type))
            address = _capsule_address(addr)
            if host.nbytes and location == module.TensorLocation.HOST:
                import ctypes

                ctypes.memmove(host.ctypes.data, address, host.nbytes)
            elif host.nbytes:
                runtime = cuda.runtime
                cuda.check(
                    runtime.cudaMemcpyAsync(
                        host.ctypes.data,
                        address,
                        host.nbytes,
                        runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                        stream,
                    ),
                    f"copy debug tensor `{name}` from the GPU",
                )
                cuda.check(runtime.cudaStreamSynchronize(stream), f"read debug tensor `{name}`")
            sink[name] = host

    return Listener()


class EngineSession:
    """One engine, one execution context, one stream, and device buffers for every I/O tensor."""

    def __init__(
        self,
        trt: TensorRT,
        serialized: bytes,
        log: TensorRTLog,
        layer_times: LayerTimes | None = None,
        debug_tensors: DebugTensors = (),
    ):
        self.trt = trt
        self.log = log
        self.layer_times = layer_times
        self.cuda = CudaCalls()
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (device address, bytes)
        self._stream = None
        self._logger = make_logger(trt.module, log)
        self._runtime = trt.module.Runtime(self._logger)
        self.engine = deserialize(trt, self._runtime, serialized)
        self.context = self.engine.create_execution_context()
        if self.context is None:
            raise StepError(
                "TensorRT could not create an execution context (out of device memory?)"
            )
        if layer_times is not None:
            self._profiler = make_profiler(trt.module, layer_times)
            self.context.profiler = self._profiler
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        input_mode = trt.module.TensorIOMode.INPUT
        self.inputs = [name for name in names if self.engine.get_tensor_mode(name) == input_mode]
        self.outputs = [name for name in names if name not in self.inputs]
        self.profiles = engine_profiles(self.engine, self.inputs)
        self._profile = 0  # the context starts on the first
        self._stream = self.cuda.check(self.cuda.runtime.cudaStreamCreate(), "create a stream")
        self._debug: dict[str, np.ndarray] = {}
        self._listener: Any = None  # held here: the context does not keep it alive
        try:
            self.debug_tensors = self._listen(debug_tensors) if debug_tensors else []
        except BaseException:
            self.close()  # the stream is not left behind
            raise

    def _listen(self, wanted: DebugTensors) -> list[str]:
        """Set the debug listener and turn on the debug state of `wanted` (or of every debug
        tensor); returns the names asked for (empty for `all`: the engine says which it has).
        A wanted ONNX name the engine marked only in its lowered form (`X::fp16`, an FP16 build of
        the lowered model) is read from that tensor."""
        missing = debug_api_missing(self.trt)
        if missing:
            raise StepError(missing)
        self._listener = make_debug_listener(self, self._debug)
        if not self.context.set_debug_listener(self._listener):
            raise StepError(f"{self.trt.name} refused the debug listener")
        if wanted == "all":
            self.context.set_all_tensors_debug_state(True)
            return []
        marked = {name: self._debug_tensor(name) for name in wanted}
        unmarked = [name for name, found in marked.items() if found is None]
        if unmarked:
            raise StepError(
                f"{', '.join(unmarked)} is not a debug tensor of this engine: mark it with "
                "build-engine's `debug_tensors` (or ask for `debug_tensors: all`)"
            )
        for found in marked.values():
            self.context.set_tensor_debug_state(found, True)
        return list(wanted)

    def _debug_tensor(self, name: str) -> str | None:
        """The engine's debug tensor for the ONNX tensor `name`: itself, or its lowered version."""
        from trtflow.precision.lower import LOWERED_PRECISIONS, lowered_name

        candidates = [name] + [lowered_name(name, low) for low in LOWERED_PRECISIONS]
        return next((found for found in candidates if self.engine.is_debug_tensor(found)), None)

    def _debug_values(self) -> dict[str, np.ndarray]:
        """The debug tensors of the last inference under their ONNX names: a lowered tensor
        (`X::fp16`) as `X`, in FP32, as ONNX Runtime computes `X` (the value is the engine's,
        widened exactly); where the engine also marked `X` itself, that one stands."""
        from trtflow.precision.lower import source_name

        values = {name: value for name, value in self._debug.items() if source_name(name) == name}
        for name, value in self._debug.items():
            onnx_name = source_name(name)
            if onnx_name != name and onnx_name not in values:
                values[onnx_name] = value.astype(np.float32)
        return values

    def dtype(self, name: str) -> np.dtype:
        return self.trt.numpy_dtype(self.engine.get_tensor_dtype(name))

    def _buffer(self, name: str, nbytes: int) -> int:
        address, capacity = self._buffers.get(name, (0, 0))
        if nbytes > capacity or not address:
            if address:
                self.cuda.check(self.cuda.runtime.cudaFree(address), f"free the buffer of `{name}`")
            capacity = max(nbytes, 1)  # TensorRT needs an address even for an empty tensor
            address = self.cuda.check(
                self.cuda.runtime.cudaMalloc(capacity), f"allocate {capacity} bytes for `{name}`"
            )
            self._buffers[name] = (address, capacity)
        return address

    def _use_profile(self, hosts: dict[str, np.ndarray]) -> None:
        """Switch to the first optimization profile that holds the feed's shapes (an engine with
        several, build-engine's `profiles`); the shapes set under another profile are gone."""
        if len(self.profiles) < 2:
            return
        index = pick_profile(self.profiles, {name: host.shape for name, host in hosts.items()})
        if index is None:
            raise StepError(
                f"no optimization profile of the engine holds the feed's shapes "
                f"({', '.join(f'{n} {list(h.shape)}' for n, h in hosts.items())}); its profiles: "
                + "; ".join(
                    f"{i}: "
                    + ", ".join(f"{n} {list(r.min)} to {list(r.max)}" for n, r in p.items())
                    for i, p in enumerate(self.profiles)
                )
                + ". Rebuild with a profile that covers them"
            )
        if index != self._profile:
            handle = self.cuda.stream_handle(self._stream)
            if not self.context.set_optimization_profile_async(index, handle):
                raise StepError(
                    f"{self.trt.name} refused to switch to optimization profile {index}"
                )
            self._profile = index

    def _set_input(self, name: str, host: np.ndarray) -> None:
        if not self.context.set_input_shape(name, host.shape):
            low, _, high = self.engine.get_tensor_profile_shape(name, self._profile)
            raise StepError(
                f"input `{name}` has shape {list(host.shape)}, outside what the engine was built for "
                f"({list(low)} to {list(high)}); rebuild with wider `shapes`"
            )

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every engine output for one feed (input name -> array); extra feed entries are ignored."""
        missing = [name for name in self.inputs if name not in feed]
        if missing:
            raise StepError(
                f"the engine needs input(s) {', '.join(missing)}; the feed has {', '.join(feed) or 'nothing'}"
            )
        runtime, stream = self.cuda.runtime, self._stream
        to_device, to_host = (
            runtime.cudaMemcpyKind.cudaMemcpyHostToDevice,
            runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost,
        )
        hosts = {
            name: np.ascontiguousarray(feed[name], dtype=self.dtype(name)) for name in self.inputs
        }
        self._use_profile(hosts)
        for name, host in hosts.items():
            self._set_input(name, host)
        for name, host in hosts.items():
            address = self._buffer(name, host.nbytes)
            self.cuda.check(
                runtime.cudaMemcpyAsync(address, host.ctypes.data, host.nbytes, to_device, stream),
                f"copy input `{name}` to the GPU",
            )
            self.context.set_tensor_address(name, address)
        results: dict[str, np.ndarray] = {}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(dim < 0 for dim in shape):
                raise StepError(
                    f"output `{name}` has a data-dependent shape {list(shape)}, which trtflow cannot run yet"
                )
            results[name] = np.empty(shape, dtype=self.dtype(name))
            self.context.set_tensor_address(name, self._buffer(name, results[name].nbytes))
        if self.layer_times is not None:
            self.layer_times.start_inference()
        self._debug.clear()
        if not self.context.execute_async_v3(self.cuda.stream_handle(stream)):
            reasons = "; ".join(self.log.errors()) or "no reason given"
            raise StepError(f"TensorRT failed to run the engine: {reasons}")
        for name, host in results.items():
            self.cuda.check(
                runtime.cudaMemcpyAsync(
                    host.ctypes.data, self._buffers[name][0], host.nbytes, to_host, stream
                ),
                f"copy output `{name}` from the GPU",
            )
        self.cuda.check(runtime.cudaStreamSynchronize(stream), "finish the inference")
        return self._debug_values() | results

    def close(self) -> None:
        for name, (address, _) in self._buffers.items():
            self.cuda.check(self.cuda.runtime.cudaFree(address), f"free the buffer of `{name}`")
        self._buffers.clear()
        if self._stream is not None:
            self.cuda.check(self.cuda.runtime.cudaStreamDestroy(self._stream), "destroy the stream")
            self._stream = None
        self.context = self.engine = None


def time_layers(
    trt: TensorRT,
    serialized: bytes,
    iterations: int,
    log: TensorRTLog,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> LayerTimes:
    """Per-layer times of `iterations` inferences on generated inputs, as `trtexec --exportProfile`
    measures them (timing barely depends on values): floats uniform in [-1, 1), integers zero,
    dynamic inputs at their `shapes` (the profile's `opt`)."""
    times = LayerTimes()
    session = EngineSession(trt, serialized, log, times)
    try:
        generator = np.random.default_rng(0)
        feed = {}
        for name in session.inputs:
            shape = tuple((shapes or {}).get(name) or session.engine.get_tensor_shape(name))
            dtype = session.dtype(name)
            values = (
                generator.uniform(-1, 1, shape)
                if np.issubdtype(dtype, np.floating) or dtype.kind == "V"
                else np.zeros(shape)
            )
            feed[name] = values.astype(dtype)
        session.infer(feed)  # warm-up, not counted
        times.count, times.times = 0, {}
        for _ in range(iterations):
            session.infer(feed)
    finally:
        session.close()
    return times
