"""A corpus of broken recipes: each must fail `trtflow validate` and `trtflow run` with exit 2,
name `file:line:column`, say what is wrong, and show no traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO, ledger_lines, write_recipe

DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"

HEAD = "trtflow: 1\nname: broken\n"

# (id, recipe text, the line the error must point at, words the message must contain)
CORPUS = [
    (
        "yaml-unclosed-flow",
        HEAD + "steps:\n  a: {uses: load, with: {path: m.onnx}\n",
        5,
        "flow mapping that starts at line 4",
    ),
    (
        "yaml-bad-indent",
        HEAD + "steps:\n  a:\n    uses: load\n   with: {path: m.onnx}\n",
        6,
        "YAML syntax error",
    ),
    ("yaml-tab", HEAD + "steps:\n\ta:\n", 4, "YAML syntax error"),
    (
        "unknown-top-key",
        HEAD + "stepz: {}\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
        3,
        "unknown key `stepz`",
    ),
    (
        "unknown-step-key",
        HEAD + "steps:\n  a:\n    usse: load\n    uses: load\n    with: {path: m.onnx}\n",
        5,
        "did you mean `uses`",
    ),
    (
        "unknown-with-key",
        HEAD + "steps:\n  a:\n    uses: load\n    with:\n      paht: m.onnx\n",
        7,
        "did you mean `path`",
    ),
    (
        "missing-with-key",
        HEAD + "steps:\n  a:\n    uses: load\n    with: {check: true}\n",
        6,
        "missing required key `path`",
    ),
    (
        "wrong-type-bool",
        HEAD + "steps:\n  a:\n    uses: load\n    with:\n      path: m.onnx\n      check: maybe\n",
        8,
        "check",
    ),
    (
        "wrong-type-shapes",
        HEAD + "steps:\n  a:\n    uses: load\n    with:\n      path: m.onnx\n      shapes: 5\n",
        8,
        "dictionary",
    ),
    (
        "wrong-type-list-item",
        HEAD
        + "steps:\n  a:\n    uses: load\n    with:\n      path: m.onnx\n      shapes: {x: [1, two]}\n",
        8,
        "integer",
    ),
    (
        "unknown-kind",
        HEAD + "steps:\n  a:\n    uses: lod\n    with: {path: m.onnx}\n",
        5,
        "did you mean `load`",
    ),
    (
        "unknown-step-ref",
        HEAD
        + "steps:\n  a: {uses: load, with: {path: m.onnx}}\n  b:\n    uses: load\n    with: {path: '${steps.aa.model}'}\n",
        7,
        "unknown step `aa`",
    ),
    (
        "unknown-output-ref",
        HEAD
        + "steps:\n  a: {uses: load, with: {path: m.onnx}}\n  b:\n    uses: load\n    with: {path: '${steps.a.modle}'}\n",
        7,
        "did you mean `model`",
    ),
    (
        "unknown-var",
        HEAD
        + "vars: {model: m.onnx}\nsteps:\n  a:\n    uses: load\n    with: {path: '${vars.modle}'}\n",
        7,
        "did you mean `model`",
    ),
    (
        "malformed-ref",
        HEAD + "steps:\n  a:\n    uses: load\n    with: {path: '${model}'}\n",
        6,
        "cannot read reference",
    ),
    (
        "cycle",
        HEAD
        + "steps:\n  a:\n    uses: load\n    with: {path: '${steps.b.model}'}\n  b:\n    uses: load\n    with: {path: '${steps.a.model}'}\n",
        4,
        "a -> b -> a",
    ),
    (
        "self-after",
        HEAD + "steps:\n  a:\n    uses: load\n    with: {path: m.onnx}\n    after: [a]\n",
        4,
        "a -> a",
    ),
    (
        "after-unknown",
        HEAD + "steps:\n  a:\n    uses: load\n    with: {path: m.onnx}\n    after: [b]\n",
        7,
        "unknown step `b`",
    ),
    (
        "duplicate-step",
        HEAD
        + "steps:\n  a: {uses: load, with: {path: m.onnx}}\n  a: {uses: load, with: {path: m.onnx}}\n",
        5,
        "duplicate key `a`",
    ),
    (
        "duplicate-with-key",
        HEAD + "steps:\n  a:\n    uses: load\n    with:\n      path: m.onnx\n      path: m.onnx\n",
        8,
        "duplicate key `path`",
    ),
    (
        "wrong-version",
        "trtflow: 2\nname: broken\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
        1,
        "version 2 is not supported",
    ),
    (
        "missing-version",
        "name: broken\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
        1,
        "missing `trtflow: 1`",
    ),
    (
        "missing-file",
        HEAD + "steps:\n  a:\n    uses: load\n    with:\n      path: no/such/model.onnx\n",
        7,
        "file not found",
    ),
    ("empty-file", "", 1, "the recipe is empty"),
    ("top-level-list", "- trtflow: 1\n- name: x\n", 1, "not a list"),
    (
        "missing-name",
        "trtflow: 1\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
        1,
        "missing required key `name`",
    ),
    ("empty-steps", HEAD + "steps: {}\n", 3, "steps"),
    (
        "bad-step-id",
        HEAD + "steps:\n  my step: {uses: load, with: {path: m.onnx}}\n",
        4,
        "not a valid name",
    ),
    ("with-is-list", HEAD + "steps:\n  a:\n    uses: load\n    with: [m.onnx]\n", 6, "dictionary"),
    (
        "matrix-ambiguous-ref",
        HEAD
        + "steps:\n  a:\n    uses: load\n    matrix: {check: [true, false]}\n    with: {path: m.onnx, check: '${matrix.check}'}\n  b:\n    uses: load\n    with: {path: '${steps.a.model}'}\n",
        10,
        "refer to one of: a@true, a@false",
    ),
    (
        "unknown-matrix-key",
        HEAD
        + "steps:\n  a:\n    uses: load\n    matrix: {check: [true]}\n    with: {path: m.onnx, check: '${matrix.chek}'}\n",
        7,
        "unknown matrix key `chek`",
    ),
    (
        "var-cycle",
        HEAD
        + "vars:\n  a: '${vars.b}'\n  b: '${vars.a}'\nsteps:\n  s: {uses: load, with: {path: m.onnx}}\n",
        4,
        "cycle",
    ),
    (
        "gate-without-passed",
        HEAD
        + "steps:\n  a:\n    uses: surgeon-insert-tap\n    gate: true\n    with: {model: m.onnx}\n",
        6,
        "`gate: true` needs",
    ),
    (
        "runner-unknown-key",
        HEAD
        + "steps:\n  r:\n    uses: run-runners\n    with:\n      model: m.onnx\n      runners:\n"
        "        - {name: a, backend: onnxruntime, precison: fp16}\n",
        9,
        "runners[0].precison: unknown key `precison` (did you mean `precision`?)",
    ),
    (
        "value-output-as-path",
        HEAD + "steps:\n  a: {uses: load, with: {path: m.onnx}}\n  b:\n    uses: load\n"
        "    with: {path: '${steps.a.kind}'}\n",
        7,
        "`${steps.a.kind}` is a value ('onnx'), not a file",
    ),
    (
        "bad-name",
        "trtflow: 1\nname: 'my recipe!'\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
        2,
        "name",
    ),
    (
        "negative-tolerance",
        HEAD + "steps:\n  a: {uses: load, with: {path: m.onnx}}\n  r:\n    uses: run-runners\n"
        "    with: {model: '${steps.a.model}', runners: [{name: a, backend: onnxruntime}]}\n  d:\n    uses: compare\n"
        "    with: {results: '${steps.r.results}', reference: a, atol: -1.0e-3}\n",
        10,
        "steps.d.with.atol: Input should be greater than or equal to 0, got -0.001",
    ),
]


@pytest.fixture(scope="module")
def recipe_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("broken")
    shutil.copy(DEMO, folder / "m.onnx")
    return folder


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 25


@pytest.mark.parametrize("case_id,text,line,words", CORPUS, ids=[c[0] for c in CORPUS])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_broken_recipe(trtflow, recipe_folder, case_id, text, line, words, command):
    recipe = write_recipe(recipe_folder, text, f"{case_id}.yaml")
    result = (
        trtflow(command, recipe, "--out", recipe_folder / "out", cwd=recipe_folder)
        if command == "run"
        else trtflow(command, recipe, cwd=recipe_folder)
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{recipe}:{line}:" in result.stderr, result.stderr
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (recipe_folder / ".trtflow" / "store").exists() or not any(
        p for p in (recipe_folder / ".trtflow" / "store").glob("??/*")
    ), "a broken recipe must not run anything"


def test_unknown_set_var(trtflow, recipe_folder):
    recipe = write_recipe(
        recipe_folder,
        HEAD + "vars: {model: m.onnx}\nsteps:\n  a: {uses: load, with: {path: '${vars.model}'}}\n",
        "setvar.yaml",
    )
    result = trtflow("validate", recipe, "--set", "modle=x.onnx", cwd=recipe_folder)
    assert result.returncode == 2
    assert "no var `modle`" in result.stderr and "did you mean `model`" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_recipe_file(trtflow, tmp_path):
    result = trtflow("validate", tmp_path / "nope.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "nope.yaml: file not found" in result.stderr


def test_every_problem_reported_at_once(trtflow, recipe_folder):
    text = (
        HEAD
        + "steps:\n  a:\n    uses: lod\n  b:\n    uses: load\n    with: {path: m.onnx, chek: true}\n"
    )
    recipe = write_recipe(recipe_folder, text, "many.yaml")
    result = trtflow("validate", recipe, cwd=recipe_folder)
    assert result.returncode == 2
    assert f"{recipe}:5:" in result.stderr and f"{recipe}:8:" in result.stderr


HUNT = (
    HEAD
    + "steps:\n  h:\n    uses: bisect-precision\n    with:\n      model: m.onnx\n      check: CHECK\n"
)


@pytest.mark.parametrize(
    "check,expected",
    [
        # a tolerance block with a bad number is not also told it lacks the command form's `command`
        (
            "{atol: abc}",
            [
                "steps.h.with.check.atol: Input should be a valid number, unable to parse string as a number;"
                " or input should be a valid dictionary, got 'abc'"
            ],
        ),
        ("{atol: {'ln.*': abc}}", ["steps.h.with.check.atol.ln.*: Input should be a valid number"]),
        (
            "{atol: -1}",
            ["steps.h.with.check.atol: Input should be greater than or equal to 0, got -1"],
        ),
        (
            "{command: run.sh}",
            ["steps.h.with.check.command: Input should be a valid list, got 'run.sh'"],
        ),
        (
            "{comand: [run.sh]}",
            ["steps.h.with.check.comand: unknown key `comand` (did you mean `command`?)"],
        ),
        ("5", ["steps.h.with.check: Input should be a mapping of keys to values, got 5"]),
    ],
)
def test_a_value_of_a_union_is_told_about_the_form_it_is_closest_to(
    trtflow, recipe_folder, check, expected
):
    recipe = write_recipe(recipe_folder, HUNT.replace("CHECK", check), "union.yaml")
    result = trtflow("validate", recipe, cwd=recipe_folder)
    assert result.returncode == 2
    problems = result.stderr.removeprefix("error: ").strip().splitlines()
    said = [problem.split(": ", 1)[1] for problem in problems]
    assert len(said) == len(expected) and all(s.startswith(e) for s, e in zip(said, expected)), (
        result.stderr
    )
    assert (
        f"{recipe}:8:" in result.stderr
        and "Tolerances" not in result.stderr
        and "CommandCheck" not in result.stderr
    )


def _alias_bomb(levels: int) -> str:
    """Ten aliases per level: `levels` lines of YAML stand for 10**(levels+1) values."""
    lines = [HEAD + "vars:", "  a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n"


@pytest.mark.parametrize(
    "text,words",
    [
        (_alias_bomb(9), "more than 100,000 values once its YAML aliases"),
        (
            HEAD
            + "vars:\n  loop: &loop [1, *loop]\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
            "vars.loop[1]: a YAML alias refers to the anchor that contains it",
        ),
        (
            HEAD
            + "vars:\n  deep: "
            + "[" * 500
            + "]" * 500
            + "\nsteps:\n  a: {uses: load, with: {path: m.onnx}}\n",
            "nested more than 100 levels deep",
        ),
    ],
    ids=["alias-bomb", "alias-cycle", "deep-nesting"],
)
def test_a_recipe_too_large_to_build_is_refused_quickly(trtflow, recipe_folder, text, words):
    recipe = write_recipe(recipe_folder, text, "huge.yaml")
    result = trtflow("validate", recipe, cwd=recipe_folder, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{recipe}:4:" in result.stderr and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_anchors_aliases_and_merges_still_work(trtflow, recipe_folder):
    text = HEAD + (
        "vars:\n  base: &base {seed: 1, iterations: 2}\n  data: {<<: *base, seed: 3}\n  again: *base\n"
        "steps:\n  a: &load {uses: load, with: {path: m.onnx}}\n  b: *load\n"
    )
    recipe = write_recipe(recipe_folder, text, "aliases.yaml")
    result = trtflow("validate", recipe, cwd=recipe_folder)
    assert result.returncode == 0, result.stderr
    assert "ok (2 steps: a, b)" in result.stdout


TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"


@pytest.mark.parametrize(
    "steps,line,words",
    [
        (
            "  a:\n    uses: load\n    matrix: {"
            + ", ".join(f"k{i}: {TEN}" for i in range(10))
            + "}\n    with: {path: m.onnx}\n",
            6,
            "steps.a.matrix: this matrix expands `a` to 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 = "
            "10,000,000,000 steps, over the limit of 10,000 steps per recipe",
        ),
        (
            "".join(
                f"  {name}:\n    uses: load\n    matrix: {{i: {TEN}, j: {TEN}, k: {TEN}}}\n    with: {{path: m.onnx}}\n"
                for name in "abcdefghijk"
            ),
            3,
            "steps: the matrices expand the recipe to 11,000 steps, over the limit of 10,000 steps per recipe",
        ),
    ],
    ids=["one-matrix", "all-matrices"],
)
def test_a_matrix_over_the_step_limit_is_refused_before_it_is_expanded(
    trtflow, recipe_folder, steps, line, words
):
    recipe = write_recipe(recipe_folder, HEAD + "steps:\n" + steps, "matrix.yaml")
    result = trtflow("validate", recipe, cwd=recipe_folder, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{recipe}:{line}:" in result.stderr and words in result.stderr, result.stderr


def test_validate_reports_problems_of_every_stage_at_once(trtflow, recipe_folder):
    text = (
        HEAD
        + """vars:
  data: {seed: 1}
  x: ${vars.nope}
steps:
  a: {uses: load, with: {path: '${vars.modle}'}}
  b: {uses: load, with: {path: m.onnx, check: '${vars.x}'}}
  c: {uses: load, with: {path: '${steps.a.modle}'}}
  d: {uses: load, with: {path: '${model}'}}
  e: {uses: load, with: {path: '${steps.f.model}'}}
  f: {uses: load, with: {path: '${steps.e.model}'}}
  g: {uses: load, with: {path: m.onnx, check: notabool}}
"""
    )
    recipe = write_recipe(recipe_folder, text, "every.yaml")
    result = trtflow("validate", recipe, "--set", "seed=2", cwd=recipe_folder)
    assert result.returncode == 2
    expected = [
        "--set seed: no var `seed`",
        f"{recipe}:5:6: vars.x: unknown var `nope`",
        f"{recipe}:7:32: steps.a.with.path: unknown var `modle`",
        f"{recipe}:8:47: steps.b.with.check: var `x` is invalid (see the problem at vars.x)",
        f"{recipe}:9:32: steps.c.with.path: step `a` (load) has no output `modle`",
        f"{recipe}:10:32: steps.d.with.path: cannot read reference `${{model}}`",
        f"{recipe}:11:3: steps.e: steps depend on each other in a cycle: e -> f -> e",
        f"{recipe}:13:47: steps.g.with.check: Input should be",
    ]
    problems = result.stderr.removeprefix("error: ").strip().splitlines()
    assert len(problems) == len(expected) and all(
        p.startswith(e) for p, e in zip(problems, expected)
    ), result.stderr


def _chain(steps: int, closed: bool) -> str:
    """A recipe whose step i needs step i + 1: the cycle check walks it as deep as it is long.
    `closed`: the last step needs the first, a cycle through every step."""
    lines = [HEAD + "steps:"]
    for i in range(steps):
        needs = i + 1 if i + 1 < steps else (0 if closed else None)
        source = f', source: "${{steps.s{needs}.out}}"' if needs is not None else ""
        lines.append(f"  s{i}: {{uses: test-sleep, with: {{text: s{i}{source}}}}}")
    return "\n".join(lines) + "\n"


def test_a_chain_of_thousands_of_steps_validates_and_runs(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, _chain(3000, closed=False))
    result = trtflow("validate", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    assert "ok (3000 steps: s2999, s2998," in result.stdout
    result = trtflow("run", recipe, "--only", "s2998", cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    assert sorted(ledger_lines(plugin_env)) == ["compute s2998 s2998", "compute s2999 s2999"]


def test_a_cycle_through_thousands_of_steps_is_reported_at_its_first_step(
    trtflow, tmp_path, plugin_env
):
    recipe = write_recipe(tmp_path, _chain(3000, closed=True))
    for command in ("validate", "run"):
        result = trtflow(command, recipe, cwd=tmp_path, env=plugin_env)
        assert result.returncode == 2, result.stderr
        assert f"{recipe}:4:3: steps.s0: steps depend on each other in a cycle: s0 -> s2999" in (
            result.stderr
        ), result.stderr[:500]
        assert "Traceback" not in result.stderr
