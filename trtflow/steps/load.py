"""`load`: bring a model into the recipe — checked, shape-inferred, every node named.

Everything downstream names nodes and tensors, so `load` makes names stable first
(`onnxmodel.files.name_nodes`), fixes dynamic dims the user pins with `shapes`, runs shape inference so
tapped tensors have types, and writes a summary that already answers the first questions of an
FP16 investigation: which constants FP16 or BF16 cannot hold, and who reads them. A TensorRT
engine (`.engine`/`.plan`) is passed through as an `engine` artifact.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import Field

from trtflow.errors import ParamError, StepError
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.onnxmodel.lint import LintReport, node_named
from trtflow.packages import installed_version
from trtflow.schema.paths import ModelFile
from trtflow.steps.base import Step, StepContext, StepParams, file, value

ENGINE_SUFFIXES = {".engine", ".plan", ".trt"}
EXTERNAL_WEIGHT_BYTES = 16 << 20
"""Weights past this size go to `model.onnx.data` (`save_model`'s own threshold is 64 MB): every
later step reads `load`'s model, most of them its graph only (taps, run-runners, the runner's
session), and inline weights make each one parse them, and taps write them again (LAC's 32 MB
encoder: 0.1 s and a 32 MB copy per step; a data file is copied in the kernel)."""


class Params(StepParams):
    path: ModelFile = Field(
        description="An ONNX model (.onnx, external data beside it is fine) or a TensorRT engine (.engine/.plan)."
    )
    shapes: dict[str, list[int]] | None = Field(
        None,
        description="Pin input dimensions: {input: [1, 3, 224, 224]}; dynamic dims become these values.",
    )
    check: bool | Literal["full"] = Field(
        True, description="Run onnx.checker (`full` adds strict shape checks)."
    )
    inline_functions: bool = Field(
        True,
        description="Inline the model's local functions, so that taps, runners and "
        "bisect-precision see the nodes inside them (false keeps each call one node).",
    )
    lint: bool = Field(
        False,
        description="Write `lint`: every onnx.checker, strict shape inference, graph (duplicate "
        "names, unused inputs, dead nodes, unbounded data-dependent shapes) and ONNX Runtime "
        "problem (node by node) of the model at once, each with its node (or tensor); with the "
        "step's `gate: true`, an error fails the run.",
    )


class WrittenModelRefused(StepError):
    """The model `load` wrote is refused where the user's file is accepted; `refusal` says why."""

    def __init__(self, refusal: str, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal

    def __reduce__(self):  # type: ignore[override]
        """Pickled whole (a process executor sends a step's error back): both arguments, and the
        location the executor added."""
        return (type(self), (self.refusal, str(self)), self.__dict__)


def _not_a_model(path: Path, detail: str) -> ParamError:
    """The error for a file that is not ONNX at all or was cut short; `check: false` cannot help it."""
    return ParamError(
        "path", f"{path}: not an ONNX model, or a truncated one ({detail}); export or copy it again"
    )


def _pin_shapes(model, shapes: dict[str, list[int]]) -> None:
    """Set input dims, and forget inferred shapes so inference recomputes them from the new inputs."""
    from trtflow.sessions.model_summary import dims as shown

    inputs = {i.name: i for i in model.graph.input}
    for name, dims in shapes.items():
        if name not in inputs:
            raise ParamError(
                "shapes", f"the model has no input `{name}`; inputs: {', '.join(inputs)}"
            )
        shape = inputs[name].type.tensor_type.shape
        if len(shape.dim) != len(dims):
            raise ParamError(
                "shapes",
                f"input `{name}` has rank {len(shape.dim)} ({shown(inputs[name])}), got {dims}",
            )
        for dim, size in zip(shape.dim, dims):
            dim.Clear()
            dim.dim_value = size
    del model.graph.value_info[:]
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")


def _infer_and_save(model, model_path: Path, ctx: StepContext, declared, apart: Path | None):
    """Shape inference, then write the model with its subgraphs' declared types; returns (model, how
    inference went, what the summary says of the weights).

    Inference reads a copy without the large weights (`infer_top_level_shapes`), so a model of
    any size costs no more than its one copy in memory. A failure is reported in the summary, not
    fatal: the model stays usable and TensorRT infers shapes itself. `apart`: the folder of the
    external data the large weights are still in (`_read`), read from there one at a time."""
    from trtflow.onnxmodel.files import infer_top_level_shapes
    from trtflow.sessions.model_summary import weight_facts

    status = infer_top_level_shapes(model)
    _restore_types(model, declared, 1)
    facts = weight_facts(model, apart)
    return _save(model, model_path, facts["bytes"], ctx, apart), status, facts


def _save(
    model,
    model_path: Path,
    stored: int | None = None,
    ctx: StepContext | None = None,
    apart: Path | None = None,
):
    """Write `load`'s model, its weights apart past `EXTERNAL_WEIGHT_BYTES`; returns the model to go
    on with. Weights written apart are let go: the model goes on as its graph, read back, pointing
    at them, so the self-check's session does not find them held twice (LAC: `load` peaked at
    200 MiB, above Polygraphy's whole run). Such a graph, saved again by the self-check, holds no
    weight bytes: onnx writes it pointing at the data file already there (the same bytes).
    `stored`: the weights' bytes where the summary counted them (counting copies every weight).
    With `ctx`, the data file's digest, taken as it was written, goes to the store; the self-check's
    saves leave that file as it is. `apart`: as `_infer_and_save`'s (past `EXTERNAL_WEIGHT_BYTES`)."""
    from trtflow.onnxmodel.files import EXTERNAL_DATA, load_model, save_model, weight_bytes

    if (
        apart is None
        and (weight_bytes(model) if stored is None else stored) <= EXTERNAL_WEIGHT_BYTES
    ):
        save_model(model, model_path, external_data=False)
        return model
    hashed = save_model(
        model, model_path, external_data=True, keep_weights=False, weights_from=apart
    )
    if ctx is not None and hashed is not None:
        ctx.hashed_while_written(
            model_path.with_name(EXTERNAL_DATA.format(file=model_path.name)), *hashed
        )
    return load_model(model_path, load_weights=False)


def _declared_types(model) -> list[tuple[list, ...]]:
    """Copies of every graph's value_info, inputs and outputs (top level first), to undo inference."""
    from trtflow.onnxmodel.files import iter_graphs

    return [
        tuple(
            [copy.deepcopy(v) for v in field]
            for field in (graph.value_info, graph.input, graph.output)
        )
        for graph in iter_graphs(model.graph)
    ]


def _restore_types(model, declared: list[tuple[list, list, list]], first: int) -> None:
    """Undo inference in every graph from index `first` on (0: all, 1: subgraphs only).

    Subgraphs always keep their declared types: nothing downstream reads types inside them (a
    precision plan treats a node with subgraphs as one unit), and onnx infers them wrong where
    ONNX Runtime is lenient. An exporter that declares an If branch's output with the wrong rank,
    or with literal 0 dims, makes onnx type the If's output from that declaration; ONNX Runtime
    then refuses the LSTM reading it, or finds a 0-sized output buffer at run time. The top level
    keeps its (pinned) inputs and gets back its declared outputs, without value_info.
    Inference never adds nodes, so `iter_graphs` meets the graphs in the same order as before."""
    from trtflow.onnxmodel.files import iter_graphs

    for index, (graph, (value_info, inputs, outputs)) in enumerate(
        zip(iter_graphs(model.graph), declared)
    ):
        if index < first:
            continue
        restored = ((graph.value_info, value_info), (graph.input, inputs), (graph.output, outputs))
        for field, values in (
            restored if index else ((graph.value_info, []), (graph.output, outputs))
        ):
            del field[:]
            field.extend(values)


def _forget_subgraph_shapes(model) -> None:
    """Drop every subgraph's value_info and the shapes of its outputs (their element types stay).

    The last fallback of `_verify_written`: an exporter's declared branch shapes that conflict with
    what the branch computes are refused once ONNX Runtime's optimizer inlines the branch into its
    parent, while without them ONNX Runtime infers the shapes itself."""
    from trtflow.onnxmodel.files import iter_graphs

    for index, graph in enumerate(iter_graphs(model.graph)):
        if index:
            del graph.value_info[:]
            for output in graph.output:
                if output.type.HasField("tensor_type"):
                    output.type.tensor_type.ClearField("shape")


def _fails_upstream_of_bodies(model, running: str | None) -> bool:
    """Whether ONNX Runtime's `running` refusal names a top-level node that no node with a body
    (If/Loop/Scan) feeds, directly or not: there the types inferred from a body's declarations,
    the one change `load` makes that opening does not judge, cannot have reached."""
    named = node_named(running or "")
    if named is None:
        return False
    producers = {output: node for node in model.graph.node for output in node.output if output}
    failed = next((node for node in model.graph.node if node.name == named), None)
    pending, seen = [failed] if failed is not None else [], set()
    while pending:
        node = pending.pop()
        if any(attribute.HasField("g") or attribute.graphs for attribute in node.attribute):
            return False
        for name in node.input:
            if name in producers and name not in seen:
                seen.add(name)
                pending.append(producers[name])
    return failed is not None


def _has_bodies(model) -> bool:
    """Whether the model has If/Loop/Scan bodies (subgraphs)."""
    from trtflow.onnxmodel.files import iter_graphs

    return any(index for index, _ in enumerate(iter_graphs(model.graph)))


def _read(model, params: Params) -> Path | None:
    """Read the weights of `model`, read from `params.path` without them, as `load_model` would,
    except large ones in external data past `EXTERNAL_WEIGHT_BYTES` in all: those are summarized
    and written one at a time, from the folder returned (a 1B-parameter model held 4 GB to be
    parsed, then copied to be summarized and copied again to be written). Lint and the Q/DQ
    summary read weights by value, so a model with either is read whole."""
    from trtflow.onnxmodel.proto import read_weights, read_weights_but_large
    from trtflow.sessions.model_summary import has_pairs

    if not params.lint and not has_pairs(model):
        if read_weights_but_large(model, params.path) > EXTERNAL_WEIGHT_BYTES:
            return params.path.absolute().parent
    read_weights(model, params.path)
    return None


def _refusal(path: Path, params: Params, run: bool = True) -> str | None:
    """Why onnx.checker (at the step's `check` level) or ONNX Runtime refuses the model file (opening
    it, and with `run` running one synthesized feed of the pinned `shapes`); None if both accept it."""
    opening, running = _refusals(path, params, run)
    return opening or running


def _refusals(
    path: Path, params: Params, run: bool = True, checker: bool = True
) -> tuple[str | None, str | None]:
    """`_refusal` in two parts: why the model does not open (onnx.checker, unless `checker` is
    False, or ONNX Runtime), and why, opened, it does not run the feed."""
    from trtflow.onnxmodel.proto import check_model_path, validation_errors
    from trtflow.ort_sessions import session_refusals

    if params.check and checker:
        try:
            check_model_path(path, full_check=params.check == "full")
        except validation_errors() as error:
            return f"onnx.checker: {str(error).strip()}", None
    opening, running = session_refusals(path, run, params.shapes)
    return (opening and f"ONNX Runtime: {opening}"), (running and f"ONNX Runtime: {running}")


def _verify_written(
    model, model_path: Path, params: Params, declared, inference: str, inlined: bool = False
):
    """Make sure `load` never turns a model that opens into one that does not; returns (model, inference).

    If ONNX Runtime refuses the user's file too (custom ops, a plugin for TensorRT), it cannot
    judge ours, and the model is kept as written. Otherwise the top-level inferred types go too,
    and if that is not enough, the subgraphs' declared shapes. ONNX Runtime judges with a default
    `onnxruntime` runner's session options (`session_refusals`): opening the model, where its
    optimizer checks every inferred type, and for a model with If/Loop/Scan bodies one synthesized
    feed, because a branch's wrong declared shape (literal 0 dims) fails only when a kernel writes
    its output; so does one whose local functions were `inlined` (onnx's inliner can write a
    MatMul that opens and cannot run). Any other model is only opened: running PP-OCRv4 det once
    more cost as much as opening it. onnx.checker judged the user's file already; it judges ours
    again only where more than names and types changed (inlined functions) or `check: full` makes
    it check the pinned shapes (a 32 MB model's check: 0.5 s). Where the user's file cannot run the feed
    (unknown dims made 1), only opening is judged: a session that opened and then failed to run
    already said so (Silero VAD: two sessions, not three). Where ours fails at a node no body feeds
    (Silero VAD 16k: its first Pad, given one audio sample), the feed is at fault, as for a model
    without bodies, which is only opened: the user's file is not asked (one session, not two)."""
    run = inlined or _has_bodies(model)
    opening, running = _refusals(model_path, params, run, inlined or params.check == "full")
    if opening is None and running is None:
        return model, inference
    if opening is None and not inlined and _fails_upstream_of_bodies(model, running):
        return model, inference
    theirs_opening, theirs_running = _refusals(params.path, params, run)
    if theirs_opening is not None:  # ONNX Runtime refuses the user's file too: it cannot judge
        return model, inference
    if theirs_running is not None:  # judged on opening only, and ours opened if only its run failed
        if opening is None:
            return model, inference
        run = False
    refusal = opening or running
    _restore_types(model, declared, 0)
    model = _save(model, model_path)
    final = _refusal(model_path, params, run)
    if final is not None:  # the declared branch types themselves fail once ORT inlines the branch
        _forget_subgraph_shapes(model)
        model = _save(model, model_path)
        final = _refusal(model_path, params, run)
    if final is None:
        return model, f"dropped, because the inferred types made the model invalid ({refusal})"
    if params.shapes:
        raise ParamError(
            "shapes",
            f"{params.path} opens, but not with these input shapes: {final} (ONNX Runtime's graph "
            "optimizer, on in the onnxruntime runner, folds the shape checks pinned dims make "
            "constant, then may refuse a branch that never runs; if the file runs with inputs of "
            "these shapes, leave `shapes` out here and give them to run-runners or "
            "bisect-precision as `data: {shapes: ...}`)",
        )
    node = re.search(r"Node \((.+?)\)", final)
    raise WrittenModelRefused(
        final,
        f"the model `load` wrote from {params.path} is refused{f' at node `{node[1]}`' if node else ''} "
        f"while the file itself is accepted; this is a bug in trtflow, please report it. {final}",
    )


def _checker_complaint(params: Params, model) -> Exception | None:
    """What onnx.checker raises on the user's file (at the step's `check` level), None when it accepts
    it or `check: false`. Given `model`, read from it, so the checker need not parse the weights
    again (`proto.check_model`: MiniLM-L3's 69 MB, 0.11 -> 0.03 s) nor hold its own copy of them."""
    from trtflow.onnxmodel.proto import check_model

    if not params.check:
        return None
    try:
        check_model(model, params.path, full_check=params.check == "full")
    except Exception as error:  # noqa: BLE001 - raised once the file is known to be a model
        return error
    return None


def _write(model, ctx: StepContext, params: Params, apart: Path | None, inlined: bool = False):
    """Name the nodes, pin `shapes`, infer and write `model`, and make sure what was written opens
    where the user's file does; returns (model, renamed nodes, how inference went, what the
    summary says of the weights). `apart`: as `_infer_and_save`'s."""
    from trtflow.onnxmodel.files import name_nodes

    renamed = name_nodes(model)
    declared = _declared_types(model)
    if params.shapes:
        _pin_shapes(model, params.shapes)
    ctx.progress(2, 5, "inferring shapes")
    model, inference, facts = _infer_and_save(model, ctx.output_path("model"), ctx, declared, apart)
    ctx.progress(3, 5, "checking what was written")
    model, inference = _verify_written(
        model, ctx.output_path("model"), params, declared, inference, inlined
    )
    return model, renamed, inference, facts


class Load(Step):
    """Load an ONNX model or a TensorRT engine; summarize it."""

    kind = "load"
    summary = "Load an ONNX model (checked, shape-inferred, nodes named) or a TensorRT engine; summarize it."
    Params: TypeAlias = Params
    outputs = {
        "model": file(
            ".onnx",
            "The normalized ONNX model (external data in model.onnx.data when large).",
            optional=True,
            companions=(EXTERNAL_DATA,),
        ),
        "engine": file(".engine", "The TensorRT engine, when `path` is one.", optional=True),
        "summary": file(
            ".json",
            "Opset, op histogram, I/O, constant ranges, values out of FP16/BF16 range by node, and what "
            "each FP16 converter makes of them (±inf or clamped).",
        ),
        "lint": file(
            ".json",
            "With `lint: true`: every checker, shape-inference and ONNX Runtime problem, with node names.",
            optional=True,
            report=LintReport,
        ),
        "kind": value("onnx", "`onnx` or `engine`: what was loaded."),
        "passed": value(
            True,
            "With `lint: true`: whether lint found no error (warnings pass), so `gate: true` fails "
            "the run (exit 1) as `polygraphy check lint` does; true without lint.",
        ),
    }
    version = 10  # 10: weights past 16 MB in model.onnx.data (EXTERNAL_WEIGHT_BYTES); 9: lint lists what TensorRT refuses in a quantized model (qdq_lint); 8: lint node by node, graph problems, `passed`; 7: local functions inlined; 6: self-check with the runner's session options + one feed; 2: out_of_range entries give the constant's `size`; 3: subgraphs keep their declared types; 5: Q/DQ summary
    # 4: out_of_range_converters says which converters give ±inf and which clamp

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {"onnx": installed_version("onnx")}

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        if params.path.suffix.lower() in ENGINE_SUFFIXES:
            shutil.copyfile(params.path, ctx.output_path("engine"))
            summary = {
                "format": "tensorrt-engine",
                "file": params.path.name,
                "bytes": params.path.stat().st_size,
            }
            ctx.output_path("summary").write_text(json.dumps(summary, indent=1))
            return {"kind": "engine", "passed": True}
        if params.path.suffix.lower() != ".onnx":
            raise ParamError(
                "path",
                f"{params.path.name}: expected an ONNX model (.onnx) or a TensorRT engine "
                f"({', '.join(sorted(ENGINE_SUFFIXES))})",
            )
        return self._load_onnx(ctx, params)

    def _load_onnx(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from google.protobuf.message import DecodeError

        from trtflow.onnxmodel.files import (
            inline_local_functions,
            load_model,
            refused_external_data,
        )
        from trtflow.onnxmodel.lint import problem_lines
        from trtflow.onnxmodel.proto import validation_errors
        from trtflow.ort_sessions import session_refusal

        refused = validation_errors()

        ctx.progress(0, 5, "reading")
        try:
            model = load_model(params.path, load_weights=False)
            apart = _read(model, params)
        except DecodeError:
            raise _not_a_model(params.path, "protobuf cannot parse it") from None
        except (OSError, ValueError) as error:
            raise ParamError(
                "path", f"{params.path}: cannot read the ONNX model: {error}"
            ) from None
        except refused[0] as error:  # onnx.checker refused an external data location
            reason = (
                refused_external_data(params.path)
                or f"not a valid ONNX model: {str(error).strip()}"
            )
            raise ParamError("path", f"{params.path}: {reason}") from None
        # a file cut at a field boundary parses; no graph or no opset_import is what such a cut leaves
        lacking = [
            part
            for part, present in (
                ("graph", model.HasField("graph")),
                ("opset_import", bool(model.opset_import)),
            )
            if not present
        ]
        if lacking:
            raise _not_a_model(params.path, f"it has no {' and no '.join(lacking)}")
        # after reading: `check: false` is no advice for a file that is not ONNX at all, or truncated
        checked = _checker_complaint(params, model)
        lint = self._lint(ctx, params, model) if params.lint else None
        if checked is not None:
            if not isinstance(checked, (*refused, DecodeError)):
                raise checked
            complaint = str(checked).strip()
            runtime = session_refusal(params.path, run=bool(params.shapes), shapes=params.shapes)
            if runtime is None:  # ONNX Runtime runs it: the checker's complaint is a warning
                node = node_named(complaint)
                ctx.notice(
                    f"{params.path}: onnx.checker complains"
                    f"{f' at node `{node}`' if node else ''}: {complaint}; ONNX Runtime runs "
                    "the model, so it is loaded (`lint: true` lists every problem; `check: "
                    "false` skips the checker)"
                )
                params = params.model_copy(update={"check": False})
            else:
                every = (
                    "; every problem (lint):\n  " + "\n  ".join(problem_lines(lint))
                    if lint is not None and lint.problems
                    else ""
                )
                raise ParamError(
                    "path",
                    f"{params.path}: not a valid ONNX model: {complaint}, and ONNX Runtime "
                    f"refuses it too ({runtime[:300]}) (set `check: false` on the load step to "
                    f"load it anyway){every}",
                ) from None
        ctx.progress(1, 5, "naming nodes")
        inlined: list[str] = []
        if params.inline_functions:
            kept, (model, inlined) = model, inline_local_functions(model)
        try:
            model, renamed, inference, facts = _write(model, ctx, params, apart, bool(inlined))
        except WrittenModelRefused as refused:
            if not inlined:
                raise
            # onnx's inliner is not always right (GraphSurgeon's example 11, tensor-valued
            # attribute references): the model as the user wrote it is better than none
            ctx.notice(
                f"{params.path}: inlining the local functions {', '.join(inlined)} made a model "
                f"ONNX Runtime or onnx.checker refuses ({refused.refusal[:300]}); loaded with the "
                "functions kept, as `inline_functions: false` does (taps and precision plans see "
                "each call as one node)"
            )
            model, renamed, inference, facts = _write(kept, ctx, params, apart)
        else:
            if inlined:
                ctx.log(f"inlined the local functions {', '.join(inlined)}")
        if inference != "ok":
            ctx.log(f"shape inference {inference}")
        ctx.progress(4, 5, "summarizing")
        from trtflow.sessions.model_summary import summarize

        summary = summarize(model, params.path, renamed, inference, facts)
        ctx.output_path("summary").write_text(json.dumps(summary, indent=1))
        ctx.progress(5, 5, "done")
        return {"kind": "onnx", "passed": lint is None or lint.passed}

    def _lint(self, ctx: StepContext, params: Params, model) -> LintReport:
        """Write `lint`: every problem of every lint check (`sessions.lint`), each in the log."""
        from trtflow.onnxmodel.lint import LintSubject, problem_lines
        from trtflow.sessions.lint import lint

        report = lint(LintSubject(model, params.path, params.shapes))
        report.write(ctx.output_path("lint"))
        for line in problem_lines(report):
            ctx.log(f"lint: {line}")
        return report
