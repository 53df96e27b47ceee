"""The smaller commands: schema, steps, dag, doctor, cache ls, and `--set` on any recipe value."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, write_recipe

QUICKSTART = REPO / "pipelines" / "quickstart.yaml"


def test_schema_ties_each_step_kind_to_its_params(trtflow, tmp_path):
    result = trtflow("schema", cwd=tmp_path)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    step = schema["$defs"]["StepSpec"]
    assert "load" in step["properties"]["uses"]["enum"]
    load_rule = next(
        rule for rule in step["allOf"] if rule["if"]["properties"]["uses"]["const"] == "load"
    )
    params = schema["$defs"][load_rule["then"]["properties"]["with"]["$ref"].rsplit("/", 1)[-1]]
    assert "path" in params["required"] and params["additionalProperties"] is False
    assert any(option.get("pattern") for option in params["properties"]["shapes"]["anyOf"]), (
        "references allowed"
    )


def test_every_shipped_recipe_is_valid_against_the_schema(trtflow, tmp_path):
    """What editors see: the schema accepts our own recipes (references at any depth) and
    rejects a misspelled key."""
    import jsonschema
    import yaml

    schema = json.loads(trtflow("schema", cwd=tmp_path).stdout)
    recipes = sorted((REPO / "pipelines").glob("*.yaml"))
    assert len(recipes) >= 5
    for recipe in recipes:
        jsonschema.validate(yaml.safe_load(recipe.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError, match="'paht' was unexpected"):
        jsonschema.validate(
            {
                "trtflow": 1,
                "name": "x",
                "steps": {"a": {"uses": "load", "with": {"paht": "m.onnx"}}},
            },
            schema,
        )


def test_steps_lists_and_describes_kinds(trtflow, tmp_path):
    listing = trtflow("steps", cwd=tmp_path)
    assert listing.returncode == 0 and "load" in listing.stdout
    detail = trtflow("steps", "load", cwd=tmp_path)
    assert detail.returncode == 0
    assert "path" in detail.stdout and "required" in detail.stdout and "summary" in detail.stdout
    nested = trtflow(
        "steps", "bisect-precision", cwd=tmp_path, env={"COLUMNS": "80"}
    )  # no key cut short
    for key in (
        "data.seed",
        "check (Tolerances).atol",
        "check (CommandCheck).command",
        "nodes.exclude",
    ):
        assert key in nested.stdout, key
    runners = trtflow("steps", "run-runners", cwd=tmp_path, env={"COLUMNS": "80"})
    assert "runners[] (onnxruntime).providers" in runners.stdout
    assert (
        "infinities_compare_equal"
        in trtflow("steps", "compare", cwd=tmp_path, env={"COLUMNS": "80"}).stdout
    )
    typo = trtflow("steps", "lod", cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean `load`" in typo.stderr


def test_dag_formats(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        """
trtflow: 1
name: g
steps:
  a: {uses: test-sleep}
  b: {uses: test-sleep, with: {text: "${steps.a.length}!"}}
  c: {uses: test-sleep, after: [a, b]}
""",
    )
    text = trtflow("dag", recipe, cwd=tmp_path, env=plugin_env)
    assert text.stdout.splitlines() == [
        "a (test-sleep)",
        "b (test-sleep)  <- a",
        "c (test-sleep)  <- a, b",
    ]
    dot = trtflow("dag", recipe, "--format", "dot", cwd=tmp_path, env=plugin_env)
    assert (
        '"a" -> "b";' in dot.stdout
        and '"b" -> "c";' in dot.stdout
        and dot.stdout.startswith('digraph "g"')
    )
    bad = trtflow("dag", recipe, "--format", "png", cwd=tmp_path, env=plugin_env)
    assert bad.returncode == 2
    awkward = write_recipe(
        tmp_path,
        """
trtflow: 1
name: g
steps:
  end: {uses: test-sleep}
  a-b: {uses: test-sleep, after: [end]}
  a_b: {uses: test-sleep, after: [a-b]}
""",
        "awkward.yaml",
    )
    mermaid = trtflow(
        "dag", awkward, "--format", "mermaid", cwd=tmp_path, env=plugin_env
    ).stdout.splitlines()
    assert mermaid == [
        "graph TD",
        '  s0["end<br/>test-sleep"]',
        '  s1["a-b<br/>test-sleep"]',
        '  s2["a_b<br/>test-sleep"]',
        "  s0 --> s1",
        "  s1 --> s2",
    ]


def test_doctor_reports_versions(trtflow, tmp_path):
    result = trtflow("doctor", cwd=tmp_path)
    assert result.returncode == 0
    for component in ("onnxruntime", "tensorrt", "gpu", "CPUExecutionProvider"):
        assert component in result.stdout
    rows = {
        line.split("│")[0].strip(): line.split("│")[1].strip()
        for line in result.stdout.splitlines()
        if "│" in line
    }
    for package in (
        "trtflow",
        "numpy",
        "onnx",
        "onnxruntime",
    ):  # what is installed, as packaging records it
        assert rows[package] == importlib.metadata.version(package), (package, rows)
    if (
        importlib.util.find_spec("tensorrt") is None
    ):  # what to do, brackets and all (not eaten as markup)
        assert (
            "not installed: install trtflow[tensorrt] on a machine with an NVIDIA GPU"
            in " ".join(result.stdout.split())
        )
    if (
        importlib.util.find_spec("cuda") is None
    ):  # without cuda-python nobody asked CUDA: no "none visible"
        assert "cannot tell: cuda-python is not installed, so CUDA cannot be asked" in " ".join(
            result.stdout.split()
        )


def test_set_any_recipe_value_and_cache_ls(trtflow, tmp_path):
    workspace = tmp_path / "ws"
    result = trtflow(
        "run",
        QUICKSTART,
        "--set",
        "steps.model.with.check=false",
        "--workspace",
        workspace,
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    listing = trtflow("cache", "ls", "--workspace", workspace, cwd=tmp_path)
    assert listing.returncode == 0 and "quickstart" in listing.stdout and "model" in listing.stdout
    status = trtflow("status", QUICKSTART, "--workspace", workspace, cwd=tmp_path)
    assert "with.check: false -> true" in status.stdout


def test_cache_commands_say_when_there_is_no_workspace(trtflow, tmp_path):
    for command in (["cache", "ls"], ["cache", "verify"], ["cache", "gc"]):
        result = trtflow(*command, cwd=tmp_path)
        assert result.returncode == 2 and "no trtflow workspace at" in result.stderr, command
    missing = trtflow("cache", "ls", "--recipe", "nope.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.yaml: file not found" in missing.stderr


def test_long_steps_print_progress_lines_in_logs(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        "trtflow: 1\nname: slow\nsteps:\n"
        "  s: {uses: test-sleep, with: {text: x, seconds: 1.2, size_kb: 6}}\n",
    )
    result = trtflow(
        "run", recipe, cwd=tmp_path, env={**plugin_env, "TRTFLOW_PROGRESS_SECONDS": "0.3"}
    )
    assert result.returncode == 0, result.stderr
    progress = [
        line.strip() for line in result.stdout.splitlines() if line.strip().startswith("s: ")
    ]
    assert len(progress) >= 2 and all(line.endswith("/6 writing") for line in progress), (
        result.stdout
    )


def _with_closed_stdout(*args, cwd, env=None) -> subprocess.CompletedProcess:
    """`trtflow ARGS | head -0`, deterministically: stdout is a pipe whose reader is already gone."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [sys.executable, "-m", "trtflow", *map(str, args)],
            cwd=cwd,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=120,
        )
    finally:
        os.close(writer)


@pytest.mark.parametrize(
    "args",
    [
        ["schema"],
        ["steps"],
        ["steps", "bisect-precision"],
        ["--version"],
        ["run", "--help"],
        ["inspect", REPO / "pipelines" / "models" / "overflow_demo.onnx"],
        ["dag", QUICKSTART],
    ],
)
def test_a_closed_stdout_is_not_an_error(tmp_path, args):
    result = _with_closed_stdout(*args, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_run_into_a_closed_stdout_ends_quietly(tmp_path, plugin_env):
    """A plain `run` is read without typer (`cli.run_command`), and ends as typer's commands do."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("trtflow: 1\nname: r\nsteps:\n  a: {uses: test-sleep}\n")
    result = _with_closed_stdout(
        "run", recipe, "--workspace", tmp_path / "w", cwd=tmp_path, env=plugin_env
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert (tmp_path / "trtflow-out" / "r" / "a").exists()


def test_version_and_help_placeholders(trtflow, tmp_path):
    from trtflow import __version__

    version = trtflow("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout == f"trtflow {__version__}\n"
    run_help = trtflow("run", "--help", cwd=tmp_path).stdout
    assert (
        "--set NAME=VALUE" in run_help
        and "--workspace DIR" in run_help
        and "--force STEP" in run_help
    )
    assert "RECIPE" in run_help and "{recipe}" not in run_help
    for command in (
        ["run"],
        ["status"],
        ["steps"],
        ["inspect"],
        ["cache", "gc"],
        ["replay", "export"],
        ["dag"],
    ):
        shown = trtflow(*command, "--help", cwd=tmp_path).stdout
        assert "list[" not in shown and "<int" not in shown, (command, shown)


def test_every_step_param_has_a_description_and_its_real_default(trtflow, tmp_path):
    from trtflow.steps import kinds, registry

    for kind in registry.kinds():
        for param in kinds.describe(kind)["params"]:
            assert param["description"].strip(), f"{kind}: {param['name']} has no description"
    runners = trtflow("steps", "run-runners", cwd=tmp_path).stdout
    assert (
        "data.shapes  object, default {}" in runners
        and 'data.ranges  object, default {"*": [0.0, 1.0]}' in runners
    )
    assert "runners[] (emulated).keep  list[string] | path, default []" in runners
    assert "runners[] (onnxruntime).session_options  object, default {}" in runners


def test_a_bad_environment_variable_is_a_usage_error(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path, "trtflow: 1\nname: env\nsteps:\n  s: {uses: test-sleep, with: {text: x}}\n"
    )
    broken_plugins = {**plugin_env, "TRTFLOW_STEP_PLUGINS": "trtflow_test_steps, no_such_plugin"}
    for command in (["steps"], ["validate", recipe], ["schema"]):
        result = trtflow(*command, cwd=tmp_path, env=broken_plugins)
        assert result.returncode == 2, (command, result.stderr)
        assert (
            "TRTFLOW_STEP_PLUGINS names `no_such_plugin`, which cannot be imported" in result.stderr
        )
        assert "please report" not in result.stderr and "Traceback" not in result.stderr
    progress = trtflow(
        "run", recipe, cwd=tmp_path, env={**plugin_env, "TRTFLOW_PROGRESS_SECONDS": "abc"}
    )
    assert progress.returncode == 2, progress.stderr
    assert "TRTFLOW_PROGRESS_SECONDS='abc': expected a number of seconds >= 0" in progress.stderr
    (tmp_path / "a-file").write_text("not a folder")
    for command in (["run", recipe], ["status", recipe]):
        result = trtflow(
            *command,
            cwd=tmp_path,
            env={**plugin_env, "TRTFLOW_WORKSPACE": str(tmp_path / "a-file")},
        )
        assert result.returncode == 2, (command, result.stderr)
        assert "a-file ($TRTFLOW_WORKSPACE) is a file, not a folder" in result.stderr
    listing = trtflow(
        "cache", "ls", cwd=tmp_path, env={"TRTFLOW_WORKSPACE": str(tmp_path / "missing")}
    )
    assert listing.returncode == 2 and "missing (from $TRTFLOW_WORKSPACE)" in listing.stderr
