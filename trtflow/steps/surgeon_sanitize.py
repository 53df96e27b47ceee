"""`surgeon-sanitize`: fold constants, clean up, sort, pin input shapes, run a user's graph edit.

Exported models compute their shapes at run time: a torch export carries chains of
Shape -> Gather -> Unsqueeze -> Concat -> Reshape that TensorRT must evaluate or refuse, and that
hide the real layers in every graph drawing and tap list. Like `polygraphy surgeon sanitize`, this
step folds them with ONNX GraphSurgeon (`fold_constants`, repeated until nothing more folds, shapes
re-inferred between passes), removes dead nodes (`cleanup`), sorts (`toposort`), and can first pin
input shapes (`override_shapes`) so shapes that depend on them fold too. `script: file.py:function`
hands the user's function the `gs.Graph` (plugin replacement and similar edits written for
GraphSurgeon) after folding, before cleanup and sorting.

Weights never all sit in memory. Polygraphy loads every weight, then copies them on each export;
a 2 GB model peaks at several times its size. Here the model is read without its external data:
while GraphSurgeon folds (or the user's script runs), each external weight is a read-only view of
a memory map of its data file, so only the weights a folded node reads are ever paged in, and
ONNX Runtime gets those inline (it would resolve an in-memory model's external files against the
process's working folder, which steps running in threads cannot change). The result is written by
copying each weight from its data file into the new one, a chunk at a time.

Node names stay: the model is named (`onnx_files.name_nodes`) before any surgery, GraphSurgeon
keeps names, and nodes the script adds without a name get stable names after it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field, PositiveInt

from trtflow.errors import InputError, ParamError, StepError
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.packages import installed_version
from trtflow.schema.paths import ModelFile
from trtflow.schema.problems import did_you_mean
from trtflow.steps.base import Step, StepContext, StepParams, file
from trtflow.tensors.inputs import LoaderSpec

if TYPE_CHECKING:
    import onnx
    import onnx_graphsurgeon as gs

SMALL_WEIGHT_BYTES = (
    1024  # weights this small stay inline in the written model (as onnx's own saving does)
)
COPY_CHUNK_BYTES = (
    64 << 20
)  # how much of a weight is in memory at once while it is copied to the new data file
MAX_FOLD_PASSES = 32  # folding stops earlier when a pass folds nothing (a real model needs a few)


class ScriptSpec(LoaderSpec):
    """`script: surgery.py:function` — a function that edits the model's `gs.Graph`."""

    function: str = Field(
        description="The function in `script` to call with the `onnx_graphsurgeon.Graph`; it edits "
        "the graph in place and returns None, or returns a new graph."
    )


class Params(StepParams):
    model: ModelFile = Field(
        description="The ONNX model to sanitize (external data beside it is fine, any size)."
    )
    fold_constants: bool = Field(
        True,
        description="Fold everything computable without the inputs, shape "
        "subgraphs included (`polygraphy surgeon sanitize --fold-constants`).",
    )
    cleanup: bool = Field(True, description="Remove nodes and weights no output needs.")
    toposort: bool = Field(True, description="Sort the nodes topologically.")
    override_shapes: dict[str, list[int | str]] | None = Field(
        None,
        description="Set input shapes before folding, {input: [1, 3, 224, 224]} (a string keeps a dim dynamic "
        "under that name); shapes that depend on them fold too.",
    )
    fold_size_limit_mb: float | None = Field(
        None,
        gt=0,
        description="Do not fold a tensor larger than this (e.g. a Tile or Expand of a weight that "
        "would bloat the model); no limit when unset.",
    )
    unbounded_dds_upper_bound: PositiveInt | dict[str, PositiveInt] | None = Field(
        None,
        description="Bound the tensors whose run-time value sets a size with no upper bound (the "
        "summary's `unbounded_dds`) with `Min(tensor, bound)`: one bound for all, or {tensor: "
        "bound} (`polygraphy surgeon sanitize --set-unbounded-dds-upper-bound`).",
    )
    script: ScriptSpec | None = Field(
        None,
        description="`file.py:function` (relative to the recipe's folder): called with the `gs.Graph` after "
        "folding, before cleanup and sorting; returns None (edited in place) or a new `gs.Graph`.",
    )


def _bounded(
    model: onnx.ModelProto, bounds: int | dict[str, int] | None
) -> tuple[onnx.ModelProto, dict[str, int]]:
    """`model` with its unbounded DDS tensors bounded (`onnxmodel.dds`), and the bounds set."""
    from trtflow.onnxmodel.dds import bound_dds

    if bounds is None:
        return model, {}
    try:
        return bound_dds(model, bounds)
    except ValueError as error:
        raise ParamError("unbounded_dds_upper_bound", str(error)) from None


def _nodes(graph: gs.Graph) -> list[gs.Node]:
    """The nodes of `graph` and of its subgraphs."""
    return [
        *graph.nodes,
        *(node for subgraph in graph.subgraphs(recursive=True) for node in subgraph.nodes),
    ]


def _constants(graph: gs.Graph) -> Iterator[gs.Constant]:
    """Every constant tensor: of the graph and its subgraphs, and the values of Constant nodes."""
    import onnx_graphsurgeon as gs

    for each in (graph, *graph.subgraphs(recursive=True)):
        yield from (tensor for tensor in each.tensors().values() if isinstance(tensor, gs.Constant))
        for node in each.nodes:
            yield from (value for value in node.attrs.values() if isinstance(value, gs.Constant))


@contextmanager
def _weights_mapped(graph: gs.Graph, folder: Path) -> Iterator[Callable[[gs.Graph], None]]:
    """Within, every external weight of `graph` is a read-only numpy view of its data file.

    GraphSurgeon loads a weight through onnx, which resolves the data file against the working
    folder, and hands ONNX Runtime the external reference as it is; both fail unless the process
    runs in the model's folder. A view of a memory map reads only what is used, and GraphSurgeon
    serializes it inline for the folding session. On exit the weights are references again, so
    exporting the graph copies no weight bytes; what it yields does the same for another graph
    (a copy a user's script returns), whose constants share the views."""
    import numpy as np
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    from onnx_graphsurgeon.ir.tensor import LazyValues

    maps: dict[str, np.memmap] = {}
    references: dict[
        int, tuple[np.ndarray, LazyValues]
    ] = {}  # id(view) -> (view, the reference it stands for)
    for constant in _constants(graph):
        lazy = constant._values  # noqa: SLF001 - GraphSurgeon's only handle on a weight it has not loaded
        if not isinstance(lazy, LazyValues) or not uses_external_data(lazy.tensor):
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(lazy.tensor.data_type)
        if (
            dtype.kind not in "biufc" or dtype.isbuiltin != 1
        ):  # bfloat16, float8, int4...: GraphSurgeon cannot export them from numpy
            continue
        info = ExternalDataInfo(lazy.tensor)
        if info.location not in maps:
            maps[info.location] = np.memmap(folder / info.location, dtype=np.uint8, mode="r")
        offset = info.offset or 0
        length = (
            info.length
            if info.length is not None
            else int(np.prod(lazy.shape, dtype=np.int64)) * dtype.itemsize
        )
        view = maps[info.location][offset : offset + length].view(dtype).reshape(lazy.shape)
        references[id(view)] = (view, lazy)
        constant.values = view

    def unmap(target: gs.Graph) -> None:
        for constant in _constants(target):
            view, lazy = references.get(id(constant._values), (None, None))  # noqa: SLF001
            if view is not None and constant._values is view:  # noqa: SLF001 - values a script replaced are kept
                constant.values = lazy

    try:
        yield unmap
    finally:
        unmap(graph)


def _reinferred(graph: gs.Graph) -> tuple[gs.Graph, str]:
    """`graph` with shapes inferred again (folding turns Shape nodes into constants only where the
    shapes are known)."""
    import onnx_graphsurgeon as gs

    from trtflow.onnxmodel.files import infer_top_level_shapes

    model = gs.export_onnx(graph, do_type_check=False)
    status = infer_top_level_shapes(model)
    return gs.import_onnx(model), status


def _override_shapes(graph: gs.Graph, shapes: dict[str, list[int | str]]) -> None:
    """Set input shapes and forget the shapes inferred from the old ones."""
    import onnx_graphsurgeon as gs

    inputs = {tensor.name: tensor for tensor in graph.inputs}
    for name, dims in shapes.items():
        if name not in inputs:
            raise ParamError(
                "override_shapes",
                f"the model has no input `{name}`{did_you_mean(name, list(inputs))}; "
                f"inputs: {', '.join(inputs)}",
            )
        declared = inputs[name].shape
        if declared is not None and len(declared) != len(dims):
            raise ParamError(
                "override_shapes",
                f"input `{name}` has rank {len(declared)} ({list(declared)}), got {dims}",
            )
        inputs[name].shape = list(dims)
    for tensor in graph.tensors().values():
        if isinstance(tensor, gs.Variable) and tensor.name not in inputs:
            tensor.shape = None


def _fold(
    graph: gs.Graph, folder: Path, size_limit: int | None, ctx: StepContext
) -> tuple[gs.Graph, int]:
    """Fold until a pass folds nothing (a folded shape can make its consumers foldable in the
    next pass, once shapes are inferred again); returns the graph and the passes that folded."""
    from onnx_graphsurgeon.logger import G_LOGGER

    passes = 0
    while passes < MAX_FOLD_PASSES:
        before = len(_nodes(graph))
        # GraphSurgeon prints its warnings (a part it could not evaluate, a large folded tensor) into
        # the run's display; what it could not fold stays in the model, and the summary counts what it did
        with _weights_mapped(graph, folder), G_LOGGER.suppress(G_LOGGER.ERROR):
            graph.fold_constants(fold_shapes=True, size_threshold=size_limit, error_ok=True)
        graph.cleanup()
        if len(_nodes(graph)) == before:
            break
        passes += 1
        ctx.log(f"fold pass {passes}: {before - len(_nodes(graph))} nodes folded")
        graph, inference = _reinferred(graph)
        if inference != "ok":
            ctx.log(f"shape inference {inference}")
    return graph, passes


def _run_script(spec: ScriptSpec, graph: gs.Graph, folder: Path) -> gs.Graph:
    """The graph the user's function leaves (edited in place) or returns; its failures name its line."""
    import onnx_graphsurgeon as gs

    from trtflow.user_code import UserFunction

    try:
        function = UserFunction.load(spec.script, spec.function, "script")
    except InputError as error:
        raise ParamError("script", str(error)) from None
    with _weights_mapped(graph, folder) as unmap:
        returned = function(graph)
        if isinstance(returned, gs.Graph):
            unmap(returned)
    if returned is None:
        return graph
    if not isinstance(returned, gs.Graph):
        raise function.misbehaved(
            f"returned {type(returned).__name__}; it must edit the graph it is given and "
            "return None, or return an `onnx_graphsurgeon.Graph`"
        )
    return returned


def _weights(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor that holds weight bytes: initializers and Constant values, subgraphs included."""
    from trtflow.onnxmodel.files import iter_graphs

    for graph in iter_graphs(model.graph):
        yield from graph.initializer
        yield from (
            attribute.t
            for node in graph.node
            for attribute in node.attribute
            if attribute.HasField("t")
        )


def _iter_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    from trtflow.onnxmodel.files import iter_graphs

    return (node for graph in iter_graphs(model.graph) for node in graph.node)


def _copy_bytes(source: Path, offset: int, length: int | None, sink) -> None:
    """Append `length` bytes of `source` from `offset` (to its end when None) to `sink`, a chunk at a time."""
    with open(source, "rb") as stream:
        stream.seek(offset)
        left = length if length is not None else source.stat().st_size - offset
        while left > 0:
            chunk = stream.read(min(left, COPY_CHUNK_BYTES))
            if not chunk:
                raise StepError(
                    f"{source} ends before the {length} bytes at offset {offset} the model says it holds; "
                    "the model's external data is truncated: copy it again"
                )
            sink.write(chunk)
            left -= len(chunk)


def _write_model(model: onnx.ModelProto, source_folder: Path, path: Path) -> None:
    """Write `model`, whose external weights are still in `source_folder`'s data files.

    A model with little weight is written whole (`save_model`). Otherwise every weight is copied,
    a chunk at a time, into `<name>.data` beside `path`: neither the model's weights nor a
    serialized copy of them are ever in memory (onnx's own saving needs both)."""
    import onnx
    from onnx.external_data_helper import (
        ExternalDataInfo,
        load_external_data_for_model,
        uses_external_data,
    )

    from trtflow.onnxmodel.files import EXTERNAL_DATA_THRESHOLD, save_model

    def stored(tensor: onnx.TensorProto) -> ExternalDataInfo | None:
        return ExternalDataInfo(tensor) if uses_external_data(tensor) else None

    total = sum(
        (info.length or 0) if (info := stored(tensor)) else len(tensor.raw_data)
        for tensor in _weights(model)
    )
    if total <= EXTERNAL_DATA_THRESHOLD:
        load_external_data_for_model(model, str(source_folder))
        save_model(model, path, external_data=False)
        return
    data_name = EXTERNAL_DATA.format(file=path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / data_name, "wb") as sink:
        for tensor in _weights(model):
            info = stored(tensor)
            if info is None and len(tensor.raw_data) <= SMALL_WEIGHT_BYTES:
                continue
            offset = sink.tell()
            if info is None:
                sink.write(tensor.raw_data)
                tensor.ClearField("raw_data")
            else:
                _copy_bytes(source_folder / info.location, info.offset or 0, info.length, sink)
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, entry in (
                ("location", data_name),
                ("offset", offset),
                ("length", sink.tell() - offset),
            ):
                tensor.external_data.add(key=key, value=str(entry))
    onnx.save_model(model, str(path))


class SurgeonSanitize(Step):
    """Fold constants, clean up, sort, override input shapes, run a GraphSurgeon script."""

    kind = "surgeon-sanitize"
    summary = "Fold constants and shape subgraphs, clean up, sort, pin input shapes, run a GraphSurgeon script."
    Params: TypeAlias = Params
    outputs = {
        "model": file(
            ".onnx",
            "The sanitized model (external data in model.onnx.data when large).",
            companions=(EXTERNAL_DATA,),
        ),
        "summary": file(
            ".json",
            "Nodes before and after, nodes folded and cleaned up, ops removed, names given.",
        ),
    }
    version = 3  # 3: the summary lists unbounded DDS tensors and the bounds set; 2: graph outputs keep (re-inferred) shapes after override_shapes or a script

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {
            package: installed_version(package)
            for package in ("onnx", "onnxruntime", "onnx-graphsurgeon")
        }

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        import onnx_graphsurgeon as gs
        from google.protobuf.message import DecodeError
        from onnx.external_data_helper import uses_external_data

        from trtflow.onnxmodel.dds import unbounded_dds
        from trtflow.onnxmodel.files import (
            infer_top_level_shapes,
            load_model,
            name_nodes,
            refused_external_data,
        )

        ctx.progress(0, 5, "reading")
        try:
            model = load_model(params.model, load_weights=False)
        except (DecodeError, OSError, ValueError) as error:
            raise ParamError(
                "model", f"{params.model}: cannot read the ONNX model: {error}"
            ) from None
        if any(uses_external_data(tensor) for tensor in _weights(model)):
            refusal = refused_external_data(params.model)
            if refusal:
                raise ParamError("model", f"{params.model}: {refusal}")
        name_nodes(model)  # names come from the model as given, before any surgery reorders it
        inference = infer_top_level_shapes(model)
        graph = gs.import_onnx(model)
        del model
        folder = params.model.parent
        before = len(_nodes(graph))
        ops_before = Counter(node.op for node in _nodes(graph))
        if params.override_shapes:
            ctx.progress(1, 5, "overriding shapes")
            _override_shapes(graph, params.override_shapes)
            graph, inference = _reinferred(graph)
        passes, folded = 0, 0
        if params.fold_constants:
            ctx.progress(2, 5, "folding constants")
            size_limit = (
                int(params.fold_size_limit_mb * 2**20)
                if params.fold_size_limit_mb is not None
                else None
            )
            graph, passes = _fold(graph, folder, size_limit, ctx)
            folded = before - len(_nodes(graph))
        if params.script is not None:
            ctx.progress(3, 5, f"running {params.script.script.name}:{params.script.function}")
            graph = _run_script(params.script, graph, folder)
        after_script = len(_nodes(graph))
        if params.cleanup:
            graph.cleanup()
        if params.toposort:
            try:
                graph.toposort()
            except Exception as error:  # noqa: BLE001 - GraphSurgeon reports a cycle as a bare Exception
                raise StepError(f"cannot sort the graph topologically: {error}") from None
        ctx.progress(4, 5, "writing")
        try:
            model = gs.export_onnx(graph)
        except Exception as error:  # noqa: BLE001 - GraphSurgeon raises assorted types for a graph it cannot export
            raise StepError(f"cannot export the sanitized graph to ONNX: {error}") from None
        del graph
        model, bounds = _bounded(model, params.unbounded_dds_upper_bound)
        named = name_nodes(model)
        _write_model(model, folder, ctx.output_path("model"))
        after = sum(1 for _ in _iter_nodes(model))
        summary = {
            "nodes": {"before": before, "after": after},
            "folded_nodes": folded,
            "fold_passes": passes,
            "cleaned_up_nodes": after_script - after + len(bounds) if params.cleanup else 0,
            "ops_removed": dict(
                sorted((ops_before - Counter(node.op_type for node in _iter_nodes(model))).items())
            ),
            "overridden_shapes": params.override_shapes or {},
            "unbounded_dds": [found.tensor for found in unbounded_dds(model)],
            "upper_bounds": bounds,
            "shape_inference": inference,
            "named_nodes": named,
        }
        ctx.output_path("summary").write_text(json.dumps(summary, indent=1))
        ctx.log(f"{before} -> {after} nodes ({folded} folded in {passes} passes)")
        ctx.progress(5, 5, "done")
        return {}
