"""`run-runners`: feed the same inputs to several runners and keep everything they return.

`polygraphy run --onnxrt --trt --onnx-outputs mark all --save-outputs` as a step: the feeds are
made once (generated, read from a file, or from a loader function) and stored as `inputs`; every
runner gets exactly those feeds; what they return lands in `results`, one uncompressed `.npz` per
runner and iteration (a `.npy` member per tensor), written as it arrives.

Memory: the requested tensors are split into slices that fit `memory_budget_mb`, each run by a
runner of its own (`trtflow.runners.sliced`); peak memory follows the budget, not the model.

A runner that fails — whatever it raised, or a crash of an `isolate: true` runner — is recorded in
`results` with its message, the other runners still run, and `compare` reports it (a failed
reference fails `compare`). Isolation changes where a runner runs, never the outcome. What the
params get wrong (a `keep` node the model lacks, an engine that is an ONNX file) is a recipe error
before anything runs. The step fails only when every runner failed.

Inputs: generated from the model (`data`), or read (`inputs` / `loader`). Without a model there is
nothing to generate from: runners that compute need `inputs`/`loader`; `saved` runners alone replay
their iterations with empty feeds.

Per-layer times: a runner that measures them (`tensorrt` with `layer_timing: true`) gets its profile
written to `profiles/<runner>.profile.json` in trtexec's `--exportProfile` layout, which
`render-graph` reads as its `profile` (the folder plus `profile_runner`, or the file itself). The
profile covers the timed inferences of the first pass: warm-up runs are dropped, and later passes
(memory-budget slices) run the same engine again, adding nothing but time.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import Field, field_validator, model_validator

from trtflow.errors import ParamError, StepError
from trtflow.lazy import lazy_import
from trtflow.packages import installed_version
from trtflow.runners.base import (
    PROFILE_SUFFIX,
    RunnerConfig,
    RunnerFailed,
    failing_as,
    layer_profile,
    most_needed,
    refuse_onnx_engine,
)
from trtflow.runners.registry import runner_entry
from trtflow.runners.sliced import SlicedRunner
from trtflow.schema.paths import InputPath, ModelFile
from trtflow.schema.problems import did_you_mean
from trtflow.schema.recipe import Resources
from trtflow.steps.base import Step, StepContext, StepParams, file, folder, measurement
from trtflow.tensors.inputs import DataSpec, ExtraInputs, LoaderSpec, ResultsFeeds

if TYPE_CHECKING:
    import numpy as np

    from trtflow.tensors.tensor_set import TensorSetWriter
else:
    np = lazy_import("numpy")


class Params(StepParams):
    model: ModelFile | None = Field(
        None, description="The ONNX model (tapped or not) the runners run."
    )
    engine: InputPath | None = Field(None, description="A TensorRT engine, for `tensorrt` runners.")
    runners: list[runner_entry()] = Field(  # type: ignore[valid-type]  # a runtime union
        min_length=1, description="The runners; each needs a unique `name`."
    )
    data: DataSpec | None = Field(
        None,
        description="Generated inputs (the default when no `inputs`/`loader`); with `inputs`, "
        "draws only the inputs its feeds lack.",
    )
    inputs: InputPath | ResultsFeeds | None = Field(
        None,
        description="Inputs file: .npz, folder of .npy/.npz, tensor set, Polygraphy JSON; or "
        "layerwise `{results: SET_OR_JSON, runner: NAME}` (another run's computed tensors).",
    )
    extra_inputs: ExtraInputs = Field(
        "ignore",
        description="Tensors in `inputs` the model does not take: `ignore` (left out, with a "
        "note) or `error`.",
    )
    loader: LoaderSpec | None = Field(
        None, description="`script.py:function` returning or yielding feed dicts."
    )
    outputs: Literal["graph", "all"] | list[str] = Field(
        "graph",
        description="`graph`: the model's outputs (taps included); `all`: every computed tensor; or names.",
    )
    memory_budget_mb: int = Field(
        1024, ge=1, description="Most output memory held at once; more is split into passes."
    )
    warmup: int = Field(
        0, ge=0, description="Untimed runs of the first feed before the timed ones."
    )
    iterations: int | None = Field(None, ge=1, description="Use only the first N feeds.")
    polygraphy_json: bool = Field(
        False,
        description="Also write the inputs and results as Polygraphy JSON files "
        "(`polygraphy run --load-inputs/--load-outputs` reads them).",
    )

    _engine_is_an_engine = field_validator("engine")(refuse_onnx_engine)

    @model_validator(mode="after")
    def _one_source(self) -> Params:
        given = [key for key in ("data", "inputs", "loader") if getattr(self, key) is not None]
        if len(given) > 1 and given != ["data", "inputs"]:  # `data` may fill what `inputs` lack
            raise ValueError(f"give one input source, not {' and '.join(given)}")
        names = [r.name for r in self.runners]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"runner names must be unique; repeated: {', '.join(duplicates)}")
        return self


def _runner_target(config: RunnerConfig, params: Params) -> Path | None:
    if config.reads == "nothing":
        return None
    key = "engine" if config.reads == "engine" else "model"
    target = getattr(params, key)
    if target is None:
        raise ParamError(key, f"runner `{config.name}` ({config.backend}) needs `{key}`")
    return target


def _feeds(params: Params, model, notice) -> list[dict[str, np.ndarray]]:
    from trtflow.tensors.inputs import InputSourceError, collect_feeds

    if model is None and params.inputs is None and params.loader is None:
        return _empty_feeds(params)
    try:
        return collect_feeds(
            model,
            data=params.data,
            inputs=params.inputs,
            loader=params.loader,
            iterations=params.iterations,
            extra_inputs=params.extra_inputs,
            notice=notice,
        )
    except InputSourceError as error:
        raise ParamError(error.param, str(error)) from None


def _empty_feeds(params: Params) -> list[dict]:
    """A run with no model and no inputs: only runners that replay saved outputs can run, one empty
    feed per iteration of the longest saved set."""
    if params.data is not None:
        raise ParamError(
            "data",
            "`data` generates inputs from a model's input names and shapes, and this run has "
            "no `model`: give `model`, or the feeds themselves with `inputs` (e.g. "
            "`${steps.RUN.inputs}`, a .npz, a Polygraphy inputs JSON) or `loader`",
        )
    counts = {}
    for config in params.runners:
        try:
            counts[config.name] = config.replayed_iterations()
        except (OSError, ValueError) as error:
            raise ParamError("runners", f"runner `{config.name}`: {error}") from None
    fed = [name for name, count in counts.items() if count is None]
    if fed:
        raise ParamError(
            "inputs",
            f"runner(s) {', '.join(f'`{name}`' for name in fed)} need inputs, and this run has "
            "no `model` to generate them from: give `inputs` (e.g. `${steps.RUN.inputs}`, a .npz, "
            "a Polygraphy inputs JSON) or `loader`, or give `model`",
        )
    longest = max(counts.values())
    iterations = min(longest, params.iterations) if params.iterations else longest
    if not iterations:
        raise ParamError("runners", "the saved outputs hold no iterations")
    return [{} for _ in range(iterations)]


def _check_runners(params: Params, model) -> None:
    for index, config in enumerate(params.runners):
        config.check_entry(model, "runners", index)


def _notice_runner_caveats(ctx: StepContext, params: Params, model) -> None:
    """What each runner says a user must know about its results (`RunnerConfig.notices`: FP16 on a
    CPU that hides overflows, nodes an opset holds in FP32), once per caveat for every runner it
    concerns."""
    concerned: dict[str, list[str]] = {}
    for config in params.runners:
        for caveat in config.notices(model):
            concerned.setdefault(caveat, []).append(f"`{config.name}`")
    for caveat, names in concerned.items():
        ctx.notice(f"runner {', '.join(names)}: {caveat}")


def _requested(params: Params, tensors: dict, model) -> list[str] | None:
    from trtflow.tensors.taps import select

    if params.outputs == "graph":
        return None
    if params.outputs == "all":
        return select(tensors, None)
    unknown = [n for n in params.outputs if n not in tensors]
    if unknown:
        raise ParamError(
            "outputs",
            f"the model has no tensor `{unknown[0]}`{did_you_mean(unknown[0], list(tensors))}",
        )
    return list(params.outputs)


def _run_one(
    sliced: SlicedRunner, feeds, warmup: int, results, progress
) -> tuple[dict, list[dict] | None]:
    """Run one runner over all feeds, slice by slice, writing outputs as they come; returns its timings
    and the per-layer profile of the first slice's timed inferences (None if the runner has none)."""
    seconds = np.zeros(len(feeds))
    profile = None
    name = sliced.name
    for slice_index in range(len(sliced)):
        with sliced.slice(slice_index) as runner:
            if slice_index == 0 and warmup:
                with failing_as(name):
                    for _ in range(warmup):
                        runner.infer(feeds[0])
                    layer_profile(runner)  # drops the warm-up runs' layer times
            for iteration, feed in enumerate(feeds):
                started = time.perf_counter()
                with failing_as(name):
                    produced = runner.infer(feed)
                seconds[iteration] += time.perf_counter() - started
                for tensor, array in produced.items():
                    results.add(name, iteration, tensor, array)
                del produced
                progress(slice_index * len(feeds) + iteration + 1, len(sliced) * len(feeds))
            if slice_index == 0:
                with failing_as(name):
                    profile = layer_profile(runner)
    milliseconds = seconds * 1000
    timings = {
        "mean_ms": round(float(milliseconds.mean()), 3),
        # statistics' median, the same number: np.median imports numpy.ma (6 ms and 2 MB of a
        # cold run) to check for masked arrays
        "median_ms": round(statistics.median(milliseconds.tolist()), 3),
        "min_ms": round(float(milliseconds.min()), 3),
        "iterations": len(feeds),
        "passes": len(sliced),
    }
    return timings, profile


def _hashed_while_written(ctx: StepContext, written: TensorSetWriter) -> None:
    """The store takes the sets' digests from their writer rather than reading them back."""
    for path, (sha256, size) in written.written.items():
        ctx.hashed_while_written(path, sha256, size)


def _write_profile(ctx: StepContext, runner: str, profile: list[dict]) -> None:
    folder = ctx.output_path("profiles")
    folder.mkdir(exist_ok=True)
    (folder / f"{runner}{PROFILE_SUFFIX}").write_text(
        json.dumps(profile, indent=1) + "\n", encoding="utf-8"
    )


def _write_polygraphy_files(ctx: StepContext, feeds, results) -> None:
    """Polygraphy's inputs and RunResults JSON. Each iteration's `runtime` is 0: a measured time
    would make the file differ on every run (the step's `timings` hold the times)."""
    from trtflow.tensors import polygraphy_json

    polygraphy_json.write_inputs(feeds, ctx.output_path("polygraphy_inputs"))
    ran = [r for r in results.runners if results.failure(r) is None]
    runs = (
        (
            runner,
            ((results.iteration(runner, i), 0.0) for i in range(results.iterations(runner))),
        )
        for runner in ran
    )
    polygraphy_json.write_results(runs, ctx.output_path("polygraphy_results"))


class RunRunners(Step):
    """Run several runners on the same inputs."""

    kind = "run-runners"
    summary = "Feed the same inputs to several runners (onnxruntime, emulated, tensorrt, saved); keep every output."
    Params: TypeAlias = Params
    outputs = {
        "inputs": folder("The feeds every runner got (a tensor set; `trtflow inspect` shows it)."),
        "results": folder(
            "What each runner returned, per iteration and tensor (.npz per iteration + index.json)."
        ),
        "polygraphy_inputs": file(
            ".json", "The inputs as Polygraphy JSON (with `polygraphy_json: true`).", optional=True
        ),
        "polygraphy_results": file(
            ".json",
            "The results as Polygraphy RunResults JSON (with `polygraphy_json: true`).",
            optional=True,
        ),
        "profiles": folder(
            "Per-layer times of each runner that measured them (`tensorrt` with `layer_timing: true`): "
            "<runner>.profile.json in trtexec's --exportProfile layout, for render-graph's `profile`.",
            optional=True,
        ),
        "timings": measurement(
            {
                "fp32": {
                    "mean_ms": 1.0,
                    "median_ms": 1.0,
                    "min_ms": 1.0,
                    "iterations": 1,
                    "passes": 1,
                }
            },
            "Per runner: inference time (ms) and how many passes the memory budget needed; or its error. "
            "A measurement: kept in the entry's manifest (`trtflow inspect` shows it), never in the "
            "results or values.json, so a re-run's artifacts are byte-identical.",
        ),
    }
    version = 9  # 2: the `profiles` output; 3: inputs record their iteration count, runner errors are uniform;
    # 4: scalars stay scalars in the Polygraphy JSON files; 5: results name unnamed nodes as reports do;
    # 6: the notice that ONNX Runtime's CPU provider hides FP16 overflows (notices are kept with the cached entry)
    # 7: layerwise `inputs` (results sets and files), tensors the model does not take left out, `data` with `inputs`
    # 8: no timings in the results index or the Polygraphy results (runtime 0): artifacts are byte-identical
    # 9: tensor sets of format 2 (one .npz pack per runner and iteration)

    def needs(self, params: Params) -> Resources:
        return most_needed(config.resources() for config in params.runners)

    def fingerprint(self, params: Params) -> dict[str, str]:
        facts = {"numpy": installed_version("numpy")}
        for config in params.runners:
            facts.update(config.fingerprint())
        return facts

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnxmodel.catalog import catalog
        from trtflow.onnxmodel.files import load_model, with_stable_names
        from trtflow.runners.sliced import plan_slices, with_input_shapes
        from trtflow.tensors.tensor_set import INPUTS, TensorSetWriter

        # every node with its stable name, whichever runners run: `results` names nodes as reports do
        model = (
            with_stable_names(load_model(params.model, load_weights=False))
            if params.model is not None
            else None
        )
        targets = {config.name: _runner_target(config, params) for config in params.runners}
        _check_runners(params, model)
        _notice_runner_caveats(ctx, params, model)
        feeds = _feeds(params, model, ctx.notice)
        inputs_set = TensorSetWriter(ctx.output_path("inputs"))
        for iteration, feed in enumerate(feeds):
            inputs_set.add_feed(INPUTS, iteration, feed)
        feeds = list(inputs_set.close().feeds())  # memory-mapped from here on
        _hashed_while_written(ctx, inputs_set)

        tensors = catalog(with_input_shapes(model, feeds[0])) if model is not None else {}
        requested = _requested(params, tensors, model) if model is not None else None
        slices: list[list[str] | None] = [requested]
        if requested and model is not None:
            slices = list(plan_slices(model, tensors, requested, params.memory_budget_mb << 20))
            if len(slices) > 1:
                ctx.log(
                    f"{len(requested)} tensors over {len(slices)} passes to stay under "
                    f"{params.memory_budget_mb} MB"
                )
        shown = (
            requested
            if requested is not None
            else [o.name for o in model.graph.output]
            if model is not None
            else []
        )
        results = TensorSetWriter(
            ctx.output_path("results"), {n: tensors[n].as_json() for n in shown if n in tensors}
        )

        timings: dict[str, dict] = {}
        for position, config in enumerate(params.runners):

            def progress(
                done: int, total: int, name=config.name, position=position
            ) -> None:  # inferences
                ctx.progress(position * total + done, len(params.runners) * total, name)

            try:
                sliced = SlicedRunner(config, targets[config.name], slices)
                timings[config.name], profile = _run_one(
                    sliced, feeds, params.warmup, results, progress
                )
                results.record_runner(config.name, backend=config.backend)
                if profile is not None:
                    _write_profile(ctx, config.name, profile)
            except RunnerFailed as error:
                timings[config.name] = {"error": str(error)}
                results.record_runner(
                    config.name, backend=config.backend, status="failed", error=str(error)
                )
                ctx.notice(
                    f"{error}\n(recorded with this step's results; the next run tries `{config.name}` again)"
                )
                ctx.mark_incomplete(f"runner `{config.name}` failed")
        finished = results.close()
        _hashed_while_written(ctx, results)
        if params.polygraphy_json:
            _write_polygraphy_files(ctx, feeds, finished)
        if all("error" in timing for timing in timings.values()):
            raise StepError(
                "every runner failed: " + "; ".join(t["error"] for t in timings.values())
            )
        return {"timings": timings}
