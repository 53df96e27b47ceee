"""How runners fail, and where they run: failures are uniform (in process or isolated), a failed
reference fails `compare` at run time, models with external data and ONNX Runtime builds other than
the `onnxruntime` distribution work, and an FP16 runner on the CPU provider says what it hides — all
through `trtflow run`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

import numpy as np
import onnx
import pytest
from conftest import step_value

from run_compare.models import batch_first_head, layer_norm_overflow, mlp_chain, save
from run_compare.recipes import failing_run, run_recipe, write_recipe
from run_compare.tensor_files import write_damaged


def _save_with_external_data(model: onnx.ModelProto, path) -> None:
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=0,
    )


def _reference_outputs(path, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))


EXTERNAL_RUN = """
run:
  uses: run-runners
  with:
    model: {model}
    outputs: {outputs}
    runners: [{{name: fp32, backend: onnxruntime}}, {{name: fp16, backend: emulated, precision: fp16}}]
diff:
  uses: compare
  gate: true
  with: {{results: "${{steps.run.results}}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}}
"""


def test_a_model_with_external_data_runs_in_onnxruntime(trtflow, tmp_path):
    (tmp_path / "weights").mkdir()
    _save_with_external_data(mlp_chain(layers=3), tmp_path / "weights" / "model.onnx")
    for outputs in (
        "graph",
        "all",
    ):  # as given, and rewritten with every tensor marked as an output
        result, out = run_recipe(
            trtflow, tmp_path, EXTERNAL_RUN.format(model="weights/model.onnx", outputs=outputs)
        )
        assert result.returncode == 0, result.stdout + result.stderr
        from trtflow.tensors.tensor_set import TensorSet

        results = TensorSet.open(out / "run" / "results")
        feed = TensorSet.open(out / "run" / "inputs").load("inputs", 0, "x")
        expected = _reference_outputs(tmp_path / "weights" / "model.onnx", np.asarray(feed))
        np.testing.assert_array_equal(results.load("fp32", 0, "act2"), expected["act2"])
        assert len(results.tensor_names("fp32")) == (1 if outputs == "graph" else 9)
    assert not list(tmp_path.glob("trtflow-ort-*"))


LOW_THRESHOLD_CLI = """
import sys
import trtflow.onnxmodel.files
trtflow.onnxmodel.files.EXTERNAL_DATA_THRESHOLD = 0  # every model a step saves gets external data, as past 64 MB
from trtflow.cli import main
sys.argv = ["trtflow", *sys.argv[1:]]
main()
"""


def test_a_tapped_model_the_store_keeps_with_external_data_runs(tmp_path):
    save(mlp_chain(layers=3), tmp_path / "model.onnx")
    taps = "taps:\n  uses: surgeon-insert-tap\n  with: {model: model.onnx}\n"
    recipe = write_recipe(
        tmp_path, taps + EXTERNAL_RUN.format(model="${steps.taps.model}", outputs="graph")
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            LOW_THRESHOLD_CLI,
            "run",
            str(recipe),
            "--workspace",
            str(tmp_path / "ws"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        tmp_path / "out" / "t" / "taps" / "model.onnx.data"
    ).exists()  # the store's model really has external data
    onnx.load(
        str(tmp_path / "out" / "t" / "taps" / "model.onnx")
    )  # users load it through the output link
    report = json.loads((tmp_path / "out" / "t" / "diff" / "report.json").read_text())
    assert report["runners"]["fp16"]["tensors_checked"] == 9 and not report["failed_runners"]


ONLY_GPU_BUILD_CLI = """
import sys
from importlib import metadata
real_version, real_distributions = metadata.version, metadata.packages_distributions

def version(name):  # a machine with `onnxruntime-gpu` installed and no `onnxruntime` distribution
    if name == "onnxruntime":
        raise metadata.PackageNotFoundError(name)
    return real_version("onnxruntime" if name == "onnxruntime-gpu" else name)

def packages_distributions():
    return {**real_distributions(), "onnxruntime": ["onnxruntime-gpu"]}

metadata.version, metadata.packages_distributions = version, packages_distributions
from trtflow.cli import main
sys.argv = ["trtflow", *sys.argv[1:]]
main()
"""


def test_runs_where_onnxruntime_comes_from_another_distribution(tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    recipe = write_recipe(tmp_path, EXTERNAL_RUN.format(model="model.onnx", outputs="graph"))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            ONLY_GPU_BUILD_CLI,
            "run",
            str(recipe),
            "--workspace",
            str(tmp_path / "ws"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PackageNotFoundError" not in result.stdout + result.stderr


def test_installed_version_tries_distributions_then_the_module(monkeypatch):
    from trtflow.errors import BackendUnavailable
    from trtflow.packages import installed_version

    real = metadata.version

    def only_gpu_build(name):
        if name == "onnxruntime":
            raise metadata.PackageNotFoundError(name)
        return real("onnxruntime") if name == "onnxruntime-gpu" else real(name)

    monkeypatch.setattr(metadata, "version", only_gpu_build)
    monkeypatch.setattr(
        metadata, "packages_distributions", lambda: {"onnxruntime": ["onnxruntime-gpu"]}
    )
    installed_version.cache_clear()
    try:
        assert installed_version("onnxruntime") == real("onnxruntime")
        monkeypatch.setattr(metadata, "packages_distributions", lambda: {})
        installed_version.cache_clear()
        import onnxruntime

        assert (
            installed_version("onnxruntime") == onnxruntime.__version__
        )  # no metadata at all: the module says
        with pytest.raises(BackendUnavailable, match="`no_such_module_here` is not installed"):
            installed_version("no_such_module_here")
    finally:
        installed_version.cache_clear()


def test_a_failed_reference_fails_compare_at_run_time_and_says_how_to_retry(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        runners:
          - {name: ref, backend: onnxruntime, session_options: {no_such_option: 1}}
          - {name: fp16, backend: emulated, precision: fp16}
    diff:
      uses: compare
      with: {results: "${steps.run.results}", reference: ref}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert (
        "the reference failed in the run" in output
        and "runner `ref` has an unknown session option" in output
    )
    assert "failed: runner `ref`" not in output  # the runner is named once
    assert "the next run tries `ref` again" in output
    timings = step_value(out / "run", "timings")
    assert (
        timings["fp16"]["iterations"] == 1 and "unknown session option" in timings["ref"]["error"]
    )
    status = trtflow(
        "status", tmp_path / "recipe.yaml", "--workspace", tmp_path / "ws", cwd=tmp_path
    )
    assert "its last run was incomplete: runner `ref` failed" in status.stdout
    again, _ = run_recipe(trtflow, tmp_path, steps)
    assert again.returncode == 3 and re.search(r"ran\s+run", again.stdout), (
        "an incomplete run is not reused"
    )


@pytest.mark.parametrize("isolate", [False, True])
def test_a_runner_failure_is_the_same_in_process_and_isolated(trtflow, tmp_path, isolate):
    """Without TensorRT here, a `tensorrt` runner fails alone, with or without `isolate`; the others run."""
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    (tmp_path / "m.engine").write_bytes(b"not built here")
    steps = f"""
    run:
      uses: run-runners
      with:
        model: model.onnx
        runners:
          - {{name: fp32, backend: onnxruntime}}
          - {{name: trt, backend: tensorrt, engine: m.engine, isolate: {str(isolate).lower()}}}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    timings = step_value(out / "run", "timings")
    assert timings["fp32"]["iterations"] == 1
    assert timings["trt"]["error"].startswith("runner `trt` failed: TensorRT is not installed here")
    assert "install trtflow[tensorrt]" in timings["trt"]["error"]


def test_a_real_fp16_transpose_matmul_runs_in_onnxruntime_and_bisect_lowers_it(trtflow, tmp_path):
    """ONNX Runtime's NCHWc pass crashed the process on the lowered FP16 model of a batch-first LSTM head:
    the `onnxruntime` fp16 runner failed, and bisect-precision died while verifying its plan."""
    save(batch_first_head(), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        runners: [{name: fp32, backend: onnxruntime}, {name: ort16, backend: onnxruntime, precision: fp16, isolate: true}]
    diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32, atol: 0.05, rtol: 0.05}}
    hunt:
      uses: bisect-precision
      with: {model: model.onnx, backend: onnxruntime, check: {atol: 0.05, rtol: 0.05}}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((out / "diff" / "values.json").read_text())["passed"]
    report = json.loads((out / "hunt" / "report.json").read_text())
    assert report["found"] and report["final"]["onnxruntime"]["passed"]


def test_an_onnx_file_given_as_an_engine_is_a_recipe_error(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    for entry in (
        "engine: model.onnx, runners: [{name: trt, backend: tensorrt}]",
        "runners: [{name: trt, backend: tensorrt, engine: model.onnx}]",
    ):
        recipe = write_recipe(
            tmp_path, f"run:\n  uses: run-runners\n  with: {{model: model.onnx, {entry}}}\n"
        )
        result = trtflow("validate", recipe, cwd=tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "model.onnx is an ONNX model, not a TensorRT engine" in result.stdout + result.stderr
        assert "steps.run.with." in result.stdout + result.stderr


@pytest.mark.parametrize("too_large", ["weights", "graph"])
def test_a_session_past_protobufs_limit_loads_from_a_scratch_file(tmp_path, monkeypatch, too_large):
    """Weights over the limit go to a scratch file without trying to serialize; a graph that only
    turns out too large when serialized (weights just under) falls back to it too."""
    from google.protobuf.message import EncodeError

    import trtflow.runners.onnxruntime as runner_module

    save(mlp_chain(layers=3), tmp_path / "model.onnx")
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    expected = _reference_outputs(tmp_path / "model.onnx", x)
    if too_large == "weights":
        monkeypatch.setattr(runner_module, "PROTOBUF_LIMIT", 1)
    else:
        serialize, refused = onnx.ModelProto.SerializeToString, []

        def refuse_once(
            self, **kwargs
        ):  # the session source's attempt fails; writing the scratch file works
            if not refused:
                refused.append(True)
                raise EncodeError("Failed to serialize proto")
            return serialize(self, **kwargs)

        monkeypatch.setattr(onnx.ModelProto, "SerializeToString", refuse_once)
    # a model in memory: a file run as it is goes to ONNX Runtime by path, whatever its size
    model = onnx.load(str(tmp_path / "model.onnx"))
    runner = runner_module.OnnxruntimeRunner("fp32", model, None)
    runner.activate()
    scratch = runner._scratch
    np.testing.assert_array_equal(runner.infer({"x": x})["act2"], expected["act2"])
    runner.deactivate()
    assert scratch is not None and not scratch.exists()


def test_a_model_file_run_as_it_is_is_opened_by_path_unparsed(tmp_path, monkeypatch):
    """Nothing to rewrite (no transform, the model's own outputs): ONNX Runtime reads the file and
    its external data itself, and the runner neither parses nor serializes the model."""
    import trtflow.onnxmodel.files as files
    import trtflow.runners.onnxruntime as runner_module

    (tmp_path / "weights").mkdir()
    _save_with_external_data(mlp_chain(layers=3), tmp_path / "weights" / "model.onnx")
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    expected = _reference_outputs(tmp_path / "weights" / "model.onnx", x)
    monkeypatch.setattr(files, "load_model", None)  # read it, and the runner fails
    runner = runner_module.OnnxruntimeRunner("fp32", tmp_path / "weights" / "model.onnx", None)
    runner.activate()
    np.testing.assert_array_equal(runner.infer({"x": x})["act2"], expected["act2"])
    runner.deactivate()


@pytest.mark.parametrize(
    "session_options, arena", [({}, False), ({"enable_cpu_mem_arena": True}, True)]
)
def test_sessions_run_without_the_cpu_memory_arena_unless_asked(tmp_path, session_options, arena):
    """ONNX Runtime's arena keeps a session's largest run (hundreds of taps) and grows by doubling; trtflow's
    sessions go without it by default, `session_options` turns it back on, and the outputs are the same."""
    import trtflow.runners.onnxruntime as runner_module
    from trtflow.runners.emulated import Config as EmulatedConfig

    save(mlp_chain(layers=3), tmp_path / "model.onnx")
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    expected = _reference_outputs(tmp_path / "model.onnx", x)
    runner = runner_module.OnnxruntimeRunner(
        "fp32", tmp_path / "model.onnx", None, session_options=session_options
    )
    runner.activate()
    assert runner.session.get_session_options().enable_cpu_mem_arena is arena
    np.testing.assert_array_equal(runner.infer({"x": x})["act2"], expected["act2"])
    runner.deactivate()
    emulated = EmulatedConfig(name="fp16", backend="emulated", precision="fp16").create(
        tmp_path / "model.onnx", None
    )
    emulated.activate()
    assert emulated.session.get_session_options().enable_cpu_mem_arena is False
    emulated.deactivate()
    from trtflow.ort_sessions import new_session_options

    assert (
        new_session_options().enable_cpu_mem_arena is False
    )  # the screening probe's and bisect judges' too


@pytest.mark.parametrize(
    "provider, says",
    [
        ("BogusEP", "`BogusEP` is no ONNX Runtime execution provider; available here: "),
        (
            "CUDAExecutionProvidr",
            "`CUDAExecutionProvidr` is no ONNX Runtime execution provider (did you mean "
            "`CUDAExecutionProvider`?); available here: ",
        ),
    ],
)
def test_an_unknown_onnxruntime_provider_is_a_recipe_error_at_its_providers_key(
    trtflow, tmp_path, provider, says
):
    """ONNX Runtime itself only warns and runs on the CPU: the comparison would silently be of the CPU provider."""
    import onnxruntime

    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    runners = f"runners: [{{name: fp32, backend: onnxruntime}}, {{name: gpu, backend: onnxruntime, providers: [{provider}]}}]"
    output = failing_run(trtflow, tmp_path, runners, 2)
    available = ", ".join(onnxruntime.get_available_providers())
    assert (
        f"recipe.yaml:6:122: steps.run.with.runners[1].providers: runner `gpu`: {says}{available}"
        in output
    ), output
    assert "UserWarning" not in output


def test_a_provider_list_is_a_priority_list_and_one_of_them_must_be_here(trtflow, tmp_path):
    """[CUDA, CPU] is what GPU recipes say: on a machine without CUDA it runs on the CPU, as asked;
    [CUDA] alone would silently run on the CPU, so it is refused."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("CUDA is available here")
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    fallback = "runners: [{name: fp32, backend: onnxruntime, providers: [CUDAExecutionProvider, CPUExecutionProvider]}]"
    failing_run(trtflow, tmp_path, fallback, 0)
    output = failing_run(
        trtflow,
        tmp_path,
        "runners: [{name: gpu, backend: onnxruntime, providers: [CUDAExecutionProvider]}]",
        2,
    )
    assert "runner `gpu`: this ONNX Runtime build has no `CUDAExecutionProvider`" in output, output


@pytest.mark.parametrize(
    "kind", ["index without iteration", "JSON nested deep", "RunResults of another shape"]
)
def test_a_saved_runner_on_a_damaged_file_is_a_recipe_error_at_its_path(trtflow, tmp_path, kind):
    """The file is the user's: not a failed runner recorded among the results (nor a bare KeyError/RecursionError)."""
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    name, says = write_damaged(tmp_path, kind)
    output = failing_run(
        trtflow,
        tmp_path,
        f"runners: [{{name: fp32, backend: onnxruntime}}, "
        f"{{name: golden, backend: saved, path: {name}}}]",
        2,
    )
    assert f"steps.run.with.runners[1].path: runner `golden`: {tmp_path / name}{says}" in output, (
        output
    )


def test_a_saved_runner_asking_for_a_runner_the_file_lacks_is_a_recipe_error_at_its_runner_key(
    trtflow, tmp_path
):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, runners: [{name: fp32, backend: onnxruntime}]}
    replay:
      uses: run-runners
      with:
        model: model.onnx
        runners: [{name: fp32, backend: onnxruntime}, {name: golden, backend: saved, path: "${steps.run.results}", runner: fp16}]
    """
    result, _ = run_recipe(trtflow, tmp_path, steps)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "steps.replay.with.runners[1].runner: runner `golden`: " in output
    assert "has no runner `fp16`; it holds ['fp32']" in output, output


def test_onnxruntime_fp16_on_the_cpu_provider_says_it_hides_overflows_once(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    runners = (
        "[{name: fp32, backend: onnxruntime}, {name: ort16, backend: onnxruntime, precision: fp16}, "
        "{name: ort16_isolated, backend: onnxruntime, precision: fp16, isolate: true}, "
        "{name: emulated16, backend: emulated, precision: fp16}]"
    )
    result, _ = run_recipe(
        trtflow,
        tmp_path,
        f"run: {{uses: run-runners, with: {{model: model.onnx, runners: {runners}}}}}\n",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    notice = (
        "runner `ort16`, `ort16_isolated`: ONNX Runtime's CPU provider computes most FP16 ops in FP32, so "
        "overflows a GPU hits are hidden; use the `emulated` backend to see them"
    )
    assert result.stdout.count(notice) == 1, result.stdout
    described = trtflow("steps", "run-runners", cwd=tmp_path)
    assert described.returncode == 0
    assert (
        "fp16 runs a real FP16 conversion of the model. ONNX Runtime's CPU provider computes most FP16 ops in "
        "FP32, so overflows a GPU hits are hidden; use the `emulated` backend to see them."
    ) in " ".join(described.stdout.split())


def test_an_fp16_runner_whose_gpu_provider_is_missing_runs_on_cpu_and_is_told():
    import onnxruntime

    from trtflow.runners.onnxruntime import Config

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("CUDA is available here: the runner really runs on the GPU")
    on_gpu = Config(
        name="g",
        backend="onnxruntime",
        precision="fp16",
        providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    assert on_gpu.hides_fp16_overflows()
    assert not Config(name="f", backend="onnxruntime").hides_fp16_overflows()
