"""Strict test doubles of the `tensorrt` Python module: 8.6, 10.x and 11.x, each with only its own API.

Each generation offers exactly the names that generation has, as `tests/trt/API_FACTS.md` lists
them (checked against NVIDIA's documentation and the docstrings in each release's Python
bindings): the 11.x double has no `BuilderFlag.FP16`, no `OBEY_PRECISION_CONSTRAINTS`, no
`ILayer.precision`, no `set_output_type`, no `EXPLICIT_BATCH`, no cuBLAS/cuDNN tactic sources and
writes `"I/O Tensors"` in the inspector JSON; the 8.6 double has no `BF16`, no `STRONGLY_TYPED`,
no `ParserError.node_name`, and its ONNX parser refuses an implicit-batch network. Every class has
`__slots__`, so reading or writing an attribute the generation lacks raises AttributeError;
methods keep TensorRT's parameter names and check argument types.

Behaviour is real enough to test trtflow end to end without a GPU: the parser reads the ONNX model
(one layer per node, named after it, with `[ONNX Layer: name]` metadata from 10.x on); a build
checks profiles, precision flags and constraints, timing-cache reuse and tactic masks; the engine
runs the model with ONNX Runtime on the CPU, reading and writing "device" memory through the
CUDA double. A weakly typed FP16 build rounds the float outputs of every layer not constrained to
FP32 through float16 (overflow becomes inf, as on a GPU); a strongly typed build runs the model's
own types. From 10.x, tensors marked with `mark_debug` are computed as outputs are (same rounding)
and handed to the context's `IDebugListener` from "device" memory that lives only for the call.
"""

from __future__ import annotations

import enum
import json
import os
from typing import Any

import cuda_double
import numpy as np

MAGIC = b"TRTFLOW-DOUBLE-ENGINE\n"


class DoubleViolation(RuntimeError):
    """trtflow used the double in a way the real TensorRT would reject or ignore."""


def _device() -> str:
    return os.environ.get("TRTFLOW_TEST_GPU") or "NVIDIA Test GPU"


def _expect(value: Any, kinds: Any, what: str) -> None:
    if not isinstance(value, kinds):
        raise TypeError(f"{what}: incompatible function arguments ({type(value).__name__} given)")


def _at(items: list, index: Any) -> Any:
    """TensorRT's indexed getters: an int index, None when out of range."""
    _expect(index, int, "index")
    return items[index] if 0 <= index < len(items) else None


def generation_namespace(version: str) -> dict[str, Any]:
    """The module namespace of the double for a full version string ("8.6.1", "10.13.0.35", "11.4.0.106")."""
    major = int(version.split(".")[0])
    if major not in (8, 10, 11):
        raise ValueError(f"no TensorRT double for {version}")
    return _Generation(version, major).namespace()


class _Generation:
    def __init__(self, version: str, major: int):
        self.version, self.major = version, major
        self.weak = major < 11
        self.strong_flag = major >= 10

    # --- enums, per generation ---------------------------------------------------------------------

    def enums(self) -> dict[str, type]:
        data_types = ["FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8"]
        if self.major >= 10:
            data_types += ["BF16", "INT64", "INT4"]
        builder_flags = {
            8: [
                "FP16",
                "INT8",
                "DEBUG",
                "GPU_FALLBACK",
                "STRICT_TYPES",
                "REFIT",
                "DISABLE_TIMING_CACHE",
                "TF32",
                "SPARSE_WEIGHTS",
                "SAFETY_SCOPE",
                "OBEY_PRECISION_CONSTRAINTS",
                "PREFER_PRECISION_CONSTRAINTS",
                "DIRECT_IO",
                "REJECT_EMPTY_ALGORITHMS",
                "ENABLE_TACTIC_HEURISTIC",
                "VERSION_COMPATIBLE",
                "EXCLUDE_LEAN_RUNTIME",
                "FP8",
            ],
            10: [
                "FP16",
                "BF16",
                "INT8",
                "DEBUG",
                "GPU_FALLBACK",
                "REFIT",
                "DISABLE_TIMING_CACHE",
                "EDITABLE_TIMING_CACHE",
                "TF32",
                "SPARSE_WEIGHTS",
                "SAFETY_SCOPE",
                "OBEY_PRECISION_CONSTRAINTS",
                "PREFER_PRECISION_CONSTRAINTS",
                "DIRECT_IO",
                "REJECT_EMPTY_ALGORITHMS",
                "VERSION_COMPATIBLE",
                "FP8",
                "ERROR_ON_TIMING_CACHE_MISS",
                "DISABLE_COMPILATION_CACHE",
                "WEIGHTLESS",
                "STRIP_PLAN",
                "REFIT_IDENTICAL",
                "WEIGHT_STREAMING",
                "INT4",
                "REFIT_INDIVIDUAL",
                "STRICT_NANS",
                "MONITOR_MEMORY",
                "FP4",
                "DISTRIBUTIVE_INDEPENDENCE",
            ],
            11: [
                "DEBUG",
                "GPU_FALLBACK",
                "REFIT",
                "DISABLE_TIMING_CACHE",
                "EDITABLE_TIMING_CACHE",
                "TF32",
                "SPARSE_WEIGHTS",
                "SAFETY_SCOPE",
                "VERSION_COMPATIBLE",
                "ERROR_ON_TIMING_CACHE_MISS",
                "DISABLE_COMPILATION_CACHE",
                "STRIP_PLAN",
                "REFIT_IDENTICAL",
                "WEIGHT_STREAMING",
                "REFIT_INDIVIDUAL",
                "STRICT_NANS",
                "MONITOR_MEMORY",
                "DISTRIBUTIVE_INDEPENDENCE",
            ],
        }[self.major]
        network_flags = {
            8: ["EXPLICIT_BATCH", "EXPLICIT_PRECISION"],
            10: [
                "EXPLICIT_BATCH",
                "STRONGLY_TYPED",
                "PREFER_AOT_PYTHON_PLUGINS",
                "PREFER_JIT_PYTHON_PLUGINS",
            ],
            11: ["STRONGLY_TYPED", "PREFER_AOT_PYTHON_PLUGINS", "PREFER_JIT_PYTHON_PLUGINS"],
        }[self.major]
        tactic_sources = ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]
        if self.major < 11:
            tactic_sources = ["CUBLAS", "CUBLAS_LT", "CUDNN"] + tactic_sources
        pools = [
            "WORKSPACE",
            "DLA_MANAGED_SRAM",
            "DLA_LOCAL_DRAM",
            "DLA_GLOBAL_DRAM",
            "TACTIC_DRAM",
        ]
        if self.major >= 10:
            pools.append("TACTIC_SHARED_MEMORY")
        layer_types = [
            "CONVOLUTION",
            "ACTIVATION",
            "POOLING",
            "ELEMENTWISE",
            "SOFTMAX",
            "CONCATENATION",
            "UNARY",
            "SHUFFLE",
            "REDUCE",
            "CONSTANT",
            "IDENTITY",
            "MATRIX_MULTIPLY",
            "SHAPE",
            "GATHER",
            "SLICE",
            "CAST" if self.major >= 10 else "SELECT",
            "NORMALIZATION",
        ]
        return {
            "DataType": enum.IntEnum("DataType", data_types, start=0),
            "BuilderFlag": enum.IntEnum("BuilderFlag", builder_flags, start=0),
            "NetworkDefinitionCreationFlag": enum.IntEnum(
                "NetworkDefinitionCreationFlag", network_flags, start=0
            ),
            "TacticSource": enum.IntEnum("TacticSource", tactic_sources, start=0),
            "MemoryPoolType": enum.IntEnum("MemoryPoolType", pools, start=0),
            "LayerType": enum.IntEnum("LayerType", layer_types, start=0),
            "ProfilingVerbosity": enum.IntEnum(
                "ProfilingVerbosity", ["LAYER_NAMES_ONLY", "NONE", "DETAILED"], start=0
            ),
            "LayerInformationFormat": enum.IntEnum(
                "LayerInformationFormat", ["ONELINE", "JSON"], start=0
            ),
            "TensorIOMode": enum.IntEnum("TensorIOMode", ["NONE", "INPUT", "OUTPUT"], start=0),
            # debug tensors (IDebugListener) arrived in TensorRT 10.0
            **(
                {"TensorLocation": enum.IntEnum("TensorLocation", ["DEVICE", "HOST"], start=0)}
                if self.major >= 10
                else {}
            ),
        }

    def namespace(self) -> dict[str, Any]:
        enums = self.enums()
        data_type = enums["DataType"]
        aliases = {
            "float32": "FLOAT",
            "float16": "HALF",
            "int8": "INT8",
            "int32": "INT32",
            "bool": "BOOL",
            "uint8": "UINT8",
            "fp8": "FP8",
            "bfloat16": "BF16",
            "int64": "INT64",
            "int4": "INT4",
        }
        names: dict[str, Any] = {"__version__": self.version, **enums}
        names.update(
            {
                alias: getattr(data_type, member)
                for alias, member in aliases.items()
                if member in data_type.__members__
            }
        )
        module = _Module(self, names)
        names.update(module.classes())
        return names


# --- the classes, built per generation -------------------------------------------------------------


class _Module:
    """Builds the generation's classes over shared behaviour; `g` is the generation, `n` its names."""

    def __init__(self, generation: _Generation, names: dict[str, Any]):
        self.g = generation
        self.n = names

    def numpy_of(self, data_type: Any) -> np.dtype:
        import ml_dtypes

        table = {
            "FLOAT": np.float32,
            "HALF": np.float16,
            "INT8": np.int8,
            "INT32": np.int32,
            "BOOL": np.bool_,
            "UINT8": np.uint8,
            "BF16": ml_dtypes.bfloat16,
            "INT64": np.int64,
        }
        return np.dtype(table[data_type.name])

    def trt_of_onnx(self, elem_type: int) -> Any:
        data_type = self.n["DataType"]
        table = {
            1: "FLOAT",
            10: "HALF",
            16: "BF16",
            3: "INT8",
            6: "INT32",
            7: "INT64",
            9: "BOOL",
            2: "UINT8",
        }
        name = table.get(elem_type, "FLOAT")
        if name == "INT64" and self.g.major < 10:
            name = "INT32"  # 8.6 has no INT64: its parser casts to INT32
        return getattr(data_type, name)

    def classes(self) -> dict[str, Any]:  # noqa: C901 - one closure per class keeps each version's surface in one place
        g, n, module = self.g, self.n, self
        LayerType, DataType = n["LayerType"], n["DataType"]

        class ILogger:
            __slots__ = ("_base_initialized", "__dict__")
            Severity = enum.IntEnum(
                "Severity", ["INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"], start=0
            )

            def __init__(self) -> None:
                self._base_initialized = True

            def log(self, severity, msg):
                raise RuntimeError('Tried to call pure virtual function "ILogger::log"')

        class Logger(ILogger):
            __slots__ = ("min_severity",)

            def __init__(self, min_severity=ILogger.Severity.WARNING):
                ILogger.__init__(self)
                self.min_severity = min_severity

            def log(self, severity, msg):
                pass

        for member in ILogger.Severity:
            setattr(Logger, member.name, member)

        def checked_logger(logger: Any) -> Any:
            _expect(logger, ILogger, "logger")
            if not getattr(logger, "_base_initialized", False):
                raise TypeError("ILogger.__init__() must be called when overriding __init__")
            return logger

        class IProfiler:
            __slots__ = ("_base_initialized", "__dict__")

            def __init__(self) -> None:
                self._base_initialized = True

            def report_layer_time(self, layer_name, ms):
                raise RuntimeError(
                    'Tried to call pure virtual function "IProfiler::report_layer_time"'
                )

        class IDebugListener:
            """10.x on: the user's subclass gets `process_debug_tensor` for each debug tensor
            whose debug state is on, with the device address as a capsule, valid only during
            the call."""

            __slots__ = ("_base_initialized", "__dict__")

            def __init__(self) -> None:
                self._base_initialized = True

            def process_debug_tensor(self, addr, location, type, shape, name, stream):
                raise RuntimeError(
                    'Tried to call pure virtual function "IDebugListener::process_debug_tensor"'
                )

        class IHostMemory:
            __slots__ = ("_data",)

            def __init__(self, data: bytes):
                self._data = data

            def __bytes__(self) -> bytes:
                return self._data

            @property
            def nbytes(self) -> int:
                return len(self._data)

        class ITensor:
            __slots__ = ("name", "dtype", "shape", "is_network_input", "_network", "_producer")

            def __init__(self, network, name, dtype, shape, producer=None):
                self._network, self._producer = network, producer
                self.name, self.dtype, self.shape = name, dtype, tuple(shape)
                self.is_network_input = producer is None

            @property
            def is_network_output(self) -> bool:
                return self in self._network._outputs

            @property
            def is_execution_tensor(self) -> bool:
                return self._producer is None or self._producer.type not in (
                    LayerType.SHAPE,
                    LayerType.CONSTANT,
                )

            @property
            def is_shape_tensor(self) -> bool:
                return self._producer is not None and self._producer.type == LayerType.SHAPE

        class ILayerBase:
            __slots__ = ("name", "metadata", "type", "_inputs", "_outputs", "_node", "_network")

            @property
            def num_inputs(self) -> int:
                return len(self._inputs)

            @property
            def num_outputs(self) -> int:
                return len(self._outputs)

            def get_input(self, index):
                return _at(self._inputs, index)

            def get_output(self, index):
                return _at(self._outputs, index)

            def get_output_type(self, index):
                return self._outputs[index].dtype

        class ILayerWeak(ILayerBase):
            """8.6 and 10.x: per-layer precision constraints (not allowed in strongly typed networks)."""

            __slots__ = ("_precision", "_output_types")

            def _weak_only(self) -> None:
                if self._network._strongly_typed:
                    raise DoubleViolation(
                        "setting layer precision or output types is not allowed in a strongly "
                        "typed network"
                    )

            @property
            def precision(self):
                return self._precision if self._precision is not None else DataType.FLOAT

            @precision.setter
            def precision(self, value):
                _expect(value, DataType, "precision")
                self._weak_only()
                self._precision = value

            @property
            def precision_is_set(self) -> bool:
                return self._precision is not None

            def reset_precision(self):
                self._precision = None

            def set_output_type(self, index, dtype):
                _expect(index, int, "index")
                _expect(dtype, DataType, "dtype")
                self._weak_only()
                self._output_types[index] = dtype

            def output_type_is_set(self, index):
                return index in self._output_types

            def reset_output_type(self, index):
                self._output_types.pop(index, None)

        ILayer = ILayerWeak if g.weak else ILayerBase

        class INetworkDefinition:
            __slots__ = (
                "_layers",
                "_inputs",
                "_outputs",
                "_flags",
                "_strongly_typed",
                "_model",
                "_explicit_batch",
                "_debug",
            )

            def __init__(self, flags: int):
                self._layers, self._inputs, self._outputs, self._debug = [], [], [], []
                self._flags, self._model = flags, None
                network_flags = n["NetworkDefinitionCreationFlag"]
                self._explicit_batch = g.major >= 10 or bool(
                    flags & (1 << int(network_flags.EXPLICIT_BATCH))
                )
                self._strongly_typed = not g.weak or (
                    g.strong_flag and bool(flags & (1 << int(network_flags.STRONGLY_TYPED)))
                )

            num_layers = property(lambda self: len(self._layers))
            num_inputs = property(lambda self: len(self._inputs))
            num_outputs = property(lambda self: len(self._outputs))

            def get_layer(self, index):
                return _at(self._layers, index)

            def get_input(self, index):
                return _at(self._inputs, index)

            def get_output(self, index):
                return _at(self._outputs, index)

            def mark_output(self, tensor):
                _expect(tensor, ITensor, "tensor")
                if tensor not in self._outputs:
                    self._outputs.append(tensor)

            def unmark_output(self, tensor):
                _expect(tensor, ITensor, "tensor")
                if tensor in self._outputs:
                    self._outputs.remove(tensor)

        def mark_debug(self, tensor):
            _expect(tensor, ITensor, "tensor")
            if tensor not in self._debug:
                self._debug.append(tensor)
            return True

        if g.major >= 10:
            INetworkDefinition.mark_debug = mark_debug

        class ParserError:
            __slots__ = ("_node", "_name", "_op", "_desc")

            def __init__(self, node, name, op, desc):
                self._node, self._name, self._op, self._desc = node, name, op, desc

            def code(self):
                return 8  # ErrorCode.UNSUPPORTED_NODE

            def desc(self):
                return self._desc

            def file(self):
                return "ModelImporter.cpp"

            def line(self):
                return 1

            def func(self):
                return "importNode"

            def node(self):
                return self._node

            def __str__(self):
                return f"In node {self._node} ({self._name}): {self._desc}"

        if g.major >= 10:
            ParserError.node_name = lambda self: self._name
            ParserError.node_operator = lambda self: self._op
            ParserError.local_function_stack = lambda self: []

        op_layer_types = {
            "Conv": "CONVOLUTION",
            "Relu": "ACTIVATION",
            "Sigmoid": "ACTIVATION",
            "Tanh": "ACTIVATION",
            "MatMul": "MATRIX_MULTIPLY",
            "Gemm": "MATRIX_MULTIPLY",
            "Shape": "SHAPE",
            "Constant": "CONSTANT",
            "Softmax": "SOFTMAX",
            "Concat": "CONCATENATION",
            "Reshape": "SHUFFLE",
            "Transpose": "SHUFFLE",
            "Flatten": "SHUFFLE",
            "Identity": "IDENTITY",
            "ReduceMean": "REDUCE",
            "ReduceSum": "REDUCE",
            "Sqrt": "UNARY",
            "Exp": "UNARY",
            "Log": "UNARY",
            "Abs": "UNARY",
            "Neg": "UNARY",
            "Reciprocal": "UNARY",
            "Gather": "GATHER",
            "Slice": "SLICE",
            "Cast": "CAST" if g.major >= 10 else "IDENTITY",
        }

        class OnnxParser:
            __slots__ = ("_network", "_logger", "_errors")

            def __init__(self, network, logger):
                _expect(network, INetworkDefinition, "network")
                self._network, self._logger, self._errors = network, checked_logger(logger), []

            num_errors = property(lambda self: len(self._errors))

            def get_error(self, index):
                return _at(self._errors, index)

            def clear_errors(self):
                self._errors.clear()

            def parse(self, model, path=None):
                raise DoubleViolation(
                    "trtflow parses from files (parse_from_file), so external data resolves"
                )

            def parse_from_file(self, model):
                _expect(model, str, "model")
                import onnx

                if not self._network._explicit_batch:
                    self._errors.append(
                        ParserError(
                            -1,
                            "",
                            "",
                            "Network must have explicit batch dimensions "
                            "(create it with NetworkDefinitionCreationFlag.EXPLICIT_BATCH)",
                        )
                    )
                    return False
                proto = onnx.load(model)
                inferred = onnx.shape_inference.infer_shapes(proto)
                self._network._model = proto
                return self._import(inferred)

            def _import(self, model) -> bool:
                network = self._network
                graph = model.graph
                types = {
                    v.name: v.type.tensor_type
                    for v in [*graph.input, *graph.value_info, *graph.output]
                }
                initializers = {i.name for i in graph.initializer}
                tensors: dict[str, Any] = {}

                def dims(tensor_type):
                    return [
                        d.dim_value if d.HasField("dim_value") else -1
                        for d in tensor_type.shape.dim
                    ]

                for value in graph.input:
                    if value.name in initializers:
                        continue
                    tensor_type = value.type.tensor_type
                    tensors[value.name] = ITensor(
                        network,
                        value.name,
                        module.trt_of_onnx(tensor_type.elem_type),
                        dims(tensor_type),
                    )
                    network._inputs.append(tensors[value.name])
                for index, node in enumerate(graph.node):
                    if node.domain not in ("", "ai.onnx") or node.op_type.startswith(
                        "NotInTensorRT"
                    ):
                        self._errors.append(
                            ParserError(
                                index,
                                node.name,
                                node.op_type,
                                f"No importer registered for op: {node.op_type}",
                            )
                        )
                        return False
                    self._add_layers(node, tensors, types, dims)
                for value in graph.output:
                    network._outputs.append(tensors[value.name])
                return True

            def _layer(self, node, name, layer_type, inputs):
                layer = ILayer.__new__(ILayer)
                layer.name, layer.type, layer._node, layer._network = (
                    name,
                    layer_type,
                    node,
                    self._network,
                )
                layer.metadata = f"[ONNX Layer: {node.name}]" if g.major >= 10 else ""
                if g.weak:
                    layer._precision, layer._output_types = None, {}
                layer._inputs, layer._outputs = inputs, []
                self._network._layers.append(layer)
                return layer

            def _add_layers(self, node, tensors, types, dims):
                """One layer per node, named after it; a Gemm with bias becomes a matrix multiply plus an
                elementwise layer (`<node>_1`), which only the metadata ties back to the node."""
                inputs = [tensors[name] for name in node.input if name in tensors]
                layer_type = getattr(LayerType, op_layer_types.get(node.op_type, "ELEMENTWISE"))
                layer = self._layer(node, node.name, layer_type, inputs)
                if node.op_type == "Gemm" and len(node.input) == 3:
                    product = ITensor(
                        self._network, f"{node.output[0]}::product", DataType.FLOAT, [], layer
                    )
                    layer._outputs.append(product)
                    layer = self._layer(node, f"{node.name}_1", LayerType.ELEMENTWISE, [product])
                for name in node.output:
                    tensor_type = types.get(name)
                    dtype = (
                        module.trt_of_onnx(tensor_type.elem_type) if tensor_type else DataType.FLOAT
                    )
                    tensors[name] = ITensor(
                        self._network, name, dtype, dims(tensor_type) if tensor_type else [], layer
                    )
                    layer._outputs.append(tensors[name])

        class IOptimizationProfile:
            __slots__ = ("_shapes",)

            def __init__(self):
                self._shapes = {}

            def set_shape(self, input, min, opt, max):
                _expect(input, str, "input")
                shapes = [tuple(int(d) for d in s) for s in (min, opt, max)]
                if len({len(s) for s in shapes}) != 1 or any(
                    not a <= b <= c for a, b, c in zip(*shapes)
                ):
                    raise ValueError("min <= opt <= max must hold for every dimension")
                self._shapes[input] = shapes

            def get_shape(self, input):
                return self._shapes.get(input, [])

            def __bool__(self):
                return True

        class ITimingCache:
            __slots__ = ("_entries", "_device")

            def __init__(self, entries, device):
                self._entries, self._device = dict(entries), device

            def serialize(self):
                return IHostMemory(
                    json.dumps({"device": self._device, "entries": self._entries}).encode()
                )

            def combine(self, input_cache, ignore_mismatch):
                _expect(input_cache, ITimingCache, "input_cache")
                self._entries.update(input_cache._entries)
                return True

            def reset(self):
                self._entries.clear()
                return True

        class IBuilderConfig:
            __slots__ = (
                "_flags",
                "_pools",
                "_tactics",
                "_cache",
                "_profiles",
                "_level",
                "profiling_verbosity",
                "avg_timing_iterations",
            )

            def __init__(self):
                self._flags, self._pools, self._profiles, self._cache = set(), {}, [], None
                if "TF32" in n["BuilderFlag"].__members__:  # on by default, as in TensorRT
                    self._flags.add(n["BuilderFlag"].TF32)
                self._tactics = sum(
                    1 << int(member)
                    for member in n["TacticSource"]
                    if member.name not in ("CUBLAS", "CUBLAS_LT", "CUDNN")
                )
                self._level = 3
                self.profiling_verbosity = n["ProfilingVerbosity"].LAYER_NAMES_ONLY
                self.avg_timing_iterations = 1

            def set_flag(self, flag):
                _expect(flag, n["BuilderFlag"], "flag")
                self._flags.add(flag)

            def clear_flag(self, flag):
                _expect(flag, n["BuilderFlag"], "flag")
                self._flags.discard(flag)

            def get_flag(self, flag):
                _expect(flag, n["BuilderFlag"], "flag")
                return flag in self._flags

            def set_memory_pool_limit(self, pool, pool_size):
                _expect(pool, n["MemoryPoolType"], "pool")
                _expect(pool_size, int, "pool_size")
                self._pools[pool] = pool_size

            def get_memory_pool_limit(self, pool):
                return self._pools.get(pool, 24 * 2**30)

            def set_tactic_sources(self, tactic_sources):
                _expect(tactic_sources, int, "tactic_sources")
                valid = sum(1 << int(member) for member in n["TacticSource"])
                if tactic_sources & ~valid:
                    return False
                self._tactics = tactic_sources
                return True

            def get_tactic_sources(self):
                return self._tactics

            def create_timing_cache(self, serialized_timing_cache):
                _expect(
                    serialized_timing_cache,
                    (bytes, bytearray, memoryview),
                    "serialized_timing_cache",
                )
                if not serialized_timing_cache:
                    return ITimingCache({}, _device())
                stored = json.loads(bytes(serialized_timing_cache))
                return ITimingCache(stored["entries"], stored["device"])

            def set_timing_cache(self, cache, ignore_mismatch):
                _expect(cache, ITimingCache, "cache")
                _expect(ignore_mismatch, bool, "ignore_mismatch")
                if cache._device != _device() and not ignore_mismatch:
                    return False
                self._cache = cache
                return True

            def get_timing_cache(self):
                return self._cache

            def add_optimization_profile(self, profile):
                _expect(profile, IOptimizationProfile, "profile")
                self._profiles.append(profile)
                return len(self._profiles) - 1

            num_optimization_profiles = property(lambda self: len(self._profiles))

            @property
            def builder_optimization_level(self):
                return self._level

            @builder_optimization_level.setter
            def builder_optimization_level(self, value):
                _expect(value, int, "builder_optimization_level")
                if not 0 <= value <= 5:
                    raise DoubleViolation(f"builder optimization level {value} is not in 0..5")
                self._level = value

        class Builder:
            __slots__ = ("_logger",)

            def __init__(self, logger):
                self._logger = checked_logger(logger)
                if not cuda_double.cudaGetDeviceCount()[
                    1
                ]:  # what TensorRT does without a usable GPU
                    logger.log(
                        ILogger.Severity.ERROR, "CUDA initialization failure with error: 100"
                    )
                    raise TypeError("pybind11::init(): factory function returned nullptr")

            def create_network(self, flags=0):
                _expect(flags, int, "flags")
                return INetworkDefinition(flags)

            def create_builder_config(self):
                return IBuilderConfig()

            def create_optimization_profile(self):
                return IOptimizationProfile()

            def _log(self, severity, message):
                self._logger.log(ILogger.Severity[severity], message)

            def build_serialized_network(self, network, config):
                _expect(network, INetworkDefinition, "network")
                _expect(config, IBuilderConfig, "config")
                return module.build(self, network, config)

        if g.weak:
            Builder.platform_has_fast_fp16 = property(lambda self: True)

        class EngineInspector:
            __slots__ = ("_engine", "execution_context")

            def __init__(self, engine):
                self._engine, self.execution_context = engine, None

            def get_engine_information(self, format):
                _expect(format, n["LayerInformationFormat"], "format")
                return json.dumps(module.engine_document(self._engine._plan))

            def get_layer_information(self, layer_index, format):
                return json.dumps(module.engine_document(self._engine._plan)["Layers"][layer_index])

        class ICudaEngine:
            __slots__ = ("_plan", "_io")

            def __init__(self, plan):
                self._plan = plan
                self._io = {t["name"]: t for t in plan["io"]}

            num_io_tensors = property(lambda self: len(self._plan["io"]))
            num_layers = property(lambda self: len(self._plan["layers"]))

            def _tensor(self, name):
                _expect(name, str, "name")
                if name not in self._io:
                    raise DoubleViolation(f"engine has no I/O tensor `{name}`")
                return self._io[name]

            def get_tensor_name(self, index):
                _expect(index, int, "index")
                return self._plan["io"][index]["name"]

            def get_tensor_mode(self, name):
                return getattr(n["TensorIOMode"], self._tensor(name)["mode"])

            def get_tensor_dtype(self, name):
                return getattr(DataType, self._tensor(name)["dtype"])

            def get_tensor_shape(self, name):
                return tuple(self._tensor(name)["shape"])

            num_optimization_profiles = property(lambda self: len(self._plan["profiles"]))

            def get_tensor_profile_shape(self, name, profile_index):
                _expect(profile_index, int, "profile_index")
                profiles = self._plan["profiles"]
                shapes = (
                    profiles[profile_index].get(name) if profile_index < len(profiles) else None
                )
                if shapes is None:
                    raise DoubleViolation(f"no profile {profile_index} shapes for `{name}`")
                return [tuple(s) for s in shapes]

            def create_execution_context(self):
                return IExecutionContext(self)

            def create_engine_inspector(self):
                return EngineInspector(self)

        if g.major < 10:  # the binding-index API was removed in 10.0
            ICudaEngine.num_bindings = property(lambda self: len(self._plan["io"]))
        else:
            ICudaEngine.is_debug_tensor = lambda self, name: (
                name in {t["name"] for t in self._plan["debug"]}
            )

        class IExecutionContext:
            __slots__ = (
                "_engine",
                "_shapes",
                "_addresses",
                "_profiler",
                "enqueue_emits_profile",
                "_session",
                "_output_shapes",
                "_listener",
                "_debug_on",
                "_stream",
                "_profile",
            )

            def __init__(self, engine):
                self._engine, self._shapes, self._addresses, self._profiler = engine, {}, {}, None
                self._listener, self._debug_on, self._stream = None, set(), 0
                self._profile = 0
                self.enqueue_emits_profile = True
                self._session = module.session(engine._plan)
                self._output_shapes = {}

            @property
            def profiler(self):
                return self._profiler

            @profiler.setter
            def profiler(self, value):
                _expect(value, IProfiler, "profiler")
                if not getattr(value, "_base_initialized", False):
                    raise TypeError("IProfiler.__init__() must be called when overriding __init__")
                self._profiler = value

            def set_input_shape(self, name, shape):
                tensor = self._engine._tensor(name)
                shape = tuple(int(d) for d in shape)
                if tensor["mode"] != "INPUT" or len(shape) != len(tensor["shape"]):
                    return False
                profile = self._engine._plan["profiles"][self._profile]
                low, _, high = profile.get(name, [tensor["shape"]] * 3)
                if any(not a <= d <= b for a, d, b in zip(low, shape, high)):
                    return False
                self._shapes[name] = shape
                self._output_shapes = {}
                return True

            active_optimization_profile = property(lambda self: self._profile)

            def set_optimization_profile_async(self, profile_index, stream_handle):
                """TensorRT: the shapes set under another profile are forgotten."""
                _expect(profile_index, int, "profile_index")
                _expect(stream_handle, int, "stream_handle")
                if not cuda_double.is_stream(stream_handle):
                    raise DoubleViolation("set_optimization_profile_async needs a created stream")
                if not 0 <= profile_index < len(self._engine._plan["profiles"]):
                    return False
                self._profile, self._shapes, self._output_shapes = profile_index, {}, {}
                return True

            def get_tensor_shape(self, name):
                tensor = self._engine._tensor(name)
                if tensor["mode"] == "INPUT":
                    return self._shapes.get(name, tuple(tensor["shape"]))
                inputs = [t for t in self._engine._plan["io"] if t["mode"] == "INPUT"]
                if any(t["name"] not in self._shapes and -1 in t["shape"] for t in inputs):
                    return tuple(tensor["shape"])
                if not self._output_shapes:
                    feed = {
                        t["name"]: np.zeros(
                            self._shapes.get(t["name"], t["shape"]),
                            module.numpy_of(getattr(DataType, t["dtype"])),
                        )
                        for t in inputs
                    }
                    self._output_shapes = {
                        name: value.shape for name, value in module.run_session(self, feed).items()
                    }
                return tuple(self._output_shapes[name])

            def set_tensor_address(self, name, memory):
                self._engine._tensor(name)
                _expect(memory, int, "memory")
                self._addresses[name] = memory
                return True

            def get_tensor_address(self, name):
                return self._addresses.get(name, 0)

            def execute_async_v3(self, stream_handle):
                _expect(stream_handle, int, "stream_handle")
                if not cuda_double.is_stream(stream_handle):
                    raise DoubleViolation(
                        "execute_async_v3 needs a stream created with cudaStreamCreate"
                    )
                self._stream = stream_handle
                return module.execute(self)

            def report_to_profiler(self):
                return True

        def set_debug_listener(self, listener):
            _expect(listener, IDebugListener, "listener")
            if not getattr(listener, "_base_initialized", False):
                raise TypeError("IDebugListener.__init__() must be called when overriding __init__")
            self._listener = listener
            return True

        def set_tensor_debug_state(self, name, flag):
            _expect(name, str, "name")
            _expect(flag, bool, "flag")
            if not self._engine.is_debug_tensor(name):
                return False  # only tensors marked at build time
            (self._debug_on.add if flag else self._debug_on.discard)(name)
            return True

        def set_all_tensors_debug_state(self, flag):
            _expect(flag, bool, "flag")
            names = {t["name"] for t in self._engine._plan["debug"]}
            self._debug_on = names if flag else set()
            return True

        if g.major >= 10:
            IExecutionContext.set_debug_listener = set_debug_listener
            IExecutionContext.set_tensor_debug_state = set_tensor_debug_state
            IExecutionContext.set_all_tensors_debug_state = set_all_tensors_debug_state

        class Runtime:
            __slots__ = ("_logger",)

            def __init__(self, logger):
                self._logger = checked_logger(logger)

            def deserialize_cuda_engine(self, serialized_engine):
                _expect(
                    serialized_engine,
                    (bytes, bytearray, memoryview, IHostMemory),
                    "serialized_engine",
                )
                data = bytes(serialized_engine)
                if not data.startswith(MAGIC):
                    self._logger.log(
                        ILogger.Severity.ERROR,
                        "The engine plan file is not compatible with this version",
                    )
                    return None
                header, _, onnx_bytes = data[len(MAGIC) :].partition(b"\n")
                plan = json.loads(header)
                if plan["tensorrt"] != g.version:
                    self._logger.log(
                        ILogger.Severity.ERROR,
                        f"The engine plan file is not compatible with this "
                        f"version of TensorRT, expecting {g.version} got {plan['tensorrt']}",
                    )
                    return None
                plan["onnx"] = onnx_bytes
                return ICudaEngine(plan)

        self.kinds = {"ITensor": ITensor, "DataType": DataType}
        return {
            "ILogger": ILogger,
            "Logger": Logger,
            "IProfiler": IProfiler,
            "Builder": Builder,
            "Runtime": Runtime,
            "OnnxParser": OnnxParser,
            "ParserError": ParserError,
            "ILayer": ILayer,
            "INetworkDefinition": INetworkDefinition,
            "IBuilderConfig": IBuilderConfig,
            "ITensor": ITensor,
            "IOptimizationProfile": IOptimizationProfile,
            "ITimingCache": ITimingCache,
            "ICudaEngine": ICudaEngine,
            "IExecutionContext": IExecutionContext,
            "EngineInspector": EngineInspector,
            "IHostMemory": IHostMemory,
            "DoubleViolation": DoubleViolation,
            **({"IDebugListener": IDebugListener} if g.major >= 10 else {}),
        }

    # --- building ----------------------------------------------------------------------------------

    def build(self, builder: Any, network: Any, config: Any) -> Any:
        g, n = self.g, self.n
        flags = n["BuilderFlag"]
        log = builder._log
        if network._model is None:
            raise DoubleViolation("build_serialized_network on a network nothing was parsed into")
        profiles = [p._shapes for p in config._profiles] or [{}]
        for tensor in network._inputs:
            if -1 in tensor.shape and any(tensor.name not in shapes for shapes in profiles):
                log(
                    "ERROR",
                    "Network has dynamic or shape inputs, but no optimization profile has been defined.",
                )
                return None
        low_precision = None
        if g.weak and not network._strongly_typed:
            wanted = [
                name
                for name in ("FP16", "BF16")
                if name in flags.__members__ and getattr(flags, name) in config._flags
            ]
            low_precision = {"FP16": "float16", "BF16": "bfloat16"}[wanted[0]] if wanted else None
        elif any(
            flag.name in ("FP16", "BF16", "OBEY_PRECISION_CONSTRAINTS") for flag in config._flags
        ):
            raise DoubleViolation("precision builder flags on a strongly typed network")
        constraints_on = g.weak and any(
            getattr(flags, name) in config._flags
            for name in ("OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS")
        )
        fp32_layers, fp32_nodes = [], []
        if g.weak and not network._strongly_typed:
            constrained = [
                layer
                for layer in network._layers
                if layer._precision is not None or layer._output_types
            ]
            if constrained and not constraints_on:
                log(
                    "WARNING",
                    "Detected layers with non-default precision constraints, but neither "
                    "OBEY_PRECISION_CONSTRAINTS nor PREFER_PRECISION_CONSTRAINTS is set: they are ignored",
                )
            elif constraints_on:
                fp32_layers = [
                    layer.name for layer in constrained if layer._precision == n["DataType"].FLOAT
                ]
                fp32_nodes = {layer._node.name for layer in network._layers}
                fp32_nodes = sorted(
                    node
                    for node in fp32_nodes
                    if all(
                        layer.name in fp32_layers
                        for layer in network._layers
                        if layer._node.name == node
                    )
                )
        cache = config._cache
        hits = misses = 0
        for layer in network._layers:
            key = f"{layer.type.name}:{layer.name}:{'fp32' if layer.name in fp32_layers else low_precision or 'fp32'}"
            if cache is not None and key in cache._entries:
                hits += 1
            else:
                misses += 1
                if cache is not None:
                    cache._entries[key] = 0.01
        log("INFO", f"timing cache: {hits} hits, {misses} tactics timed")
        verbosity = config.profiling_verbosity
        io = [
            {"name": t.name, "mode": "INPUT", "dtype": t.dtype.name, "shape": list(t.shape)}
            for t in network._inputs
        ]
        io += [
            {"name": t.name, "mode": "OUTPUT", "dtype": t.dtype.name, "shape": list(t.shape)}
            for t in network._outputs
        ]
        debug = [{"name": t.name, "dtype": t.dtype.name} for t in network._debug]
        layers = _fused(
            [
                {
                    "name": layer.name,
                    "type": layer.type.name,
                    "metadata": layer.metadata,
                    "op": layer._node.op_type,
                    "inputs": [t.name for t in layer._inputs],
                    "outputs": [t.name for t in layer._outputs],
                    "precision": "FP32"
                    if layer.name in fp32_layers or not low_precision
                    else "FP16",
                }
                for layer in network._layers
                if layer.type != n["LayerType"].CONSTANT
            ],
            {t.name for t in network._outputs},
        )
        plan = {
            "tensorrt": g.version,
            "io": io,
            "layers": layers,
            "low_precision": low_precision,
            "fp32_nodes": fp32_nodes,
            "profiles": [
                {k: [list(s) for s in v] for k, v in shapes.items()} for shapes in profiles
            ],
            "detailed": verbosity == n["ProfilingVerbosity"].DETAILED,
            "strongly_typed": network._strongly_typed,
            "flags": sorted(f.name for f in config._flags),
            "optimization_level": config._level,
            "tactic_sources": config._tactics,
            "workspace": config._pools.get(n["MemoryPoolType"].WORKSPACE),
            "debug": debug,
        }
        import onnx

        model = network._model
        inferred = onnx.shape_inference.infer_shapes(model).graph
        infos = {v.name: v for v in [*inferred.input, *inferred.value_info, *inferred.output]}
        del model.graph.output[:]
        # debug tensors are computed as outputs are (same rounding), but are no engine I/O
        shown = {t.name for t in network._outputs}
        for tensor in [*network._outputs, *(t for t in network._debug if t.name not in shown)]:
            info = infos.get(tensor.name)
            model.graph.output.append(
                info if info is not None else onnx.helper.make_empty_tensor_value_info(tensor.name)
            )
        return self.n["IHostMemory"](
            MAGIC + json.dumps(plan).encode() + b"\n" + model.SerializeToString()
        )

    def engine_document(self, plan: dict) -> dict:
        if not plan["detailed"]:
            layers: list = [layer["name"] for layer in plan["layers"]]
        else:
            fmt = {
                "FLOAT": "Row major linear FP32",
                "HALF": "Row major linear FP16 format",
                "INT32": "Row major linear Int32",
                "INT64": "Row major linear Int64",
                "BOOL": "Row major linear Bool",
                "BF16": "Row major linear BF16",
            }
            layers = [
                {
                    "Name": layer["name"],
                    "LayerType": layer["type"].title(),
                    "Inputs": [
                        {"Name": name, "Format/Datatype": "Row major linear " + layer["precision"]}
                        for name in layer["inputs"]
                    ],
                    "Outputs": [
                        {"Name": name, "Format/Datatype": "Row major linear " + layer["precision"]}
                        for name in layer["outputs"]
                    ],
                    "TacticValue": "0x0000000000000001",
                    **({"Metadata": layer["metadata"]} if self.g.major >= 10 else {}),
                }
                for layer in plan["layers"]
            ]
        if self.g.major >= 11:
            io = [
                {
                    "Name": t["name"],
                    "IOMode": t["mode"].title(),
                    "DataType": t["dtype"].title(),
                    "Dimensions": t["shape"],
                    "Location": "Device",
                    "IsShapeInferenceIO": False,
                    "ProfileInfo": [{"Format": fmt.get(t["dtype"], t["dtype"])}],
                }
                for t in plan["io"]
            ]
            return {"Layers": layers, "I/O Tensors": io}
        return {"Layers": layers, "Bindings": [t["name"] for t in plan["io"]]}

    # --- running -------------------------------------------------------------------------------------

    def session(self, plan: dict) -> Any:
        import onnx
        import onnxruntime

        model = onnx.load_from_string(plan["onnx"])
        if plan["low_precision"]:
            model = _round_layer_outputs(model, plan)
        elif plan["strongly_typed"]:
            model = _store_typed_tensors(model)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        return onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )

    def run_session(self, context: Any, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX Runtime on the engine's model, converting to and from the engine's I/O types (8.6 holds
        INT64 tensors as INT32)."""
        session = context._session
        session_types = {
            "tensor(float)": np.float32,
            "tensor(float16)": np.float16,
            "tensor(int64)": np.int64,
            "tensor(int32)": np.int32,
            "tensor(bool)": np.bool_,
            "tensor(int8)": np.int8,
            "tensor(uint8)": np.uint8,
        }
        converted = {
            i.name: feed[i.name].astype(session_types.get(i.type, np.float32))
            for i in session.get_inputs()
        }
        plan = context._engine._plan
        engine_types = {
            t["name"]: self.numpy_of(getattr(self.n["DataType"], t["dtype"]))
            for t in [*plan["io"], *plan.get("debug", ())]
        }
        names = [o.name for o in session.get_outputs()]
        return {
            name: np.asarray(value).astype(engine_types[name])
            for name, value in zip(names, session.run(None, converted))
        }

    def emit_debug_tensor(self, context: Any, tensor: dict, value: np.ndarray) -> None:
        """Call the listener as TensorRT does: the value in device memory that lives only for the
        call, its location, type, shape, name and the stream of the enqueue."""
        data = np.ascontiguousarray(value).tobytes()
        _, address = cuda_double.cudaMalloc(len(data))
        try:
            cuda_double.write_device(address, data)
            context._listener.process_debug_tensor(
                _capsule(address),
                self.n["TensorLocation"].DEVICE,
                getattr(self.n["DataType"], tensor["dtype"]),
                tuple(value.shape),
                tensor["name"],
                context._stream,
            )
        finally:
            cuda_double.cudaFree(address)

    def execute(self, context: Any) -> bool:
        plan = context._engine._plan
        inputs = [t for t in plan["io"] if t["mode"] == "INPUT"]
        feed = {}
        for tensor in inputs:
            shape = context._shapes.get(tensor["name"], tuple(tensor["shape"]))
            if -1 in shape or tensor["name"] not in context._addresses:
                return False
            dtype = self.numpy_of(getattr(self.n["DataType"], tensor["dtype"]))
            count = int(np.prod(shape)) * dtype.itemsize
            feed[tensor["name"]] = np.frombuffer(
                cuda_double.device_bytes(context._addresses[tensor["name"]], count), dtype=dtype
            ).reshape(shape)
        computed = self.run_session(context, feed)
        outputs = {t["name"] for t in plan["io"] if t["mode"] == "OUTPUT"}
        for name in outputs:
            if name not in context._addresses:
                return False
            cuda_double.write_device(
                context._addresses[name], np.ascontiguousarray(computed[name]).tobytes()
            )
        for tensor in plan.get("debug", ()):
            if context._listener is not None and tensor["name"] in context._debug_on:
                self.emit_debug_tensor(context, tensor, computed[tensor["name"]])
        if context._profiler is not None:
            for index, layer in enumerate(plan["layers"]):
                context._profiler.report_layer_time(layer["name"], 0.01 * (index + 1))
        return True


def _capsule(address: int) -> Any:
    """A PyCapsule holding `address`, as TensorRT's bindings hand a debug tensor's buffer."""
    import ctypes

    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, None, None)


FUSED_EPILOGUES = {
    "BatchNormalization",
    "Add",
    "Relu",
}  # what TensorRT fuses into a convolution's kernel


def _fused(layers: list[dict], network_outputs: set[str]) -> list[dict]:
    """Each convolution and the epilogue layers that read only its single output, as one layer; a tensor
    that is a network output must be written to memory, so it ends the fusion."""
    readers: dict[str, int] = {}
    for layer in layers:
        for name in layer["inputs"]:
            readers[name] = readers.get(name, 0) + 1
    fused: list[dict] = []
    for layer in layers:
        previous = fused[-1] if fused else None
        joins = (
            previous is not None
            and previous["op"] in ("Conv", "fused")
            and layer["op"] in FUSED_EPILOGUES
            and len(previous["outputs"]) == 1
            and previous["outputs"][0] in layer["inputs"]
            and readers.get(previous["outputs"][0]) == 1
            and previous["outputs"][0] not in network_outputs
            and previous["precision"] == layer["precision"]
        )
        if not joins:
            fused.append(dict(layer))
            continue
        internal = previous["outputs"][0]
        previous.update(
            name=f"{previous['name']} + {layer['name']}",
            op="fused",
            metadata="\x1f".join(filter(None, [previous["metadata"], layer["metadata"]])),
            inputs=previous["inputs"] + [t for t in layer["inputs"] if t != internal],
            outputs=layer["outputs"],
        )
    return fused


def _round_layer_outputs(model: Any, plan: dict) -> Any:
    """What a weakly typed FP16 engine does: a layer not kept in FP32 reads its float inputs and
    writes its float outputs in float16 (overflow becomes inf), so both go through a Cast pair."""
    import onnx
    from onnx import TensorProto, helper

    low = TensorProto.FLOAT16 if plan["low_precision"] == "float16" else TensorProto.BFLOAT16
    inferred = onnx.shape_inference.infer_shapes(model).graph
    float_tensors = {
        v.name
        for v in [*inferred.input, *inferred.value_info, *inferred.output]
        if v.type.tensor_type.elem_type == TensorProto.FLOAT
    }
    float_tensors |= {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}
    kept = set(plan["fp32_nodes"])

    def rounded(source: str, target: str) -> list:
        return [
            helper.make_node("Cast", [source], [f"{target}::low"], to=low),
            helper.make_node("Cast", [f"{target}::low"], [target], to=TensorProto.FLOAT),
        ]

    nodes = []
    for node in model.graph.node:
        low_node = node.name not in kept and node.op_type not in ("Constant", "Shape")
        if low_node:
            for index, name in enumerate(node.input):
                if name in float_tensors:
                    node.input[index] = f"{name}::read_by::{node.name}"
                    nodes.extend(rounded(name, node.input[index]))
        nodes.append(node)
        if low_node:
            for index, name in enumerate(node.output):
                if name in float_tensors:
                    node.output[index] = f"{name}::stored"
                    nodes.extend(rounded(node.output[index], name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _store_typed_tensors(model: Any) -> Any:
    """What a strongly typed engine does with a model's FP16/BF16 tensors: it stores them in that type.
    ONNX Runtime's CPU provider would compute them in FP32 and hide overflows, so the model is run in
    FP32 with every low-precision tensor rounded through its type (Cast pairs), initializers widened."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    lows = {TensorProto.FLOAT16, TensorProto.BFLOAT16}
    graph = onnx.shape_inference.infer_shapes(model).graph
    low_tensors = {
        v.name: v.type.tensor_type.elem_type
        for v in [*graph.input, *graph.value_info, *graph.output]
        if v.type.tensor_type.elem_type in lows
    }
    for index, initializer in enumerate(model.graph.initializer):
        if initializer.data_type in lows:
            widened = numpy_helper.from_array(
                numpy_helper.to_array(initializer).astype(np.float32), initializer.name
            )
            model.graph.initializer[index].CopyFrom(widened)
    nodes = []
    for node in model.graph.node:
        if node.op_type == "Cast":
            for attribute in node.attribute:
                if attribute.name == "to" and attribute.i in lows:
                    attribute.i = TensorProto.FLOAT
        nodes.append(node)
        for index, name in enumerate(node.output):
            if name in low_tensors:
                node.output[index] = f"{name}::wide"
                nodes.append(
                    helper.make_node(
                        "Cast", [node.output[index]], [f"{name}::stored"], to=low_tensors[name]
                    )
                )
                nodes.append(
                    helper.make_node("Cast", [f"{name}::stored"], [name], to=TensorProto.FLOAT)
                )
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.value_info[:]
    for value in [*model.graph.input, *model.graph.output]:
        if value.type.tensor_type.elem_type in lows:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    return model
